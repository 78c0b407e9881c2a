// A collective Comm written outside the library, on the host (here it borrows the in-process
// engine), paired with a central copy of the weights: strategy.hpp's rule speaks of what the Comm
// can do, with no edit for it, and names the placements that fit.
// expected-error: a collective Comm on the host (host_collective = true) keeps the replicas
// expected-error: place::Host (one replica per process) or place::Mirrored
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

#include "outside_collective.hpp"

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::CentralStorage, Carrier,
                                  convoy::sync::Synchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
