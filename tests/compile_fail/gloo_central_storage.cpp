// comm::Gloo keeps every replica's copy equal through allreduces; a central copy of the weights
// has no place in it. The message names the placements that fit, and where a central copy lives.
// expected-error: comm::Gloo keeps the replicas equal on the host, with no central copy
// expected-error: place::Host (one replica per process) or place::Mirrored
// expected-error: place::CentralStorage with comm::InProcess
#include <convoy/comm/gloo.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::CentralStorage,
                                  convoy::comm::Gloo, convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
