// comm::Nccl's engine needs convoy::nccl and convoy::cuda; a file built without them says so, and
// what to use on the host, instead of failing inside the engine.
// expected-error: comm::Nccl's engine runs on CUDA devices: it needs convoy::nccl and convoy::cuda
// expected-error: On the host, use comm::InProcess
#include <convoy/comm/nccl.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Gpu, convoy::comm::Nccl,
                                  convoy::sync::Synchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
