// Worker 0's rendezvous over ZeroMQ on loopback: a peer that sends a frame larger than rank 0
// takes is disconnected before the frame is allocated, and the ranks are still served.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/comm/bootstrap/rendezvous.hpp>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "processes.hpp"
#include "zmq_watch.hpp"

using namespace convoy;
using namespace std::chrono_literals;

TEST_CASE("a peer that sends a frame past rank 0's cap is disconnected, and rank 1 is served") {
  std::string const address = "127.0.0.1:" + std::to_string(testing::free_port());
  comm::bootstrap::Options const options{.timeout = 20000ms, .retry = 200ms};
  std::vector<std::byte> const id{std::byte{7}, std::byte{9}};
  std::thread rank0([&] {
    comm::bootstrap::serve(address, 2, options, "test/1", "the test's id",
                           [&](int, std::span<std::byte const>) {
                             return std::optional(std::vector<std::vector<std::byte>>{id});
                           });
  });
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
