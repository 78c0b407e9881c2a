// place::Host runs one replica, so it cannot be paired with sync::Asynchronous.
// expected-error: place::Host and place::Gpu run one replica
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Host, convoy::comm::InProcess,
                                  convoy::sync::Asynchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
