// A synchronization policy given where the communication policy belongs.
// expected-error: third argument must be a communication policy
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored,
                                  convoy::sync::Synchronous, convoy::sync::Synchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
