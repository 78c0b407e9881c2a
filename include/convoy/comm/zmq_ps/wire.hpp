// The parameter server's wire format. A message is a header frame, serialized with cereal's binary
// archive, followed by raw payload frames of floats, one per piece of the shard's variables (see
// place::ShardMap). Payloads are never serialized: a sender hands ZeroMQ the arena's own memory
// and a receiver reads the received frame in place. The header starts with a magic number and the
// protocol version, read before anything else, so a peer of another version is refused with both
// numbers; every other field is checked by the code that uses it.
#pragma once

#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "../../core/error.hpp"

namespace convoy::comm::zmq_ps {

inline constexpr std::uint32_t wire_magic = 0x53505643;  // "CVPS" read as little-endian bytes
inline constexpr std::uint32_t protocol_version = 4;     // 2: Op::save; 3: generation, instance;
                                                         // 4: slices, keep_global_batch
/// Headers are small; a frame claiming more is refused before it is read.
inline constexpr std::size_t max_header_bytes = 64 * 1024;

/// What a message asks for (requests, worker -> shard) or answers (replies carry the same op).
enum class Op : std::uint8_t {
  hello = 1,     ///< first contact: checks versions, the layout and the optimizer
  init = 2,      ///< the chief's initial weights (ignored once initialized); payload: weights
  restore = 3,   ///< weights, slots and counters from a snapshot; payload: weights then slots
  push = 4,      ///< a gradient tagged with a step (sync) or clock; the reply carries new weights
  pull = 5,      ///< the current weights, now, whatever the policy (evaluation, snapshots)
  snapshot = 6,  ///< weights, slots, counters
  bye = 7,       ///< the worker is done; the shard stops once every worker said it
  save = 8,      ///< write the shard's part of a checkpoint into the directory `text` names, for
                 ///< step `global_step`, bound to one save by the nonce in `tag`; the reply's
                 ///< `text` is the part's file name
};

/// How a shard answered.
enum class Status : std::uint8_t {
  ok = 0,
  dropped = 1,  ///< the gradient was late (synchronous, M of N) and was dropped
  error = 2,    ///< refused: `text` says why
  stopped = 3,  ///< the open step can no longer complete (workers left): the run is over
};

/// The header frame of every message.
struct Header {
  std::uint32_t magic = wire_magic;
  std::uint32_t version = protocol_version;
  Op op = Op::hello;
  Status status = Status::ok;
  std::uint32_t worker = 0;       ///< the worker's rank (requests), or the addressee (replies)
  std::uint32_t shard = 0;        ///< the shard's index
  std::uint64_t sequence = 0;     ///< the worker's request number, echoed by the answer
  std::int64_t tag = 0;           ///< push: the step the gradient is for; reply: the next step
  std::uint64_t fingerprint = 0;  ///< hello: the shard's part of the layout and the optimizer
  std::uint32_t frames = 0;       ///< payload frames that follow
  float loss = 0.0f;              ///< push: the batch's loss; reply: the update's mean loss
  double seconds = 0.0;           ///< push: compute time of the batch
  std::int64_t global_step = 0;   ///< counters after the request (shard 0's are the run's)
  std::int64_t applied = 0;
  std::int64_t dropped = 0;
  std::int64_t optimizer_updates = 0;
  std::uint8_t initialized = 0;     ///< hello reply: whether the shard holds weights yet
  /// How many times the cluster was rolled back to a checkpoint after losing a shard's state.
  /// Requests: the worker's; a restore raising it is a rollback. Replies: the shard's.
  std::uint64_t generation = 0;
  /// Replies: a number the shard's process drew when it started. Another number is another
  /// process (a restarted ps task), which holds nothing of the last one's state.
  std::uint64_t instance = 0;
  /// Requests: the worker trains a share of the whole global batch while workers are gone
  /// (FitOptions::keep_global_batch), so ps:0 may give it more than one slice.
  std::uint8_t keep_global_batch = 0;
  std::vector<std::int64_t> local;  ///< every worker's applied steps
  /// The data a worker trains on (DataSlices). Push: the slices its gradient was computed on, as
  /// one batch of their rows; ps:0's answers to a push, a pull, an init or a restore: the slices
  /// its worker trains next.
  std::vector<std::int64_t> slices;
  std::string text;                 ///< hello: the optimizer's name; error: the reason

