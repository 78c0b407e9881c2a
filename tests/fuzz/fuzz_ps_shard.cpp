// libFuzzer target: a sequence of multipart messages, in any order and of any shape, handed to a
// fresh parameter-server shard one at a time, as its ROUTER socket would hand them over
// (tests/fuzz/ps_fuzz.hpp gives the framing and the seeds). It goes through
// Shard::handle_message(), the code serve() runs for every message, without a socket: no I/O
// thread, no polling, so a run does thousands of sequences a second and a crash replays exactly.
//
// Besides the sanitizers' findings, it stops on a broken promise of the shard: an exception out
// of the handler, an answer that does not decode or miscounts its frames or has no addressee,
// more answers than there can be requests waiting, or a malformed count that moves backwards or
// by more than one per message.
//
//   fuzz_ps_shard --make-corpus DIR      writes the seed corpus into DIR
//   fuzz_ps_shard DIR -max_total_time=60 -rss_limit_mb=1024 -malloc_limit_mb=256
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include "ps_fuzz.hpp"

namespace fuzz = convoy::fuzz;
namespace zps = convoy::comm::zmq_ps;

namespace {

// A save writes the shard's checkpoint part into the directory the request names: any directory,
// which the fuzzer must not choose on this machine. Saves go to this process's own scratch folder
// (or, for an empty name, to a path that cannot be created: the failing save), emptied after each
// input that saved.
std::filesystem::path const& scratch() {
  static std::filesystem::path const dir =
      std::filesystem::temp_directory_path() / ("convoy-fuzz-" + std::to_string(::getpid()));
  return dir;
}

bool confine_save(zmq::message_t& header_frame) {
  zps::Header h;
  try {
    h = zps::decode(header_frame, "the fuzzer");
  } catch (convoy::ProtocolError const&) {
    return false;
  }
  if (h.op != zps::Op::save) return false;
  h.text = h.text.empty() ? std::string("/dev/null/cannot-be-a-directory") : scratch().string();
  header_frame = zps::encode(h);
  return true;
}

template <class Sync>
void run(Sync const& policy, std::size_t config, fuzz::Reader& in) {
  std::ostream quiet(nullptr);  // formats every log line, writes none
  zps::Shard<Sync> shard(
      fuzz::model().pieces, fuzz::optimizer_of(config), policy,
      {.index = 0, .shards = 1, .workers = fuzz::workers, .endpoint = {}, .log = &quiet});
  bool saved = false;
  while (!in.done()) {
    auto frames = fuzz::next_message(in);
    if (frames.size() >= 2) saved |= confine_save(frames[1]);
    auto const malformed = shard.malformed();
    std::vector<std::vector<zmq::message_t>> answers;
    try {
      answers = shard.handle_message(std::move(frames));
    } catch (std::exception const& e) {
      fuzz::fail(std::string("the shard let an exception out: ") + e.what());
    }
    if (shard.malformed() < malformed || shard.malformed() > malformed + 1) {
      fuzz::fail("the malformed count went from " + std::to_string(malformed) + " to " +
                 std::to_string(shard.malformed()) + " on one message");
    }
    // The answer to this message, and at most one waiting request per worker released by it.
    if (answers.size() > fuzz::workers + 1) {
      fuzz::fail(std::to_string(answers.size()) + " answers to one message");
    }
    for (auto const& a : answers) {
      if (a.size() < 2 || a[0].size() == 0) fuzz::fail("an answer without an addressee or header");
      zps::Header h;
      try {
        h = zps::decode(a[1], "the shard");
      } catch (convoy::ProtocolError const& e) {
        fuzz::fail(std::string("an answer that does not decode: ") + e.what());
      }
      if (h.frames != a.size() - 2) {
        fuzz::fail("an answer announces " + std::to_string(h.frames) + " payload frames and has " +
                   std::to_string(a.size() - 2));
      }
    }
  }
  if (saved) {
    std::error_code ignored;
    std::filesystem::remove_all(scratch(), ignored);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  std::vector<std::pair<std::string, std::string>> seeds;
  for (std::size_t c = 0; c < fuzz::configurations; ++c) {
    auto more = fuzz::shard_seeds(c);
    seeds.insert(seeds.end(), more.begin(), more.end());
  }
  fuzz::make_corpus_if_asked(argc, argv, seeds);
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(scratch(), ignored);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  fuzz::Reader in({data, size});
  std::size_t const config = in.byte() % fuzz::configurations;
  fuzz::with_policy(config, [&](auto const& policy) { run(policy, config, in); });
  return 0;
}
