// comm::Gloo's engine is defined only where the program links convoy::gloo (which defines
// CONVOY_WITH_GLOO); without it the message says what to link, instead of an incomplete type.
// expected-error: comm::Gloo's engine needs convoy::gloo (link it; Debian's libgloo-dev)
#include <convoy/comm/gloo.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Host, convoy::comm::Gloo,
                                  convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
