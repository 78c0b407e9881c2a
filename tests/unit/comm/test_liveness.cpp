// Who stopped answering when a collective times out: the liveness board over ZeroMQ on loopback,
// with real sockets and each process's reporter on its own thread. A process that stops beating,
// one that beats but has issued fewer collectives than the others, one that never came (also
// after a failure, without waiting out the patience), and a board that is gone are each named; a
// stranger's message does not stop the board, nor do idle strangers beyond its connection cap;
// a goodbye or beat forged by another run is dropped and cannot blame the wrong cause; a board
// whose address another program took is done without; and a process whose connection closes with
// no word is known to have ended (gone), one that leaves to regroup or says goodbye is not.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <convoy/comm/bootstrap/liveness.hpp>
#include <convoy/comm/bootstrap/process_group.hpp>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "clog_capture.hpp"
#include "processes.hpp"
#include "zmq_watch.hpp"

namespace test_comm_liveness {

namespace {

using namespace convoy;
using namespace std::chrono_literals;
using comm::bootstrap::LivenessBoard;
using comm::bootstrap::LivenessOptions;
using comm::bootstrap::LivenessReporter;

// Beats every 100 ms, silent for a second before a process counts as stopped: wide enough for a
// loaded machine (sanitizers, parallel tests) to deliver every beat of a live process in time.
LivenessOptions const quick{.interval = 100ms, .answer = 1000ms, .missed_beats = 10};

// Process p of a run: a counter of issued collectives and the reporter that beats it.
struct Process {
  std::atomic<std::int64_t> issued{0};
  std::unique_ptr<LivenessReporter> reporter;
  Process(std::string const& address, int p) {
    reporter = std::make_unique<LivenessReporter>(
        address, p, [this] { return issued.load(); }, quick);
  }
};

// Waits until every process has beaten with its current count.
void settle() { std::this_thread::sleep_for(3 * quick.interval); }

// A peer that does not speak the board's protocol, connected to `address`.
zmq::socket_t stranger_at(zmq::context_t& context, std::string const& address) {
  zmq::socket_t stranger(context, zmq::socket_type::dealer);
  stranger.set(zmq::sockopt::linger, 0);
  stranger.connect("tcp://" + address);
  return stranger;
}

// The board at `address` still serves: a process beats `issued` to it and asks.
void check_board_serves(std::string const& address, std::int64_t issued) {
  Process p0(address, 0);
  p0.issued = issued;
  settle();
  auto const seen = p0.reporter->ask();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].issued == issued);
}

}  // namespace

TEST_CASE("a process that stops beating is named, with how long it has been silent") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 3);
  Process p0(address, 0), p1(address, 1);
  auto p2 = std::make_unique<Process>(address, 2);
  p0.issued = p1.issued = p2->issued = 7;
  settle();
  p2.reset();  // its process died: no more beats
  p0.issued = p1.issued = 8;
  std::this_thread::sleep_for(quick.interval * (quick.missed_beats + 3));
  auto const why = p1.reporter->explain();
  CHECK(why.find("stopped answering: process 2 has not beaten for ") != std::string::npos);
  CHECK(why.find("(last at 7 collectives)") != std::string::npos);
  CHECK(why.find("process 0") == std::string::npos);
  auto const seen = p1.reporter->ask();
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].issued == 8);
  CHECK(seen[2].issued == 7);
  CHECK(seen[2].silent_ms > quick.missed_beats * quick.interval.count());
}

TEST_CASE(
    "a process whose connection closes with no word is gone; one that regroups or ends is not") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 5);
  Process p0(address, 0), p1(address, 1);
  auto p2 = std::make_unique<Process>(address, 2);
  auto p3 = std::make_unique<Process>(address, 3);
  auto p4 = std::make_unique<Process>(address, 4);
  settle();
  CHECK(board.gone().empty());
  p2.reset();                        // killed: its kernel closes the connection, no word
  p3->reporter->leave_to_regroup();  // a survivor about to regroup
  p4->reporter->say_goodbye();       // ended on its own
  p3.reset();
  p4.reset();
  // The board sees a connection close within moments; a second is wide for a loaded machine.
  auto const until = std::chrono::steady_clock::now() + 5s;
  while (board.gone().empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(3 * quick.interval);  // p3's and p4's closing seen too
  CHECK(board.gone() == std::vector<std::size_t>{2});
  // Process 1, still beating, was never gone; a process that beats again is no longer.
  Process again(address, 2);
  settle();
  CHECK(board.gone().empty());
}

