// A plain LibTorch module's weights in and out of convoy's files, by LibTorch's names: weights
// files (.bin, .pbin, .json), checkpoints (.convoy) and LibTorch's own archive (.pt), checked name
// by name as a strategy checks them. For a module trained elsewhere, or to run convoy's trained
// weights without convoy's strategies. Part of the optional component convoy::torch.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../io/checkpoint.hpp"
#include "../io/weights.hpp"
#include "../io/weights_format.hpp"
#include "pt_archive.hpp"

namespace convoy::libtorch {

/// Every parameter and buffer of `module`, named as named_parameters() and named_buffers() name
/// them ("conv.weight", "bn.running_mean"), as float tensors: copies, the names and values a
/// libtorch::Model of the same module holds. Integer buffers become floats.
inline std::map<std::string, Tensor> module_weights(::torch::nn::Module const& module) {
  std::map<std::string, Tensor> named;
  for (auto const& item : module.named_parameters())
    named.emplace(item.key(), detail::convoy_tensor(item.value()));
  for (auto const& item : module.named_buffers())
    named.emplace(item.key(), detail::convoy_tensor(item.value()));
  return named;
}

/// Sets `module`'s parameters and buffers by name from `named`, each converted to its tensor's
/// type. Checks everything first: throws LoadError saying `what` (say "loading 'w.bin'") and
/// naming every unknown, missing and mis-shaped name, and then changes nothing. Not thread-safe
/// against other users of `module`.
inline void set_module_weights(::torch::nn::Module& module,
                               std::map<std::string, Tensor> const& named,
                               std::string_view what = "set_module_weights") {
  detail::layout_of(module).check_names(named, what);
  ::torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters())
    item.value().copy_(detail::torch_tensor(named.at(item.key()), item.value()));
  for (auto& item : module.named_buffers())
    item.value().copy_(detail::torch_tensor(named.at(item.key()), item.value()));
}

/// The weights in `path` by name, whatever wrote them: a LibTorch archive (".pt", load_pt), a
/// checkpoint (".convoy": its weights, io::load_checkpoint) or a weights file (`format`, or the
/// one its extension names: io::format_for). Blocks on file I/O. Throws what those readers throw:
/// convoy::Error for a missing or unreadable file or an unknown extension, LoadError or
/// CheckpointError naming the path for a file they refuse.
inline std::map<std::string, Tensor> read_weights_file(std::filesystem::path const& path,
                                                       std::optional<io::Format> format = {}) {
  if (!format && is_pt_file(path)) return load_pt(path);
  if (!format && path.extension() == io::detail::checkpoint_suffix)
    return io::load_checkpoint(path).state.weights;
  return io::load_named(path, format ? *format : io::format_for(path));
}

/// Loads the weights in `path` (read_weights_file: .pt, a checkpoint, a weights file) into
/// `module` by name (set_module_weights). Blocks on file I/O. Throws as read_weights_file does,
/// and LoadError naming the path and every unknown, missing and mis-shaped name when the file
/// holds another architecture; on any error `module` is unchanged.
inline void load_module_weights(::torch::nn::Module& module, std::filesystem::path const& path,
                                std::optional<io::Format> format = {}) {
  set_module_weights(module, read_weights_file(path, format), "loading '" + path.string() + "'");
}

/// Writes `named`, the weights of a module of `module`'s architecture, to `path`: LibTorch's
/// archive for ".pt" (save_pt, shaped by `module`), else a convoy weights file in `format` or the
/// one the extension names; read_weights_file's counterpart. Replaced atomically. Blocks on file
/// I/O. Throws as save_pt and io::save_named do, naming the path.
inline void write_weights_file(std::filesystem::path const& path, ::torch::nn::Module const& module,
                               std::map<std::string, Tensor> const& named,
                               std::optional<io::Format> format = {}) {
  if (!format && is_pt_file(path)) return save_pt(path, module, named);
  io::save_named(path, named, format ? *format : io::format_for(path));
}

/// Saves `module`'s parameters and buffers by name to `path`: LibTorch's archive for ".pt" (what
/// torch::save(module, path) writes, save_pt), else a convoy weights file in `format` or the one
/// the extension names, which Trainer::load_weights, io::load_weights and libtorch::load_weights
/// read. Replaced atomically. Blocks on file I/O. Throws convoy::Error for an unknown extension or
/// when the file cannot be written, naming the path and the reason.
inline void save_module_weights(::torch::nn::Module const& module,
                                std::filesystem::path const& path,
                                std::optional<io::Format> format = {}) {
  write_weights_file(path, module, module_weights(module), format);
}

}  // namespace convoy::libtorch
