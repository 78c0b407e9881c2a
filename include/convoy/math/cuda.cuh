// Device math: the overloads of math/host.hpp's functions for exec::Cuda. GEMM through cuBLAS,
// element-wise work through Thrust on the context's stream, sums through CUB; a context on the
// host (exec::Cuda::host()) runs the host math instead. Layers, losses and
// optimizers call the same names with either context, so their code (CONVOY_HOST_DEVICE lambdas)
// is written once. Only nvcc compiles this header (convoy::cuda gives it --extended-lambda).
#pragma once

#include <cub/device/device_reduce.cuh>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include "../core/error.hpp"
#include "../exec/cuda.hpp"
#include "host.hpp"

namespace convoy::math {

/// Calls f(i) for i in [0, n) on the device, queued on the context's stream (Thrust's par_nosync:
/// the host does not wait). `f` must be CONVOY_HOST_DEVICE. Throws DeviceError when the launch
/// fails.
template <class F>
void for_each_index(exec::Cuda const& ctx, std::size_t n, F f) {
  if (!ctx.on_device()) return for_each_index(exec::Host{}, n, f);
  if (n == 0) return;
  try {
    thrust::for_each_n(thrust::cuda::par_nosync.on(ctx.stream()),
                       thrust::counting_iterator<std::size_t>(0), n, f);
  } catch (thrust::system_error const& e) {
    throw DeviceError("convoy: thrust::for_each_n over " + std::to_string(n) +
                      " elements failed on /gpu:" + std::to_string(ctx.device()) + ": " + e.what());
  }
  exec::cuda::check(cudaGetLastError(), "thrust::for_each_n (kernel launch)", ctx.device());
}

/// Sum of f(i) for i in [0, n), as double, through CUB's device reduction on the context's stream.
/// Waits for the stream: the caller gets the value on the host.
template <class F>
double sum_over_indices(exec::Cuda const& ctx, std::size_t n, F f) {
  if (!ctx.on_device()) return sum_over_indices(exec::Host{}, n, f);
  if (n == 0) return 0.0;
  auto const values = thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0), f);
  int const device = ctx.device();
  std::size_t bytes = 0;
  exec::cuda::check(cub::DeviceReduce::Sum(nullptr, bytes, values, ctx.result(), n, ctx.stream()),
                    "cub::DeviceReduce::Sum (sizing)", device);
  exec::cuda::check(
      cub::DeviceReduce::Sum(ctx.scratch(bytes), bytes, values, ctx.result(), n, ctx.stream()),
      "cub::DeviceReduce::Sum", device, std::to_string(n) + " values");
  double sum = 0.0;
  exec::cuda::check(cudaMemcpyAsync(&sum, ctx.result(), sizeof sum, cudaMemcpyDeviceToHost, ctx.stream()),
                    "cudaMemcpyAsync", device, "a reduction's result");
  ctx.synchronize();
  return sum;
}

/// out[j] = sum over r of a[r * cols + j], the column sums of a row-major rows x cols matrix, as
/// cuBLAS's matrix-vector product with a run of ones, queued on the context's stream. A thread per
/// column walking the rows (the host's loop) leaves the device nearly idle, 500 threads of 4096
/// loads each for the MLP's first layer at batch 4096: its step took 1.94 ms that way and 1.30 ms
/// this way on an H200 (bench_gpu_training, one run).
inline void column_sums(exec::Cuda const& ctx, std::size_t rows, std::size_t cols, float const* a,
                        float* out) {
  if (!ctx.on_device()) return column_sums(exec::Host{}, rows, cols, a, out);
  if (cols == 0) return;
  if (std::max(rows, cols) > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error("convoy: column sums of " + std::to_string(rows) + "x" + std::to_string(cols) +
                " exceed cuBLAS's int sizes");
  }
  if (rows == 0) {
    exec::cuda::check(cudaMemsetAsync(out, 0, cols * sizeof(float), ctx.stream()), "cudaMemsetAsync",
                      ctx.device(), "column sums of no rows");
    return;
  }
  // Read column-major, the row-major matrix is its cols x rows transpose: out = A^T 1 is A_cm 1.
  float const one = 1.0f, zero = 0.0f;
  exec::cuda::check(cublasSgemv(ctx.blas(), CUBLAS_OP_N, static_cast<int>(cols),
                                static_cast<int>(rows), &one, a, static_cast<int>(cols),
                                ctx.ones(rows), 1, &zero, out, 1),
                    "cublasSgemv", ctx.device(),
                    "column sums of " + std::to_string(rows) + "x" + std::to_string(cols));
}

/// C = alpha * op(A) op(B) + beta * C, row-major, through cuBLAS on the context's stream; op
/// transposes when the flag is set. op(A) is m x k, op(B) is k x n, C is m x n. cuBLAS is
/// column-major, and a row-major matrix read column-major is its transpose, so this computes
/// C^T = op(B)^T op(A)^T: the same call with A and B swapped.
inline void gemm(exec::Cuda const& ctx, bool transpose_a, bool transpose_b, std::size_t m,
                 std::size_t n, std::size_t k, float alpha, float const* a, float const* b,
                 float beta, float* c) {
  if (!ctx.on_device()) return gemm(exec::Host{}, transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
  std::string const shape = std::to_string(m) + "x" + std::to_string(k) + " by " +
                            std::to_string(k) + "x" + std::to_string(n);
  if (std::max({m, n, k}) > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error("convoy: gemm of " + shape + " exceeds cuBLAS's int sizes");
  }
  if (m == 0 || n == 0) return;
  auto const lda = static_cast<int>(transpose_a ? m : k);
  auto const ldb = static_cast<int>(transpose_b ? k : n);
  exec::cuda::check(cublasSgemm(ctx.blas(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb, a, lda,
                                &beta, c, static_cast<int>(n)),
                    "cublasSgemm", ctx.device(), "a gemm of " + shape);
}

}  // namespace convoy::math
