// Cluster: which processes take part in a run, at which addresses, and which one this process is.
// The struct, its queries, describe() and validate(); resolve.hpp (included at the end) reads one
// from flags, TF_CONFIG or a launcher's variables.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "address.hpp"
#include "detail/text.hpp"
#include "environment.hpp"

namespace convoy {

/// The jobs a cluster may have, in the order describe() lists them.
inline std::vector<std::string> const& cluster_job_names() {
  static std::vector<std::string> const names{"chief", "worker", "ps", "evaluator"};
  return names;
}

/// What the ranks of a launcher that only numbers its processes (torchrun, Open MPI, MPICH, Slurm)
/// become when CONVOY_PS_TASKS does not say. A parameter server needs ps tasks and such a
/// launcher cannot name them; a collective (comm::Gloo, comm::Nccl) has none, and a rank taken
/// for a ps would take no part in it.
enum class RankJobs {
  ps_first,     ///< with 2 or more ranks, rank 0 is ps task 0, the rest workers (comm::ZmqPs)
  all_workers,  ///< every rank is a worker (the collectives)
};

/// A run's processes and this process's place among them, in TensorFlow's terms: jobs of tasks,
/// each task at a "host:port" address. The processes that train are the chief (if any) and the
/// workers, numbered by worker_rank(); ps tasks hold the variables; an evaluator only evaluates.
/// A plain value: build one by hand (then call validate()), or let resolve() read it.
/// A single process has no jobs; it is then worker 0 of 1, and the chief.
struct Cluster {
  /// Job name -> task addresses "host:port"; jobs among "chief", "worker", "ps", "evaluator".
  std::map<std::string, std::vector<std::string>> jobs;
  /// This task's job ("" for a single process with no cluster).
  std::string job;
  /// This task's index in its job.
  int index = 0;
  /// This process's rank on its machine (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID);
  /// 0 if unknown.
  int local_rank = 0;
  /// Where the description came from: "arguments", "flags", "TF_CONFIG", "torchrun",
  /// "Open MPI", "MPICH/PMI", "Slurm" or "none".
  std::string source = "arguments";

  /// True when there are no jobs at all: one process, nothing to connect to.
  bool single_process() const { return jobs.empty(); }

  /// Tasks of job "ps".
  std::size_t ps_count() const { return job_size("ps"); }

  /// The processes that train: the chief (if any) plus the workers; 1 for a single process.
  /// Evaluators do not count.
  std::size_t worker_count() const {
    return single_process() ? 1 : job_size("chief") + job_size("worker");
  }

  /// This task's number among the processes that train: the chief is 0, worker i is i + 1 when
  /// there is a chief and i otherwise; a single process is 0; ps and evaluator tasks get -1.
  int worker_rank() const {
    if (single_process() || job == "chief") return 0;
    if (job == "worker") return index + (has_chief() ? 1 : 0);
    return -1;
  }

  /// True for the task that writes checkpoints and summaries: job "chief", or worker 0 when there
  /// is no chief job, or a single process.
  bool is_chief() const {
    if (single_process() || job == "chief") return true;
    return job == "worker" && index == 0 && !has_chief();
  }

  /// True when this task is a parameter server.
  bool is_ps() const { return job == "ps"; }

  /// The address of ps task `i`; throws ClusterError (a convoy::Error) when there is no such task.
  std::string const& ps_address(std::size_t i) const {
    if (i >= ps_count()) {
      throw ClusterError("convoy: ps_address(" + std::to_string(i) + "): the cluster (from " +
                         source + ") has " + std::to_string(ps_count()) + " ps task(s)");
    }
    return jobs.at("ps")[i];
  }

