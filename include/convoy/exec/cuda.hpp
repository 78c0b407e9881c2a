// exec::Cuda: the execution context of a replica that computes on one CUDA device: the device, a
// stream of its own, a cuBLAS handle bound to that stream, the memory its arenas and buffers live
// in, and a copy of the batch where the device reads it. Plain C++ over the CUDA runtime and
// cuBLAS (convoy::cuda links both); the math overloads that launch work on it are in
// math/cuda.cuh, which only nvcc compiles.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/batch.hpp"
#include "../core/detail/cuda_error_text.hpp"
#include "../core/error.hpp"
#include "../core/variables.hpp"
#include "host.hpp"

namespace convoy::exec {

namespace cuda {

/// "/gpu:N" for `device`, or for the calling thread's current device when `device` is -1.
inline std::string device_name(int device) {
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) return "the current device";
  return "/gpu:" + std::to_string(device);
}

/// "convoy: <call> failed on <device>[ for <what_for>]": how every check below starts.
inline std::string failure_text(std::string_view call, int device, std::string_view what_for) {
  std::string what = "convoy: " + std::string(call) + " failed on " + device_name(device);
  if (!what_for.empty()) what += " for " + std::string(what_for);
  return what;
}

/// Throws DeviceError naming `call`, the device (-1: the current one) and, when given, what the
/// call was for (a variable, an arena), unless `status` is cudaSuccess.
inline void check(cudaError_t status, std::string_view call, int device,
                  std::string_view what_for = {}) {
  if (status == cudaSuccess) return;
  throw DeviceError(failure_text(call, device, what_for) + ": " +
                    convoy::detail::cuda_error_text(status));
}

/// The same for a cuBLAS call.
inline void check(cublasStatus_t status, std::string_view call, int device,
                  std::string_view what_for = {}) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(failure_text(call, device, what_for) + ": " + cublasGetStatusName(status) +
                    " (" + cublasGetStatusString(status) + ")");
}

/// The devices the CUDA runtime sees: 0 when there is none, or no driver. Not an error, because
/// GPU placements then fall back to the host.
inline int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clears the error, so the next call does not report it
    return 0;
  }
  return count;
}

/// One device as the placement log names it.
struct DeviceInfo {
  int index = 0;
  std::string name;         ///< "NVIDIA H100 80GB HBM3"
  std::size_t memory = 0;   ///< total global memory, bytes
};

/// The name and memory of device `device`. Throws DeviceError when it does not exist.
inline DeviceInfo device_info(int device) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties", device);
  return {device, properties.name, properties.totalGlobalMem};
}

/// "/gpu:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)".
inline std::string describe(DeviceInfo const& info) {
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB",
                static_cast<double>(info.memory) / (1024.0 * 1024.0 * 1024.0));
  return "/gpu:" + std::to_string(info.index) + " (" + info.name + ", " + memory + ")";
}

/// CUDA managed memory: the device computes in it and the host reads and writes it between the
/// context's work (after synchronize()), so every by-name and flat view of a model's variables
/// keeps working while the arenas live on the device. Pages move to whichever side touches them.
class ManagedMemory final : public std::pmr::memory_resource {
 private:
  void* do_allocate(std::size_t bytes, std::size_t) override {
    void* p = nullptr;
    check(cudaMallocManaged(&p, bytes == 0 ? 1 : bytes), "cudaMallocManaged", -1,
          std::to_string(bytes) + " bytes of buffers");
    return p;  // 256-byte aligned, more than any alignment asked for here
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override {
    (void)cudaFree(p);  // a deallocation cannot throw; a failing cudaFree means a lost context
  }
  bool do_is_equal(memory_resource const& other) const noexcept override { return this == &other; }
};

/// The one managed-memory resource of the process. Never destroyed: buffers allocated from it may
/// outlive every context (a model copy held by a replica thread that outlived its run), and managed
/// memory serves every device.
inline ManagedMemory* managed_memory() {
  static auto* const resource = new ManagedMemory();
  return resource;
}

/// Page-locked host memory mapped into every device's address space (cudaHostAlloc, portable and
/// mapped): the host reads and writes it at memory speed, and the kernels of every device read and
/// write it over the bus through the same pointer (unified addressing). What
/// place::CentralStorageGpus keeps its one copy of the weights in.
class PinnedMemory final : public std::pmr::memory_resource {
 private:
  void* do_allocate(std::size_t bytes, std::size_t) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable | cudaHostAllocMapped),
          "cudaHostAlloc", -1, std::to_string(bytes) + " bytes of page-locked host memory");
    return p;  // page-aligned
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override { (void)cudaFreeHost(p); }
  bool do_is_equal(memory_resource const& other) const noexcept override { return this == &other; }
};

