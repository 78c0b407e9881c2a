// Host math: GEMM through CBLAS and element-wise work through Thrust's OpenMP system, each taking
// the exec::Host context first. Layers and optimizers reach the processor only through these
// functions, so a device backend adds overloads for its own context and leaves them alone.
#pragma once

#include <cblas.h>
#include <omp.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>
#include <thrust/transform_reduce.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include "../core/error.hpp"
#include "../exec/host.hpp"

namespace convoy::math {

/// Calls f(i) for i in [0, n) through Thrust: its OpenMP system when the calling thread may use
/// more than one OpenMP thread, else its sequential system, because a one-thread OpenMP team adds
/// about a microsecond per call and buys nothing (the synchronous reduction makes ~100 calls a
/// step).
template <class F>
void for_each_index(exec::Host const&, std::size_t n, F f) {
  if (omp_get_max_threads() > 1) {
    thrust::for_each_n(thrust::omp::par, thrust::counting_iterator<std::size_t>(0), n, f);
  } else {
    thrust::for_each_n(thrust::cpp::par, thrust::counting_iterator<std::size_t>(0), n, f);
  }
}

/// Sum of f(i) for i in [0, n), as double, through Thrust (same system choice as for_each_index).
template <class F>
double sum_over_indices(exec::Host const&, std::size_t n, F f) {
  thrust::counting_iterator<std::size_t> const first(0), last(n);
  if (omp_get_max_threads() > 1)
    return thrust::transform_reduce(thrust::omp::par, first, last, f, 0.0, thrust::plus<double>{});
  return thrust::transform_reduce(thrust::cpp::par, first, last, f, 0.0, thrust::plus<double>{});
}

/// C = alpha * op(A) op(B) + beta * C, row-major; op transposes when the flag is set.
/// op(A) is m x k, op(B) is k x n, C is m x n.
inline void gemm(exec::Host const&, bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k,
                 float alpha, float const* a, float const* b, float beta, float* c) {
  if (std::max({m, n, k}) > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error("convoy: gemm of " + std::to_string(m) + "x" + std::to_string(k) + " by " +
                std::to_string(k) + "x" + std::to_string(n) + " exceeds CBLAS's int sizes");
  }
  auto const lda = static_cast<int>(transpose_a ? m : k);
  auto const ldb = static_cast<int>(transpose_b ? k : n);
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
}

}  // namespace convoy::math

// A translation unit nvcc compiles for convoy::cuda gets the device overloads too, declared before
// any layer's template that calls math:: by its qualified name (which finds only the overloads
// declared before it).
#if defined(__CUDACC__) && defined(CONVOY_WITH_CUDA)
#include "cuda.cuh"
#endif
