// A Model with variables() but no forward_backward(): Strategy must reject it and print the
// signature to write.
// expected-error: needs 'float forward_backward(convoy::Batch const&)' that returns the batch's
// expected-error: mean loss and overwrites every gradient;
// expected-error: see examples/04_own_model and docs/own_model.md.
#include <convoy/core/variables.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

struct NoForwardBackward {
  convoy::Variables vars;
  convoy::Variables& variables() { return vars; }
};

using Rejected = convoy::Strategy<NoForwardBackward, convoy::place::Host, convoy::comm::InProcess,
                                  convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
