// Communicator: one NCCL communicator for one device of one rank, non-blocking, so that a
// collective (or the start-up) that does not finish within its timeout can be aborted
// (ncclCommAbort) and reported instead of hanging. Several devices of one process start and
// reduce together through NCCL group calls (for_devices, allreduce_sum over a span). Every NCCL
// and CUDA call is checked (check.hpp). Needs convoy::nccl.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "check.hpp"

namespace convoy::comm::nccl {

/// What the engine needs of a device execution context (exec::Cuda): its device and the stream
/// its kernels run on.
template <class C>
concept device_context = requires(C const& c) {
  { c.device() } -> std::convertible_to<int>;
  { c.stream() } -> std::same_as<cudaStream_t>;
};

struct CommunicatorOptions {
  /// How long the start-up and each wait() may take before the communicator is aborted.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// A unique id for a run's rank 0 to share (unique_id_bootstrap.hpp carries it to the others).
inline std::vector<std::byte> make_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId", Caller{0, -1});
  auto const* bytes = reinterpret_cast<std::byte const*>(&id);
  return std::vector<std::byte>(bytes, bytes + sizeof id);
}

/// Owns one ncclComm_t. Movable, not copyable. Not thread-safe: one thread drives it.
class Communicator {
 public:
  /// Rank `rank` of `world_size` on `device`, joining the run that `unique_id` (sizeof
  /// ncclUniqueId bytes, from make_unique_id on rank 0) names. Blocks until every rank has joined;
  /// throws TimeoutError after options.timeout (the communicator is aborted), NcclError for a
  /// failed call, Error for an id of the wrong size.
  Communicator(std::span<std::byte const> unique_id, int rank, int world_size, int device,
               CommunicatorOptions const& options = {})
      : who_{rank, device}, world_size_(world_size), timeout_(options.timeout) {
    auto const id = to_id(unique_id);
    check(cudaSetDevice(device), "cudaSetDevice", who_);
    start(id);
    settle("ncclCommInitRankConfig (joining " + std::to_string(world_size) + " ranks)");
  }

