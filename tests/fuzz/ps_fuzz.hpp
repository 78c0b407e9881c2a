// What the parameter-server fuzz targets share: the shard configurations they run, the framing
// that turns a fuzz input into a sequence of multipart messages, and the seed corpus of valid (and
// deliberately out-of-order) message sequences, written by `--make-corpus DIR`.
#pragma once

#include <algorithm>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace convoy::fuzz {

namespace zps = convoy::comm::zmq_ps;

using Frames = std::vector<std::string>;  // one message: header frame, then payload frames

/// Every input's shard: one of 3 workers' single shard of a small model with 4 pieces
/// (6, 2, 4 and 2 floats), under one of 4 policies and one of 3 optimizers. The input's first
/// byte picks the configuration, so one corpus covers all 12.
inline constexpr std::size_t workers = 3;
inline constexpr std::size_t configurations = 12;

struct Model {
  nn::Mlp mlp{{3, 2, 2}};
  place::ShardMap map = place::GreedyBySize{}.assign(mlp.variables(), 1);
  std::vector<place::Piece const*> pieces = map.pieces_of(0);
};
inline Model const& model() {
  static Model const m;
  return m;
}

inline optim::Optimizer optimizer_of(std::size_t config) {
  switch (config / 4 % 3) {
    case 0:
      return optim::Sgd{};
    case 1:
      return optim::Momentum{};
    default:
      return optim::Adam{};
  }
}

/// Calls `f(policy)` with configuration `config`'s Sync policy.
template <class F>
decltype(auto) with_policy(std::size_t config, F&& f) {
  switch (config % 4) {
    case 0:
      return f(sync::Synchronous{});  // lock step: all 3
    case 1:
      return f(sync::Synchronous{.replicas_to_aggregate = 2});  // M of N: 2 of 3
    case 2:
      return f(sync::Asynchronous{});
    default:
      return f(sync::BoundedStaleness<1>{});
  }
}

inline std::uint64_t fingerprint_of(std::size_t config) {
  return with_policy(config, [&](auto const& policy) {
    return zps::fingerprint(std::span<place::Piece const* const>(model().pieces),
                            optimizer_of(config), policy, 1, workers);
  });
}

// The framing of a fuzz input: [config] then messages, each [peer << 4 | frames] followed by
// `frames` frames of [length: 2 bytes, little-endian][bytes]. The peer's identity frame is the
// one a ROUTER socket adds (5 bytes, as ZeroMQ makes them), never the sender's to forge; a
// frame whose length runs past the input's end gets what is left.
class Reader {
 public:
  explicit Reader(std::span<std::uint8_t const> bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }
  std::uint8_t byte() { return done() ? 0 : bytes_[at_++]; }
  std::string take(std::size_t n) {
    n = std::min(n, bytes_.size() - at_);
    std::string out(reinterpret_cast<char const*>(bytes_.data() + at_), n);
    at_ += n;
    return out;
  }

 private:
  std::span<std::uint8_t const> bytes_;
  std::size_t at_ = 0;
};

/// The next message of `in`: the peer's identity frame, then the frames the input gives.
inline std::vector<zmq::message_t> next_message(Reader& in) {
  std::uint8_t const head = in.byte();
  std::vector<zmq::message_t> frames;
  char const peer[5] = {0, 'p', 'e', 'e', static_cast<char>('a' + (head >> 4))};
  frames.emplace_back(peer, sizeof peer);
  for (int f = 0; f < (head & 0x0f); ++f) {
    std::size_t length = in.byte();
    length |= std::size_t{in.byte()} << 8;
    auto const bytes = in.take(length);
    frames.emplace_back(bytes.data(), bytes.size());
  }
  return frames;
}

/// Appends `message` from peer `peer` to an input in the framing above.
inline void append(std::string& input, std::uint8_t peer, Frames const& message) {
  input += static_cast<char>((peer << 4) | message.size());
  for (auto const& f : message) {
    input += static_cast<char>(f.size() & 0xff);
    input += static_cast<char>(f.size() >> 8);
    input += f;
  }
}

inline std::string bytes_of(zmq::message_t const& m) {
  return {static_cast<char const*>(m.data()), m.size()};
}

// ---------------------------------------------------------------------------------------------
// The seed corpus: what a correct worker sends, in order and out of it.

class Seeds {
 public:
  explicit Seeds(std::size_t config) : config_(config), fingerprint_(fingerprint_of(config)) {}

