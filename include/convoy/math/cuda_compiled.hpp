// Device math for the files g++ compiles in a build with convoy::cuda: the exec::Cuda overloads of
// math/cuda.cuh for convoy's own kernels (the named functors of the layers, losses, optimizers and
// collectives, each marked `using compiled_kernel = void`), which src/cuda_kernels.cu compiles once
// into convoy_cuda_kernels, the library convoy::cuda links. So a program whose only device code is
// convoy's (a LibTorch model on a GPU, a placement of convoy's MLP) is a C++ file, which g++
// compiles in about half nvcc's CPU time: nvcc parses its headers for the device as well as for the
// host (docs/env.md). A function of the caller's own on exec::Cuda still needs nvcc: the file is
// then compiled as CUDA and gets math/cuda.cuh instead of this header.
#pragma once

#include <concepts>
#include <cstddef>

#include "../exec/cuda.hpp"
#include "host.hpp"

namespace convoy::math {

/// One of convoy's kernels, compiled for the device in convoy_cuda_kernels.
template <class F>
concept CompiledKernel = requires {
  typename F::compiled_kernel;
};

namespace detail {
// Defined in src/cuda_kernels.cu: math/cuda.cuh's functions of the same names without the suffix,
// instantiated there for each of convoy's kernels.
template <class F>
void for_each_index_compiled(exec::Cuda const& ctx, std::size_t n, F const& f);
template <class F>
double sum_over_indices_compiled(exec::Cuda const& ctx, std::size_t n, F const& f);
void column_sums_compiled(exec::Cuda const& ctx, std::size_t rows, std::size_t cols, float const* a,
                          float* out);
void gemm_compiled(exec::Cuda const& ctx, bool transpose_a, bool transpose_b, std::size_t m,
                   std::size_t n, std::size_t k, float alpha, float const* a, float const* b,
                   float beta, float* c);

// A function of the caller's own stops the compile here, with the fix.
template <class F>
constexpr void require_compiled() {
  static_assert(CompiledKernel<F>,
                "convoy: device math on exec::Cuda (math::for_each_index, "
                "math::sum_over_indices) runs a function of your own only in a file nvcc "
                "compiles: compile this file as CUDA (a .cu file, or the source property LANGUAGE "
                "CUDA), linking convoy::cuda");
}
}  // namespace detail

// Templates over the context, not functions of exec::Cuda: math/cuda.cuh's functions, which
// src/cuda_kernels.cu defines, are other functions with the same parameters, and one program holds
// both. A context on the host (exec::Cuda::host()) gets the host math from math/cuda.cuh's.

/// f(i) for i in [0, n) on the context's device (math/cuda.cuh's for_each_index).
template <std::same_as<exec::Cuda> Context, class F>
void for_each_index(Context const& ctx, std::size_t n, F f) {
  detail::require_compiled<F>();
  detail::for_each_index_compiled(ctx, n, f);
}

/// Sum of f(i) for i in [0, n) on the context's device (math/cuda.cuh's sum_over_indices).
template <std::same_as<exec::Cuda> Context, class F>
double sum_over_indices(Context const& ctx, std::size_t n, F f) {
  detail::require_compiled<F>();
  return detail::sum_over_indices_compiled(ctx, n, f);
}

/// Column sums through cuBLAS (math/cuda.cuh's column_sums).
template <std::same_as<exec::Cuda> Context>
void column_sums(Context const& ctx, std::size_t rows, std::size_t cols, float const* a,
                 float* out) {
  detail::column_sums_compiled(ctx, rows, cols, a, out);
}

/// C = alpha * op(A) op(B) + beta * C through cuBLAS (math/cuda.cuh's gemm).
template <std::same_as<exec::Cuda> Context>
void gemm(Context const& ctx, bool transpose_a, bool transpose_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, float const* a, float const* b, float beta, float* c) {
  detail::gemm_compiled(ctx, transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
}

}  // namespace convoy::math
