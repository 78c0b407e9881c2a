// place::Sharded spreads variables over parameter-server shards, which comm::InProcess has not.
// expected-error: which only comm::ZmqPs
#include <convoy/nn/mlp.hpp>
#include <convoy/place/sharded.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Sharded<>,
                                  convoy::comm::InProcess, convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
