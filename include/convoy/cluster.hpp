// Everything about clusters: the Cluster type, its sources (flags, TF_CONFIG, torchrun, Open MPI,
// MPICH/Hydra PMI, Slurm) and the order Cluster::resolve tries them in.
#pragma once

#include "cluster/address.hpp"
#include "cluster/cluster.hpp"
#include "cluster/environment.hpp"
#include "cluster/flags.hpp"
#include "cluster/launchers.hpp"
#include "cluster/local_rank.hpp"
#include "cluster/resolve.hpp"
#include "cluster/slurm_nodelist.hpp"
#include "cluster/tf_config.hpp"
