// The same outside collective Comm under sync::Asynchronous: the rule speaks of collectives, not
// of a product, and says what to use instead.
// expected-error: a collective Comm (collective = true: every replica takes part in every
// expected-error: exchange) cannot run sync::Asynchronous
// expected-error: sync::BoundedStaleness<S> for an allreduce of the weights every S+1 steps
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

#include "outside_collective.hpp"

namespace {

using Rejected =
    convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, Carrier, convoy::sync::Asynchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
