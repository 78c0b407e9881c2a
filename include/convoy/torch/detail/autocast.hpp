// Mixed precision for libtorch::Model (ModelOptions::autocast): LibTorch's autocast on the device
// a pass computes on, for the forward pass and the loss, as `with torch.autocast(...)` does in
// Python. LibTorch renamed its calls in 2.4 (one per device type before, one taking the device
// type after); both are spoken here. Not for users.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <optional>
#include <sstream>

#include "../../core/error.hpp"

namespace convoy::libtorch::detail {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool autocast_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
inline at::ScalarType autocast_type(c10::DeviceType d) {
  return at::autocast::get_autocast_dtype(d);
}
inline void set_autocast(c10::DeviceType d, bool on, at::ScalarType type) {
  at::autocast::set_autocast_enabled(d, on);
  at::autocast::set_autocast_dtype(d, type);
}
#else
inline bool autocast_enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline at::ScalarType autocast_type(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                    : at::autocast::get_autocast_cpu_dtype();
}
inline void set_autocast(c10::DeviceType d, bool on, at::ScalarType type) {
  if (d == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
    at::autocast::set_autocast_gpu_dtype(type);
  } else {
    at::autocast::set_cpu_enabled(on);
    at::autocast::set_autocast_cpu_dtype(type);
  }
}
#endif

/// While alive, this thread's autocast to `type` on `device`'s type (nothing when `type` is
/// empty); the state before it comes back after, and the cache of cast weights goes when the
/// outermost one ends, as torch.autocast's exit does (a cast copy must not outlive an optimizer
/// step that changes its weight).
class Autocast {
 public:
  /// Throws Error for a type autocast does not compute in (bfloat16, or float16).
  Autocast(std::optional<at::ScalarType> type, ::torch::Device device) {
    if (!type) return;
    if (*type != at::kBFloat16 && *type != at::kHalf) {
      std::ostringstream what;
      what << "convoy: libtorch::ModelOptions::autocast is " << *type
           << "; autocast computes in ::torch::kBFloat16 (or kHalf), the weights staying float32";
      throw Error(what.str());
    }
    device_ = device.type();
    was_on_ = autocast_enabled(device_);
    was_type_ = autocast_type(device_);
    set_autocast(device_, true, *type);
    at::autocast::increment_nesting();
    active_ = true;
  }
  Autocast(Autocast const&) = delete;
  Autocast& operator=(Autocast const&) = delete;
  ~Autocast() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, was_on_, was_type_);
  }

 private:
  bool active_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;
  bool was_on_ = false;
  at::ScalarType was_type_ = at::kFloat;
};

}  // namespace convoy::libtorch::detail
