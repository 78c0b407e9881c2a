// The order in which a cluster is looked for: flags, TF_CONFIG, torchrun, Open MPI, MPICH/Hydra
// PMI, Slurm, else a single process. Defines Cluster::resolve and Cluster::from_environment.
#pragma once

#include <optional>

#include "cluster.hpp"
#include "environment.hpp"

namespace convoy::resolvers {

// Declared here, defined in flags.hpp, tf_config.hpp and launchers.hpp (included below), so that
// the order reads in one place whichever of these headers a program includes first.
inline std::optional<Cluster> from_flags(int argc, char const* const* argv);
inline std::optional<Cluster> from_tf_config(Environment const& env);
inline std::optional<Cluster> from_torchrun(Environment const& env, RankJobs ranks);
inline std::optional<Cluster> from_open_mpi(Environment const& env, RankJobs ranks);
inline std::optional<Cluster> from_pmi(Environment const& env, RankJobs ranks);
inline std::optional<Cluster> from_slurm(Environment const& env, RankJobs ranks);

}  // namespace convoy::resolvers

namespace convoy {

inline Cluster Cluster::from_environment(Environment const& env, RankJobs ranks) {
  if (auto found = resolvers::from_tf_config(env)) return *found;
  for (auto* source : {resolvers::from_torchrun, resolvers::from_open_mpi, resolvers::from_pmi,
                       resolvers::from_slurm}) {
    if (auto found = source(env, ranks)) return *found;
  }
  return local();
}

inline Cluster Cluster::resolve(int argc, char const* const* argv, Environment const& env,
                                RankJobs ranks) {
  if (auto found = resolvers::from_flags(argc, argv)) return *found;
  return from_environment(env, ranks);
}

}  // namespace convoy

#include "flags.hpp"
#include "launchers.hpp"
#include "tf_config.hpp"
