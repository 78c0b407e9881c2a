// BucketAllreduce: the NCCL exchange of a bucketed reduction (comm/buckets/). A bucket the
// backward pass has finished is summed by ncclAllReduce on a communication stream of its own,
// after the kernels already queued on the compute stream (the ones that wrote its gradients), so
// the sum overlaps the backward kernels still to come. wait() blocks until every bucket is summed,
// within the communicator's timeout. Needs convoy::nccl.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "check.hpp"
#include "communicator.hpp"

namespace convoy::comm::nccl {

/// A comm::bucket_exchange over one Communicator. Owns its communication stream and event. Not
/// thread-safe: the replica's thread drives it.
class BucketAllreduce {
 public:
  /// `compute` is the stream the model's kernels run on (exec::Cuda's stream()); both must
  /// outlive the exchange.
  BucketAllreduce(Communicator& comm, cudaStream_t compute) : comm_(&comm), compute_(compute) {
    Caller const who{comm.rank(), comm.device()};
    check(cudaSetDevice(comm.device()), "cudaSetDevice", who);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
          who);
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags",
          who);
  }
  template <device_context Context>
  BucketAllreduce(Communicator& comm, Context const& ctx) : BucketAllreduce(comm, ctx.stream()) {}

  BucketAllreduce(BucketAllreduce const&) = delete;
  BucketAllreduce& operator=(BucketAllreduce const&) = delete;
  ~BucketAllreduce() {
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(stream_);
  }

  /// Enqueues the sum of `grads` (device memory) over the ranks, after the work queued so far on
  /// the compute stream. Returns at once.
  void start(std::size_t bucket, std::span<float> grads) {
    Caller const who{comm_->rank(), comm_->device()};
    check(cudaEventRecord(ready_, compute_), "cudaEventRecord", who);
    check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent", who);
    comm_->allreduce_sum(grads, stream_);
    ++started_;
    issued_.fetch_add(1, std::memory_order_relaxed);
    last_bucket_ = bucket;
  }

  /// Blocks until every bucket started since the last wait() is summed. Throws TimeoutError (the
  /// communicator aborted) or NcclError, as Communicator::wait.
  void wait() {
    if (started_ == 0) return;
    comm_->wait(stream_, "the allreduce of " + std::to_string(started_) + " gradient bucket(s) " +
                             "(last: bucket " + std::to_string(last_bucket_) + ")");
    started_ = 0;
  }

  cudaStream_t stream() const { return stream_; }
  /// Collectives enqueued so far, from any thread: what this rank tells the liveness board.
  std::int64_t issued() const { return issued_.load(std::memory_order_relaxed); }

 private:
  Communicator* comm_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::size_t started_ = 0;
  std::size_t last_bucket_ = 0;
  std::atomic<std::int64_t> issued_{0};
};

}  // namespace convoy::comm::nccl
