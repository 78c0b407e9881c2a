// A collective needs every replica in every exchange, so comm::Nccl has no asynchronous form; the
// message names the policies that fit.
// expected-error: comm::Nccl cannot run sync::Asynchronous
// expected-error: use sync::Synchronous for a bucketed allreduce of the gradients
// expected-error: sync::BoundedStaleness<S> for an allreduce of the weights every S+1 steps
#include <convoy/comm/nccl.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, convoy::comm::Nccl,
                                  convoy::sync::Asynchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