TEST_CASE("a process that beats but has issued fewer collectives is named as behind") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 3);
  Process p0(address, 0), p1(address, 1), p2(address, 2);
  p0.issued = p2.issued = 12;
  p1.issued = 9;  // stuck in its own code before the exchange the others wait in
  settle();
  auto const why = p0.reporter->explain();
  CHECK(why ==
        "behind the others (stuck before the exchange they wait in): process 1 has issued 9 "
        "collectives, the others up to 12");
}

TEST_CASE("a process that never came is named; with everyone there, nobody is") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 2);
  Process p0(address, 0);
  settle();
  CHECK(p0.reporter->explain() == "stopped answering: process 1 never beat");
  Process p1(address, 1);
  settle();
  CHECK(p0.reporter->explain() ==
        "every process beats and has issued 0 collectives: none is missing from the board's view");
}

TEST_CASE(
    "after a failure, a process that never beat is named once it has been given as long "
    "as one that stopped, not at the end of the patience") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 2);
  Process p0(address, 0);  // process 1 died before its first beat reached the board
  settle();
  auto const start = std::chrono::steady_clock::now();
  CHECK(p0.reporter->explain_after_failure(30s) == "stopped answering: process 1 never beat");
  auto const took = std::chrono::steady_clock::now() - start;
  CHECK(took >= quick.interval * quick.missed_beats);
  CHECK(took < 10s);
}

TEST_CASE("without the board, the first process is the one named, within the answer timeout") {
  auto const address = testing::free_loopback_address();
  auto board = std::make_unique<LivenessBoard>(address, 2);
  Process p1(address, 1);
  settle();
  board.reset();  // the first process died
  auto const start = std::chrono::steady_clock::now();
  CHECK(p1.reporter->explain() ==
        "the liveness board kept by process 0 at " + address +
            " does not answer either, so process 0 has most likely stopped");
  CHECK(std::chrono::steady_clock::now() - start < quick.answer + 1s);
}

TEST_CASE(
    "the board ignores what does not speak its protocol, and a board that cannot listen "
    "says where") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 1);
  {
    zmq::context_t context;
    auto stranger = stranger_at(context, address);
    stranger.send(zmq::str_buffer("GET / HTTP/1.0"), zmq::send_flags::none);
    stranger.send(zmq::str_buffer("convoy-liveness/1"), zmq::send_flags::sndmore);
    stranger.send(zmq::str_buffer("ask"), zmq::send_flags::sndmore);
    stranger.send(zmq::str_buffer("not a number"), zmq::send_flags::sndmore);
    stranger.send(zmq::str_buffer("1"), zmq::send_flags::none);
  }
  check_board_serves(address, 3);
  CHECK_THROWS_WITH_AS(LivenessBoard(address, 1),
                       doctest::Contains(("cannot listen at " + address).c_str()), Error);
}

TEST_CASE(
    "a peer that sends a frame larger than the board takes is disconnected, and the board "
    "serves on") {
  auto const address = testing::free_loopback_address();
  LivenessBoard const board(address, 1);
  zmq::context_t context;
  auto stranger = stranger_at(context, address);
  testing::DisconnectWatch watch(stranger, "board");
  std::vector<char> const large(1 << 20, 'x');
  stranger.send(zmq::buffer(large), zmq::send_flags::none);
  CHECK(watch.disconnected_within(10000ms));
  check_board_serves(address, 2);
}

