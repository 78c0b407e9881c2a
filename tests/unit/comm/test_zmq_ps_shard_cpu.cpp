// Which CPU a ps task's shard keeps to (comm/zmq_ps/shard_cpu.hpp): the plan from the cluster spec
// and the CPUs allowed, and the pinning itself, which a thread started meanwhile inherits and
// which ends with the pinned scope. test_ps_cluster checks the shards' log lines in real clusters.
#include <doctest/doctest.h>

#include <convoy/comm/zmq_ps/shard_cpu.hpp>
#include <thread>

namespace test_comm_zmq_ps_shard_cpu {

using namespace convoy;
using namespace convoy::comm::zmq_ps;

namespace {

Cluster cluster(std::vector<std::string> ps, std::vector<std::string> workers, std::string job,
                int index) {
  Cluster c;
  c.jobs["ps"] = std::move(ps);
  c.jobs["worker"] = std::move(workers);
  c.job = std::move(job);
  c.index = index;
  c.source = "arguments";
  return c;
}

}  // namespace

TEST_CASE("shards keep to one CPU each, in turn, where the host's tasks outnumber its CPUs") {
  std::vector<std::string> const ps{"127.0.0.1:2001", "localhost:2002"};
  std::vector<std::string> const workers{"127.0.0.1:2003", "127.0.0.2:2004"};
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    auto const c = cluster(ps, workers, "ps", s);
    auto const crowded = plan_shard_cpu(c, ShardCpu::automatic, {3, 5});
    REQUIRE(crowded.cpu);
    CHECK(*crowded.cpu == (s == 0 ? 3 : 5));
    CHECK(crowded.local_tasks == 4);  // every loopback address is this host
    CHECK(crowded.cpus == 2);
    CHECK(crowded.describe() == "; on CPU " + std::to_string(*crowded.cpu) +
                                    " (4 tasks of the cluster on this host, 2 CPUs)");
    auto const roomy = plan_shard_cpu(c, ShardCpu::automatic, {0, 1, 2, 3});
    CHECK_FALSE(roomy.cpu);  // 4 tasks, 4 CPUs: the scheduler keeps them apart
    CHECK(roomy.describe().empty());
    CHECK(plan_shard_cpu(c, ShardCpu::one, {0, 1, 2, 3}).cpu == s);
    CHECK_FALSE(plan_shard_cpu(c, ShardCpu::any, {0}).cpu);
  }
}

TEST_CASE("only the tasks on the shard's own host count, and a worker has no plan") {
  std::vector<std::string> const ps{"ps-a:2222", "ps-a:2223", "ps-b:2222"};
  std::vector<std::string> const workers{"w-a:2222", "w-b:2222", "ps-a:2224"};
  auto const second = plan_shard_cpu(cluster(ps, workers, "ps", 1), ShardCpu::automatic, {0, 1});
  CHECK(second.local_tasks == 3);  // ps:0, ps:1 and worker:2 on ps-a
  REQUIRE(second.cpu);
  CHECK(*second.cpu == 1);
  auto const alone = plan_shard_cpu(cluster(ps, workers, "ps", 2), ShardCpu::automatic, {0, 1});
  CHECK(alone.local_tasks == 1);
  CHECK_FALSE(alone.cpu);
  CHECK(plan_shard_cpu(cluster(ps, workers, "ps", 2), ShardCpu::one, {4, 6}).cpu == 4);
  CHECK_FALSE(plan_shard_cpu(cluster(ps, workers, "worker", 0), ShardCpu::one, {0, 1}).cpu);
  CHECK_FALSE(plan_shard_cpu(cluster(ps, workers, "ps", 0), ShardCpu::one, {}).cpu);
}

TEST_CASE("StayOnCpu pins the thread and the threads it starts, and gives the CPUs back") {
  auto const allowed = allowed_cpus();
  REQUIRE_FALSE(allowed.empty());
  int const cpu = allowed.back();
  std::thread([&] {  // not the test runner's own thread
    auto const before = allowed_cpus();
    {
      StayOnCpu const stay(cpu);
      CHECK(stay.pinned());
      CHECK(allowed_cpus() == std::vector<int>{cpu});
      std::vector<int> started;
      std::thread([&] { started = allowed_cpus(); }).join();
      CHECK(started == std::vector<int>{cpu});
    }
    CHECK(allowed_cpus() == before);
    StayOnCpu const nothing(std::nullopt);
    CHECK_FALSE(nothing.pinned());
    CHECK(allowed_cpus() == before);
  }).join();
}

}  // namespace test_comm_zmq_ps_shard_cpu
