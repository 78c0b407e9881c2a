// A Model with forward_backward() but no variables(): Strategy must reject it and print the
// signature to write.
// expected-error: needs 'convoy::Variables& variables()' returning the Variables that hold its
// expected-error: weights; see examples/04_own_model and docs/own_model.md.
#include <convoy/core/batch.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>

namespace {

struct NoVariables {
  float forward_backward(convoy::Batch const&) { return 0.0f; }
};

using Rejected = convoy::Strategy<NoVariables, convoy::place::Host, convoy::comm::InProcess,
                                  convoy::sync::Synchronous>;

}  // namespace

// Completing the type instantiates the class and with it its static_asserts.
std::size_t const size_of_rejected = sizeof(Rejected);
