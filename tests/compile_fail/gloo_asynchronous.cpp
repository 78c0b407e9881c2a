// An allreduce needs every replica of every process in every exchange, so comm::Gloo has no
// asynchronous form; the message names the policies that fit.
// expected-error: comm::Gloo cannot run sync::Asynchronous
// expected-error: sync::BoundedStaleness<S> for an allreduce of the weights every S+1 steps
// expected-error: comm::ZmqPs with place::Sharded for asynchronous training across processes
#include <convoy/comm/gloo.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, convoy::comm::Gloo,
                                  convoy::sync::Asynchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
