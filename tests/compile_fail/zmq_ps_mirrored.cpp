// comm::ZmqPs keeps the variables on parameter-server shards, so it needs place::Sharded.
// expected-error: place them with place::Sharded
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, convoy::comm::ZmqPs,
                                  convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