  /// The address of the training process with worker rank `rank` (see worker_rank()); throws
  /// ClusterError when there is no such process, and for a single process, which has no address.
  std::string const& worker_address(std::size_t rank) const {
    std::size_t const trainers = single_process() ? 0 : worker_count();
    if (rank >= trainers) {
      throw ClusterError("convoy: worker_address(" + std::to_string(rank) +
                         "): the cluster (from " + source + ") has " + std::to_string(trainers) +
                         " training task(s) with an address");
    }
    if (has_chief()) return rank == 0 ? jobs.at("chief")[0] : jobs.at("worker")[rank - 1];
    return jobs.at("worker")[rank];
  }

  /// The task of the training process with worker rank `rank`, as "job:index" ("chief:0",
  /// "worker:2"); "worker:0" for a single process. Throws ClusterError when there is no such
  /// process.
  std::string worker_task(std::size_t rank) const {
    if (single_process() && rank == 0) return "worker:0";
    (void)worker_address(rank);  // the same check and message
    if (has_chief()) return rank == 0 ? "chief:0" : "worker:" + std::to_string(rank - 1);
    return "worker:" + std::to_string(rank);
  }

  /// A few lines for users: the source, every job's addresses (long lists shortened), and this
  /// task with its worker rank and whether it is the chief. No trailing newline.
  std::string describe() const;

  /// Throws ClusterError, quoting the offending part, unless: every job is a known name with a
  /// non-empty list of well-formed, distinct "host:port" addresses; there is at most one chief and
  /// at least one chief or worker; `job` is one of the jobs and `index` within it (or, with no
  /// jobs, `job` is "" and `index` 0); `local_rank` is not negative.
  void validate() const;

  /// A single process: no jobs, source "none".
  static Cluster local() {
    Cluster c;
    c.source = "none";
    return c;
  }

  /// Reads the cluster from the first source that applies, in this order: the TensorFlow example
  /// flags in argv (--job_name, --task_index, --ps_hosts, --worker_hosts), TF_CONFIG, torchrun,
  /// Open MPI, MPICH/Hydra PMI, Slurm; when none applies, local(). Unknown flags are left alone.
  /// `ranks` splits a rank launcher's processes when CONVOY_PS_TASKS is unset. Throws
  /// ClusterError when the source that applies is malformed; never falls through past a broken
  /// one. Reads only `env` and argv; does not block. Defined in resolve.hpp.
  static Cluster resolve(int argc, char const* const* argv,
                         Environment const& env = Environment::process(),
                         RankJobs ranks = RankJobs::ps_first);

  /// resolve() without flags: TF_CONFIG, torchrun, Open MPI, MPICH/Hydra PMI, Slurm, else local().
  static Cluster from_environment(Environment const& env = Environment::process(),
                                  RankJobs ranks = RankJobs::ps_first);
  /// from_environment() of this process's environment, its rank launcher's ranks split by `ranks`.
  static Cluster from_environment(RankJobs ranks) {
    return from_environment(Environment::process(), ranks);
  }