  /// One communicator per device of this process, ranks first_rank, first_rank + 1, ... of
  /// `world_size`, started together in one NCCL group (NCCL needs that for several devices
  /// driven by one thread). Throws as the constructor.
  static std::vector<Communicator> for_devices(std::span<std::byte const> unique_id, int first_rank,
                                               int world_size, std::span<int const> devices,
                                               CommunicatorOptions const& options = {}) {
    auto const id = to_id(unique_id);
    std::vector<Communicator> out;
    out.reserve(devices.size());
    Caller const group{first_rank, devices.empty() ? -1 : devices[0]};
    check(ncclGroupStart(), "ncclGroupStart", group);
    try {
      for (std::size_t d = 0; d < devices.size(); ++d) {
        Communicator c(first_rank + static_cast<int>(d), world_size, devices[d], options);
        check(cudaSetDevice(devices[d]), "cudaSetDevice", c.who_);
        c.start(id);
        out.push_back(std::move(c));
      }
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    check(ncclGroupEnd(), "ncclGroupEnd", group, nullptr, true);
    for (auto& c : out) {
      c.settle("ncclCommInitRankConfig (joining " + std::to_string(world_size) + " ranks)");
    }
    return out;
  }

  Communicator(Communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)),
        who_(other.who_),
        world_size_(other.world_size_),
        timeout_(other.timeout_) {}
  Communicator& operator=(Communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, nullptr);
      who_ = other.who_;
      world_size_ = other.world_size_;
      timeout_ = other.timeout_;
    }
    return *this;
  }
  Communicator(Communicator const&) = delete;
  Communicator& operator=(Communicator const&) = delete;
  ~Communicator() { release(); }

  int rank() const { return who_.rank; }
  int device() const { return who_.device; }
  int world_size() const { return world_size_; }
  bool aborted() const { return comm_ == nullptr; }

  /// Enqueues an in-place sum of `data` (device memory on device()) over all ranks on `stream`;
  /// returns without waiting for it. Throws NcclError for a failed call, Error after an abort.
  void allreduce_sum(std::span<float> data, cudaStream_t stream) {
    live("ncclAllReduce");
    check(cudaSetDevice(who_.device), "cudaSetDevice", who_);
    check(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, comm_, stream),
          "ncclAllReduce", who_, comm_, true);
    settle("ncclAllReduce of " + std::to_string(data.size()) + " floats (enqueue)");
  }

  /// The same for several devices of this process at once: comms[i] reduces data[i] on
  /// streams[i], in one NCCL group.
  static void allreduce_sum(std::span<Communicator> comms, std::span<std::span<float> const> data,
                            std::span<cudaStream_t const> streams) {
    if (comms.size() != data.size() || comms.size() != streams.size())
      throw Error("convoy: a grouped allreduce needs one buffer and one stream per communicator");
    if (comms.empty()) return;
    check(ncclGroupStart(), "ncclGroupStart", comms[0].who_);
    try {
      for (std::size_t i = 0; i < comms.size(); ++i) {
        auto& c = comms[i];
        c.live("ncclAllReduce");
        check(ncclAllReduce(data[i].data(), data[i].data(), data[i].size(), ncclFloat, ncclSum,
                            c.comm_, streams[i]),
              "ncclAllReduce", c.who_, c.comm_, true);
      }
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    check(ncclGroupEnd(), "ncclGroupEnd", comms[0].who_, nullptr, true);
    for (auto& c : comms) c.settle("grouped ncclAllReduce (enqueue)");
  }

  /// Blocks until everything enqueued on `stream` has finished. Throws TimeoutError after the
  /// timeout, having aborted the communicator, NcclError when NCCL reports an error on the way;
  /// `what` names the work in the message.
  void wait(cudaStream_t stream, std::string_view what) {
    live(what);
    auto const deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      auto const query = cudaStreamQuery(stream);
      if (query == cudaSuccess) return;
      if (query != cudaErrorNotReady) check(query, "cudaStreamQuery", who_);
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", who_, comm_);
      if (state != ncclSuccess && state != ncclInProgress) {
        abort();
        check(state, std::string(what) + " (asynchronous error)", who_);
      }
      if (std::chrono::steady_clock::now() >= deadline) timed_out(what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  /// Tears the communicator down at once, whatever is in flight; later calls throw Error.
  void abort() {
    if (comm_ != nullptr) (void)ncclCommAbort(std::exchange(comm_, nullptr));
  }

 private:
  Communicator(int rank, int world_size, int device, CommunicatorOptions const& options)
      : who_{rank, device}, world_size_(world_size), timeout_(options.timeout) {}

  static ncclUniqueId to_id(std::span<std::byte const> bytes) {
    ncclUniqueId id;
    if (bytes.size() != sizeof id) {
      throw Error("convoy: an NCCL unique id has " + std::to_string(sizeof id) + " bytes, not " +
                  std::to_string(bytes.size()));
    }
    std::memcpy(&id, bytes.data(), sizeof id);
    return id;
  }

  void start(ncclUniqueId const& id) {
    if (who_.rank < 0 || who_.rank >= world_size_) {
      throw Error("convoy: NCCL rank " + std::to_string(who_.rank) + " is outside [0, " +
                  std::to_string(world_size_) + ")");
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; settle() and wait() bound the waiting
    check(ncclCommInitRankConfig(&comm_, world_size_, id, who_.rank, &config),
          "ncclCommInitRankConfig", who_, comm_, true);
  }

  // A non-blocking communicator finishes a call in the background: poll until it has, within the
  // timeout.
  void settle(std::string const& what) {
    auto const deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", who_, comm_);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        abort();
        check(state, what, who_);
      }
      if (std::chrono::steady_clock::now() >= deadline) timed_out(what);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  [[noreturn]] void timed_out(std::string_view what) {
    abort();
    throw TimeoutError("convoy: NCCL " + who_.text() + " of " + std::to_string(world_size_) + ": " +
                       std::string(what) + " did not finish within " +
                       std::to_string(timeout_.count()) +
                       " ms; the communicator was aborted. Another rank stopped answering or "
                       "never joined (NCCL does not say which; see the other ranks' logs)");
  }

  void live(std::string_view what) const {
    if (comm_ == nullptr) {
      throw Error("convoy: NCCL " + who_.text() + ": " + std::string(what) +
                  " on a communicator that was aborted after an earlier error");
    }
  }

  void release() noexcept {
    if (comm_ == nullptr) return;
    // Destroying a communicator with work in flight may wait for it; a caller that could not wait
    // has aborted it already.
    (void)ncclCommDestroy(std::exchange(comm_, nullptr));
  }

  ncclComm_t comm_ = nullptr;
  Caller who_;
  int world_size_ = 0;
  std::chrono::milliseconds timeout_;
};

}  // namespace convoy::comm::nccl
