// Replicas are copies of the model handed to the Strategy, so a model must be copyable.
// expected-error: a Model must be copy-constructible: replicas are copies of the model given to
// expected-error: the Strategy; see docs/own_model.md.
#include <convoy/strategy.hpp>
#include <cstddef>
#include <memory>

namespace {

struct Unique {
  convoy::Variables vars;
  std::unique_ptr<int> handle;  // makes the type move-only
  convoy::Variables& variables() { return vars; }
  float forward_backward(convoy::Batch const&) { return 0.0f; }
};

using Rejected = convoy::Strategy<Unique, convoy::place::Mirrored, convoy::comm::InProcess,
                                  convoy::sync::Synchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
