// exec::Cuda: the execution context of a replica that computes on one CUDA device: the device, a
// stream of its own, a cuBLAS handle bound to that stream, the memory its arenas and buffers live
// in, and a copy of the batch where the device reads it. Plain C++ over the CUDA runtime and
// cuBLAS (convoy::cuda links both); the math overloads that launch work on it are in
// math/cuda.cuh, which only nvcc compiles.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <memory_resource>
#include <string>
#include <string_view>
#include <vector>

#include "../core/batch.hpp"
#include "../core/error.hpp"
#include "../core/variables.hpp"

namespace convoy::exec {

namespace cuda {

/// Throws DeviceError naming `call`, the device and, when given, what the call was for (a variable,
/// an arena), unless `status` is cudaSuccess.
inline void check(cudaError_t status, std::string_view call, int device,
                  std::string_view what_for = {}) {
  if (status == cudaSuccess) return;
  std::string what = "convoy: " + std::string(call) + " failed on /gpu:" + std::to_string(device);
  if (!what_for.empty()) what += " for " + std::string(what_for);
  what += ": ";
  what += cudaGetErrorName(status);
  what += " (";
  what += cudaGetErrorString(status);
  what += ")";
  throw DeviceError(what);
}

/// The same for a cuBLAS call.
inline void check(cublasStatus_t status, std::string_view call, int device,
                  std::string_view what_for = {}) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::string what = "convoy: " + std::string(call) + " failed on /gpu:" + std::to_string(device);
  if (!what_for.empty()) what += " for " + std::string(what_for);
  what += ": ";
  what += cublasGetStatusName(status);
  what += " (";
  what += cublasGetStatusString(status);
  what += ")";
  throw DeviceError(what);
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
 public:
  explicit ManagedMemory(int device) : device_(device) {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t) override {
    void* p = nullptr;
    check(cudaMallocManaged(&p, bytes == 0 ? 1 : bytes), "cudaMallocManaged", device_,
          std::to_string(bytes) + " bytes of buffers");
    return p;  // 256-byte aligned, more than any alignment asked for here
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override {
    (void)cudaFree(p);  // a deallocation cannot throw; a failing cudaFree means a lost context
  }
  bool do_is_equal(memory_resource const& other) const noexcept override { return this == &other; }

  int device_;
};

}  // namespace cuda

/// One CUDA device, a non-blocking stream and a cuBLAS handle on that stream. Copies share them
/// (a cheap handle), so a placement can hand the same context out and an engine copy it freely;
/// all work on one context is ordered on its stream. Every CUDA and cuBLAS call is checked and
/// throws DeviceError naming the call and the device.
class Cuda {
 public:
  /// "/gpu:N", as the placement log prints it.
  std::string name;

  /// Opens `device`. Throws DeviceError naming the call that failed (no driver, no such device).
  explicit Cuda(int device) : name("/gpu:" + std::to_string(device)), state_(std::make_shared<State>(device)) {}

  /// The CUDA device ordinal.
  int device() const { return state_->device; }
  /// The stream all of this context's work runs on.
  cudaStream_t stream() const { return state_->stream; }
  /// The cuBLAS handle, bound to stream().
  cublasHandle_t blas() const { return state_->blas; }

  /// While alive, the calling thread's current device is this context's; restores the previous one
  /// when it ends. Every thread that computes in a context enters it first.
  class ReplicaScope {
   public:
    explicit ReplicaScope(int device) {
      cuda::check(cudaGetDevice(&previous_), "cudaGetDevice", device);
      cuda::check(cudaSetDevice(device), "cudaSetDevice", device);
    }
    ~ReplicaScope() { (void)cudaSetDevice(previous_); }
    ReplicaScope(ReplicaScope const&) = delete;
    ReplicaScope& operator=(ReplicaScope const&) = delete;

   private:
    int previous_ = 0;
  };
  ReplicaScope enter() const { return ReplicaScope(state_->device); }

  /// Where a model keeps the buffers its math writes (activations): managed memory.
  std::pmr::memory_resource* memory() const { return &state_->memory; }

  /// Copies the batch's features and labels where the device reads them (on the stream; the host
  /// batch may change once this returns) and returns a view of the copy, valid until the next
  /// stage() on this context.
  Batch const& stage(Batch const& batch) const {
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
    cuda::check(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize", state_->device);
  }

  /// Moves `vars`' weights and gradients to this device: one managed allocation for each arena,
  /// holding the current values, kept alive by `vars` (Variables::bind_arenas). The by-name and
  /// flat views read them on the host after synchronize(). Throws DeviceError naming the arena.
  void adopt(Variables& vars) const {
    std::size_t const n = vars.element_count();
    auto const allocate = [&](std::string_view arena) {
      void* p = nullptr;
      cuda::check(cudaMallocManaged(&p, n == 0 ? 1 : n * sizeof(float)), "cudaMallocManaged",
                  state_->device,
                  "the " + std::string(arena) + " arena of '" + vars.scope() + "' (" + std::to_string(n) + " floats)");
      return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { (void)cudaFree(q); });
    };
    auto const weights = allocate("weights");
    auto const grads = allocate("gradients");
    struct Arenas {
      std::shared_ptr<float> weights, grads;
    };
    vars.bind_arenas({weights.get(), n}, {grads.get(), n},
                     std::make_shared<Arenas>(Arenas{weights, grads}));
  }

  /// Device memory of at least `bytes` for a reduction's temporary storage, reused across calls
  /// (work on the stream is ordered, so one call's storage is free when the next starts).
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

  /// One double on the device for a reduction's result.
  double* result() const { return state_->result; }

  friend bool operator==(Cuda const& a, Cuda const& b) { return a.state_ == b.state_; }

 private:
  void copy_in(void* to, void const* from, std::size_t bytes, std::string_view what) const {
    if (bytes == 0) return;
    cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, state_->stream), "cudaMemcpyAsync",
                state_->device, what);
  }

  struct State {
    explicit State(int ordinal) : device(ordinal), memory(ordinal), features(&memory), labels(&memory), targets(&memory) {
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
      if (result != nullptr) (void)cudaFree(result);
      if (blas != nullptr) (void)cublasDestroy(blas);
      if (stream != nullptr) (void)cudaStreamDestroy(stream);
      scratch = nullptr, result = nullptr, blas = nullptr, stream = nullptr;
    }

    int device;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    cuda::ManagedMemory memory;
    std::pmr::vector<float> features;
    std::pmr::vector<std::int32_t> labels;
    std::pmr::vector<float> targets;
    Batch staged;
    void* scratch = nullptr;
    std::size_t scratch_bytes = 0;
    double* result = nullptr;
  };

  std::shared_ptr<State> state_;
};

}  // namespace convoy::exec
