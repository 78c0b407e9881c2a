// Conversions between LibTorch's tensors and convoy's, shared by the adapter (model.hpp) and the
// weights files of plain modules (pt_archive.hpp, module_weights.hpp). Not for users.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <vector>

#include "../../core/tensor.hpp"
#include "../../core/variables.hpp"

namespace convoy::libtorch::detail {

inline Shape shape_of(::torch::Tensor const& t) {
  Shape shape;
  for (auto d : t.sizes()) shape.push_back(static_cast<std::size_t>(d));
  return shape;
}

// A convoy tensor (float values) as a tensor of `like`'s type and shape, owning its values.
inline ::torch::Tensor torch_tensor(Tensor const& value, ::torch::Tensor const& like) {
  return ::torch::from_blob(const_cast<float*>(value.data.data()), like.sizes(), ::torch::kFloat)
      .to(like.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
}

// A tensor of any type or device as a convoy tensor: integer buffers (BatchNorm's
// num_batches_tracked) become floats, as libtorch::Model holds them.
inline Tensor convoy_tensor(::torch::Tensor const& t) {
  auto const values = t.detach().to(::torch::kCPU).to(::torch::kFloat).contiguous();
  auto const* first = values.data_ptr<float>();
  return Tensor{shape_of(t), std::vector<float>(first, first + values.numel())};
}

// The names and shapes of `module`'s parameters (trainable) and buffers (state), in
// named_parameters() and named_buffers() order: the layout libtorch::Model gives the same module,
// so a name check here says what a strategy's would.
inline Variables layout_of(::torch::nn::Module const& module) {
  Variables layout;
  for (auto const& item : module.named_parameters()) layout.add(item.key(), shape_of(item.value()));
  for (auto const& item : module.named_buffers())
    layout.add_state(item.key(), shape_of(item.value()));
  return layout;
}

}  // namespace convoy::libtorch::detail
