// Which CPU a ps task's shard runs on. A shard's serving thread sums the frames that ZeroMQ's I/O
// thread received, and hands ZeroMQ the weights it sends: where the cluster's tasks on one host
// outnumber its CPUs, every thread shares a core anyway, and the scheduler moves these two apart
// at every hand-over (thousands of migrations a second), so each frame crosses from one core's
// cache to the other's. Kept on one CPU, the shard's frames stay in that core's cache: on a 2-vCPU
// host, 2 shards + 2 workers moved 1.40-2.05x of 1+1's bytes/s at 1 and 4 MiB, against 1.14-1.25x
// left to the scheduler (docs/benchmarks.md#bench_ps). Only the shard, which every flow passes
// through: bound too, a worker and a shard on one CPU could no longer copy at the same time. With
// a CPU to spare for every task the threads are better apart, so that is left to the scheduler.
#pragma once

#include <sched.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "../../cluster/address.hpp"
#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"

namespace convoy::comm::zmq_ps {

/// Where a ps task's shard runs (ZmqPs::shard_cpu).
enum class ShardCpu {
  automatic,  ///< one CPU when the cluster's tasks on this host outnumber the CPUs it may use
  one,        ///< always one CPU
  any,        ///< wherever the scheduler puts it
};

/// The CPU a shard keeps its threads on, and what decided it (for the shard's first log line).
struct ShardCpuPlan {
  std::optional<int> cpu;       ///< none: the scheduler decides
  std::size_t local_tasks = 0;  ///< the cluster's tasks on this host (all jobs)
  std::size_t cpus = 0;         ///< the CPUs this process may use

  /// "; on CPU 1 (5 tasks of the cluster on this host, 2 CPUs)", or "" without a CPU.
  std::string describe() const {
    if (!cpu) return {};
    return "; on CPU " + std::to_string(*cpu) + " (" + std::to_string(local_tasks) +
           " tasks of the cluster on this host, " + std::to_string(cpus) + " CPUs)";
  }
};

/// Whether two task hosts are the same machine as far as the spec tells: the same name, or both
/// loopback addresses.
inline bool same_host(std::string const& a, std::string const& b) {
  return a == b || (is_loopback(a) && is_loopback(b));
}

/// The plan for ps task `cluster.index`, given the CPUs this process may use (`allowed`, in
/// order). Shards on one host take the allowed CPUs in turn, by their order in the ps job.
inline ShardCpuPlan plan_shard_cpu(Cluster const& cluster, ShardCpu mode,
                                   std::vector<int> const& allowed) {
  ShardCpuPlan plan;
  plan.cpus = allowed.size();
  if (!cluster.is_ps() || allowed.empty()) return plan;
  auto const host = [](std::string const& address) {
    return parse_address(address, "the cluster spec").host;
  };
  std::string const mine = host(cluster.ps_address(static_cast<std::size_t>(cluster.index)));
  std::size_t shards_before = 0;
  for (auto const& [job, addresses] : cluster.jobs) {
    for (std::size_t i = 0; i < addresses.size(); ++i) {
      if (!same_host(host(addresses[i]), mine)) continue;
      ++plan.local_tasks;
      if (job == "ps" && i < static_cast<std::size_t>(cluster.index)) ++shards_before;
    }
  }
  bool const one = mode == ShardCpu::one ||
                   (mode == ShardCpu::automatic && plan.local_tasks > plan.cpus);
  if (one) plan.cpu = allowed[shards_before % allowed.size()];
  return plan;
}

/// The CPUs a thread may run on, in order: by default the calling one (thread id 0).
inline std::vector<int> allowed_cpus(pid_t thread = 0) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(thread, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

/// Keeps the calling thread, and every thread it starts meanwhile (ZeroMQ's I/O thread), on one
/// CPU until destroyed, then gives the calling thread back the CPUs it had. Without a CPU, nothing.
class StayOnCpu {
 public:
  explicit StayOnCpu(std::optional<int> cpu) {
    if (!cpu) return;
    CPU_ZERO(&before_);
    if (sched_getaffinity(0, sizeof before_, &before_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(*cpu, &one);
    pinned_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~StayOnCpu() {
    if (pinned_) sched_setaffinity(0, sizeof before_, &before_);
  }
  StayOnCpu(StayOnCpu const&) = delete;
  StayOnCpu& operator=(StayOnCpu const&) = delete;
  /// Whether the thread was moved (a CPU was given, and the kernel allowed it).
  bool pinned() const { return pinned_; }

 private:
  cpu_set_t before_{};
  bool pinned_ = false;
};

}  // namespace convoy::comm::zmq_ps
