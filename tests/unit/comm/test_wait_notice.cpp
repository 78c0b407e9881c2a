// ctest-labels: unit
// WaitNotice: lock-step replicas that spend most of each step waiting for one another are told so
// once, after the warm-up and a window of steps, with what to change; busy replicas, one replica
// and a run with no log are never told.
#include <doctest/doctest.h>

#include <convoy/comm/in_process/wait_notice.hpp>
#include <sstream>
#include <string>

namespace test_comm_wait_notice {

using convoy::comm::in_process::WaitNotice;

namespace {

// Feeds `steps` steps of `wall` seconds, each with `compute` seconds of computing; returns how
// many calls gave the notice.
int feed(WaitNotice& notice, int steps, double wall, double compute) {
  int given = 0;
  for (int i = 0; i < steps; ++i) given += notice.step(wall, compute) ? 1 : 0;
  return given;
}

}  // namespace

TEST_CASE("replicas waiting for most of each step are told once, with the fix") {
  std::ostringstream log;
  WaitNotice notice(2, &log);
  CHECK(feed(notice, WaitNotice::warm_up + WaitNotice::window - 1, 0.004, 0.0014) == 0);
  CHECK(log.str().empty());
  CHECK(feed(notice, 1, 0.004, 0.0014) == 1);
  CHECK(feed(notice, 500, 0.004, 0.0014) == 0);  // once
  auto const text = log.str();
  CHECK(text.find("the 2 replicas computed for 35% of each step (1.400 ms of 4.000 ms)") !=
        std::string::npos);
  CHECK(text.find("place::Mirrored{.replicas = 1}") != std::string::npos);
}

TEST_CASE("the warm-up does not count: slow first steps alone give no notice") {
  std::ostringstream log;
  WaitNotice notice(2, &log);
  feed(notice, WaitNotice::warm_up, 1.0, 0.001);
  CHECK(feed(notice, 200, 0.002, 0.0018) == 0);
  CHECK(log.str().empty());
}

TEST_CASE("busy replicas, one replica, or no log: no notice") {
  std::ostringstream log;
  WaitNotice busy(4, &log), one(1, &log), quiet(2, nullptr);
  CHECK(feed(busy, 200, 0.002, 0.0011) == 0);
  CHECK(feed(one, 200, 0.004, 0.0001) == 0);
  CHECK(feed(quiet, 200, 0.004, 0.0001) == 0);
  CHECK(log.str().empty());
}

}  // namespace test_comm_wait_notice
