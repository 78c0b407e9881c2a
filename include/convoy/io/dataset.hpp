// Dataset: examples held in memory, row-major; and shard(), which cuts it into equal parts for
// replicas or processes so that none runs out of data before the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/batch.hpp"
#include "../core/error.hpp"

namespace convoy::io {

/// An aggregate: build it with named fields, `Dataset{.name = "xy", .cols = 2, .target_cols = 1}`
/// (every member has a default, so any may be left out), or row by row, checked, with
/// DatasetBuilder (dataset_builder.hpp). io::check() tells whether the parts agree.
struct Dataset {
  std::string name{};                  ///< for messages and logs
  std::size_t cols = 0;                ///< features per example
  std::vector<float> features{};       ///< rows x cols
  std::vector<std::int32_t> labels{};  ///< one per row, or empty
  std::size_t target_cols = 0;         ///< targets per example (regression), or 0
  std::vector<float> targets{};        ///< rows x target_cols, or empty

  std::size_t rows() const { return cols ? features.size() / cols : 0; }

  /// Rows [begin, begin + count) as a Batch view; valid while the dataset lives.
  Batch slice(std::size_t begin, std::size_t count) const {
    Batch b;
    b.rows = count;
    b.features = std::span(features).subspan(begin * cols, count * cols);
    if (!labels.empty()) b.labels = std::span(labels).subspan(begin, count);
    if (!targets.empty())
      b.targets = std::span(targets).subspan(begin * target_cols, count * target_cols);
    return b;
  }
};

/// Throws DatasetError, naming the dataset, when its parts disagree: features that are not whole
/// rows, or labels or targets for another number of rows. Cheap: sizes only.
inline void check(Dataset const& data) {
  auto fail = [&](std::string const& what) {
    throw DatasetError("convoy: dataset '" + data.name + "': " + what);
  };
  if (data.cols == 0 || data.features.size() % data.cols != 0) {
    fail(std::to_string(data.features.size()) + " feature values are not whole rows of " +
         std::to_string(data.cols));
  }
  if (!data.labels.empty() && data.labels.size() != data.rows()) {
    fail(std::to_string(data.labels.size()) + " labels for " + std::to_string(data.rows()) +
         " rows");
  }
  if (data.targets.size() != data.rows() * data.target_cols && !data.targets.empty()) {
    fail(std::to_string(data.targets.size()) + " target values for " + std::to_string(data.rows()) +
         " rows of " + std::to_string(data.target_cols));
  }
  if (data.targets.empty() != (data.target_cols == 0) && data.rows() > 0) {
    fail("target_cols is " + std::to_string(data.target_cols) + " but there are " +
         std::to_string(data.targets.size()) + " target values");
  }
}

/// Shard `index` of `count`: rows index, index + count, index + 2 count, ..., cut so that every
/// shard has exactly rows() / count rows (the remainder is dropped, so no shard runs dry first).
/// Throws DatasetError when there are fewer rows than shards.
inline Dataset shard(Dataset const& data, std::size_t index, std::size_t count) {
  if (count == 0 || index >= count) {
    throw DatasetError("convoy: shard " + std::to_string(index) + " of " + std::to_string(count) +
                       " does not exist");
  }
  std::size_t const per_shard = data.rows() / count;
  if (per_shard == 0) {
    throw DatasetError("convoy: dataset '" + data.name + "' has " + std::to_string(data.rows()) +
                       " rows, fewer than its " + std::to_string(count) + " shards");
  }
  Dataset out{
      .name = data.name + "[shard " + std::to_string(index) + "/" + std::to_string(count) + "]",
      .cols = data.cols,
      .target_cols = data.target_cols};
  out.features.reserve(per_shard * data.cols);
  for (std::size_t k = 0; k < per_shard; ++k) {
    std::size_t const row = index + k * count;
    auto src = data.features.begin() + static_cast<std::ptrdiff_t>(row * data.cols);
    out.features.insert(out.features.end(), src, src + static_cast<std::ptrdiff_t>(data.cols));
    if (!data.labels.empty()) out.labels.push_back(data.labels[row]);
    if (!data.targets.empty()) {
      auto t = data.targets.begin() + static_cast<std::ptrdiff_t>(row * data.target_cols);
      out.targets.insert(out.targets.end(), t, t + static_cast<std::ptrdiff_t>(data.target_cols));
    }
  }
  return out;
}

}  // namespace convoy::io
