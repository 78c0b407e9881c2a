// convoy_cuda_kernels: the device code of convoy's own kernels, compiled once for every program
// that links convoy::cuda (math/cuda_compiled.hpp declares these functions for the files g++
// compiles). Each kernel is instantiated here: a kernel added to the layers, losses, optimizers or
// collectives needs its line below, or a C++ file that uses it on a device does not link.
#include <convoy/comm/buckets/collective_replica.hpp>
#include <convoy/math/host.hpp>
#include <convoy/nn/dense.hpp>
#include <convoy/nn/losses.hpp>
#include <convoy/nn/relu.hpp>
#include <convoy/optim/adam.hpp>
#include <convoy/optim/momentum.hpp>
#include <convoy/optim/sgd.hpp>

namespace convoy::math::detail {

template <class F>
void for_each_index_compiled(exec::Cuda const& ctx, std::size_t n, F const& f) {
  for_each_index(ctx, n, f);
}

template <class F>
double sum_over_indices_compiled(exec::Cuda const& ctx, std::size_t n, F const& f) {
  return sum_over_indices(ctx, n, f);
}

void column_sums_compiled(exec::Cuda const& ctx, std::size_t rows, std::size_t cols, float const* a,
                          float* out) {
  column_sums(ctx, rows, cols, a, out);
}

void gemm_compiled(exec::Cuda const& ctx, bool transpose_a, bool transpose_b, std::size_t m,
                   std::size_t n, std::size_t k, float alpha, float const* a, float const* b,
                   float beta, float* c) {
  gemm(ctx, transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
}

#define CONVOY_FOR_EACH_INDEX(F) \
  template void for_each_index_compiled<F>(exec::Cuda const&, std::size_t, F const&);
CONVOY_FOR_EACH_INDEX(optim::detail::SgdStep)
CONVOY_FOR_EACH_INDEX(optim::detail::MomentumStep)
CONVOY_FOR_EACH_INDEX(optim::detail::AdamStep)
CONVOY_FOR_EACH_INDEX(nn::detail::ReluForward)
CONVOY_FOR_EACH_INDEX(nn::detail::ReluBackward)
CONVOY_FOR_EACH_INDEX(nn::detail::BroadcastRows)
CONVOY_FOR_EACH_INDEX(comm::detail::ScaleBy)
CONVOY_FOR_EACH_INDEX(comm::detail::FillZero)
#undef CONVOY_FOR_EACH_INDEX

template double sum_over_indices_compiled<nn::detail::SoftmaxRows>(exec::Cuda const&, std::size_t,
                                                                   nn::detail::SoftmaxRows const&);

}  // namespace convoy::math::detail
