// Worker 0's rendezvous over ZeroMQ on loopback: a peer that sends a frame larger than rank 0
// takes is disconnected before the frame is allocated, a process of another run is refused and
// cannot answer, a rank of an earlier generation of the group is told it was left behind, and the
// ranks are still served.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/cluster/cluster.hpp>
#include <convoy/comm/bootstrap/rendezvous.hpp>
#include <convoy/comm/bootstrap/run_identity.hpp>
#include <cstddef>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "clog_capture.hpp"
#include "processes.hpp"
#include "rendezvous_rank0.hpp"
#include "zmq_watch.hpp"

namespace test_comm_rendezvous {

using namespace convoy;
using namespace std::chrono_literals;

TEST_CASE("a peer that sends a frame past rank 0's cap is disconnected, and rank 1 is served") {
  std::string const address = testing::free_loopback_address();
  comm::bootstrap::Options const options{.timeout = 20000ms, .retry = 200ms};
  std::vector<std::byte> const id{std::byte{7}, std::byte{9}};
  auto rank0 = testing::serve_rank0(address, options, id);
  {
    zmq::context_t context;
    zmq::socket_t stranger(context, zmq::socket_type::req);
    stranger.set(zmq::sockopt::linger, 0);
    // Rank 0's thread may not listen yet: the first try may be refused, and the next comes soon.
    stranger.set(zmq::sockopt::reconnect_ivl, 100);
    testing::DisconnectWatch watch(stranger, "rendezvous");
    stranger.connect("tcp://" + address);
    std::vector<char> const large(static_cast<std::size_t>(options.max_request_bytes) + 1, 'x');
    stranger.send(zmq::str_buffer("test/1"), zmq::send_flags::sndmore);
    stranger.send(zmq::str_buffer("1"), zmq::send_flags::sndmore);
    stranger.send(zmq::buffer(large), zmq::send_flags::none);
    CHECK(watch.disconnected_within(10000ms));
  }
  std::vector<std::byte> const payload{std::byte{1}};
  auto const answer = comm::bootstrap::ask(address, 1, payload, options, "test/1", "the test's id");
  rank0.join();
  REQUIRE(answer.size() == 1);
  REQUIRE(answer[0].size() == 2);
  CHECK(answer[0].data<std::byte>()[1] == std::byte{9});
}

TEST_CASE(
    "rank 0 serves its own run only: a request of another run is refused, said once, and "
    "the real rank is served") {
  std::string const address = testing::free_loopback_address();
  comm::bootstrap::Options const options{.timeout = 20000ms, .retry = 200ms, .run = "token:ours"};
  std::vector<std::byte> const id{std::byte{7}, std::byte{9}};
  testing::ClogCapture capture;
  auto rank0 = testing::serve_rank0(address, options, id);
  // A registration forged for rank 1, then one of a task started without the run's token.
  std::vector<std::byte> const payload{std::byte{1}};
  auto forged = options;
  forged.run = "token:guessed";
  CHECK_THROWS_WITH_AS(
      comm::bootstrap::ask(address, 1, payload, forged, "test/1", "the test's id"),
      doctest::Contains("serves another run: its CONVOY_RUN_TOKEN or cluster differs"),
      ProtocolError);
  forged.run = "cluster:0123";
  CHECK_THROWS_WITH_AS(comm::bootstrap::ask(address, 1, payload, forged, "test/1", "the test's id"),
                       doctest::Contains("CONVOY_RUN_TOKEN is set for rank 0 and not for rank 1"),
                       ProtocolError);
  auto const answer = comm::bootstrap::ask(address, 1, payload, options, "test/1", "the test's id");
  rank0.join();
  REQUIRE(answer.size() == 1);
  CHECK(answer[0].size() == 2);
  auto const said = capture.text.str();
  CHECK_MESSAGE(
      said.find("refused a request for rank 1 from 127.0.0.1 of another run") != std::string::npos,
      said);
  CHECK(said.find("later ones are refused without a line") != std::string::npos);
  CHECK(said.find("refused a request", said.find("refused a request") + 1) == std::string::npos);
}

TEST_CASE(
    "a rank of an earlier generation of the run's group is told the group went on without it, "
    "and the group's own rank is served") {
  // A member stopped before its group's meeting reaches the rendezvous of the group the others
  // agreed on without it: it must learn it was left behind (and knock), not stop as if it had met
  // another run.
  std::string const address = testing::free_loopback_address();
  std::string const run = "token:ours";
  comm::bootstrap::Options const options{
      .timeout = 20000ms, .retry = 200ms, .run = comm::bootstrap::group_identity(run, 2)};
  std::vector<std::byte> const id{std::byte{7}, std::byte{9}};
  testing::ClogCapture capture;
  auto rank0 = testing::serve_rank0(address, options, id);
  std::vector<std::byte> const payload{std::byte{1}};
  auto earlier = options;
  earlier.run = comm::bootstrap::group_identity(run, 1);
  // Its rank in the earlier group may be past this group's size, and the round it asks for over
  // (another round of the exchange): it is told all the same.
  for (int rank : {1, 3}) {
    CHECK_THROWS_WITH_AS(
        comm::bootstrap::ask(address, rank, payload, earlier, rank == 1 ? "test/1" : "test/1 #2",
                             "the test's id"),
        doctest::Contains(("meets generation 2 of the run's group; the asking rank " +
                           std::to_string(rank) +
                           " belongs to generation 1, which went on without it")
                              .c_str()),
        comm::bootstrap::LeftBehind);
  }
  // A later generation than rank 0's, or another run's earlier one, is no member of this group.
  auto later = options;
  later.run = comm::bootstrap::group_identity(run, 3);
  CHECK_THROWS_WITH_AS(comm::bootstrap::ask(address, 1, payload, later, "test/1", "the test's id"),
                       doctest::Contains("serves another run"), ProtocolError);
  auto other = options;
  other.run = comm::bootstrap::group_identity("token:theirs", 1);
  CHECK_THROWS_WITH_AS(comm::bootstrap::ask(address, 1, payload, other, "test/1", "the test's id"),
                       doctest::Contains("serves another run"), ProtocolError);
  auto const answer = comm::bootstrap::ask(address, 1, payload, options, "test/1", "the test's id");
  rank0.join();
  REQUIRE(answer.size() == 1);
  CHECK(answer[0].size() == 2);
}

TEST_CASE("an earlier generation is one of the same run, with a well-formed generation below") {
  using comm::bootstrap::earlier_generation;
  using comm::bootstrap::group_identity;
  std::string const run = "token:0123456789abcdef";
  CHECK(earlier_generation(run, group_identity(run, 1)));
  CHECK(earlier_generation(group_identity(run, 1), group_identity(run, 12)));
  CHECK_FALSE(earlier_generation(group_identity(run, 2), group_identity(run, 2)));
  CHECK_FALSE(earlier_generation(group_identity(run, 3), group_identity(run, 2)));
  CHECK_FALSE(earlier_generation(group_identity("token:other", 1), group_identity(run, 2)));
  for (std::string suffix : {"/g", "/gx", "/g01", "/g1234567890123456789"})
    CHECK_FALSE(earlier_generation(run + suffix, group_identity(run, 2)));
}

TEST_CASE("a rank takes no answer from a rank 0 of another run") {
  std::string const address = testing::free_loopback_address();
  // Another run's rank 0 on this address: it answers in the protocol, for its own run.
  zmq::context_t context;
  zmq::socket_t other(context, zmq::socket_type::rep);
  other.set(zmq::sockopt::linger, 0);
  other.bind("tcp://" + address);
  std::thread serving([&] {
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(other, std::back_inserter(request))) return;
    other.send(zmq::str_buffer("test/1"), zmq::send_flags::sndmore);
    other.send(zmq::str_buffer("token:theirs"), zmq::send_flags::sndmore);
    other.send(zmq::str_buffer("an id"), zmq::send_flags::none);
  });
  comm::bootstrap::Options const options{.timeout = 20000ms, .retry = 200ms, .run = "token:ours"};
  std::vector<std::byte> const payload{std::byte{1}};
  CHECK_THROWS_WITH_AS(
      comm::bootstrap::ask(address, 1, payload, options, "test/1", "the test's id"),
      doctest::Contains("was answered by a process of another run"), ProtocolError);
  serving.join();
}

TEST_CASE("a run's identity: the same for every task of a run, another for another run") {
  Cluster a;
  a.jobs["worker"] = {"127.0.0.1:2000", "127.0.0.1:2001"};
  Cluster b = a;
  b.index = 1;  // another task of the same run
  Cluster c = a;
  c.jobs["worker"][1] = "127.0.0.1:2002";  // another run
  using comm::bootstrap::run_identity;
  CHECK(run_identity(a, "secret") == run_identity(b, "secret"));
  CHECK(run_identity(a, "secret") != run_identity(a, "other"));
  CHECK(run_identity(a, "secret") != run_identity(c, "secret"));
  CHECK(run_identity(a, nullptr) == run_identity(a, ""));
  CHECK(run_identity(a, nullptr) != run_identity(c, nullptr));
  CHECK(run_identity(a, "secret").starts_with("token:"));
  CHECK(run_identity(a, nullptr).starts_with("cluster:"));
  CHECK(run_identity(a, "secret").find("secret") == std::string::npos);
}

}  // namespace test_comm_rendezvous