/// The one page-locked resource of the process; never destroyed, as managed_memory().
inline PinnedMemory* pinned_memory() {
  static auto* const resource = new PinnedMemory();
  return resource;
}

}  // namespace cuda

/// One CUDA device, a non-blocking stream and a cuBLAS handle on that stream. Copies share them
/// (a cheap handle), so a placement can hand the same context out and an engine copy it freely;
/// all work on one context is ordered on its stream. Every CUDA and cuBLAS call is checked and
/// throws DeviceError naming the call and the device.
///
/// Cuda::host() is the same type computing on the host (exec::Host's math, heap memory): what a
/// GPU placement hands out when it falls back, so a strategy's type does not depend on whether the
/// machine has a device.
class Cuda {
 public:
  /// "/gpu:N", or "/cpu:0" for host(), as the placement log prints it.
  std::string name;

  /// Opens `device`. Throws DeviceError naming the call that failed (no driver, no such device).
  explicit Cuda(int device)
      : name("/gpu:" + std::to_string(device)), state_(std::make_shared<State>(device)) {}

  /// A context that computes on the host.
  static Cuda host() { return Cuda(); }

  /// Whether the work runs on a device (else on the host).
  bool on_device() const { return state_ != nullptr; }
  /// The CUDA device ordinal; -1 on the host.
  int device() const { return on_device() ? state_->device : -1; }
  /// The stream all of this context's work runs on; null on the host.
  cudaStream_t stream() const { return on_device() ? state_->stream : nullptr; }
  /// The cuBLAS handle, bound to stream(); null on the host.
  cublasHandle_t blas() const { return on_device() ? state_->blas : nullptr; }

  /// While alive, the calling thread's current device is this context's (restored when it ends);
  /// on the host, what exec::Host::enter() does. Every thread that computes in a context enters it
  /// first.
  class ReplicaScope {
   public:
    explicit ReplicaScope(int device) : device_(device) {
      if (device_ < 0) {
        host_.emplace();
        return;
      }
      cuda::check(cudaGetDevice(&previous_), "cudaGetDevice", device_);
      cuda::check(cudaSetDevice(device_), "cudaSetDevice", device_);
    }
    ~ReplicaScope() {
      if (device_ >= 0) (void)cudaSetDevice(previous_);
    }
    ReplicaScope(ReplicaScope const&) = delete;
    ReplicaScope& operator=(ReplicaScope const&) = delete;

   private:
    int device_;
    int previous_ = 0;
    std::optional<Host::ReplicaScope> host_;
  };
  ReplicaScope enter() const { return ReplicaScope(device()); }

  /// Where a model keeps the buffers its math writes (activations): managed memory, or the heap on
  /// the host.
  std::pmr::memory_resource* memory() const {
    return on_device() ? static_cast<std::pmr::memory_resource*>(cuda::managed_memory())
                       : std::pmr::new_delete_resource();
  }

  /// Where a batch for this context is best gathered: page-locked host memory on a device (see
  /// stage()), the heap on the host.
  std::pmr::memory_resource* batch_memory() const {
    return on_device() ? static_cast<std::pmr::memory_resource*>(cuda::pinned_memory())
                       : std::pmr::new_delete_resource();
  }

  /// Copies the batch's features and labels where the device reads them, on the stream, and
  /// returns a view of the copy, valid until the next stage() on this context. From pageable
  /// memory the copy has left the batch when this returns; from page-locked memory
  /// (batch_memory()) it is a DMA that runs on while the host goes on, so the batch must not change
  /// until the context's next synchronize() (a forward_backward ends with one: its loss). A batch
  /// of 4096 Fashion-MNIST rows took 0.88 ms from pageable and 0.26 ms from page-locked memory on
  /// an H200 (bench_gpu_training's copy columns).
  Batch const& stage(Batch const& batch) const {
    if (!on_device()) return batch;
    State& s = *state_;
    s.features.resize(batch.features.size());
    s.labels.resize(batch.labels.size());
    copy_in(s.features.data(), batch.features.data(), batch.features.size_bytes(), "the batch's features");
    copy_in(s.labels.data(), batch.labels.data(), batch.labels.size_bytes(), "the batch's labels");
    s.staged = Batch{s.features, s.labels, {}, batch.rows};
    if (!batch.targets.empty()) {
      s.targets.resize(batch.targets.size());
      copy_in(s.targets.data(), batch.targets.data(), batch.targets.size_bytes(), "the batch's targets");
      s.staged.targets = s.targets;
    }
    return s.staged;
  }

