// GradientPlaces: where each of a model's gradients is after its forward_backward. A model whose
// framework computes every gradient in memory of its own (LibTorch's autograd allocates a tensor
// for each) can leave it there for an engine that reads each gradient once, the lock-step sum,
// instead of copying it into the gradient arena first: a write and a read of every gradient a
// step less, which on a small model is a few percent of its step (docs/torch.md measures it).
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "variables.hpp"

namespace convoy {

/// Each variable's gradient, variable by variable: in its model's gradient arena
/// (Variables::grads()), or where the model left it, which the model keeps readable and unchanged
/// until its next forward_backward. An engine resets it before each forward_backward and settles
/// it (copies what was left outside into the arena) before anyone else may read the arena.
class GradientPlaces {
 public:
  GradientPlaces() = default;
  /// Every gradient of `vars` in its arena; `vars` must outlive this.
  explicit GradientPlaces(Variables& vars) : vars_(&vars) { reset(); }

  /// Called by the model: variable `id`'s gradient is the Variable's size() floats at `data`, not
  /// in the arena: memory the host reads (the engine sums it there), valid and unchanged until
  /// the model's next forward_backward.
  void leave(VariableId id, float const* data) {
    at_[id.index] = data;
    left_ = true;
  }

  /// The first of variable `index`'s gradients.
  float const* of(std::size_t index) const { return at_[index]; }
  /// The variables, in arena order: offsets and sizes.
  std::span<Variable const> list() const { return vars_->list(); }
  /// True when some gradient is outside the arena.
  bool left() const { return left_; }

  /// Points every variable at the arena again, copying nothing: before the next forward_backward,
  /// which overwrites whatever it does not leave outside.
  void reset() {
    auto const grads = vars_->grads();
    auto const list = vars_->list();
    at_.resize(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) at_[i] = grads.data() + list[i].offset;
    left_ = false;
  }

  /// Copies every gradient left outside into the arena, then points at the arena: afterwards the
  /// arena holds the last forward_backward's gradients, as the Model contract says.
  void settle() {
    if (!left_) return;
    auto const grads = vars_->grads();
    auto const list = vars_->list();
    for (std::size_t i = 0; i < list.size(); ++i) {
      float* const home = grads.data() + list[i].offset;
      if (at_[i] != home) std::memcpy(home, at_[i], list[i].size * sizeof(float));
    }
    reset();
  }

 private:
  Variables* vars_ = nullptr;
  std::vector<float const*> at_;  // by variable index
  bool left_ = false;
};

}  // namespace convoy
