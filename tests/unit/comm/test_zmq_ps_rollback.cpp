// ctest-labels: unit fault
// A shard's side of a rollback (docs/parameter_server.md, "Faults"), message by message through
// Shard::handle_message: a restore of a new generation voids what waited from before and answers
// the pulls that waited for it; a request of an older generation is refused with the new one, so
// its worker learns of the rollback; nothing may run ahead of the shard's generation.
#include <doctest/doctest.h>

#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace test_comm_zmq_ps_rollback {

using namespace convoy;
using namespace convoy::comm::zmq_ps;

namespace {

struct Bench {
  nn::Mlp model{{3, 2, 2}};
  place::ShardMap map = place::GreedyBySize{}.assign(model.variables(), 1);
  std::vector<place::Piece const*> pieces = map.pieces_of(0);
  optim::Optimizer optimizer = optim::Sgd{0.1f};
  sync::Synchronous policy{};
  std::ostringstream log;
  Shard<sync::Synchronous> shard{
      pieces,
      optimizer,
      policy,
      {.index = 0, .shards = 1, .workers = 2, .endpoint = {}, .log = &log}};
  std::map<std::uint32_t, std::vector<std::int64_t>> slices;  ///< what the answers gave each worker

  // Worker `worker`'s `op` of generation `generation`, from connection `peer`, with a payload of
  // `arrays` frames per piece.
  std::vector<std::vector<zmq::message_t>> send(std::string const& peer, Op op,
                                                std::uint32_t worker, std::uint64_t generation,
                                                std::size_t arrays = 0, std::int64_t tag = 0,
                                                std::int64_t step = 0) {
    Header h;
    h.op = op;
    h.worker = worker;
    h.generation = generation;
    h.tag = tag;
    h.global_step = h.applied = step;
    h.local = {step, step};
    h.fingerprint = fingerprint(pieces, optimizer, policy, 1, 2);
    if (op == Op::push && slices.contains(worker)) h.slices = slices.at(worker);
    h.frames = static_cast<std::uint32_t>(arrays * pieces.size());
    std::vector<zmq::message_t> frames;
    frames.emplace_back(peer.data(), peer.size());
    frames.push_back(encode(h));
    for (std::size_t a = 0; a < arrays; ++a) {
      for (auto const* p : pieces) {
        std::vector<float> v(p->size(), 0.5f);
        frames.emplace_back(v.data(), v.size() * sizeof(float));
      }
    }
    auto answers = shard.handle_message(std::move(frames));
    for (auto const& a : answers) {
      auto const answer = convoy::comm::zmq_ps::decode(a.at(1), "the shard");
      if (!answer.slices.empty()) slices[answer.worker] = answer.slices;
    }
    return answers;
  }
};

std::string to(std::vector<zmq::message_t> const& answer) {
  return {static_cast<char const*>(answer[0].data()), answer[0].size()};
}
Header header(std::vector<zmq::message_t> const& answer) {
  REQUIRE(answer.size() >= 2);
  return convoy::comm::zmq_ps::decode(answer[1], "the shard");
}

}  // namespace

TEST_CASE("a restore of a new generation voids what waited, answers the pulls that waited for it") {
  Bench b;
  REQUIRE(header(b.send("w0", Op::init, 0, 0, 1).at(0)).status == Status::ok);
  CHECK(b.send("w0", Op::push, 0, 0, 1, 0).empty());  // waits for worker 1's gradient
  // Worker 1 lost another shard and connected again: it waits for the chief's rollback.
  CHECK(b.send("w1-again", Op::pull, 1, 1).empty());
  auto const answers = b.send("chief", Op::restore, 0, 1, 1, 0, 2);
  REQUIRE(answers.size() == 3);
  std::map<std::string, Header> by_peer;
  for (auto const& a : answers) by_peer[to(a)] = header(a);
  CHECK(by_peer.at("w0").status == Status::error);  // the voided push
  CHECK(by_peer.at("w0").text.find("rolled back to a checkpoint") != std::string::npos);
  CHECK(by_peer.at("w0").generation == 1);
  CHECK(by_peer.at("chief").status == Status::ok);
  CHECK(by_peer.at("w1-again").status == Status::ok);
  CHECK(by_peer.at("w1-again").global_step == 2);
  CHECK(by_peer.at("w1-again").generation == 1);
  CHECK(b.log.str().find("ps:0 rolled back to global step 2 by worker 0's restore (generation 1); "
                         "1 waiting request(s) voided") != std::string::npos);

  // Worker 0 has not heard of the rollback: its push is void, and the answer says why and which
  // generation the shard is at. That is no malformed message.
  auto const stale = b.send("w0", Op::push, 0, 0, 1, 0);
  REQUIRE(stale.size() == 1);
  CHECK(header(stale[0]).status == Status::error);
  CHECK(header(stale[0]).generation == 1);
  CHECK(header(stale[0]).text.find("of generation 0 is void") != std::string::npos);
  CHECK(b.shard.malformed() == 0);
  // A push may not run ahead of the shard's generation (only a restore raises it).
  auto const ahead = b.send("w1-again", Op::push, 1, 2, 1, 2);
  REQUIRE(ahead.size() == 1);
  CHECK(header(ahead[0]).status == Status::error);
  CHECK(b.shard.malformed() == 1);
  // Both workers in the new generation: the step after the checkpoint is applied.
  CHECK(b.send("w0-again", Op::push, 0, 1, 1, 2).empty());
  CHECK(b.send("w1-again", Op::push, 1, 1, 1, 2).size() == 2);
  CHECK(b.shard.counters().global_step == 3);
}

TEST_CASE("a worker keeps one request waiting whatever its generations: a later one voids it") {
  Bench b;
  REQUIRE(header(b.send("w0", Op::init, 0, 0, 1).at(0)).status == Status::ok);
  CHECK(b.send("w0", Op::push, 0, 0, 1, 0).empty());
  // Pulls of ever later generations wait for restores that have not come: each voids the last.
  for (std::uint64_t generation = 1; generation <= 3; ++generation) {
    auto const peer = "w0-" + std::to_string(generation);
    auto const answers = b.send(peer, Op::pull, 0, generation);
    REQUIRE(answers.size() == 1);
    CHECK(to(answers[0]) == (generation == 1 ? "w0" : "w0-" + std::to_string(generation - 1)));
    CHECK(header(answers[0]).status == Status::error);
    CHECK(header(answers[0]).text.find("a request of a later generation") != std::string::npos);
  }
  auto const answers = b.send("chief", Op::restore, 0, 3, 1, 0, 5);
  REQUIRE(answers.size() == 2);  // the restore's and the last pull's
  CHECK(b.shard.malformed() == 0);
}

TEST_CASE("a restore of the same generation keeps its old rule: not while gradients wait") {
  Bench b;
  REQUIRE(header(b.send("w0", Op::init, 0, 0, 1).at(0)).status == Status::ok);
  CHECK(b.send("w0", Op::push, 0, 0, 1, 0).empty());
  auto const answers = b.send("chief", Op::restore, 0, 0, 1, 0, 2);
  REQUIRE(answers.size() == 1);
  CHECK(header(answers[0]).status == Status::error);
  CHECK(header(answers[0]).text.find("cannot restore while workers' gradients wait") !=
        std::string::npos);
  CHECK(b.shard.counters().global_step == 0);
}

}  // namespace test_comm_zmq_ps_rollback
