// Optimizer: one of Sgd, Momentum or Adam, chosen at run time; and OptimizerState, its slots laid
// out like the weights arena so any chunk of the arena can be updated on its own, and saved by
// variable name.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/variables.hpp"
#include "adam.hpp"
#include "momentum.hpp"
#include "sgd.hpp"
#include "update.hpp"

namespace convoy::optim {

/// Slot arrays (same layout as the weights arena) and the number of updates applied so far. The
/// arrays live where make_state() was told: heap memory, or a device context's memory.
struct OptimizerState {
  std::vector<std::pmr::vector<float>> slots;
  std::int64_t updates = 0;
  /// Ranges of state variables (Variables::add_state), sorted, in the slots' coordinates: apply()
  /// updates them as `w -= grad_scale * g`, leaving the optimizer and its slots out.
  std::vector<ArenaRange> assigned;
};

/// A value type holding one optimizer. Copyable; apply() is thread-safe for disjoint ranges.
class Optimizer {
 public:
  using Any = std::variant<Sgd, Momentum, Adam>;
  static_assert(
      Sgd::slot_names.size() <= Update{}.slots.size() &&
          Momentum::slot_names.size() <= Update{}.slots.size() &&
          Adam::slot_names.size() <= Update{}.slots.size(),
      "convoy: an optimizer has more slots than optim::Update carries; widen Update::slots");

  Optimizer(Sgd o) : any_(o) {}
  Optimizer(Momentum o) : any_(o) {}
  Optimizer(Adam o) : any_(o) {}

  std::string_view name() const {
    return std::visit([](auto const& o) { return std::string_view(o.name); }, any_);
  }
  std::span<std::string_view const> slot_names() const {
    return std::visit([](auto const& o) { return std::span<std::string_view const>(o.slot_names); },
                      any_);
  }
  Any const& get() const { return any_; }

  /// The step size every optimizer has.
  float learning_rate() const {
    return std::visit([](auto const& o) { return o.learning_rate; }, any_);
  }
  /// Changes only the step size; slots and every other setting stay. Not thread-safe: whoever
  /// holds the optimizer a run applies must stop the run's updates first (ReplicaGroup's gate).
  /// Throws Error for a negative or non-finite rate, changing nothing.
  void set_learning_rate(float rate) {
    if (!(rate >= 0.0f) || !std::isfinite(rate)) {
      throw Error("convoy: " + std::string(name()) + " got learning rate " + std::to_string(rate) +
                  "; give a finite rate >= 0");
    }
    std::visit([rate](auto& o) { o.learning_rate = rate; }, any_);
  }

  /// Zeroed slots sized for `arena_size` floats, allocated from `memory` (a context's memory()).
  OptimizerState make_state(std::size_t arena_size, std::pmr::memory_resource* memory =
                                                        std::pmr::new_delete_resource()) const {
    OptimizerState state;
    for (std::size_t s = 0; s < slot_names().size(); ++s)
      state.slots.emplace_back(arena_size, 0.0f, memory);
    return state;
  }
  /// The same for `layout`'s arena, with its state variables' ranges marked (`assigned`).
  OptimizerState make_state(Variables const& layout, std::pmr::memory_resource* memory =
                                                         std::pmr::new_delete_resource()) const {
    OptimizerState state = make_state(layout.element_count(), memory);
    state.assigned = layout.state_ranges();
    return state;
  }

  /// One update of weights[begin, begin + grads.size()) with `state`'s matching slot ranges,
  /// computed in `ctx`. Throws Error, changing nothing, when the state does not fit (another
  /// optimizer's, or slots shorter than the range).
  template <class Context>
  void apply(Context const& ctx, std::span<float> weights, std::span<float const> grads,
             OptimizerState& state, std::size_t begin, float grad_scale, std::int64_t step) const {
    bool fits = state.slots.size() == slot_names().size() && begin + grads.size() <= weights.size();
    for (auto const& slot : state.slots) fits = fits && begin + grads.size() <= slot.size();
    if (!fits) {
      throw Error("convoy: " + std::string(name()) + " needs " +
                  std::to_string(slot_names().size()) + " slot arrays of at least " +
                  std::to_string(begin + grads.size()) + " floats, the state has " +
                  std::to_string(state.slots.size()) +
                  "; make the state with this optimizer's make_state()");
    }
    // [from, to) of the arena, by the optimizer or, for state variables, by their change.
    auto update = [&](std::size_t from, std::size_t to, bool assigned) {
      Update u{weights.subspan(from, to - from),
               grads.subspan(from - begin, to - from),
               {},
               grad_scale,
               step};
      if (assigned) return Sgd{.learning_rate = 1.0f}.apply(ctx, u);
      for (std::size_t s = 0; s < state.slots.size(); ++s)
        u.slots[s] = state.slots[s].data() + from;
      std::visit([&](auto const& o) { o.apply(ctx, u); }, any_);
    };
    std::size_t const end = begin + grads.size();
    std::size_t at = begin;
    for (auto const& r : state.assigned) {
      if (r.end <= at) continue;
      if (r.begin >= end) break;
      std::size_t const from = std::max(r.begin, at), to = std::min(r.end, end);
      if (from > at) update(at, from, false);
      update(from, to, true);
      at = to;
    }
    if (at < end) update(at, end, false);
    // A device context only queues the update, so that the next step's kernels queue behind it
    // instead of the device idling while the host starts them. Whoever reads the weights on the
    // host waits for the context first: Variables' copies of device arenas are ordered on its
    // stream, and ReplicaGroup settles every replica's context before it reads memory both sides
    // address (the mapped arenas of CentralStorageGpus, the managed slots).
  }

 private:
  Any any_;
};

/// "/<slot>", the key suffix of a slot's tensors. (Appended, not `"/" + name`: GCC 12 warns falsely
/// about that expression, its bug 105329.)
inline std::string slot_suffix(std::string_view slot) {
  std::string suffix = "/";
  suffix += slot;
  return suffix;
}

/// The state's slots by name: "<variable>/<slot>" -> tensor shaped like the variable.
inline std::map<std::string, Tensor> named_slots(Optimizer const& opt, OptimizerState const& state,
                                                 Variables const& vars) {
  std::map<std::string, Tensor> out;
  auto names = opt.slot_names();
  for (std::size_t s = 0; s < names.size(); ++s) {
    out.merge(vars.named(state.slots[s], slot_suffix(names[s])));
  }
  return out;
}

/// Restores slots saved by named_slots(). Throws LoadError listing unknown, missing and mis-shaped
/// names (and which optimizer was loading); on error `state` is unchanged.
inline void set_named_slots(Optimizer const& opt, OptimizerState& state, Variables const& vars,
                            std::map<std::string, Tensor> const& named) {
  std::vector<std::string> suffixes;
  for (auto name : opt.slot_names()) suffixes.push_back(slot_suffix(name));
  vars.check_names(named, "optimizer state for " + std::string(opt.name()), suffixes);
  for (std::size_t s = 0; s < suffixes.size(); ++s)
    vars.assign_named(named, state.slots[s], suffixes[s]);
}

}  // namespace convoy::optim