TEST_CASE("idle connections beyond the board's cap are closed and never take the process's files") {
  auto const address = testing::free_loopback_address();
  constexpr std::size_t cap = 8;
  LivenessBoard const board(address, 1, cap);
  auto const open_files = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator{});
  };
  auto const before = open_files();
  // 200 strangers: plain TCP connections that never send a byte.
  constexpr int strangers = 200;
  std::vector<int> sockets;
  auto const port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  for (int i = 0; i < strangers; ++i) {
    int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ::sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<::sockaddr*>(&to), sizeof to) == 0);
    sockets.push_back(fd);
  }
  // A real process beats and asks through the strangers' crowd.
  check_board_serves(address, 5);
  for (int i = 0; i < 100 && board.over_cap() < strangers - static_cast<int>(cap); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  CHECK(board.over_cap() >= strangers - static_cast<std::int64_t>(cap));
  // The board's side of the strangers' connections is closed: the test's own 200 descriptors,
  // and at most the cap more.
  CHECK(open_files() - before <= strangers + static_cast<std::ptrdiff_t>(cap) + 4);
  for (int fd : sockets) ::close(fd);
}

TEST_CASE(
    "a board whose address another program took is done without; the run goes on, saying so") {
  auto const address = testing::free_loopback_address();
  // Another program holds the first process's address between the rendezvous and the board.
  int const squatter = ::socket(AF_INET, SOCK_STREAM, 0);
  int const yes = 1;
  ::setsockopt(squatter, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  ::sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port =
      htons(static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(squatter, reinterpret_cast<::sockaddr*>(&at), sizeof at) == 0);
  REQUIRE(::listen(squatter, 4) == 0);
  Cluster cluster;
  cluster.jobs["worker"] = {address, testing::free_loopback_address()};
  cluster.job = "worker";
  cluster.index = 0;
  comm::bootstrap::ProcessGroup group(cluster, 1, "comm::Gloo");
  std::ostringstream warnings;
  CHECK_NOTHROW(group.start_liveness([] { return std::int64_t{0}; }, quick, &warnings));
  CHECK_MESSAGE(
      warnings.str().find("the liveness board cannot listen at " + address) != std::string::npos,
      warnings.str());
  CHECK(warnings.str().find("worker:0 trains on without it") != std::string::npos);
  CHECK(group.explain_timeout().empty());
  ::close(squatter);
}

TEST_CASE(
    "a forged goodbye or beat of another run is dropped: the process that then dies is named as "
    "stopped, and a stranger cannot read the board") {
  auto const address = testing::free_loopback_address();
  LivenessOptions ours = quick;
  ours.run = "token:ours";
  testing::ClogCapture capture;
  LivenessBoard const board(address, 2, 0, ours.run);
  std::atomic<std::int64_t> issued{4};
  LivenessReporter const p0(
      address, 0, [&] { return issued.load(); }, ours);
  auto p1 = std::make_unique<LivenessReporter>(
      address, 1, [&] { return issued.load(); }, ours);
  settle();
  // A stranger beats for process 1 with a count of its own, and then says its goodbye.
  LivenessOptions theirs = quick;
  theirs.run = "cluster:guessed";
  {
    LivenessReporter forger(
        address, 1, [] { return std::int64_t{99}; }, theirs);
    settle();
    CHECK_THROWS_AS(forger.ask(), TimeoutError);  // the board answers its own run only
    forger.say_goodbye();
  }
  // Process 1 dies: it stops beating, with no goodbye.
  p1.reset();
  std::this_thread::sleep_for(quick.interval * quick.missed_beats + 500ms);
  auto const why = p0.explain();
  CHECK_MESSAGE(why.find("process 1 has not beaten for") != std::string::npos, why);
  CHECK(why.find("(last at 4 collectives)") != std::string::npos);
  CHECK(why.find("ended on their own") == std::string::npos);
  CHECK(board.strangers() >= 3);  // beats, an ask and a goodbye
  auto const said = capture.text.str();
  CHECK_MESSAGE(said.find("dropped a 'beat' naming process 1 from 127.0.0.1 of another run") !=
                    std::string::npos,
                said);
  CHECK(said.find("of another run", said.find("of another run") + 1) == std::string::npos);
}

}  // namespace test_comm_liveness
