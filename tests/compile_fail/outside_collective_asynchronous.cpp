// The same outside collective Comm under sync::Asynchronous: the rule speaks of collectives, not
// of a product, and says what to use instead.
// expected-error: a collective Comm (collective = true: every replica takes part in every
// expected-error: exchange) cannot run sync::Asynchronous
// expected-error: sync::BoundedStaleness<S> for an allreduce of the weights every S+1 steps
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>
#include <string_view>

namespace {

struct Carrier {
  using policy_category = convoy::communication_tag;
  static constexpr std::string_view name = "Carrier";
  static constexpr bool collective = true;
  static constexpr bool host_collective = true;
  template <class Model, class Placement, class Sync>
  using engine = convoy::comm::in_process::Engine<Model, Placement, Sync>;
};

using Rejected =
    convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, Carrier, convoy::sync::Asynchronous>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
