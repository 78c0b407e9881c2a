// A communication policy that names itself one but brings no engine.
// expected-error: a communication policy needs 'template <class Model, class Placement, class Sync> using engine
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>
#include <string_view>

namespace {

struct Pigeons {
  using policy_category = convoy::communication_tag;
  static constexpr std::string_view name = "Pigeons";
};

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, Pigeons,
                                  convoy::sync::Synchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
