// place::MirroredGpus keeps a replica on each GPU, which the in-process engine (host memory, host
// threads summing) cannot reduce; the message names the Comm that can, and the host alternative.
// expected-error: place::MirroredGpus keeps one replica per GPU, which comm::Nccl
// expected-error: use comm::Nccl, or place::Mirrored with comm::InProcess on the host
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::MirroredGpus,
                                  convoy::comm::InProcess, convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
