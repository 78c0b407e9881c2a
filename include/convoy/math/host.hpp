// Host math: GEMM through CBLAS and element-wise work through OpenMP loops, each taking the
// exec::Host context first. Layers and optimizers reach the processor only through these
// functions, so a device backend adds overloads for its own context and leaves them alone.
// The loops are plain OpenMP rather than Thrust's OpenMP system: the same work, without the ~70 MB
// and ~2 s of libcu++ that every Thrust header costs each file including convoy
// (docs/compile_time.md), and without Thrust defines pushed onto a consumer's targets.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../exec/host.hpp"
#include "blas_kernels.hpp"

namespace convoy::math {

/// Calls f(i) for i in [0, n): on an OpenMP team when the calling thread may use more than one
/// thread, else in a plain loop, because a one-thread team adds about a microsecond per call and
/// buys nothing (the synchronous reduction makes ~100 calls a step).
template <class F>
void for_each_index(exec::Host const&, std::size_t n, F f) {
  if (omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < n; ++i) f(i);
  } else {
    for (std::size_t i = 0; i < n; ++i) f(i);
  }
}

/// f(begin, end) over [0, n) cut into one contiguous range per OpenMP thread (one range when
/// there is one thread): for a kernel that walks its range in vector blocks itself.
template <class F>
void for_each_range(exec::Host const&, std::size_t n, F f) {
  int const threads = omp_get_max_threads();
  if (threads <= 1 || n < 2) {
    f(std::size_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    auto const team = static_cast<std::size_t>(omp_get_num_threads());
    auto const t = static_cast<std::size_t>(omp_get_thread_num());
    f(n * t / team, n * (t + 1) / team);
  }
}

/// Sum of f(i) for i in [0, n), as double. Each thread of the team sums one contiguous slice and
/// the slices' sums are added in slice order, so the result depends only on the number of threads,
/// never on which finishes first (an OpenMP `reduction` clause leaves that order open, and losses
/// compared bit for bit across strategies need it fixed).
template <class F>
double sum_over_indices(exec::Host const&, std::size_t n, F f) {
  int const threads = omp_get_max_threads();
  if (threads <= 1 || n < 2) {
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) total += f(i);
    return total;
  }
  std::vector<double> slices(static_cast<std::size_t>(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    auto const team = static_cast<std::size_t>(omp_get_num_threads());
    auto const t = static_cast<std::size_t>(omp_get_thread_num());
    std::size_t const begin = n * t / team, end = n * (t + 1) / team;
    double sum = 0.0;
    for (std::size_t i = begin; i < end; ++i) sum += f(i);
    slices[t] = sum;
  }
  double total = 0.0;
  for (double const s : slices) total += s;
  return total;
}

/// out[j] = sum over r of a[r * cols + j]: the column sums of a row-major rows x cols matrix (a
/// Dense layer's bias gradient), each summed in row order.
inline void column_sums(exec::Host const& ctx, std::size_t rows, std::size_t cols, float const* a,
                        float* out) {
  for_each_index(ctx, cols, [=](std::size_t j) {
    float sum = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) sum += a[r * cols + j];
    out[j] = sum;
  });
}

/// C = alpha * op(A) op(B) + beta * C, row-major; op transposes when the flag is set.
/// op(A) is m x k, op(B) is k x n, C is m x n. The first call selects the BLAS's kernels
/// (host_blas_kernels()).
inline void gemm(exec::Host const&, bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k,
                 float alpha, float const* a, float const* b, float beta, float* c) {
  if (std::max({m, n, k}) > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error("convoy: gemm of " + std::to_string(m) + "x" + std::to_string(k) + " by " +
                std::to_string(k) + "x" + std::to_string(n) + " exceeds CBLAS's int sizes");
  }
  host_blas_kernels();  // once: a CPU newer than OpenBLAS still gets its vector units
  auto const lda = static_cast<int>(transpose_a ? m : k);
  auto const ldb = static_cast<int>(transpose_b ? k : n);
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
}

}  // namespace convoy::math

// A translation unit of a build with convoy::cuda gets the device overloads too, declared before
// any layer's template that calls math:: by its qualified name (which finds only the overloads
// declared before it): every one of them where nvcc compiles it, convoy's own kernels, compiled
// once, where g++ does.
#if defined(__CUDACC__) && defined(CONVOY_WITH_CUDA)
#include "cuda.cuh"
#elif defined(CONVOY_WITH_CUDA)
#include "cuda_compiled.hpp"
#endif