 private:
  std::size_t job_size(std::string const& name) const {
    auto it = jobs.find(name);
    return it == jobs.end() ? 0 : it->second.size();
  }
  bool has_chief() const { return job_size("chief") > 0; }
};

namespace detail {

/// "a, b, c", or for long lists "a, b, c, ..., y, z (26 tasks)".
inline std::string short_list(std::vector<std::string> const& items) {
  constexpr std::size_t head = 3, tail = 2;
  if (items.size() <= head + tail + 1) return join(items, ", ");
  std::vector<std::string> shown(items.begin(), items.begin() + head);
  shown.emplace_back("...");
  shown.insert(shown.end(), items.end() - tail, items.end());
  return join(shown, ", ") + " (" + std::to_string(items.size()) + " tasks)";
}

}  // namespace detail

inline std::string Cluster::describe() const {
  std::string out = "cluster from " + source + ": ";
  if (single_process()) return out + "a single process, which is the chief";
  std::vector<std::string> parts;
  auto const& known = cluster_job_names();
  for (auto const& name : known) {
    if (auto it = jobs.find(name); it != jobs.end())
      parts.push_back(name + " [" + detail::short_list(it->second) + "]");
  }
  for (auto const& [name, addresses] : jobs) {  // unknown names: validate() would reject them
    if (std::find(known.begin(), known.end(), name) == known.end())
      parts.push_back(name + " [" + detail::short_list(addresses) + "]");
  }
  out += detail::join(parts, ", ") + "\nthis task: " + job + " " + std::to_string(index);
  auto const where = jobs.find(job);
  if (where != jobs.end() && index >= 0 && static_cast<std::size_t>(index) < where->second.size())
    out += " at " + where->second[static_cast<std::size_t>(index)];
  if (is_ps()) {
    out += ", a parameter server for " + std::to_string(worker_count()) + " training task(s)";
  } else if (worker_rank() >= 0) {
    out += ", worker rank " + std::to_string(worker_rank()) + " of " +
           std::to_string(worker_count()) + (is_chief() ? ", the chief" : ", not the chief");
  } else {
    out += ", which does not train";
  }
  return out + "; local rank " + std::to_string(local_rank);
}

inline void Cluster::validate() const {
  std::string const from = "convoy: the cluster from " + source + ": ";
  auto const& known = cluster_job_names();
  std::map<std::string, std::string> owner;  // address -> the task it was first given to
  for (auto const& [name, addresses] : jobs) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw ClusterError(from + "unknown job " + detail::quote(name) +
                         detail::did_you_mean(name, known) + " (the jobs are " +
                         detail::join(known, ", ") + ")");
    }
    if (addresses.empty())
      throw ClusterError(from + "job " + detail::quote(name) + " lists no addresses");
    for (std::size_t i = 0; i < addresses.size(); ++i) {
      std::string const task = name + "[" + std::to_string(i) + "]";
      parse_address(addresses[i], "the cluster from " + source + ", " + task);
      if (auto [it, fresh] = owner.emplace(addresses[i], task); !fresh) {
        throw ClusterError(from + "address " + detail::quote(addresses[i]) +
                           " is given to two tasks, " + it->second + " and " + task);
      }
    }
  }
  if (job_size("chief") > 1) {
    throw ClusterError(from + "job \"chief\" has " + std::to_string(job_size("chief")) +
                       " tasks (" + detail::join(jobs.at("chief"), ", ") +
                       "); there is at most one chief: list the others under \"worker\"");
  }
  if (single_process()) {
    if (!job.empty() || index != 0) {
      throw ClusterError(from + "this task is " + detail::quote(job) + " " +
                         std::to_string(index) +
                         " but there are no jobs; a single process has job \"\" and index 0");
    }
  } else {
    if (job_size("chief") + job_size("worker") == 0) {
      throw ClusterError(from + "no \"chief\" or \"worker\" job, so no task trains (jobs: " +
                         detail::short_list([&] {
                           std::vector<std::string> names;
                           for (auto const& entry : jobs) names.push_back(entry.first);
                           return names;
                         }()) +
                         ")");
    }
    if (jobs.find(job) == jobs.end()) {
      std::vector<std::string> present;
      for (auto const& entry : jobs) present.push_back(entry.first);
      throw ClusterError(from + "this task's job " + detail::quote(job) +
                         " is not one of the cluster's jobs (" + detail::join(present, ", ") + ")" +
                         detail::did_you_mean(job, present));
    }
    if (index < 0 || static_cast<std::size_t>(index) >= job_size(job)) {
      throw ClusterError(from + "this task's index " + std::to_string(index) + " is outside job " +
                         detail::quote(job) + ", which has " + std::to_string(job_size(job)) +
                         " task(s)");
    }
  }
  if (local_rank < 0)
    throw ClusterError(from + "local rank " + std::to_string(local_rank) + " is negative");
}

}  // namespace convoy

#include "resolve.hpp"  // defines Cluster::resolve and Cluster::from_environment
