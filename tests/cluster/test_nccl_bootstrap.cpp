// The NCCL unique-id bootstrap over ZeroMQ on loopback: real processes started as torchrun would
// start them, whose rank 0 comes up late, all end with the same 128-byte id; a rank with nobody to
// ask, a rank 0 whose peers never come, a foreign request and an id of the wrong size each end in
// an error that names the rank and the address, within their timeouts. The id is an arbitrary
// blob: the transport does not care what it holds.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/cluster.hpp>
#include <convoy/comm/nccl/unique_id_bootstrap.hpp>
#include <cstddef>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "processes.hpp"
#include "task_checks.hpp"
#include "temp_dir.hpp"

namespace test_cluster_nccl_bootstrap {

using namespace convoy;
using namespace std::chrono_literals;
using comm::nccl::BootstrapOptions;

std::string const program = testing::this_program();
constexpr std::size_t id_bytes = 128;

std::vector<std::byte> random_id() {
  std::random_device device;
  std::vector<std::byte> id(id_bytes);
  for (auto& b : id) b = static_cast<std::byte>(device() & 0xff);
  return id;
}

// One rank: resolves the cluster from the launcher's variables, shares the id and writes it to
// <dir>/rank<r>.id. Scenario "late": rank 0 starts serving a second after the others ask.
int task(std::string const& scenario, std::filesystem::path const& dir) {
  auto const cluster = Cluster::from_environment(RankJobs::all_workers);
  int const rank = cluster.worker_rank();
  if (scenario == "late" && rank == 0) std::this_thread::sleep_for(1s);
  auto const id = comm::nccl::share_unique_id(cluster, id_bytes, random_id,
                                              BootstrapOptions{.timeout = 20s, .retry = 200ms});
  std::ofstream out(dir / ("rank" + std::to_string(rank) + ".id"), std::ios::binary);
  out.write(reinterpret_cast<char const*>(id.data()), static_cast<std::streamsize>(id.size()));
  return out ? 0 : 1;
}
testing::TaskSuite const suite("nccl_bootstrap", task);

TEST_CASE("ranks started by torchrun share rank 0's id, though rank 0 comes up late") {
  testing::TempDir const dir("nccl_bootstrap");
  constexpr int ranks = 3;
  auto const tasks = testing::run_cluster(program, suite.scenario("late"), dir.path, 0, ranks,
                                          "torchrun", std::chrono::seconds(60));
  testing::check_tasks_succeeded(tasks);
  std::vector<std::vector<char>> ids;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(dir.path / ("rank" + std::to_string(r) + ".id"), std::ios::binary);
    ids.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    CHECK(ids.back().size() == id_bytes);
  }
  CHECK(ids[1] == ids[0]);
  CHECK(ids[2] == ids[0]);
}

TEST_CASE("a rank with no rank 0 to ask gives up at its timeout, naming itself and the address") {
  auto const address = testing::free_loopback_address();
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(
      comm::nccl::fetch_unique_id(address, 2, id_bytes, {.timeout = 600ms, .retry = 200ms}),
      doctest::Contains(
          ("rank 2 could not fetch the NCCL unique id from rank 0 at " + address).c_str()),
      TimeoutError);
  auto const took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 600ms);
  CHECK(took < 5s);
}

TEST_CASE("rank 0 names the ranks that never asked") {
  auto const address = testing::free_loopback_address();
  auto const id = random_id();
  std::vector<std::byte> fetched;
  std::jthread rank1([&] {
    fetched = comm::nccl::fetch_unique_id(address, 1, id_bytes, {.timeout = 5s, .retry = 200ms});
  });
  CHECK_THROWS_WITH_AS(comm::nccl::serve_unique_id(address, id, 3, {.timeout = 1s}),
                       doctest::Contains("rank(s) 2 of 3 never asked"), TimeoutError);
  rank1.join();
  CHECK(fetched == id);
}

TEST_CASE("a foreign request is refused and serving goes on; an id of another size is refused") {
  auto const address = testing::free_loopback_address();
  auto const id = random_id();
  std::jthread rank0(
      [&] { comm::nccl::serve_unique_id(address, id, 3, {.timeout = 10s, .retry = 100ms}); });
  {
    zmq::context_t context;
    zmq::socket_t stranger(context, zmq::socket_type::req);
    stranger.set(zmq::sockopt::linger, 0);
    stranger.set(zmq::sockopt::rcvtimeo, 5000);
    stranger.connect("tcp://" + address);
    stranger.send(zmq::str_buffer("GET / HTTP/1.0"), zmq::send_flags::none);
    std::vector<zmq::message_t> answer;
    REQUIRE(zmq::recv_multipart(stranger, std::back_inserter(answer)));
    REQUIRE(answer.size() == 2);
    CHECK(answer[0].to_string() == "error");
  }
  CHECK_THROWS_WITH_AS(comm::nccl::fetch_unique_id(address, 1, 64, {.timeout = 5s, .retry = 200ms}),
                       doctest::Contains("got 128 bytes, not 64"), ProtocolError);
  CHECK(comm::nccl::fetch_unique_id(address, 2, id_bytes, {.timeout = 5s}) == id);
}

}  // namespace test_cluster_nccl_bootstrap
