// A Trainer's or Strategy's weights of a libtorch::Model saved to, and loaded from, any weights
// file a LibTorch user has, LibTorch's own "model.pt" included. Trainer::save_weights knows only
// io::Format's files, since convoy.hpp never includes LibTorch; a program that trains a LibTorch
// module calls these instead, and a ".pt" path then works wherever a weights path is taken.
// Part of the optional component convoy::torch.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "../core/tensor.hpp"
#include "../io/files.hpp"
#include "../io/weights.hpp"
#include "../io/weights_format.hpp"
#include "module_weights.hpp"
#include "pt_archive.hpp"

namespace convoy::libtorch {

/// A Trainer or a Strategy of a libtorch::Model: its weights by name, and the model, whose module
/// gives a .pt archive its structure and whose variables check a loaded file.
template <class T>
concept trains_libtorch_model = requires(T const& t) {
  { t.get_weights() } -> std::same_as<std::map<std::string, Tensor>>;
  { *t.model().net() } -> std::convertible_to<::torch::nn::Module const&>;
  t.model().variables().check_names(std::map<std::string, Tensor>{}, std::string_view{});
};

/// Saves `trained`'s weights by LibTorch's names to `path`: LibTorch's archive for ".pt", which
/// torch::load(module, path) reads into a module of the trained architecture; else a convoy
/// weights file in `format` or the one the extension names, as Trainer::save_weights writes.
/// Replaced atomically. Blocks on file I/O, and on the strategy's get_weights() (a parameter-
/// server worker fetches them from the shards). Throws convoy::Error for an unknown extension or
/// a file that cannot be written, naming the path and the reason.
template <trains_libtorch_model T>
void save_weights(T const& trained, std::filesystem::path const& path,
                  std::optional<io::Format> format = {}) {
  write_weights_file(path, *trained.model().net(), trained.get_weights(), format);
}

/// Loads the weights in `path` into every replica of `trained` by name: a LibTorch archive
/// (".pt", one torch::save(module, path) or save_weights wrote), a checkpoint (".convoy") or a
/// weights file (read_weights_file). Blocks on file I/O. Throws as read_weights_file does, and
/// LoadError naming the path and every unknown, missing and mis-shaped name when the file holds
/// another architecture; on any error `trained` is unchanged.
template <trains_libtorch_model T>
void load_weights(T& trained, std::filesystem::path const& path,
                  std::optional<io::Format> format = {}) {
  auto const named = read_weights_file(path, format);
  trained.model().variables().check_names(named, "loading '" + path.string() + "'");
  trained.set_weights(named);
}

/// Makes sure `path` can be written by save_weights before a run that ends by writing it: a ".pt"
/// path or one whose extension names an io::Format, in a directory that accepts files (see
/// io::require_writable_file). Blocks on file I/O. Throws convoy::Error naming the path and what
/// is wrong.
inline void require_writable_weights_file(std::filesystem::path const& path) {
  io::require_writable_file(path, "weights file", /*weights_format=*/!is_pt_file(path));
}

}  // namespace convoy::libtorch
