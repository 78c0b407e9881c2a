// The bootstrap under the run's key (CONVOY_BOOTSTRAP_KEY, comm/bootstrap/run_key.hpp), over
// ZeroMQ on loopback with real sockets: the ranks of the run meet, beat and knock over CURVE; a
// peer in plaintext, or under another key, is not answered, and the refusal of a wrong key is
// logged with its address; a key file that cannot be used is refused naming the variable.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <convoy/comm/bootstrap/liveness.hpp>
#include <convoy/comm/bootstrap/rendezvous.hpp>
#include <convoy/comm/bootstrap/run_key.hpp>
#include <convoy/comm/zmq_ps/curve_keys.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "clog_capture.hpp"
#include "processes.hpp"
#include "rendezvous_rank0.hpp"
#include "temp_dir.hpp"

namespace test_comm_run_key {

namespace {

using namespace convoy;
using namespace std::chrono_literals;
using comm::bootstrap::run_key_variable;

// CONVOY_BOOTSTRAP_KEY set to `path` while it lives, as it was after.
struct KeyVariable {
  std::optional<std::string> saved;
  explicit KeyVariable(std::filesystem::path const& path) {
    if (char const* was = std::getenv(run_key_variable)) saved = was;
    ::setenv(run_key_variable, path.c_str(), 1);
  }
  KeyVariable(KeyVariable const&) = delete;
  KeyVariable& operator=(KeyVariable const&) = delete;
  ~KeyVariable() {
    if (saved) {
      ::setenv(run_key_variable, saved->c_str(), 1);
    } else {
      ::unsetenv(run_key_variable);
    }
  }
};

// A rendezvous request for rank 1 of the run `run`, sent by a peer of its own on `socket`, which
// `setup` prepares: whether any answer comes within `wait`.
template <class Setup>
bool stranger_answered(std::string const& address, std::string const& run, Setup setup,
                       std::chrono::milliseconds wait) {
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::req);
  socket.set(zmq::sockopt::linger, 0);
  setup(socket);
  socket.connect("tcp://" + address);
  socket.send(zmq::str_buffer("test/1"), zmq::send_flags::sndmore);
  socket.send(zmq::str_buffer("1"), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(run), zmq::send_flags::sndmore);
  socket.send(zmq::str_buffer("x"), zmq::send_flags::none);
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, wait);
  return (item.revents & ZMQ_POLLIN) != 0;
}

}  // namespace

TEST_CASE(
    "under the run's key the ranks meet; a peer in plaintext or under another key gets no "
    "answer, and a wrong key is logged with its address") {
  testing::TempDir dir("run-key");
  auto const ours = comm::zmq_ps::write_curve_key_pair(dir.path / "run");
  auto const theirs = comm::zmq_ps::write_curve_key_pair(dir.path / "other");
  KeyVariable const key(dir.path / "run.key");
  REQUIRE(comm::bootstrap::run_key().has_value());
  CHECK(comm::bootstrap::run_key()->public_key == ours.public_key);

  std::string const address = testing::free_loopback_address();
  comm::bootstrap::Options const options{.timeout = 20000ms, .retry = 200ms, .run = "token:ours"};
  std::vector<std::byte> const id{std::byte{7}, std::byte{9}};
  testing::ClogCapture capture;
  auto rank0 = testing::serve_rank0(address, options, id);
  // The run's identity is no help without the key: neither peer gets past the handshake.
  CHECK_FALSE(stranger_answered(
      address, options.run, [](zmq::socket_t&) {}, 1500ms));
  CHECK_FALSE(stranger_answered(
      address, options.run,
      [&](zmq::socket_t& s) {
        s.set(zmq::sockopt::curve_serverkey, ours.public_key);  // the public half, leaked
        s.set(zmq::sockopt::curve_publickey, theirs.public_key);
        s.set(zmq::sockopt::curve_secretkey, theirs.secret_key);
      },
      1500ms));
  std::vector<std::byte> const payload{std::byte{1}};
  auto const answer = comm::bootstrap::ask(address, 1, payload, options, "test/1", "the test's id");
  rank0.join();
  REQUIRE(answer.size() == 1);
  REQUIRE(answer[0].size() == 2);
  CHECK(answer[0].data<std::byte>()[1] == std::byte{9});
  auto const said = capture.text.str();
  CHECK_MESSAGE(said.find("convoy: rank 0 at " + address + " refused a worker at 127.0.0.1") !=
                    std::string::npos,
                said);
  CHECK_MESSAGE(said.find("key " + theirs.public_key + " is not authorized") != std::string::npos,
                said);
}

TEST_CASE(
    "under the run's key the liveness board hears its processes; a knock in plaintext gets "
    "nothing") {
  testing::TempDir dir("run-key-board");
  comm::zmq_ps::write_curve_key_pair(dir.path / "run");
  std::string const address = testing::free_loopback_address();
  comm::bootstrap::LivenessOptions const quick{
      .interval = 100ms, .answer = 1000ms, .missed_beats = 10, .run = "token:ours"};
  std::optional<comm::bootstrap::LivenessBoard> board;
  std::optional<comm::bootstrap::LivenessReporter> p0, p1;
  {
    KeyVariable const key(dir.path / "run.key");
    board.emplace(address, 2, 0, quick.run);
    p0.emplace(
        address, 0, [] { return std::int64_t{3}; }, quick);
    p1.emplace(
        address, 1, [] { return std::int64_t{3}; }, quick);
    std::this_thread::sleep_for(3 * quick.interval);
    auto const seen = p0->ask();
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].issued == 3);
    CHECK(seen[1].issued == 3);
    CHECK(p0->explain().find("none is missing") != std::string::npos);
  }
  // Without the key (the variable is unset again): the board does not take the knock.
  CHECK_FALSE(comm::bootstrap::knock(address, quick.run, 1, 1000ms).has_value());
  CHECK(board->joiners().empty());
  {
    KeyVariable const key(dir.path / "run.key");
    CHECK(comm::bootstrap::knock(address, quick.run, 1, 2000ms).has_value());
    CHECK(board->joiners() == std::vector<std::size_t>{1});
    p1.reset();
    p0.reset();
  }
}

TEST_CASE(
    "a run key file that is missing or that others may read is refused, naming the variable") {
  testing::TempDir dir("run-key-bad");
  {
    KeyVariable const key(dir.path / "absent.key");
    CHECK_THROWS_WITH_AS(comm::bootstrap::run_key(),
                         doctest::Contains("CONVOY_BOOTSTRAP_KEY names the run's bootstrap key"),
                         Error);
    CHECK_THROWS_WITH_AS(comm::bootstrap::run_key(), doctest::Contains("cannot read the key file"),
                         Error);
  }
  comm::zmq_ps::write_curve_key_pair(dir.path / "open");
  ::chmod((dir.path / "open.key").c_str(), 0644);
  KeyVariable const key(dir.path / "open.key");
  CHECK_THROWS_WITH_AS(comm::bootstrap::run_key(), doctest::Contains("chmod 600"), Error);
}

}  // namespace test_comm_run_key
