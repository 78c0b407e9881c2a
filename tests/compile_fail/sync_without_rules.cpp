// A synchronization policy that names itself one but brings no rule object.
// expected-error: a synchronization policy needs 'rules_type make_rules(convoy::Counters const&) const'
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstddef>
#include <string_view>

namespace {

struct WheneverItFeelsLikeIt {
  using policy_category = convoy::synchronization_tag;
  static constexpr std::string_view name = "WheneverItFeelsLikeIt";
};

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored,
                                  convoy::comm::InProcess, WheneverItFeelsLikeIt>;

}  // namespace

std::size_t const size_of_rejected = sizeof(Rejected);
