// libFuzzer target: any bytes as a header frame, read by zmq_ps::decode as a shard reads a
// worker's request and a worker a shard's answer. decode either throws ProtocolError or returns a
// header that encodes back to exactly the bytes it read (a prefix of the input: bytes after a
// whole header are ignored), and decodes again to the same header.
//
//   fuzz_wire_decode --make-corpus DIR   writes the seed corpus (every operation's header) into DIR
//   fuzz_wire_decode DIR -max_total_time=60 -rss_limit_mb=1024 -malloc_limit_mb=256
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ps_fuzz.hpp"

namespace fuzz = convoy::fuzz;
namespace zps = convoy::comm::zmq_ps;

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fuzz::make_corpus_if_asked(argc, argv, fuzz::header_seeds());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  zmq::message_t const frame(data, size);
  zps::Header h;
  try {
    h = zps::decode(frame, "the fuzzer");
  } catch (convoy::ProtocolError const&) {
    return 0;  // refused: what decode promises for anything that is not a whole header
  } catch (std::exception const& e) {
    fuzz::fail(std::string("decode threw something else than ProtocolError: ") + e.what());
  }
  auto const again = zps::encode(h);
  if (again.size() > size || std::memcmp(again.data(), data, again.size()) != 0) {
    fuzz::fail("a decoded header does not encode back to the bytes it was read from");
  }
  auto const back = zps::decode(again, "the fuzzer");
  if (back.op != h.op || back.status != h.status || back.worker != h.worker ||
      back.sequence != h.sequence || back.tag != h.tag || back.fingerprint != h.fingerprint ||
      back.frames != h.frames || back.global_step != h.global_step || back.local != h.local ||
      back.text != h.text) {
    fuzz::fail("a header does not survive encoding and decoding");
  }
  return 0;
}
