// Launchers that give each process only a rank: torchrun, Open MPI's mpirun, MPICH's Hydra (PMI)
// and Slurm's srun. Ranks become roles by one rule: ranks 0..P-1 are ps tasks, the rest workers,
// P from CONVOY_PS_TASKS or else from what the program trains with (RankJobs).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "address.hpp"
#include "cluster.hpp"
#include "detail/text.hpp"
#include "environment.hpp"
#include "slurm_nodelist.hpp"

namespace convoy::resolvers {

/// The port base when neither CONVOY_PORT nor MASTER_PORT is set (torchrun's own default).
inline constexpr int default_port_base = 29500;

/// What a launcher says about this process, before ranks become roles.
struct RankInfo {
  std::string source;         ///< "torchrun", "Open MPI", "MPICH/PMI", "Slurm"
  std::string rank_variable;  ///< the variables read, for messages
  std::string size_variable;
  std::string local_rank_variable;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::vector<std::string> hosts{};  ///< host of every rank (Slurm), or empty: the coordinator rule
};

namespace detail {

using convoy::detail::quote;

/// The variable `name` as a non-negative integer, nullopt when unset; throws ClusterError quoting
/// a malformed value.
inline std::optional<int> read_count(Environment const& env, std::string const& name) {
  auto const text = env.get(name);
  if (!text) return std::nullopt;
  return convoy::detail::require_count(*text, name);
}

/// The variable `name`; throws ClusterError naming it and the launcher when it is unset.
inline int require_variable(Environment const& env, std::string const& name,
                            std::string const& launcher, std::string const& because) {
  auto const value = read_count(env, name);
  if (!value)
    throw ClusterError("convoy: " + because + " (" + launcher + ") but " + name + " is not set");
  return *value;
}

/// A host from a variable: non-empty, no spaces, no port.
inline std::string check_host(std::string const& host, std::string const& variable) {
  bool const v6 = host.find(':') != std::string::npos &&
                  host.find_first_not_of("0123456789abcdefABCDEF:.") == std::string::npos;
  if (host.find(':') != std::string::npos && !v6) {
    throw ClusterError("convoy: " + variable + " is " + quote(host) +
                       ", a host with a port; give the host alone (ports come from CONVOY_PORT)");
  }
  parse_address(format_address(host, 1), variable);
  return host;
}

/// The first port: CONVOY_PORT, else MASTER_PORT, else 29500; rank r listens on base + 1 + r.
inline int port_base(Environment const& env, int size) {
  std::string variable = "CONVOY_PORT";
  auto text = env.get(variable);
  if (!text) {
    variable = "MASTER_PORT";
    text = env.get(variable);
  }
  if (!text) return default_port_base;
  int const base = convoy::detail::require_count(*text, variable);
  if (base < 1 || base > 65535)
    throw ClusterError("convoy: " + variable + " is " + quote(*text) + ", outside 1..65535");
  if (base + size > 65535) {
    throw ClusterError("convoy: " + variable + " is " + quote(*text) + ", so " +
                       std::to_string(size) + " processes would need ports up to " +
                       std::to_string(base + size) + ", past 65535");
  }
  return base;
}

}  // namespace detail

/// The cluster a launcher's ranks make. Reads CONVOY_PS_TASKS (P; when unset, 1 if size >= 2 and
/// `ranks` is ps_first, else 0), CONVOY_PORT / MASTER_PORT (the port base) and, when `info.hosts`
/// is empty, CONVOY_COORDINATOR / MASTER_ADDR / 127.0.0.1 (the one host of every rank, so ps ranks
/// must run there). Ranks 0..P-1 are ps 0..P-1, ranks P..size-1 are worker 0..size-P-1 (worker 0
/// is the chief; there is no chief job); rank r listens on base + 1 + r. Size 1 with P = 0 is a
/// single process. Throws ClusterError unless 0 <= rank < size, local_rank < size and P < size.
inline Cluster rank_cluster(RankInfo const& info, Environment const& env, RankJobs ranks) {
  using detail::quote;
  std::string const launcher = " (" + info.source + ")";
  if (info.size < 1)
    throw ClusterError("convoy: " + info.size_variable + " is 0" + launcher + "; it must be >= 1");
  if (info.rank >= info.size) {
    throw ClusterError("convoy: " + info.rank_variable + " is " +
                       quote(std::to_string(info.rank)) + ", outside [0, " + info.size_variable +
                       "=" + std::to_string(info.size) + ")" + launcher);
  }
  if (info.local_rank >= info.size) {
    throw ClusterError("convoy: " + info.local_rank_variable + " is " +
                       quote(std::to_string(info.local_rank)) + ", not below " +
                       info.size_variable + "=" + std::to_string(info.size) + launcher);
  }
  auto const requested = detail::read_count(env, "CONVOY_PS_TASKS");
  // The ps tasks take the lowest ranks because rank 0 is where every launcher starts counting:
  // torchrun's node_rank 0 and mpirun's first host are the coordinator, so the ps tasks land on
  // the host the others are told to reach.
  int const ps = requested.value_or(ranks == RankJobs::ps_first && info.size >= 2 ? 1 : 0);
  Cluster c;
  c.source = info.source;
  c.local_rank = info.local_rank;
  if (info.size == 1 && ps == 0) return c;  // one process: nothing to connect
  if (ps >= info.size) {
    throw ClusterError("convoy: CONVOY_PS_TASKS is " + quote(std::to_string(ps)) + " but " +
                       info.size_variable + " is " + std::to_string(info.size) + launcher +
                       "; it must be below the world size so that at least one worker trains");
  }
  // base + 1 + r, not base + r: under torchrun, MASTER_PORT itself is taken by its TCP store.
  int const base = detail::port_base(env, info.size);
  std::vector<std::string> hosts = info.hosts;
  // Without a node per rank (only Slurm says where each task runs), every address names the
  // coordinator; the ps tasks must run there, and workers only need to reach it.
  if (hosts.empty()) {
    std::string variable = "CONVOY_COORDINATOR";
    auto host = env.get(variable);
    if (!host) {
      variable = "MASTER_ADDR";
      host = env.get(variable);
    }
    hosts.assign(static_cast<std::size_t>(info.size),
                 host ? detail::check_host(*host, variable) : std::string("127.0.0.1"));
  }
  for (int r = 0; r < info.size; ++r) {
    std::string address = format_address(hosts[static_cast<std::size_t>(r)], base + 1 + r);
    c.jobs[r < ps ? "ps" : "worker"].push_back(std::move(address));
  }
  c.job = info.rank < ps ? "ps" : "worker";
  c.index = info.rank < ps ? info.rank : info.rank - ps;
  c.validate();
  return c;
}

/// A launcher that gives a rank, a size and a local rank in three variables: applies when either
/// of the first two is set; then both are required.
inline std::optional<Cluster> from_rank_variables(Environment const& env, std::string const& source,
                                                  std::string const& rank,
                                                  std::string const& size,
                                                  std::string const& local_rank,
                                                  RankJobs ranks) {
  if (!env.has(rank) && !env.has(size)) return std::nullopt;
  RankInfo info{.source = source,
                .rank_variable = rank,
                .size_variable = size,
                .local_rank_variable = local_rank};
  std::string const because = (env.has(rank) ? rank : size) + " is set";
  info.rank = detail::require_variable(env, rank, source, because);
  info.size = detail::require_variable(env, size, source, because);
  info.local_rank = detail::read_count(env, local_rank).value_or(0);
  return rank_cluster(info, env, ranks);
}

/// torchrun (and torch.distributed.launch): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
/// MASTER_PORT.
inline std::optional<Cluster> from_torchrun(Environment const& env, RankJobs ranks) {
  return from_rank_variables(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", ranks);
}

/// Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK.
inline std::optional<Cluster> from_open_mpi(Environment const& env, RankJobs ranks) {
  return from_rank_variables(env, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK", ranks);
}

/// MPICH's Hydra (and other PMI launchers): PMI_RANK, PMI_SIZE, and Hydra's MPI_LOCALRANKID for
/// the local rank.
inline std::optional<Cluster> from_pmi(Environment const& env, RankJobs ranks) {
  return from_rank_variables(env, "MPICH/PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", ranks);
}

/// The host of every Slurm task: the step's node list (SLURM_STEP_NODELIST, else
/// SLURM_JOB_NODELIST, else SLURM_NODELIST) expanded, with the matching task counts
/// (SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE; `ntasks` spread evenly in blocks when
/// absent), laid out by SLURM_DISTRIBUTION (block, the default, or cyclic).
inline std::vector<std::string> slurm_task_hosts(Environment const& env, int ntasks) {
  using detail::quote;
  bool const step = env.has("SLURM_STEP_NODELIST");
  std::string list_variable = step ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (!env.has(list_variable)) list_variable = "SLURM_NODELIST";
  auto const list = env.get(list_variable);
  if (!list)
    throw ClusterError("convoy: SLURM_PROCID is set (Slurm) but SLURM_JOB_NODELIST is not");
  auto const nodes = slurm::expand_nodelist(*list, list_variable);

  std::string const counts_variable = step ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  std::vector<int> counts;
  if (auto const text = env.get(counts_variable)) {
    counts = slurm::expand_tasks_per_node(*text, counts_variable);
    if (counts.size() != nodes.size()) {
      throw ClusterError("convoy: " + counts_variable + " is " + quote(*text) + ", counts for " +
                         std::to_string(counts.size()) + " node(s), but " + list_variable + " is " +
                         quote(*list) + ", " + std::to_string(nodes.size()) + " node(s)");
    }
    int total = 0;
    for (int n : counts) total += n;
    if (total != ntasks) {
      throw ClusterError("convoy: " + counts_variable + " is " + quote(*text) + ", " +
                         std::to_string(total) + " tasks in all, but SLURM_NTASKS is " +
                         std::to_string(ntasks));
    }
  } else {
    counts = slurm::even_tasks_per_node(ntasks, nodes.size());
  }

  bool cyclic = false;
  if (auto const distribution = env.get("SLURM_DISTRIBUTION")) {
    auto const first = distribution->substr(0, distribution->find_first_of(":,"));
    // "block:cyclic" and the like: the part before ':' lays tasks over nodes, the rest over
    // sockets and cores within a node, which does not change the host.
    if (first == "cyclic") {
      cyclic = true;
    } else if (first != "block" && first != "*" && !first.empty()) {
      throw ClusterError("convoy: SLURM_DISTRIBUTION is " + quote(*distribution) +
                         ", which convoy cannot map to hosts (it knows block and cyclic); run "
                         "srun with --distribution=block");
    }
  }
  std::vector<std::string> hosts;
  for (std::size_t node : slurm::task_nodes(counts, cyclic)) hosts.push_back(nodes[node]);
  return hosts;
}

/// Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the node list and task counts (see
/// slurm_task_hosts()). Applies when SLURM_PROCID is set; then SLURM_NTASKS is required.
inline std::optional<Cluster> from_slurm(Environment const& env, RankJobs ranks) {
  if (!env.has("SLURM_PROCID")) return std::nullopt;
  RankInfo info{.source = "Slurm",
                .rank_variable = "SLURM_PROCID",
                .size_variable = "SLURM_NTASKS",
                .local_rank_variable = "SLURM_LOCALID"};
  info.rank = detail::require_variable(env, "SLURM_PROCID", "Slurm", "SLURM_PROCID is set");
  info.size = detail::require_variable(env, "SLURM_NTASKS", "Slurm", "SLURM_PROCID is set");
  info.local_rank = detail::read_count(env, "SLURM_LOCALID").value_or(0);
  if (info.size >= 1 && info.rank < info.size) info.hosts = slurm_task_hosts(env, info.size);
  return rank_cluster(info, env, ranks);
}

}  // namespace convoy::resolvers
