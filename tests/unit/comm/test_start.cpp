// A run that starts with the workers that are there (comm/bootstrap/start.hpp), over ZeroMQ on
// loopback with a thread for each worker: with every worker there it starts at once with all of
// them; with fewer it starts after the last call with those that came, in the cluster's order,
// and one that asks after that is told the run started without it; with fewer than it needs it
// ends with an error naming who never asked.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/comm/bootstrap/start.hpp>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "processes.hpp"

namespace test_comm_start {

using namespace convoy;
using namespace std::chrono_literals;
using comm::bootstrap::Group;
using comm::bootstrap::StartOptions;

TEST_CASE("with every worker there the run starts at once, without waiting out the last call") {
  auto const address = testing::free_loopback_address();
  StartOptions const options{
      .start_workers = 2, .last_call = 20s, .meeting = {.timeout = 30s, .run = "token:ours"}};
  Group one, two;
  std::thread w1([&] { one = comm::bootstrap::ask_start(address, 1, 3, options); });
  std::thread w2([&] { two = comm::bootstrap::ask_start(address, 2, 3, options); });
  auto const started = std::chrono::steady_clock::now();
  auto const zero = comm::bootstrap::serve_start(address, 3, options);
  w1.join();
  w2.join();
  CHECK(std::chrono::steady_clock::now() - started < 10s);
  CHECK(zero.workers == std::vector<std::size_t>{0, 1, 2});
  CHECK(zero.rank == 0);
  CHECK(one.workers == zero.workers);
  CHECK(one.rank == 1);
  CHECK(two.rank == 2);
  CHECK(two.generation == 0);
}

TEST_CASE(
    "2 of 3: the run starts after the last call with the two that came; the third, asking "
    "after, is told it started without it") {
  auto const address = testing::free_loopback_address();
  StartOptions const options{.start_workers = 2,
                             .last_call = 300ms,
                             .meeting = {.timeout = 30s, .retry = 2000ms, .run = "token:ours"}};
  Group two;
  std::thread w2([&] { two = comm::bootstrap::ask_start(address, 2, 3, options); });
  std::thread w1([&] {
    // Once the group of two has its answers, while worker 0 still answers for two retries.
    std::this_thread::sleep_for(1200ms);
    CHECK_THROWS_WITH_AS(comm::bootstrap::ask_start(address, 1, 3, options),
                         doctest::Contains("started without it, with workers 0,2"),
                         comm::bootstrap::StartedWithout);
  });
  auto const zero = comm::bootstrap::serve_start(address, 3, options);
  w2.join();
  w1.join();
  CHECK(zero.workers == std::vector<std::size_t>{0, 2});
  CHECK(two.workers == zero.workers);
  CHECK(two.rank == 1);
}

TEST_CASE("fewer workers than the run starts with: worker 0 names those that never asked") {
  auto const address = testing::free_loopback_address();
  StartOptions const options{
      .start_workers = 2, .last_call = 100ms, .meeting = {.timeout = 800ms, .run = "token:ours"}};
  CHECK_THROWS_WITH_AS(comm::bootstrap::serve_start(address, 3, options),
                       doctest::Contains("with 2 of 3 workers, but worker(s) 1, 2 never asked"),
                       TimeoutError);
}

}  // namespace test_comm_start