  template <class Archive>
  void serialize(Archive& ar) {
    ar(magic, version);
    if (magic != wire_magic || version != protocol_version) return;  // the reader says which
    ar(op, status, worker, shard, sequence, tag, fingerprint, frames, loss, seconds, global_step,
       applied, dropped, optimizer_updates, initialized, generation, instance, keep_global_batch,
       local, slices, text);
  }
};

/// A read-only stream buffer over a received frame, for cereal's input archive.
class FrameBuffer : public std::streambuf {
 public:
  explicit FrameBuffer(std::span<char const> bytes) {
    auto* begin = const_cast<char*>(bytes.data());
    setg(begin, begin, begin + bytes.size());
  }
};

inline std::string describe(Op op) {
  switch (op) {
    case Op::hello: return "hello";
    case Op::init: return "init";
    case Op::restore: return "restore";
    case Op::push: return "push";
    case Op::pull: return "pull";
    case Op::snapshot: return "snapshot";
    case Op::bye: return "bye";
    case Op::save: return "save";
  }
  return "operation " + std::to_string(static_cast<int>(op));
}

/// Serializes `h` into a frame.
inline zmq::message_t encode(Header const& h) {
  std::ostringstream out(std::ios::binary);
  {
    cereal::BinaryOutputArchive ar(out);
    ar(const_cast<Header&>(h));
  }
  auto const bytes = out.str();
  return zmq::message_t(bytes.data(), bytes.size());
}

/// Reads a header frame from `from` (a peer, for messages). Throws ProtocolError for a frame that
/// is too large, is not a convoy message, speaks another protocol version, or is malformed.
inline Header decode(zmq::message_t const& frame, std::string const& from) {
  if (frame.size() > max_header_bytes) {
    throw ProtocolError("convoy: a header frame of " + std::to_string(frame.size()) +
                        " bytes from " + from + " is larger than the " +
                        std::to_string(max_header_bytes) + " bytes allowed");
  }
  Header h;
  h.magic = h.version = 0;
  FrameBuffer buffer({static_cast<char const*>(frame.data()), frame.size()});
  std::istream in(&buffer);
  try {
    cereal::BinaryInputArchive ar(in);
    ar(h.magic, h.version);
    if (h.magic != wire_magic) {
      throw ProtocolError("convoy: " + from + " sent a message that is not convoy's protocol");
    }
    if (h.version != protocol_version) {
      throw ProtocolError("convoy: " + from + " speaks protocol version " +
                          std::to_string(h.version) + " and this process version " +
                          std::to_string(protocol_version) +
                          "; run the same convoy release on every task");
    }
    // Cereal reads a vector's or string's size before its elements: bound both by the frame.
    std::size_t const limit = frame.size();
    ar(h.op, h.status, h.worker, h.shard, h.sequence, h.tag, h.fingerprint, h.frames, h.loss,
       h.seconds, h.global_step, h.applied, h.dropped, h.optimizer_updates, h.initialized,
       h.generation, h.instance, h.keep_global_batch);
    cereal::size_type n = 0;
    for (auto* list : {&h.local, &h.slices}) {
      ar(cereal::make_size_tag(n));
      if (n > limit / sizeof(std::int64_t)) throw ProtocolError("convoy: bad counter list");
      list->resize(static_cast<std::size_t>(n));
      ar(cereal::binary_data(list->data(), list->size() * sizeof(std::int64_t)));
    }
    ar(cereal::make_size_tag(n));
    if (n > limit) throw ProtocolError("convoy: bad text");
    h.text.resize(static_cast<std::size_t>(n));
    ar(cereal::binary_data(h.text.data(), h.text.size()));
  } catch (ProtocolError const&) {
    throw;
  } catch (std::exception const& e) {
    throw ProtocolError("convoy: a malformed header from " + from + ": " + e.what());
  }
  if (h.op < Op::hello || h.op > Op::save || h.status > Status::stopped) {
    throw ProtocolError("convoy: " + from + " sent an unknown operation or status");
  }
  return h;
}

/// A frame that lends `data` to ZeroMQ without copying it; `on_sent` is called once ZeroMQ is done
/// with the memory (from ZeroMQ's I/O thread, or from the sender's when the frame is dropped).
/// `hint` is passed to it.
inline zmq::message_t lend(std::span<float const> data, zmq::free_fn* on_sent, void* hint) {
  return zmq::message_t(const_cast<float*>(data.data()), data.size_bytes(), on_sent, hint);
}

/// Throws ProtocolError when a received payload frame does not hold exactly `expected` floats.
inline void check_floats(zmq::message_t const& frame, std::size_t expected, std::string const& what) {
  if (frame.size() != expected * sizeof(float)) {
    throw ProtocolError("convoy: " + what + " has " + std::to_string(frame.size()) +
                        " bytes, expected " + std::to_string(expected * sizeof(float)));
  }
}

/// The floats of a received payload frame (checked with check_floats), read in place. ZeroMQ may
/// keep a small frame inside its receive buffer at any byte offset; such a frame is copied into
/// `scratch` first, so the span is always aligned for float.
inline std::span<float const> floats(zmq::message_t const& frame, std::vector<float>& scratch) {
  auto const n = frame.size() / sizeof(float);
  if (reinterpret_cast<std::uintptr_t>(frame.data()) % alignof(float) == 0) {
    return {static_cast<float const*>(frame.data()), n};
  }
  scratch.resize(n);
  std::memcpy(scratch.data(), frame.data(), n * sizeof(float));
  return scratch;
}

}  // namespace convoy::comm::zmq_ps