  /// Waits for all work on the stream; the host may then read what it wrote. Throws DeviceError
  /// for a failure of any work queued since the last check.
  void synchronize() const {
    if (!on_device()) return;
    cuda::check(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize", state_->device);
  }

  /// Copies `count` floats from `from` to `to` on the stream, either way between the device and
  /// host memory (page-locked host memory for a copy that runs on while the host goes on). Only on
  /// a device.
  void copy_async(float* to, float const* from, std::size_t count) const {
    copy_in(to, from, count * sizeof(float), "a staged exchange's copy");
  }

  /// Calls `fn(arg)` on a thread of the CUDA driver once the work queued on the stream before it
  /// has finished (cudaLaunchHostFunc), without the calling thread waiting: host work in the
  /// stream's order. `fn` must not call CUDA, nor throw. Only on a device.
  void then_on_host(void (*fn)(void*), void* arg) const {
    cuda::check(cudaLaunchHostFunc(state_->stream, fn, arg), "cudaLaunchHostFunc", state_->device);
  }

  /// Moves `vars`' weights and gradients to this device: one cudaMalloc'd arena each, holding the
  /// current values, kept alive by `vars` (Variables::bind_arenas). The host reaches them only
  /// through copies (Variables::copy, and the by-name and flat views that use it), each ordered on
  /// this context's stream after the work queued there. Throws DeviceError naming the arena.
  void adopt(Variables& vars) const {
    if (!on_device()) return;
    auto const on = enter();  // cudaMalloc allocates on the calling thread's current device
    std::size_t const n = vars.element_count();
    auto const allocate = [&](std::string_view arena) {
      void* p = nullptr;
      cuda::check(cudaMalloc(&p, n == 0 ? 1 : n * sizeof(float)), "cudaMalloc", state_->device,
                  "the " + std::string(arena) + " arena of '" + vars.scope() + "' (" + std::to_string(n) + " floats)");
      return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { (void)cudaFree(q); });
    };
    auto const weights = allocate("weights");
    auto const grads = allocate("gradients");
    struct Arenas {
      std::shared_ptr<float> weights, grads;
    };
    vars.bind_arenas({weights.get(), n}, {grads.get(), n},
                     std::make_shared<Arenas>(Arenas{weights, grads}),
                     [ctx = *this](float* to, float const* from, std::size_t count) {
                       ctx.copy_and_wait(to, from, count);
                     });
  }

  /// Moves `vars`' arenas to page-locked host memory mapped into every device
  /// (cuda::pinned_memory): the device's kernels read and write them over the bus, the host
  /// directly (after synchronize()). What place::CentralStorageGpus's replicas use, whose
  /// gradients the host sums.
  void adopt_mapped(Variables& vars) const {
    if (!on_device()) return;
    std::size_t const n = vars.element_count();
    using Arena = std::pmr::vector<float>;
    auto weights = std::make_shared<Arena>(n, 0.0f, cuda::pinned_memory());
    auto grads = std::make_shared<Arena>(n, 0.0f, cuda::pinned_memory());
    std::span<float> const w(*weights), g(*grads);
    using Owner = std::pair<std::shared_ptr<Arena>, std::shared_ptr<Arena>>;
    vars.bind_arenas(w, g, std::make_shared<Owner>(std::move(weights), std::move(grads)));
  }

  /// Copies `count` floats from `from` to `to`, either way between this device's memory and the
  /// host's (or within either), after the work queued on the stream, and returns when it is done.
  /// Only on a device.
  void copy_and_wait(float* to, float const* from, std::size_t count) const {
    if (count == 0) return;
    if (host_addressable(to) && host_addressable(from)) {  // a host copy of, or into, host memory
      synchronize();
      std::copy_n(from, count, to);
      return;
    }
    copy_in(to, from, count * sizeof(float), "a copy of the arenas");
    synchronize();
  }