  zps::Header header(zps::Op op, std::uint32_t worker) const {
    zps::Header h;
    h.op = op;
    h.worker = worker;
    h.sequence = ++sequence_;
    h.fingerprint = fingerprint_;
    if (op == zps::Op::hello) h.text = std::string(optimizer_of(config_).name());
    return h;
  }
  /// One payload frame per piece, `arrays` times (weights, then each slot), of `value`s.
  static Frames arrays(std::size_t arrays, float value) {
    Frames out;
    for (std::size_t a = 0; a < arrays; ++a) {
      for (auto const* p : model().pieces) {
        std::vector<float> v(p->size(), value + static_cast<float>(a));
        out.emplace_back(reinterpret_cast<char const*>(v.data()), v.size() * sizeof(float));
      }
    }
    return out;
  }
  Frames message(zps::Header h, Frames const& payload = {}) const {
    h.frames = static_cast<std::uint32_t>(payload.size());
    Frames out{bytes_of(zps::encode(h))};
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
  }

  Frames hello(std::uint32_t w) const { return message(header(zps::Op::hello, w)); }
  Frames init(std::uint32_t w) const { return message(header(zps::Op::init, w), arrays(1, 0.5f)); }
  /// Worker `w`'s gradient for `step`, computed on `slice` of the data (default: the worker's own
  /// place in that step's global batch, which ps:0 gives it when nothing fails).
  Frames push(std::uint32_t w, std::int64_t step, std::int64_t slice = -1) const {
    auto h = header(zps::Op::push, w);
    h.tag = step;
    h.slices = {slice >= 0 ? slice : step * static_cast<std::int64_t>(workers) + w};
    h.loss = 1.5f;
    h.seconds = 0.01;
    return message(h, arrays(1, 0.25f));
  }
  Frames pull(std::uint32_t w) const { return message(header(zps::Op::pull, w)); }
  Frames snapshot(std::uint32_t w) const { return message(header(zps::Op::snapshot, w)); }
  Frames bye(std::uint32_t w) const { return message(header(zps::Op::bye, w)); }
  Frames save(std::uint32_t w) const {
    auto h = header(zps::Op::save, w);
    h.global_step = 4;
    h.tag = 0x5eed;
    h.text = "checkpoints";
    return message(h);
  }
  Frames restore(std::uint32_t w, std::size_t local_size = workers) const {
    auto h = header(zps::Op::restore, w);
    h.global_step = 6;
    h.applied = 6;
    h.dropped = 1;
    h.optimizer_updates = 6;
    h.local.assign(local_size, 2);
    return message(h, arrays(1 + optimizer_of(config_).slot_names().size(), 0.75f));
  }

  /// A sequence of messages as one fuzz input: each from the peer of its worker.
  std::string input(std::vector<Frames> const& messages) const {
    std::string out(1, static_cast<char>(config_));
    for (auto const& m : messages) {
      std::uint8_t peer = 15;  // a forged header's: none of the workers'
      try {
        peer = static_cast<std::uint8_t>(
            zps::decode(zmq::message_t(m[0].data(), m[0].size()), "a seed").worker % 16);
      } catch (ProtocolError const&) {
      }
      append(out, peer, m);
    }
    return out;
  }

 private:
  std::size_t config_;
  std::uint64_t fingerprint_;
  mutable std::uint64_t sequence_ = 0;
};

