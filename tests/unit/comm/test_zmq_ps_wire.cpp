// The parameter server's wire format and a shard facing bad peers: headers round-trip; a frame
// that is not convoy's, of another protocol version, truncated anywhere or claiming huge sizes is
// refused with a ProtocolError and never crashes; a live shard answers such messages with an error,
// counts them and keeps serving the others.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq_addon.hpp>

#include "processes.hpp"
#include "shard_peer.hpp"

namespace test_comm_zmq_ps_wire {

using namespace convoy;
using namespace convoy::comm::zmq_ps;
namespace wire = convoy::comm::zmq_ps;

namespace {

Header sample() {
  Header h;
  h.op = Op::push;
  h.status = Status::dropped;
  h.worker = 3;
  h.shard = 1;
  h.tag = 42;
  h.fingerprint = 0xfeedface;
  h.frames = 4;
  h.loss = 0.5f;
  h.seconds = 0.25;
  h.global_step = 7;
  h.applied = 14;
  h.dropped = 1;
  h.optimizer_updates = 7;
  h.initialized = 1;
  h.keep_global_batch = 1;
  h.local = {3, 4, 5, 6};
  h.slices = {9, 12};
  h.text = "Adam";
  return h;
}

zmq::message_t bytes(std::string const& s) { return zmq::message_t(s.data(), s.size()); }
std::string as_string(zmq::message_t const& m) { return {static_cast<char const*>(m.data()), m.size()}; }

}  // namespace

TEST_CASE("a header survives encoding and decoding") {
  auto const h = sample();
  auto const back = wire::decode(encode(h), "test");
  CHECK(back.op == h.op);
  CHECK(back.status == h.status);
  CHECK(back.worker == 3);
  CHECK(back.tag == 42);
  CHECK(back.fingerprint == h.fingerprint);
  CHECK(back.loss == 0.5f);
  CHECK(back.local == h.local);
  CHECK(back.keep_global_batch == 1);
  CHECK(back.slices == h.slices);
  CHECK(back.text == "Adam");
}

TEST_CASE("decode refuses what is not convoy's protocol, naming the peer") {
  CHECK_THROWS_WITH_AS(wire::decode(bytes("GET / HTTP/1.1\r\n"), "ps:0"),
                       doctest::Contains("ps:0 sent a message that is not convoy's protocol"),
                       ProtocolError);
  CHECK_THROWS_AS(wire::decode(bytes(""), "ps:0"), ProtocolError);
  CHECK_THROWS_WITH_AS(wire::decode(zmq::message_t(max_header_bytes + 1), "worker 1"),
                       doctest::Contains("larger than the 65536 bytes allowed"), ProtocolError);
}

TEST_CASE("a peer of another protocol version is refused with both versions named") {
  auto frame = encode(sample());
  std::uint32_t other = protocol_version + 1;
  std::memcpy(static_cast<char*>(frame.data()) + 4, &other, 4);
  CHECK_THROWS_WITH_AS(wire::decode(frame, "worker 2"),
                       doctest::Contains(("worker 2 speaks protocol version " +
                                          std::to_string(other) + " and this process version " +
                                          std::to_string(protocol_version))
                                             .c_str()),
                       ProtocolError);
}

TEST_CASE("every truncation of a valid header is refused, never read past its end") {
  auto const whole = as_string(encode(sample()));
  for (std::size_t n = 0; n < whole.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(wire::decode(bytes(whole.substr(0, n)), "peer"), ProtocolError);
  }
}

TEST_CASE("a header claiming a huge list or text is refused before anything is allocated") {
  Header h = sample();
  h.local.clear();
  h.slices.clear();
  h.text.clear();
  auto const base = as_string(encode(h));
  // The two lists' sizes are the 16 bytes before the text's size (all empty here): claim 2^60
  // entries.
  for (std::size_t from_end : {24u, 16u, 8u}) {
    auto forged = base;
    std::uint64_t const huge = std::uint64_t{1} << 60;
    std::memcpy(forged.data() + forged.size() - from_end, &huge, 8);
    CHECK_THROWS_AS(wire::decode(bytes(forged), "peer"), ProtocolError);
  }
  // An unknown operation.
  auto forged = as_string(encode(sample()));
  forged[8] = 99;
  CHECK_THROWS_WITH_AS(wire::decode(bytes(forged), "peer"), doctest::Contains("unknown operation"),
                       ProtocolError);
}

TEST_CASE("a shard counts malformed messages, answers those of its protocol, and keeps serving") {
  testing::ShardBench const b;
  auto const& pieces = b.pieces;
  auto const& optimizer = b.optimizer;
  auto const& policy = b.policy;
  std::ostringstream log;
  Shard<sync::Asynchronous> shard(pieces, optimizer, policy, b.options(1, &log));
  std::thread server([&] { shard.serve(); });

  zmq::context_t context(1);
  auto peer = testing::shard_peer(context, b.endpoint);
  auto ask = [&](std::vector<zmq::message_t> frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      peer.send(frames[i], i + 1 == frames.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
    std::vector<zmq::message_t> reply;
    REQUIRE(zmq::recv_multipart(peer, std::back_inserter(reply)));
    REQUIRE(!reply.empty());
    return wire::decode(reply[0], "the shard");
  };
  auto const fp = fingerprint(pieces, optimizer, policy, 1, 1);
  // Another learning rate, or another policy, is another configuration.
  CHECK(fingerprint(pieces, optim::Optimizer(optim::Sgd{0.2f}), policy, 1, 1) != fp);
  CHECK(fingerprint(pieces, optimizer, sync::BoundedStaleness<1>{}, 1, 1) != fp);

  // Junk gets no answer: a peer sending it fast would get as many answers back.
  std::vector<zmq::message_t> garbage;
  garbage.push_back(bytes("not a header"));
  peer.send(garbage[0], zmq::send_flags::none);
  peer.set(zmq::sockopt::rcvtimeo, 300);
  zmq::message_t none;
  CHECK(!peer.recv(none));
  peer.set(zmq::sockopt::rcvtimeo, 10000);

  Header wrong = sample();
  wrong.op = Op::push;
  wrong.worker = 5;  // the shard has 1 worker
  wrong.frames = 0;
  std::vector<zmq::message_t> frames;
  frames.push_back(encode(wrong));
  auto h = ask(std::move(frames));
  CHECK(h.status == Status::error);
  CHECK(h.text.find("names worker 5") != std::string::npos);

  Header push;
  push.op = Op::push;
  push.fingerprint = fp;
  push.frames = 1;
  frames.clear();
  frames.push_back(encode(push));
  frames.push_back(bytes("abc"));  // one frame where there are pieces.size(), of the wrong size
  h = ask(std::move(frames));
  CHECK(h.status == Status::error);

  frames.clear();
  frames.push_back(encode(push));
  for (int i = 0; i < 40; ++i) frames.push_back(bytes("x"));  // more frames than any request has
  h = ask(std::move(frames));
  CHECK(h.status == Status::error);
  CHECK(h.text.find("frames") != std::string::npos);

  Header hello;
  hello.op = Op::hello;
  hello.fingerprint = fp + 1;
  hello.text = "Sgd";
  frames.clear();
  frames.push_back(encode(hello));
  h = ask(std::move(frames));
  CHECK(h.status == Status::error);
  CHECK(h.text.find("disagree") != std::string::npos);

  hello.fingerprint = fp;
  frames.clear();
  frames.push_back(encode(hello));
  h = ask(std::move(frames));
  CHECK(h.status == Status::ok);  // still serving
  CHECK(h.initialized == 0);

  Header bye;
  bye.op = Op::bye;
  frames.clear();
  frames.push_back(encode(bye));
  h = ask(std::move(frames));  // without the run's fingerprint: refused
  CHECK(h.status == Status::error);
  CHECK(h.text.find("another layout") != std::string::npos);
  bye.fingerprint = fp;
  frames.clear();
  frames.push_back(encode(bye));
  h = ask(std::move(frames));
  CHECK(h.status == Status::ok);
  server.join();
  CHECK(shard.malformed() == 5);
  auto const text = log.str();
  CHECK(text.find("5 malformed messages") != std::string::npos);
  // Each refusal is named by the peer's address; this peer's later ones within 10 s are summed.
  CHECK(text.find("dropped a message: convoy: a peer of ps:0 sent") != std::string::npos);
  CHECK(text.find("(from peer 127.0.0.1)") != std::string::npos);
  CHECK(text.find("4 more refused message(s) from peer 127.0.0.1") != std::string::npos);
}

TEST_CASE("junk does not keep a shard whose workers are gone waiting: it times out all the same") {
  testing::ShardBench b;
  b.policy.timeout = std::chrono::milliseconds(1000);
  std::ostringstream log;
  Shard<sync::Asynchronous> shard(b.pieces, b.optimizer, b.policy, b.options(1, &log));
  std::string error;
  std::atomic<bool> ended{false};
  auto const started = std::chrono::steady_clock::now();
  std::thread server([&] {
    try {
      shard.serve();
    } catch (std::exception const& e) {
      error = e.what();
    }
    ended = true;
  });
  zmq::context_t context(1);
  auto peer = testing::shard_peer(context, b.endpoint);
  // A message every 100 ms, more often than the timeout, for at most 4 s.
  for (int i = 0; i < 40 && !ended; ++i) {
    auto junk = bytes("not a request");
    peer.send(junk, zmq::send_flags::dontwait);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  server.join();
  auto const took = std::chrono::steady_clock::now() - started;
  CHECK(error.find("heard from no worker for 1000 ms") != std::string::npos);
  CHECK(took < std::chrono::milliseconds(2500));
  CHECK(shard.malformed() > 3);
}

TEST_CASE("a shard whose connection cap is below its workers' needs says so when it starts") {
  testing::ShardBench const b;
  std::ostringstream log;
  auto options = b.options(2, &log);
  options.max_connections = 1;
  Shard<sync::Asynchronous> shard(b.pieces, b.optimizer, b.policy, options);
  std::thread server([&] { shard.serve(); });
  zmq::context_t context(1);
  auto peer = testing::shard_peer(context, b.endpoint);
  Header hello;
  hello.op = Op::hello;
  hello.fingerprint = b.fingerprint(2);
  hello.text = std::string(b.optimizer.name());
  Header bye;
  bye.op = Op::bye;
  bye.fingerprint = b.fingerprint(2);
  // The one connection it keeps says both hellos, then both goodbyes (a goodbye before its
  // worker's hello is refused).
  for (Header* h : {&hello, &bye}) {
    for (std::uint32_t w : {0u, 1u}) {
      h->worker = w;
      REQUIRE(peer.send(encode(*h), zmq::send_flags::none));
      zmq::message_t reply;
      REQUIRE(peer.recv(reply));
      CHECK(wire::decode(reply, "the shard").status == Status::ok);
    }
  }
  server.join();
  CHECK(log.str().find("ps:0 may hold 1 connection(s) (its file limit is ") != std::string::npos);
  CHECK(log.str().find("ZmqPs::max_connections 1), fewer than the 4 its 2 worker(s) may need") !=
        std::string::npos);
}

TEST_CASE("a worker whose parameter server never comes stops after its connect timeout, naming it") {
  using S = Strategy<nn::Mlp, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
  Cluster cluster;
  cluster.jobs["ps"] = {"127.0.0.1:" + std::to_string(testing::free_port())};
  cluster.jobs["worker"] = {"127.0.0.1:" + std::to_string(testing::free_port())};
  cluster.job = "worker";
  cluster.index = 0;
  cluster.source = "arguments";
  std::ostringstream log;
  S strategy{nn::Mlp({6, 4, 3}), {},
             comm::ZmqPs{.cluster = cluster, .connect_timeout = std::chrono::milliseconds(2500), .log = &log},
             {}};
  RunPlan plan;
  plan.until = 1;
  plan.batch = [](std::size_t, std::int64_t) -> Batch { return {}; };
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(strategy.run(plan),
                       doctest::Contains(("ps:0 at " + cluster.jobs["ps"][0]).c_str()), TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(log.str().find("waiting for ps:0") != std::string::npos);  // the log named the peer
}

TEST_CASE("M of N synchronous workers over several shards is refused, naming why") {
  using S = Strategy<nn::Mlp, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
  Cluster cluster;
  cluster.jobs["ps"] = {"127.0.0.1:1", "127.0.0.1:2"};
  cluster.jobs["worker"] = {"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"};
  cluster.job = "worker";
  cluster.source = "arguments";
  auto build = [&] {
    S strategy{nn::Mlp({6, 4, 3}), {}, comm::ZmqPs{.cluster = cluster},
               sync::Synchronous{.replicas_to_aggregate = 2}};
  };
  CHECK_THROWS_WITH_AS(build(), doctest::Contains("needs a single ps task"), Error);
  cluster.jobs["ps"] = {"127.0.0.1:1"};
  CHECK_NOTHROW(build());
}

// Shard::handle_message runs serve()'s handling of one message without a socket: the fuzz target
// tests/fuzz/fuzz_ps_shard drives it, and the cases below replay what it found.
namespace {

struct Bench {
  nn::Mlp model{{3, 2, 2}};
  place::ShardMap map = place::GreedyBySize{}.assign(model.variables(), 1);
  std::vector<place::Piece const*> pieces = map.pieces_of(0);
  optim::Optimizer optimizer = optim::Sgd{0.1f};
  std::ostringstream log;
  /// The slices of the data ps:0's answers last gave each worker, which its pushes name.
  std::map<std::uint32_t, std::vector<std::int64_t>> slices;

  template <class Sync>
  Shard<Sync> shard(Sync policy, std::size_t workers) {
    return Shard<Sync>(pieces, optimizer, policy,
                       {.index = 0, .shards = 1, .workers = workers, .endpoint = {}, .log = &log});
  }
  template <class Sync>
  Header request(Op op, std::uint32_t worker, Sync const& policy, std::size_t workers) const {
    Header h;
    h.op = op;
    h.worker = worker;
    h.fingerprint = fingerprint(pieces, optimizer, policy, 1, workers);
    if (op == Op::push && slices.contains(worker)) h.slices = slices.at(worker);
    return h;
  }
  /// `shard`'s answers to `frames`, each slice they give noted for its worker.
  template <class Shard>
  std::vector<std::vector<zmq::message_t>> send(Shard& shard, std::vector<zmq::message_t> frames) {
    auto answers = shard.handle_message(std::move(frames));
    for (auto const& a : answers) {
      auto const h = wire::decode(a.at(1), "the shard");
      if (!h.slices.empty()) slices[h.worker] = h.slices;
    }
    return answers;
  }
  // [peer, header, one frame of `value`s per piece when `payload`]
  std::vector<zmq::message_t> message(Header h, bool payload) const {
    std::vector<zmq::message_t> frames;
    frames.push_back(bytes("peer-" + std::to_string(h.worker)));
    h.frames = payload ? static_cast<std::uint32_t>(pieces.size()) : 0;
    frames.push_back(encode(h));
    for (auto const* p : pieces) {
      if (!payload) break;
      std::vector<float> v(p->size(), 0.5f);
      frames.emplace_back(v.data(), v.size() * sizeof(float));
    }
    return frames;
  }
};

Header answer_header(std::vector<zmq::message_t> const& answer) {
  REQUIRE(answer.size() >= 2);
  return wire::decode(answer[1], "the shard");
}

}  // namespace

TEST_CASE("handle_message answers as serve() does: nothing to a lone frame or junk, an error to too many") {
  Bench b;
  auto const policy = sync::Asynchronous{};
  auto shard = b.shard(policy, 1);
  std::vector<zmq::message_t> lone;
  lone.push_back(bytes("peer"));
  CHECK(shard.handle_message(std::move(lone)).empty());
  auto frames = b.message(b.request(Op::push, 0, policy, 1), true);
  for (int i = 0; i < 20; ++i) frames.push_back(bytes("x"));
  auto const answers = shard.handle_message(std::move(frames));
  REQUIRE(answers.size() == 1);
  CHECK(as_string(answers[0][0]) == "peer-0");
  auto const h = answer_header(answers[0]);
  CHECK(h.status == Status::error);
  CHECK(h.text.find("has more than") != std::string::npos);
  CHECK(shard.malformed() == 1);
  // Junk, of any number of frames, is counted and not answered.
  std::vector<zmq::message_t> junk;
  junk.push_back(bytes("peer"));
  for (int i = 0; i < 20; ++i) junk.push_back(bytes("x"));
  CHECK(shard.handle_message(std::move(junk)).empty());
  junk.clear();
  junk.push_back(bytes("peer"));
  junk.push_back(bytes("123456"));
  CHECK(shard.handle_message(std::move(junk)).empty());
  CHECK(shard.malformed() == 3);
}

TEST_CASE("a push or pull after the worker's goodbye is refused and counted; the others go on") {
  // Found by fuzz_ps_shard: under bounded staleness a goodbye marks the worker's clock with the
  // largest value, and a push after it overflowed that clock.
  Bench b;
  auto const policy = sync::BoundedStaleness<1>{};
  auto shard = b.shard(policy, 2);
  auto ask = [&](Op op, std::uint32_t worker, bool payload) {
    auto answers = b.send(shard, b.message(b.request(op, worker, policy, 2), payload));
    REQUIRE(answers.size() == 1);
    return answer_header(answers[0]);
  };
  CHECK(ask(Op::init, 0, true).status == Status::ok);
  CHECK(ask(Op::bye, 0, false).status == Status::ok);
  auto h = ask(Op::push, 0, true);
  CHECK(h.status == Status::error);
  CHECK(h.text.find("worker 0 sent a push to ps:0 after its goodbye") != std::string::npos);
  h = ask(Op::pull, 0, false);
  CHECK(h.status == Status::error);
  CHECK(h.text.find("after its goodbye") != std::string::npos);
  CHECK(shard.malformed() == 2);
  // Its first slice of the data: the one worker 0 held when it left.
  CHECK(ask(Op::pull, 1, false).slices == std::vector<std::int64_t>{0});
  h = ask(Op::push, 1, true);  // the worker left is not held back by the one gone
  CHECK(h.status == Status::ok);
  CHECK(h.global_step == 1);
  CHECK(h.local == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("a restore with a counter outside 0..2^62 is refused and counted, changing nothing") {
  // A global step of 2^63 - 1 made the next step overflow it; a negative clock made bounded
  // staleness's lead overflow.
  Bench b;
  auto const policy = sync::Synchronous{};
  auto shard = b.shard(policy, 1);
  auto restore = [&](auto&& forge) {
    auto h = b.request(Op::restore, 0, policy, 1);
    h.local = {3};
    forge(h);
    auto answers = b.send(shard, b.message(h, true));
    REQUIRE(answers.size() == 1);
    return answer_header(answers[0]);
  };
  auto h = restore([](Header& r) { r.global_step = std::numeric_limits<std::int64_t>::max(); });
  CHECK(h.status == Status::error);
  CHECK(h.text.find("carries a counter outside 0..2^62") != std::string::npos);
  h = restore([](Header& r) { r.local = {-1}; });
  CHECK(h.status == Status::error);
  h = restore([](Header& r) { r.optimizer_updates = -5; });
  CHECK(h.status == Status::error);
  CHECK(shard.malformed() == 3);
  CHECK(shard.counters().global_step == 0);
  h = restore([](Header& r) { r.global_step = r.applied = 3; });
  CHECK(h.status == Status::ok);
  CHECK(shard.counters().global_step == 3);
  CHECK(shard.counters().local_steps == std::vector<std::int64_t>{3});
  auto push = b.request(Op::push, 0, policy, 1);
  push.tag = 3;
  auto answers = b.send(shard, b.message(push, true));
  REQUIRE(answers.size() == 1);
  CHECK(answer_header(answers[0]).global_step == 4);
}

// A worker whose connection was lost (heartbeats, a cut link) sends its request again under the
// same number (Client::receive); tests/netns cuts a real link, these cases pin the shard's side.
TEST_CASE("a push sent again after a lost connection is answered again and applied once") {
  Bench b;
  auto const policy = sync::Asynchronous{};
  auto shard = b.shard(policy, 1);
  auto ask = [&](Op op, std::uint64_t sequence) {
    auto h = b.request(op, 0, policy, 1);
    h.sequence = sequence;
    if (op == Op::hello) h.text = std::string(b.optimizer.name());
    auto answers = b.send(shard, b.message(h, op == Op::push || op == Op::init));
    REQUIRE(answers.size() == 1);
    return answer_header(answers[0]);
  };
  CHECK(ask(Op::init, 1).status == Status::ok);
  CHECK(ask(Op::push, 2).global_step == 1);
  auto const again = ask(Op::push, 2);  // the first answer was lost
  CHECK(again.status == Status::ok);
  CHECK(again.sequence == 2);
  CHECK(again.global_step == 1);
  CHECK(again.local == std::vector<std::int64_t>{1});
  CHECK(shard.resent() == 1);
  CHECK(b.log.str().find("ps:0 got worker 0's push again") != std::string::npos);
  CHECK(ask(Op::push, 3).global_step == 2);
  // A worker started again says hello and numbers its requests from 1 again: nothing is taken
  // for a copy.
  CHECK(ask(Op::hello, 1).status == Status::ok);
  CHECK(ask(Op::push, 3).global_step == 3);
  CHECK(shard.resent() == 1);
  CHECK(shard.malformed() == 0);
}

TEST_CASE("a synchronous push sent again while it waits is answered once, on the new connection") {
  Bench b;
  auto const policy = sync::Synchronous{};
  auto shard = b.shard(policy, 2);
  auto push = [&](std::uint32_t worker, std::uint64_t sequence, std::string const& peer) {
    auto h = b.request(Op::push, worker, policy, 2);
    h.sequence = sequence;
    auto frames = b.message(h, true);
    frames[0] = bytes(peer);
    return b.send(shard, std::move(frames));
  };
  auto init = b.request(Op::init, 0, policy, 2);
  init.sequence = 1;
  REQUIRE(b.send(shard, b.message(init, true)).size() == 1);
  CHECK(push(0, 2, "old-connection").empty());  // waits for worker 1's gradient
  CHECK(push(0, 2, "new-connection").empty());  // the same push again: not a second gradient
  CHECK(shard.resent() == 1);
  CHECK(shard.malformed() == 0);
  REQUIRE(b.send(shard, b.message(b.request(Op::pull, 1, policy, 2), false)).size() == 1);
  auto const answers = push(1, 2, "peer-1");
  REQUIRE(answers.size() == 2);
  std::vector<std::string> to;
  for (auto const& a : answers) {
    to.push_back(as_string(a[0]));
    CHECK(answer_header(a).status == Status::ok);
    CHECK(answer_header(a).global_step == 1);
    CHECK(answer_header(a).applied == 2);
  }
  std::sort(to.begin(), to.end());
  CHECK(to == std::vector<std::string>{"new-connection", "peer-1"});
}

}  // namespace test_comm_zmq_ps_wire
