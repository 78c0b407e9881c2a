// Heartbeats of the parameter server, on loopback: a peer process that stops (SIGSTOP: its
// connection stays open but nothing answers, not even ZeroMQ's pings) is noticed within the
// heartbeat the user set, and logged by role and index, by a shard (the worker it lost) and by a
// worker (the shard it lost); the shard serves on and ends normally.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <exception>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq_addon.hpp>

#include "processes.hpp"
#include "shard_peer.hpp"

namespace test_comm_zmq_ps_heartbeat {

using namespace convoy;
using namespace convoy::comm::zmq_ps;
namespace wire = convoy::comm::zmq_ps;  // zmq::decode (Z85) would be found too

namespace {

// A child process, killed and reaped however the test leaves.
struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

void send_all(zmq::socket_t& s, std::vector<zmq::message_t>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    s.send(frames[i], i + 1 == frames.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  }
}

}  // namespace

TEST_CASE("a shard names the worker that went silent, within its heartbeat, and serves on") {
  testing::ShardBench const b;
  auto const fp = b.fingerprint(2);
  auto const& endpoint = b.endpoint;
  auto hello = [&](std::uint32_t worker) {
    Header h;
    h.op = Op::hello;
    h.worker = worker;
    h.fingerprint = fp;
    h.text = "Sgd";
    return h;
  };

  // Forked before this process starts any thread: the child is worker 0, which says hello and
  // then stops.
  Child child{::fork()};
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    zmq::context_t context(1);
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::rcvtimeo, 10000);
    s.connect(endpoint);
    s.send(encode(hello(0)), zmq::send_flags::none);
    std::vector<zmq::message_t> reply;
    (void)zmq::recv_multipart(s, std::back_inserter(reply));
    ::raise(SIGSTOP);
    ::_exit(0);
  }

  std::ostringstream log;
  auto options = b.options(2, &log);
  options.heartbeat = std::chrono::milliseconds(300);
  Shard<sync::Asynchronous> shard(b.pieces, b.optimizer, b.policy, options);
  std::exception_ptr failed;
  std::thread server([&] {
    try {
      shard.serve();
    } catch (...) {
      failed = std::current_exception();
    }
  });
  {
    zmq::context_t context(1);
    auto peer = testing::shard_peer(context, endpoint);
    auto ask = [&](Header const& h) {
      std::vector<zmq::message_t> frames;
      frames.push_back(encode(h));
      send_all(peer, frames);
      std::vector<zmq::message_t> reply;
      REQUIRE(zmq::recv_multipart(peer, std::back_inserter(reply)));
      return wire::decode(reply[0], "the shard");
    };
    CHECK(ask(hello(1)).status == Status::ok);
    // Worker 0 stops after its hello; 300 ms of silence drops it. Worker 1 keeps talking.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    CHECK(ask(hello(1)).status == Status::ok);  // still served
    Header bye;
    bye.op = Op::bye;
    bye.fingerprint = fp;
    for (std::uint32_t w : {0u, 1u}) {
      bye.worker = w;
      CHECK(ask(bye).status == Status::ok);
    }
  }
  server.join();
  if (failed) std::rethrow_exception(failed);
  CHECK(shard.lost() == 1);
  // Asynchronous: the silent worker counts as departed, and its goodbye later is still taken.
  CHECK(log.str().find("ps:0 lost worker 0 at 127.0.0.1: silent for over 300 ms, or gone; it "
                       "counts as departed under Asynchronous, 1 worker(s) go on") !=
        std::string::npos);
  CHECK(log.str().find("worker 0 is back") != std::string::npos);
  CHECK(log.str().find("lost worker 1") == std::string::npos);  // it said goodbye
}

TEST_CASE("a worker names the shard that went silent, within its heartbeat") {
  std::string const endpoint = "tcp://127.0.0.1:" + std::to_string(testing::free_port());
  // The child is a shard that answers one hello and then stops, leaving the next request
  // unanswered.
  Child child{::fork()};
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    zmq::context_t context(1);
    zmq::socket_t s(context, zmq::socket_type::router);
    s.set(zmq::sockopt::rcvtimeo, 10000);
    s.bind(endpoint);
    std::vector<zmq::message_t> request;
    if (zmq::recv_multipart(s, std::back_inserter(request)) && request.size() >= 2) {
      auto const in = wire::decode(request[1], "the worker");
      Header out;
      out.op = in.op;
      out.worker = in.worker;
      out.sequence = in.sequence;
      std::vector<zmq::message_t> reply;
      reply.push_back(std::move(request[0]));
      reply.push_back(encode(out));
      send_all(s, reply);
      // Stops once the next request came: the answer has left by then (a stop right after the
      // send could keep it in this process's queue).
      request.clear();
      (void)zmq::recv_multipart(s, std::back_inserter(request));
    }
    ::raise(SIGSTOP);
    ::_exit(0);
  }

  std::ostringstream log;
  Client client({endpoint}, 0, &log, std::nullopt, std::chrono::milliseconds(300));
  auto const replies = client.hello([](std::size_t) { return Header{}; }, std::chrono::seconds(10));
  CHECK(replies[0].header.status == Status::ok);
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(client.exchange(
                      [](std::size_t) {
                        Header h;
                        h.op = Op::pull;
                        return h;
                      },
                      {}, std::chrono::milliseconds(2000), "to send its weights"),
                  TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(log.str().find("worker 0 lost ps:0 at 127.0.0.1:") != std::string::npos);
  CHECK(log.str().find("silent for over 300 ms") != std::string::npos);
}

}  // namespace test_comm_zmq_ps_heartbeat
