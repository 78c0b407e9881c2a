// GradientsReady: how a model tells the engine, during its backward pass, that the gradients of a
// range of its variables are final, so that their exchange can start while the rest of the
// backward pass runs. A non-owning callable reference: no allocation, copied by value.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

#include "variables.hpp"

namespace convoy {

/// Called by a model with [first, last] (declaration order, both included) once those variables'
/// gradients will not change again in this forward_backward. Calls may come in any order and may
/// overlap; the engine counts each variable once. A default-constructed one does nothing. Cheap to
/// copy; the callable it refers to must outlive it.
class GradientsReady {
 public:
  GradientsReady() = default;
  template <class F>
  requires(!std::same_as<std::remove_cvref_t<F>, GradientsReady>) explicit GradientsReady(F& f)
      : target_(&f), call_([](void* t, VariableId first, VariableId last) {
          (*static_cast<F*>(t))(first, last);
        }) {}

  void operator()(VariableId first, VariableId last) const {
    if (call_ != nullptr) call_(target_, first, last);
  }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  void* target_ = nullptr;
  void (*call_)(void*, VariableId, VariableId) = nullptr;
};

}  // namespace convoy
