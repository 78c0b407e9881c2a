// comm::Nccl's engine needs the CUDA execution context; a build without it says so, and where the
// parts that exist are, instead of failing inside the engine.
// expected-error: comm::Nccl's engine runs on CUDA devices through the CUDA execution context
// expected-error: see docs/nccl.md
#include <convoy/comm/nccl.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Gpu, convoy::comm::Nccl,
                                  convoy::sync::Synchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
