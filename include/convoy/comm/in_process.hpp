// comm::InProcess: replicas are threads of one process and exchange through shared memory. It
// brings in_process::Engine: lock-step synchronous training as a fused reduce-scatter, update and
// all-gather (thread t owns chunk t of the arena, so every thread moves about 3x the model's bytes
// per step whatever the replica count), and everything else through the central store.
#pragma once

#include <string_view>

#include "../core/concepts.hpp"
#include "in_process/engine.hpp"

namespace convoy::comm {

struct InProcess {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "InProcess";
  /// The engine a Strategy<Model, Placement, InProcess, Sync> owns.
  template <class Model, class Placement, class Sync>
  using engine = in_process::Engine<Model, Placement, Sync>;
  friend bool operator==(InProcess const&, InProcess const&) = default;
};
static_assert(communication_policy<InProcess>);

}  // namespace convoy::comm
