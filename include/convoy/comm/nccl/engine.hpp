// comm::Nccl's engine: the collective engine (comm/buckets/collective_engine.hpp) over NCCL, one
// process per CUDA device (place::Gpu). Building it resolves the cluster, shares the run's unique
// id through the cluster's coordinator (rank 0 serves it), joins the communicator on the
// placement's device and puts the bucketed allreduce on the device's stream. Needs convoy::nccl and
// a CUDA build (convoy::cuda, compiled by nvcc), where place::Gpu computes in exec::Cuda.
#pragma once

#include <nccl.h>

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../../place/gpu.hpp"
#include "../buckets/bucket_plan.hpp"
#include "../buckets/collective_engine.hpp"
#include "../nccl.hpp"
#include "bucket_allreduce.hpp"
#include "communicator.hpp"
#include "unique_id_bootstrap.hpp"

namespace convoy::comm::nccl {

/// The collective fabric of one device per process: this process is one rank and holds one
/// replica, the run's replica `rank`.
class DeviceFabric {
 public:
  /// Blocks until every rank has the unique id and has joined (within the policy's
  /// bootstrap_timeout and timeout). Throws PlacementError when the replica is not on a device
  /// (place::Gpu fell back to the host), ClusterError for a ps or evaluator task, TimeoutError
  /// naming the rank that did not come, NcclError for a failed call.
  template <class Group>
  DeviceFabric(Nccl const& policy, Group& group, BucketPlan const&)
      : cluster_(policy.cluster ? *policy.cluster : Cluster::from_environment()) {
    auto const ctx = group.context(0);
    static_assert(device_context<decltype(ctx)>,
                  "convoy: comm::Nccl needs a placement whose context is on a CUDA device "
                  "(place::Gpu in a build with convoy::cuda)");
    if (!ctx.on_device()) {
      throw PlacementError(
          "convoy: comm::Nccl reduces on CUDA devices, and place::Gpu is computing on the host "
          "(see the line above on why); give this process a device, or use comm::InProcess");
    }
    if (group.size() != 1) {
      throw PlacementError("convoy: comm::Nccl runs one replica per process (place::Gpu)");
    }
    world_ = cluster_.single_process() ? 1 : static_cast<int>(cluster_.worker_count());
    rank_ = cluster_.single_process() ? 0 : cluster_.worker_rank();
    auto const id = share_unique_id(cluster_, sizeof(ncclUniqueId), make_unique_id,
                                    BootstrapOptions{.timeout = policy.bootstrap_timeout});
    comm_ = std::make_unique<Communicator>(id, rank_, world_, ctx.device(),
                                           CommunicatorOptions{.timeout = policy.timeout});
    exchange_ = std::make_unique<BucketAllreduce>(*comm_, ctx);
    device_name_ = ctx.name;
  }

  BucketAllreduce& exchange(std::size_t) { return *exchange_; }
  std::size_t world_size() const { return static_cast<std::size_t>(world_); }
  std::size_t first_replica() const { return static_cast<std::size_t>(rank_); }
  std::string describe() const {
    return "NCCL rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " on " +
           device_name_;
  }
  /// Tears the communicator down; the other ranks' next collective times out.
  void abort(std::string const&) { comm_->abort(); }

 private:
  Cluster cluster_;
  int world_ = 1;
  int rank_ = 0;
  std::string device_name_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<BucketAllreduce> exchange_;  // after comm_: destroyed before it
};

template <class Model, class Placement, class Sync>
class Engine : public CollectiveEngine<Model, Placement, Sync, DeviceFabric> {
  static_assert(std::same_as<Placement, place::Gpu>,
                "convoy: comm::Nccl runs one process per GPU: place it with place::Gpu (its "
                "device is the process's local rank); several GPUs in one process are not "
                "supported by comm::Nccl yet (docs/nccl.md)");

 public:
  using CollectiveEngine<Model, Placement, Sync, DeviceFabric>::CollectiveEngine;
};

}  // namespace convoy::comm::nccl
