// How many replicas a threaded placement runs when the user leaves the count at 0: one per CPU this
// process may use (its affinity mask, and its cgroup's CPU quota when one is set), since each
// replica's math is single-threaded and a replica more than the CPUs only time-slices with another.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

namespace convoy::place::detail {

/// CPUs a cgroup quota allows (quota / period, rounded up), or 0 when there is no quota. Reads
/// cgroup v2's cpu.max, else v1's cpu.cfs_quota_us and cpu.cfs_period_us, under `root`.
inline int cgroup_cpu_limit(std::string const& root = "/sys/fs/cgroup") {
  auto limit = [](double quota, double period) {
    return quota > 0 && period > 0 ? static_cast<int>(std::ceil(quota / period)) : 0;
  };
  if (std::ifstream v2(root + "/cpu.max"); v2) {
    std::string quota;
    double period = 0;
    if (v2 >> quota >> period && quota != "max") return limit(std::stod(quota), period);
    return 0;
  }
  std::ifstream quota_file(root + "/cpu/cpu.cfs_quota_us"), period_file(root + "/cpu/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (quota_file >> quota && period_file >> period) return limit(quota, period);
  return 0;
}

/// CPUs this process may run on: its affinity mask, capped by the cgroup quota; at least 1.
inline int usable_cpus() {
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  try {
    if (int const quota = cgroup_cpu_limit(); quota > 0) cpus = std::min(cpus, quota);
  } catch (...) {  // an unreadable or odd cgroup file only loses the cap
  }
  return std::max(1, cpus);
}

inline int replicas_or_one_per_core(int wanted) { return wanted > 0 ? wanted : usable_cpus(); }

}  // namespace convoy::place::detail
