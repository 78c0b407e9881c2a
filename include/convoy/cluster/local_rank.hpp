// This process's local rank on its machine, read from the launcher's variables alone. place::Gpu's
// default device needs nothing else of the cluster, and resolving the whole cluster (TF_CONFIG's
// JSON, Slurm's node lists, the flags) costs every file that includes a placement about a second
// of compile time (docs/compile_time.md).
#pragma once

#include <array>
#include <optional>
#include <string>

#include "../core/error.hpp"
#include "detail/text.hpp"
#include "environment.hpp"

namespace convoy {

/// The local rank that Cluster::from_environment(env) would give, looked up in the same order:
/// 0 under TF_CONFIG (TensorFlow gives no local rank); else the local-rank variable of the first
/// launcher whose rank or size variable is set (torchrun's LOCAL_RANK, Open MPI's
/// OMPI_COMM_WORLD_LOCAL_RANK, MPICH/Hydra's MPI_LOCALRANKID, Slurm's SLURM_LOCALID), 0 when that
/// one is unset; 0 for a process started alone. Throws ClusterError naming the variable when it is
/// not a non-negative integer. It checks nothing else: Cluster::from_environment checks the rest.
inline int local_rank(Environment const& env = Environment::process()) {
  if (env.has("TF_CONFIG")) return 0;
  struct Launcher {
    char const* rank;
    char const* size;
    char const* local_rank;
  };
  // Slurm applies on SLURM_PROCID alone (a job's allocation sets SLURM_NTASKS outside srun too).
  static constexpr std::array<Launcher, 4> launchers{{
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"SLURM_PROCID", "SLURM_PROCID", "SLURM_LOCALID"},
  }};
  for (auto const& launcher : launchers) {
    if (!env.has(launcher.rank) && !env.has(launcher.size)) continue;
    auto const text = env.get(launcher.local_rank);
    return text ? detail::require_count(*text, launcher.local_rank) : 0;
  }
  return 0;
}

}  // namespace convoy
