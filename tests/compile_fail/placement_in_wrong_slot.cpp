// The placement and communication policies swapped: Strategy must name the slot that is wrong.
// expected-error: second argument must be a placement policy
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::comm::InProcess, convoy::place::Host,
                                  convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
