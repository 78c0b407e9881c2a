// LibTorch's own weights file, "model.pt": the archive torch::save(module, path) writes and
// torch::load(module, path) reads, written from convoy's tensors by name and read back into them.
// Part of the optional component convoy::torch: io/ never includes LibTorch, so the .pt format
// lives here and not among io::Format's archives.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../io/files.hpp"
#include "detail/tensors.hpp"

namespace convoy::libtorch {

/// Whether `path` names LibTorch's archive: its extension is ".pt". Does not touch the file system.
inline bool is_pt_file(std::filesystem::path const& path) { return path.extension() == ".pt"; }

namespace detail {

// Module::save's walk: a module's own parameters, then its own buffers, then one nested archive
// per serializable child, whose tensors drop the child's "name." prefix. Written from `named`
// rather than from the module, with each tensor's type and requires_grad taken from the module's,
// because Module::load checks requires_grad against parameter or buffer and set_() the type.
inline void write_level(::torch::serialize::OutputArchive& archive,
                        ::torch::nn::Module const& module, std::string const& prefix,
                        std::map<std::string, Tensor> const& named) {
  for (auto const& item : module.named_parameters(/*recurse=*/false)) {
    auto value = torch_tensor(named.at(prefix + item.key()), item.value());
    value.set_requires_grad(item.value().requires_grad());
    archive.write(item.key(), value);
  }
  for (auto const& item : module.named_buffers(/*recurse=*/false)) {
    archive.write(item.key(), torch_tensor(named.at(prefix + item.key()), item.value()),
                  /*is_buffer=*/true);
  }
  for (auto const& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    ::torch::serialize::OutputArchive nested(archive.compilation_unit());
    write_level(nested, *child.value(), prefix + child.key() + ".", named);
    archive.write(child.key(), nested);
  }
}

// Every tensor of an archive and of the archives nested in it, under its dotted name.
inline void read_level(::torch::serialize::InputArchive& archive, std::string const& prefix,
                       std::map<std::string, Tensor>& named) {
  for (auto const& key : archive.keys()) {
    c10::IValue value;
    if (!archive.try_read(key, value)) continue;
    if (value.isTensor()) {
      named.emplace(prefix + key, convoy_tensor(value.toTensor()));
    } else if (value.isObject()) {
      ::torch::serialize::InputArchive nested;
      archive.read(key, nested);
      read_level(nested, prefix + key + ".", named);
    }
  }
}

}  // namespace detail

/// Writes `named` to `path` as LibTorch's archive, the file torch::save(module, path) writes for a
/// module of `layout`'s architecture holding these values, so torch::load(module, path) reads it.
/// `layout` gives the structure, each tensor's type and whether it is a parameter or a buffer;
/// its values are not read. The file is replaced atomically, as io::save_weights does. Blocks on
/// file I/O. Throws LoadError naming every unknown, missing and mis-shaped name when `named` does
/// not fit `layout` (nothing is written), and convoy::Error naming the path and the reason when
/// the file cannot be written.
inline void save_pt(std::filesystem::path const& path, ::torch::nn::Module const& layout,
                    std::map<std::string, Tensor> const& named) {
  detail::layout_of(layout).check_names(named, "saving '" + path.string() + "'");
  ::torch::serialize::OutputArchive archive;
  detail::write_level(archive, layout, "", named);
  io::detail::write_atomically(path, [&](std::ostream& out) {
    try {
      archive.save_to(out);
    } catch (c10::Error const& e) {
      throw Error("convoy: LibTorch cannot write '" + path.string() +
                  "': " + e.what_without_backtrace());
    }
  });
}

/// Every parameter and buffer in the LibTorch archive at `path` (one torch::save(module, path) or
/// save_pt() wrote), by its LibTorch name ("stage2.conv1.weight"), as float tensors on the host.
/// Blocks on file I/O. Throws convoy::Error naming the path when it is missing or cannot be
/// opened, and LoadError naming it when it is not a LibTorch archive.
inline std::map<std::string, Tensor> load_pt(std::filesystem::path const& path) {
  auto in = io::detail::open_for_reading<Error>(path, "weights file");
  std::map<std::string, Tensor> named;
  try {
    ::torch::serialize::InputArchive archive;
    archive.load_from(in);
    detail::read_level(archive, "", named);
  } catch (c10::Error const& e) {
    throw LoadError(
        "convoy: '" + path.string() +
        "' cannot be read as LibTorch's archive (torch::save): " + e.what_without_backtrace());
  }
  return named;
}

}  // namespace convoy::libtorch
