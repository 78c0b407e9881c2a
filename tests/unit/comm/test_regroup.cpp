// The survivors' agreement on a new group (comm/bootstrap/regroup.hpp), each survivor a thread
// serving at its own loopback address: the lowest live rank leads whoever was lost, the group is
// ordered by global step, a lower rank that notices late takes the lead over, a group that is
// not a quorum ends with an error naming who was lost, a member the liveness board saw end is not
// waited for, and a leader lost during the agreement is lost like any other member.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <convoy/cluster/cluster.hpp>
#include <convoy/comm/bootstrap/regroup.hpp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "processes.hpp"

namespace test_comm_regroup {

using namespace convoy;
using namespace std::chrono_literals;

namespace {

Cluster loopback_cluster(std::size_t workers) {
  Cluster c;
  for (std::size_t w = 0; w < workers; ++w)
    c.jobs["worker"].push_back("127.0.0.1:" + std::to_string(testing::free_port()));
  return c;
}

struct Outcome {
  std::optional<comm::bootstrap::Group> group;
  std::string error;
};

// Runs the agreement on the ranks of `alive` (of a group of `size`), rank r with global step
// steps[r], after late[r]; `restarted`, one of them, asks rank 0 to join instead, as a process
// started again does; `gone`: the ranks the leader's board saw end, waited for 100 ms, the others
// `patience`; `held`: worker 0's address is held by a socket that listens and never answers (as
// its liveness board holds it until it leaves to regroup, or as a stopped process's is) until
// worker 0 starts, if it does. Returns each one's outcome, and what the leader logged in `log`.
std::vector<Outcome> agree(std::size_t size, std::vector<std::size_t> const& alive,
                           std::vector<std::int64_t> const& steps, std::string& log,
                           std::size_t min_workers = 1,
                           std::vector<std::chrono::milliseconds> const& late = {},
                           std::optional<std::size_t> restarted = {},
                           std::vector<std::size_t> const& gone = {},
                           std::chrono::milliseconds patience = 400ms, bool held = false) {
  auto const cluster = loopback_cluster(size);
  std::atomic<int> listener = -1;
  if (held) {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto const& address = cluster.worker_address(0);
    at.sin_port =
        htons(static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr const*>(&at), sizeof at) == 0);
    REQUIRE(::listen(listener, 16) == 0);
  }
  comm::bootstrap::Group last{.workers = {}, .rank = 0, .generation = 4};
  for (std::size_t w = 0; w < size; ++w) last.workers.push_back(w);
  std::ostringstream out;
  comm::bootstrap::RegroupOptions const options{.patience = patience,
                                                .gone = gone,
                                                .window = patience + 1100ms,
                                                .min_workers = min_workers,
                                                .run = "cluster:test",
                                                .log = &out};
  std::vector<Outcome> outcomes(size);
  {
    std::vector<std::jthread> threads;
    for (auto r : alive) {
      threads.emplace_back([&, r] {
        if (r < late.size()) std::this_thread::sleep_for(late[r]);
        // Worker 0's board gives its address up as it leaves to regroup.
        if (auto const fd = r == 0 ? listener.exchange(-1) : -1; fd >= 0) ::close(fd);
        auto mine = last;
        mine.rank = r;
        try {
          outcomes[r].group =
              r == restarted
                  ? comm::bootstrap::join_group(
                        cluster, r, cluster.worker_address(0),
                        comm::bootstrap::group_identity(options.run, last.generation), 20s)
                  : comm::bootstrap::regroup(cluster, mine, steps[r], options, 20s);
        } catch (std::exception const& e) {
          outcomes[r].error = e.what();
        }
      });
    }
  }
  if (auto const fd = listener.exchange(-1); fd >= 0) ::close(fd);
  log = out.str();
  return outcomes;
}

// Each of `ranks` agreed on the group of `workers`.
void check_agreed(std::vector<Outcome> const& got, std::vector<std::size_t> const& ranks,
                  std::vector<std::size_t> const& workers) {
  for (auto r : ranks) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == workers);
  }
}

}  // namespace

TEST_CASE("worker 1 of 3 lost: 0 and 2 go on, the one that applied the last step first") {
  std::string log;
  auto const got = agree(3, {0, 2}, {7, 7, 8}, log);
  for (std::size_t r : {0u, 2u}) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == std::vector<std::size_t>{2, 0});
    CHECK(got[r].group->generation == 5);
  }
  CHECK(got[2].group->rank == 0);
  CHECK(got[0].group->rank == 1);
  CHECK_MESSAGE(log.find("lost worker:1 at 127.0.0.1:") != std::string::npos, log);
  CHECK_MESSAGE(log.find("2 go on") != std::string::npos, log);
  CHECK_MESSAGE(log.find("from global step 8") != std::string::npos, log);
}

