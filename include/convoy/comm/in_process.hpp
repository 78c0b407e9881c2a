// comm::InProcess: replicas are threads of one process and exchange through shared memory. The
// synchronous reduction is a reduce-scatter followed by an all-gather: thread t owns chunk t of the
// arena, so every thread reads and writes about 3x the model's bytes per step, whatever the
// replica count R, and no thread waits on a single summer.
#pragma once

#include <string_view>

#include "../core/concepts.hpp"

namespace convoy::comm {

struct InProcess {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "InProcess";
  friend bool operator==(InProcess const&, InProcess const&) = default;
};
static_assert(communication_policy<InProcess>);

}  // namespace convoy::comm
