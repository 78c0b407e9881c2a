// place::CentralStorageGpus keeps one copy of the weights in host memory, which the in-process
// engine serves; comm::Nccl keeps a copy on every GPU. The message names the placement that fits.
// expected-error: place::CentralStorageGpus keeps one copy of the weights in host memory
// expected-error: use place::MirroredGpus there
#include <convoy/comm/nccl.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::CentralStorageGpus,
                                  convoy::comm::Nccl, convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