TEST_CASE("worker 0 of 3 lost: worker 1 leads, and the group keeps its order on equal steps") {
  std::string log;
  auto const got = agree(3, {1, 2}, {5, 5, 5}, log);
  for (std::size_t r : {1u, 2u}) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == std::vector<std::size_t>{1, 2});
    CHECK(got[r].group->rank == r - 1);
  }
  CHECK_MESSAGE(log.find("lost worker:0 at") != std::string::npos, log);
}

TEST_CASE("of 2 workers, worker 0 goes on alone; worker 1 alone stops with an error naming 0") {
  std::string log;
  auto const with_zero = agree(2, {0}, {3, 3}, log);
  REQUIRE_MESSAGE(with_zero[0].group, with_zero[0].error);
  CHECK(with_zero[0].group->workers == std::vector<std::size_t>{0});

  auto const without = agree(2, {1}, {3, 3}, log);
  CHECK_FALSE(without[1].group);
  CHECK_MESSAGE(without[1].error.find("lost worker:0 at 127.0.0.1:") != std::string::npos,
                without[1].error);
  CHECK_MESSAGE(without[1].error.find("not more than half") != std::string::npos, without[1].error);
}

TEST_CASE("two of three lost: the one left stops with an error naming both, within the window") {
  std::string log;
  auto const started = std::chrono::steady_clock::now();
  auto const got = agree(3, {2}, {9, 9, 9}, log);
  CHECK(std::chrono::steady_clock::now() - started < 10s);
  CHECK_FALSE(got[2].group);
  CHECK_MESSAGE(got[2].error.find("worker:0 at") != std::string::npos, got[2].error);
  CHECK_MESSAGE(got[2].error.find("worker:1 at") != std::string::npos, got[2].error);
  CHECK_MESSAGE(got[2].error.find("1 of 3 remain") != std::string::npos, got[2].error);
}

TEST_CASE("below min_workers every survivor stops with the leader's error") {
  std::string log;
  auto const got = agree(4, {0, 1, 3}, {1, 1, 1, 1}, log, 4);
  for (std::size_t r : {0u, 1u, 3u}) {
    CAPTURE(r);
    CHECK_FALSE(got[r].group);
    CHECK_MESSAGE(got[r].error.find("fewer than min_workers 4") != std::string::npos, got[r].error);
  }
}

TEST_CASE("nobody lost: every member comes and the leader closes at once") {
  std::string log;
  auto const started = std::chrono::steady_clock::now();
  auto const got = agree(3, {0, 1, 2}, {2, 2, 2}, log);
  CHECK(std::chrono::steady_clock::now() - started < 1400ms);  // before the 1.5 s window
  for (std::size_t r : {0u, 1u, 2u}) {
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->rank == r);
  }
}

TEST_CASE("worker 0 notices late: worker 1, leading meanwhile, hands the lead over and all go on") {
  std::string log;
  // Past worker 1's 400 ms patience with it, within its 1.5 s window.
  auto const got = agree(3, {0, 1, 2}, {6, 6, 6}, log, 1, {700ms, 0ms, 0ms}, {}, {}, 400ms, true);
  for (std::size_t r : {0u, 1u, 2u}) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == std::vector<std::size_t>{0, 1, 2});
    CHECK(got[r].group->rank == r);
  }
  CHECK_MESSAGE(log.find("re-formed with every member; 3 go on") != std::string::npos, log);
}

TEST_CASE("worker 1 lost and started again while the others regroup: it comes back, last") {
  std::string log;
  // It knocked at the old board, and asks the leader to join as the member it was.
  auto const got = agree(3, {0, 1, 2}, {7, 0, 7}, log, 1, {0ms, 200ms, 0ms}, 1);
  for (std::size_t r : {0u, 1u, 2u}) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == std::vector<std::size_t>{0, 2, 1});
    CHECK(got[r].group->generation == 5);
  }
  CHECK(got[1].group->rank == 2);
}

TEST_CASE("worker 2 of 3 seen to end by the board: the leader closes without its patience") {
  std::string log;
  auto const started = std::chrono::steady_clock::now();
  // A patience of 3 s with the silent member, which the board saw end: waited for 100 ms.
  auto const got = agree(3, {0, 1}, {4, 4, 4}, log, 1, {}, {}, {2}, 3s);
  CHECK(std::chrono::steady_clock::now() - started < 2s);
  check_agreed(got, {0, 1}, {0, 1});
  CHECK_MESSAGE(log.find("lost worker:2 at 127.0.0.1:") != std::string::npos, log);
}

TEST_CASE("a member taken for ended that comes at once is in the group") {
  std::string log;
  // The board saw worker 1's connection close as it left to regroup, its word not yet read.
  auto const got = agree(3, {0, 1, 2}, {4, 4, 4}, log, 1, {}, {}, {1}, 3s);
  check_agreed(got, {0, 1, 2}, {0, 1, 2});
}

