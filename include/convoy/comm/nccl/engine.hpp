// comm::Nccl's engine: the collective engine (comm/buckets/collective_engine.hpp) over NCCL, with
// one rank per device: one device per process (place::Gpu) or every local device in one process
// (place::MirroredGpus, whose communicators start in one NCCL group). Building it resolves the
// cluster, shares the run's unique id through the cluster's coordinator (the first process serves
// it), joins the communicators on the placement's devices and puts a bucketed allreduce on each
// device's stream. Needs convoy::nccl and a CUDA build (convoy::cuda, compiled by nvcc), where the
// GPU placements compute in exec::Cuda.
#pragma once

#include <nccl.h>

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../../place/gpu.hpp"
#include "../../place/mirrored_gpus.hpp"
#include "../bootstrap/process_group.hpp"
#include "../buckets/bucket_plan.hpp"
#include "../buckets/collective_engine.hpp"
#include "../nccl.hpp"
#include "bucket_allreduce.hpp"
#include "communicator.hpp"
#include "unique_id_bootstrap.hpp"

namespace convoy::comm::nccl {

/// The collective fabric of one rank per device: this process holds `n` replicas, one per device,
/// the run's replicas process_rank * n ... process_rank * n + n - 1; every process of the run
/// must hold the same number.
class DeviceFabric {
 public:
  /// Blocks until every rank has the unique id and has joined (within the policy's
  /// bootstrap_timeout and timeout). Throws PlacementError when a replica is not on a device (the
  /// placement fell back to the host), ClusterError for a ps or evaluator task, TimeoutError
  /// naming the rank that did not come, NcclError for a failed call.
  template <class Group>
  DeviceFabric(Nccl const& policy, Group& group, BucketPlan const&)
      : group_(policy.cluster, group.size(), "comm::Nccl") {
    auto const local = static_cast<int>(group.size());
    std::vector<int> devices;
    for (int r = 0; r < local; ++r) {
      auto const ctx = group.context(static_cast<std::size_t>(r));
      static_assert(device_context<decltype(ctx)>,
                    "convoy: comm::Nccl needs a placement whose contexts are on CUDA devices "
                    "(place::Gpu or place::MirroredGpus in a build with convoy::cuda)");
      if (!ctx.on_device()) {
        throw PlacementError(
            "convoy: comm::Nccl reduces on CUDA devices, and the placement is computing on the "
            "host (see the line above on why); give this process a device, or use "
            "comm::InProcess");
      }
      devices.push_back(ctx.device());
      names_ += (r == 0 ? "" : ", ") + ctx.name;
    }
    auto const id = share_unique_id(group_.cluster(), sizeof(ncclUniqueId), make_unique_id,
                                    BootstrapOptions{.timeout = policy.bootstrap_timeout});
    comms_ = Communicator::for_devices(id, static_cast<int>(group_.first_replica()),
                                       static_cast<int>(group_.world_size()), devices,
                                       CommunicatorOptions{.timeout = policy.timeout});
    for (int r = 0; r < local; ++r) {
      exchanges_.push_back(std::make_unique<BucketAllreduce>(
          comms_[static_cast<std::size_t>(r)], group.context(static_cast<std::size_t>(r))));
    }
    group_.start_liveness([this] {
      std::int64_t issued = 0;
      for (auto const& e : exchanges_) issued += e->issued();
      return issued;
    });
  }
  DeviceFabric(DeviceFabric const&) = delete;
  DeviceFabric& operator=(DeviceFabric const&) = delete;
  ~DeviceFabric() { group_.stop_liveness(); }  // the reporter reads exchanges_

  BucketAllreduce& exchange(std::size_t replica) { return *exchanges_.at(replica); }
  std::size_t world_size() const { return group_.world_size(); }
  std::size_t first_replica() const { return group_.first_replica(); }
  std::string describe() const {
    return "NCCL ranks " + std::to_string(group_.first_replica()) + "-" +
           std::to_string(group_.first_replica() + comms_.size() - 1) + " of " +
           std::to_string(group_.world_size()) + " on " + names_ + "; the bootstrap " +
           group_.bootstrap_mode();
  }
  /// After a collective timed out: which processes stopped answering, as the liveness board sees
  /// them (empty for a single process).
  std::string explain_timeout() const { return group_.explain_timeout(); }
  /// Tears this process's communicators down; the other ranks' next collective times out.
  void abort(std::string const&) {
    for (auto& c : comms_) c.abort();
  }

 private:
  bootstrap::ProcessGroup group_;
  std::string names_;
  std::vector<Communicator> comms_;  // the exchanges point at them: never resized after start
  std::vector<std::unique_ptr<BucketAllreduce>> exchanges_;  // after comms_: destroyed first
};

template <class Model, class Placement, class Sync>
class Engine : public CollectiveEngine<Model, Placement, Sync, DeviceFabric> {
  static_assert(std::same_as<Placement, place::Gpu> || std::same_as<Placement, place::MirroredGpus>,
                "convoy: comm::Nccl computes on GPUs: place the replicas with place::Gpu (one "
                "process per GPU, its device the local rank) or place::MirroredGpus (every local "
                "GPU in one process)");

 public:
  using CollectiveEngine<Model, Placement, Sync, DeviceFabric>::CollectiveEngine;
};

}  // namespace convoy::comm::nccl
