// exec::Host: the execution context of replicas that compute on the host processor. A placement
// hands one to each replica; layers, losses and optimizers take it as their first argument and the
// math functions (math/host.hpp) overload on it, so a device context adds overloads and no layer
// changes.
#pragma once

#include <omp.h>

#include <memory_resource>
#include <string_view>

#include "../core/batch.hpp"

// OpenBLAS's own knobs; weak so that any other CBLAS links too (the calls are then skipped).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads() __attribute__((weak));

namespace convoy::exec {

/// Host memory, CBLAS for GEMM, Thrust's OpenMP or sequential system for element-wise work.
/// Stateless and cheap to copy.
struct Host {
  static constexpr std::string_view name = "/cpu:0";

  /// While alive, the calling thread's math is single-threaded: one OpenMP thread for Thrust and
  /// one BLAS thread. Each replica runs on its own thread, so more threads per replica would only
  /// oversubscribe the cores. Restores the previous settings when it ends. OpenBLAS's setting is
  /// process-wide, the OpenMP one per thread: do not run two strategies at once if other code in
  /// the process relies on OpenBLAS's thread count.
  class ReplicaScope {
   public:
    ReplicaScope()
        : omp_threads_(omp_get_max_threads()),
          blas_threads_(openblas_get_num_threads != nullptr ? openblas_get_num_threads() : 0) {
      omp_set_num_threads(1);
      if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
    }
    ~ReplicaScope() {
      omp_set_num_threads(omp_threads_);
      if (openblas_set_num_threads != nullptr && blas_threads_ > 0)
        openblas_set_num_threads(blas_threads_);
    }
    ReplicaScope(ReplicaScope const&) = delete;
    ReplicaScope& operator=(ReplicaScope const&) = delete;

   private:
    int omp_threads_;
    int blas_threads_;
  };

  /// Entered by an engine on each replica thread before it computes.
  ReplicaScope enter() const { return {}; }

  /// Where a model keeps the buffers its math writes (activations): ordinary heap memory.
  std::pmr::memory_resource* memory() const { return std::pmr::new_delete_resource(); }

  /// The batch where this context's math can read it: on the host, the batch itself.
  Batch const& stage(Batch const& batch) const { return batch; }

  friend bool operator==(Host const&, Host const&) = default;
};

}  // namespace convoy::exec