TEST_CASE("the leader lost while the others are registered with it: they agree without it") {
  // Worker 0 of 5 is lost; worker 1 leads, a process of its own, held open for its whole window
  // by a newcomer (worker 5) that never registers, and is killed once 2, 3 and 4 registered with
  // it. They take it for lost after their patience with it, and 2 leads the three of 5 left.
  auto const cluster = loopback_cluster(6);
  comm::bootstrap::Group last{.workers = {0, 1, 2, 3, 4}, .rank = 0, .generation = 4};
  comm::bootstrap::RegroupOptions const options{
      .patience = 400ms, .window = 4s, .run = "cluster:test", .log = nullptr};
  pid_t const leader = ::fork();
  REQUIRE(leader >= 0);
  if (leader == 0) {
    auto mine = last;
    mine.rank = 1;
    auto held_open = options;
    held_open.newcomers = {5};
    try {
      (void)comm::bootstrap::regroup(cluster, mine, 3, held_open, 20s);
    } catch (...) {
    }
    ::_exit(0);
  }
  std::vector<Outcome> got(5);
  std::vector<std::ostringstream> logs(5);  // one a thread
  auto const started = std::chrono::steady_clock::now();
  {
    // Past the followers' registration (within half a second: nothing listens at worker 0's
    // address, so they wait for it 100 ms), before the leader's 4 s window.
    std::jthread killer([&] {
      std::this_thread::sleep_for(1800ms);
      ::kill(leader, SIGKILL);
    });
    std::vector<std::jthread> threads;
    for (std::size_t r : {2u, 3u, 4u}) {
      threads.emplace_back([&, r] {
        auto mine = last;
        mine.rank = r;
        auto own = options;
        own.log = &logs[r];
        try {
          got[r].group = comm::bootstrap::regroup(cluster, mine, 3, own, 20s);
        } catch (std::exception const& e) {
          got[r].error = e.what();
        }
      });
    }
  }
  ::waitpid(leader, nullptr, 0);
  CHECK(std::chrono::steady_clock::now() - started < 6s);
  for (std::size_t r : {2u, 3u, 4u}) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == std::vector<std::size_t>{2, 3, 4});
    CHECK(got[r].group->generation == 5);
    CHECK_MESSAGE(logs[r].str().find("registered to regroup with worker:1 at") != std::string::npos,
                  logs[r].str());
  }
  // The new leader, worker 2, names both lost.
  auto const log = logs[2].str();
  auto const lost = log.find("the group of 5 lost worker:0 at");
  REQUIRE_MESSAGE(lost != std::string::npos, log);
  CHECK_MESSAGE(log.find(", worker:1 at", lost) < log.find("; 3 go on", lost), log);
}

TEST_CASE("a member of an older generation is silence to a later one's, not a refusal") {
  // Worker 0 is still agreeing on generation 4's group (it was stopped past the others'
  // regroup); 1 and 2, of generation 5, ask it first: it is behind, so they go on without it.
  auto const cluster = loopback_cluster(3);
  std::ostringstream out;
  comm::bootstrap::RegroupOptions const options{
      .patience = 400ms, .window = 1500ms, .run = "cluster:test", .log = &out};
  std::vector<Outcome> got(3);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r : {0u, 1u, 2u}) {
      threads.emplace_back([&, r] {
        comm::bootstrap::Group last{
            .workers = {0, 1, 2}, .rank = r, .generation = r == 0 ? 4u : 5u};
        try {
          got[r].group = comm::bootstrap::regroup(cluster, last, 9, options, 20s);
        } catch (std::exception const& e) {
          got[r].error = e.what();
        }
      });
    }
  }
  for (std::size_t r : {1u, 2u}) {
    CAPTURE(r);
    REQUIRE_MESSAGE(got[r].group, got[r].error);
    CHECK(got[r].group->workers == std::vector<std::size_t>{1, 2});
    CHECK(got[r].group->generation == 6);
  }
  CHECK_FALSE(got[0].group);
  CHECK_MESSAGE(got[0].error.find("1 of 3 remain") != std::string::npos, got[0].error);
}

TEST_CASE("worker 0 of 3 ended (its address refuses): the others wait for it 100 ms, not 3 s") {
  // No board saw it: worker 0 kept the board. Nothing listens at its address, as after its death.
  std::string log;
  auto const started = std::chrono::steady_clock::now();
  auto const got = agree(3, {1, 2}, {4, 4, 4}, log, 1, {}, {}, {}, 3s);
  CHECK(std::chrono::steady_clock::now() - started < 2s);
  check_agreed(got, {1, 2}, {1, 2});
  CHECK_MESSAGE(log.find("lost worker:0 at 127.0.0.1:") != std::string::npos, log);
}

TEST_CASE("worker 0 of 3 silent but holding its address (stopped): it gets the whole patience") {
  // A listening socket that never answers stands for a stopped process: the kernel takes the
  // connections, so the address does not refuse, and the others wait their patience.
  std::string log;
  auto const started = std::chrono::steady_clock::now();
  auto const got = agree(3, {1, 2}, {4, 4, 4}, log, 1, {}, {}, {}, 1s, /*held=*/true);
  CHECK(std::chrono::steady_clock::now() - started >= 1500ms);
  check_agreed(got, {1, 2}, {1, 2});
}

}  // namespace test_comm_regroup