/// Named inputs for the shard target: every operation, in a correct run and alone, and the
/// out-of-order, malformed and oversized sequences a shard must drop and count.
inline std::vector<std::pair<std::string, std::string>> shard_seeds(std::size_t config) {
  Seeds s(config);
  using zps::Op;
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string name, std::vector<Frames> messages) {
    out.emplace_back("c" + std::to_string(config) + "-" + name, s.input(messages));
  };
  // Each worker's first pull gives it its first slice of the data, which its pushes name.
  std::vector<Frames> const start{s.hello(0), s.hello(1), s.hello(2), s.init(0),
                                  s.pull(0),  s.pull(1),  s.pull(2)};
  auto after_start = [&](std::vector<Frames> more) {
    auto all = start;
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  add("run", after_start({s.push(0, 0), s.push(1, 0), s.push(2, 0), s.pull(1), s.snapshot(0),
                          s.save(0), s.restore(0), s.push(0, 6, 3), s.push(1, 6, 4),
                          s.push(2, 6, 5), s.bye(0), s.bye(1), s.bye(2)}));
  add("hello", {s.hello(0)});
  add("init", after_start({}));
  add("restore", {s.hello(0), s.restore(0)});
  add("push", after_start({s.push(0, 0)}));
  add("pull", after_start({s.pull(2)}));
  add("snapshot", after_start({s.snapshot(0)}));
  add("bye", after_start({s.bye(0), s.bye(1), s.bye(2)}));
  add("save", after_start({s.save(0)}));
  // Out of order.
  add("push-before-init", {s.hello(0), s.push(0, 0)});
  add("push-before-hello", {s.push(1, 0), s.init(0), s.push(1, 0)});
  add("pull-before-init", {s.pull(1), s.pull(1), s.init(0)});
  add("restore-while-pushes-wait", after_start({s.push(0, 0), s.restore(0), s.push(1, 0)}));
  add("bye-twice", after_start({s.push(0, 0), s.bye(1), s.bye(1), s.bye(2), s.push(0, 1)}));
  add("push-after-bye", after_start({s.bye(0), s.push(0, 0), s.pull(0)}));
  add("push-twice-while-waiting", after_start({s.push(0, 0), s.push(0, 0), s.push(0, 1)}));
  add("late-and-early-steps", after_start({s.push(0, -1), s.push(1, 5), s.push(2, 0)}));
  add("init-twice", after_start({s.init(1), s.snapshot(2)}));
  add("save-before-init", {s.save(0), s.snapshot(0)});
  add("restore-wrong-workers", after_start({s.restore(0, 2), s.restore(0, 7)}));
  add("unknown-worker", after_start({s.pull(7), s.push(9, 0)}));
  // Malformed and oversized.
  auto push = s.push(0, 0);
  auto short_payload = push;
  short_payload[1].resize(3);
  auto missing_frame = push;
  missing_frame.pop_back();
  auto too_many = push;
  too_many.insert(too_many.end(), 12, "x");
  add("bad-payloads", after_start({short_payload, missing_frame, too_many}));
  auto forged = s.hello(0);
  auto const huge = std::string("\x00\x00\x00\x00\x00\x00\x00\x10", 8);  // 2^60 entries
  auto const text = optimizer_of(config).name().size();
  forged[0].replace(forged[0].size() - text - 16, 8, huge);  // the list's size, before the text's
  auto truncated = s.init(0);
  truncated[0].resize(truncated[0].size() / 2);
  add("bad-headers", {forged, truncated, Frames{"not a header"}, s.hello(0)});
  return out;
}

/// Inputs for the decode target: the header of every operation, as asked and as answered.
inline std::vector<std::pair<std::string, std::string>> header_seeds() {
  std::vector<std::pair<std::string, std::string>> out;
  Seeds s(configurations - 1);
  for (int op = 1; op <= 8; ++op) {
    auto h = s.header(static_cast<zps::Op>(op), 1);
    h.local = {3, 4, 5};
    out.emplace_back("request-" + zps::describe(h.op), bytes_of(zps::encode(h)));
    h.status = op % 2 ? zps::Status::ok : zps::Status::dropped;
    h.text = op == 8 ? "checkpoint-4.part-0-of-1.convoy.part" : "";
    out.emplace_back("reply-" + zps::describe(h.op), bytes_of(zps::encode(h)));
  }
  auto h = s.header(zps::Op::push, 2);
  h.status = zps::Status::error;
  h.text = "convoy: ps:0 refused";
  out.emplace_back("reply-error", bytes_of(zps::encode(h)));
  return out;
}

/// `--make-corpus DIR` (any target): writes `seeds` into DIR, one file each, and exits.
inline void make_corpus_if_asked(int* argc, char*** argv,
                                 std::vector<std::pair<std::string, std::string>> const& seeds) {
  if (*argc < 2 || std::string((*argv)[1]) != "--make-corpus") return;
  if (*argc != 3) {
    std::fprintf(stderr, "usage: %s --make-corpus DIR\n", (*argv)[0]);
    std::exit(2);
  }
  std::filesystem::path const dir((*argv)[2]);
  std::filesystem::create_directories(dir);
  for (auto const& [name, bytes] : seeds) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  }
  std::printf("%zu seed inputs written to %s\n", seeds.size(), dir.c_str());
  std::exit(0);
}

/// Stops the run with a report: libFuzzer saves the input as a crash.
[[noreturn]] inline void fail(std::string const& what) {
  std::fprintf(stderr, "convoy fuzz: %s\n", what.c_str());
  std::abort();
}

}  // namespace convoy::fuzz
