// load_fashion_mnist(): Zalando's Fashion-MNIST (70,000 28x28 grey images of clothing in ten
// classes) as a Dataset of 784 features scaled to [0, 1] and labels 0..9, read from the IDX files
// of Debian's dataset-fashion-mnist package or any directory holding the same four files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "dataset.hpp"
#include "idx.hpp"

namespace convoy::io {

/// Which of Fashion-MNIST's two files pairs to load: 60,000 training or 10,000 test examples.
enum class Split { train, test };

/// The number of examples in `split` of the published data set: 60,000 or 10,000. Files holding
/// more are refused before their data is read, so a damaged header cannot cost more memory or time.
inline constexpr std::uint32_t fashion_mnist_examples(Split split) {
  return split == Split::train ? 60'000 : 10'000;
}

/// $CONVOY_FASHION_MNIST_DIR when set and non-empty, otherwise /usr/share/datasets/fashion-mnist
/// (where Debian's dataset-fashion-mnist package installs it). Reads the environment, so it is not
/// safe against a concurrent setenv(). Throws nothing beyond std::bad_alloc.
inline std::filesystem::path default_fashion_mnist_dir() {
  if (char const* dir = std::getenv("CONVOY_FASHION_MNIST_DIR"); dir && *dir) return dir;
  return "/usr/share/datasets/fashion-mnist";
}

/// The name of class `label` (0 "T-shirt/top" ... 9 "Ankle boot"). Throws DatasetError when
/// `label` is outside 0..9.
inline std::string_view fashion_mnist_class_name(int label) {
  static constexpr std::array<std::string_view, 10> names = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  if (label < 0 || label >= static_cast<int>(names.size())) {
    throw DatasetError("convoy: " + std::to_string(label) + " is not a Fashion-MNIST label (0..9)");
  }
  return names[static_cast<std::size_t>(label)];
}

namespace detail {

inline constexpr std::string_view fashion_mnist_hint =
    "install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or set "
    "CONVOY_FASHION_MNIST_DIR to a directory holding the four IDX files";

// dir/<stem>.gz, or dir/<stem> when only the uncompressed file is there.
inline std::filesystem::path fashion_mnist_file(std::filesystem::path const& dir,
                                                std::string const& stem) {
  std::error_code ignored;
  auto const gz = dir / (stem + ".gz");
  if (!std::filesystem::exists(gz, ignored) && std::filesystem::exists(dir / stem, ignored))
    return dir / stem;
  return gz;
}

inline void require_fashion_mnist_file(std::filesystem::path const& file) {
  std::error_code ignored;
  if (std::filesystem::exists(file, ignored)) return;
  auto const dir = file.parent_path();
  std::string const where = std::filesystem::is_directory(dir, ignored)
                                ? ""
                                : " (the directory '" + dir.string() + "' does not exist)";
  throw DatasetError("convoy: Fashion-MNIST file '" + file.string() + "' not found" + where + "; " +
                     std::string(fashion_mnist_hint));
}

}  // namespace detail

/// Loads one split from `dir`: files {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same
/// names without .gz). Returns a Dataset named "fashion-mnist/train" or "fashion-mnist/test" with
/// cols = 784 (pixels row by row, divided by 255) and int32 labels 0..9. Blocks on file I/O
/// (about 50 MB decompressed for train).
/// Throws DatasetError naming the file: when one is missing (saying how to get the package), is
/// malformed (see read_idx), holds more examples than fashion_mnist_examples(split), holds images
/// other than N x 28 x 28 or labels other than N, has image and label counts that differ, or holds
/// a label of 10 or more.
inline Dataset load_fashion_mnist(Split split,
                                  std::filesystem::path const& dir = default_fashion_mnist_dir()) {
  std::string const prefix = split == Split::train ? "train" : "t10k";
  auto const images_path = detail::fashion_mnist_file(dir, prefix + "-images-idx3-ubyte");
  auto const labels_path = detail::fashion_mnist_file(dir, prefix + "-labels-idx1-ubyte");
  // Both are checked before either is read, so a missing labels file fails at once.
  detail::require_fashion_mnist_file(images_path);
  detail::require_fashion_mnist_file(labels_path);

  std::uint64_t const examples = fashion_mnist_examples(split);
  IdxArray const images = read_idx(images_path, examples * 28 * 28);
  if (images.shape.size() != 3 || images.shape[1] != 28 || images.shape[2] != 28) {
    std::string shape;
    for (std::size_t d = 0; d < images.shape.size(); ++d)
      shape += (d ? " x " : "") + std::to_string(images.shape[d]);
    throw DatasetError("convoy: Fashion-MNIST images '" + images_path.string() + "' have shape [" +
                       shape + "]; expected N x 28 x 28");
  }
  IdxArray const labels = read_idx(labels_path, examples);
  if (labels.shape.size() != 1) {
    throw DatasetError("convoy: Fashion-MNIST labels '" + labels_path.string() + "' have " +
                       std::to_string(labels.shape.size()) + " dimensions; expected 1");
  }
  if (labels.shape[0] != images.shape[0]) {
    throw DatasetError("convoy: Fashion-MNIST labels '" + labels_path.string() + "' hold " +
                       std::to_string(labels.shape[0]) + " labels but images '" +
                       images_path.string() + "' hold " + std::to_string(images.shape[0]) +
                       " images");
  }

  Dataset out;
  out.name = split == Split::train ? "fashion-mnist/train" : "fashion-mnist/test";
  out.cols = 28 * 28;
  out.labels.resize(labels.data.size());
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= 10) {
      throw DatasetError("convoy: Fashion-MNIST labels '" + labels_path.string() + "' hold label " +
                         std::to_string(labels.data[i]) + " at index " + std::to_string(i) +
                         "; expected 0..9");
    }
    out.labels[i] = labels.data[i];
  }
  // A table of the 256 quotients keeps v / 255 exact (255 -> 1.0f) and the loop a plain gather.
  std::array<float, 256> scale{};
  for (std::size_t v = 0; v < scale.size(); ++v) scale[v] = static_cast<float>(v) / 255.0f;
  out.features.resize(images.data.size());
  for (std::size_t i = 0; i < images.data.size(); ++i) out.features[i] = scale[images.data[i]];
  return out;
}

}  // namespace convoy::io