  /// Whether the host may dereference `p` (once the device's work on it is done): memory the CUDA
  /// runtime does not know, page-locked or managed memory; not a cudaMalloc'd buffer.
  static bool host_addressable(void const* p) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      (void)cudaGetLastError();  // older runtimes fail for memory they do not know: the host's
      return true;
    }
    return attributes.type != cudaMemoryTypeDevice;
  }

  /// Device memory of at least `bytes` for a reduction's temporary storage, reused across calls
  /// (work on the stream is ordered, so one call's storage is free when the next starts). Only on
  /// a device.
  void* scratch(std::size_t bytes) const {
    State& s = *state_;
    if (bytes > s.scratch_bytes) {
      if (s.scratch != nullptr) {
        cuda::check(cudaFreeAsync(s.scratch, s.stream), "cudaFreeAsync", s.device, "reduction scratch");
        s.scratch = nullptr;
        s.scratch_bytes = 0;
      }
      cuda::check(cudaMallocAsync(&s.scratch, bytes, s.stream), "cudaMallocAsync", s.device,
                  std::to_string(bytes) + " bytes of reduction scratch");
      s.scratch_bytes = bytes;
    }
    return s.scratch;
  }

  /// `n` ones in device memory, the right-hand side of a column sum through cuBLAS (a Dense
  /// layer's bias gradient): kept, and replaced by a longer run when a call asks for more. Only on
  /// a device.
  float const* ones(std::size_t n) const {
    State& s = *state_;
    if (n > s.ones_count) {
      std::vector<float> const host(n, 1.0f);
      if (s.ones != nullptr) {
        cuda::check(cudaFreeAsync(s.ones, s.stream), "cudaFreeAsync", s.device, "a run of ones");
        s.ones = nullptr;
        s.ones_count = 0;
      }
      cuda::check(cudaMallocAsync(reinterpret_cast<void**>(&s.ones), n * sizeof(float), s.stream),
                  "cudaMallocAsync", s.device, std::to_string(n) + " ones");
      // From pageable memory the call returns once it holds the values, so `host` may go.
      cuda::check(cudaMemcpyAsync(s.ones, host.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                                  s.stream),
                  "cudaMemcpyAsync", s.device, std::to_string(n) + " ones");
      s.ones_count = n;
    }
    return s.ones;
  }

  /// One double on the device for a reduction's result.
  double* result() const { return state_->result; }

  friend bool operator==(Cuda const& a, Cuda const& b) { return a.state_ == b.state_; }

 private:
  Cuda() : name("/cpu:0") {}

  void copy_in(void* to, void const* from, std::size_t bytes, std::string_view what) const {
    if (bytes == 0) return;
    cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, state_->stream), "cudaMemcpyAsync",
                state_->device, what);
  }

  struct State {
    explicit State(int ordinal)
        : device(ordinal),
          features(cuda::managed_memory()),
          labels(cuda::managed_memory()),
          targets(cuda::managed_memory()) {
      ReplicaScope const on(device);
      cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device);
      try {
        cuda::check(cublasCreate(&blas), "cublasCreate", device);
        cuda::check(cublasSetStream(blas, stream), "cublasSetStream", device);
        cuda::check(cudaMalloc(reinterpret_cast<void**>(&result), sizeof(double)), "cudaMalloc", device,
                    "a reduction's result");
      } catch (...) {
        release();
        throw;
      }
    }
    ~State() { release(); }
    State(State const&) = delete;
    State& operator=(State const&) = delete;

    // Unchecked: a destructor cannot throw, and a failure here means the device is already lost.
    void release() {
      if (stream != nullptr) (void)cudaStreamSynchronize(stream);
      if (scratch != nullptr) (void)cudaFree(scratch);
      if (ones != nullptr) (void)cudaFree(ones);
      if (result != nullptr) (void)cudaFree(result);
      if (blas != nullptr) (void)cublasDestroy(blas);
      if (stream != nullptr) (void)cudaStreamDestroy(stream);
      scratch = nullptr, ones = nullptr, result = nullptr, blas = nullptr, stream = nullptr;
    }

    int device;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    std::pmr::vector<float> features;
    std::pmr::vector<std::int32_t> labels;
    std::pmr::vector<float> targets;
    Batch staged;
    void* scratch = nullptr;
    std::size_t scratch_bytes = 0;
    float* ones = nullptr;
    std::size_t ones_count = 0;
    double* result = nullptr;
  };

  std::shared_ptr<State> state_;
};

}  // namespace convoy::exec
