// DatasetBuilder: an io::Dataset built row by row from a user's own values, each row checked as it
// is added (its length, its label's range, finite values), so a mistake is reported at the row
// that made it instead of as a size mismatch at training time.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "../core/error.hpp"
#include "dataset.hpp"

namespace convoy::io {

/// What every row holds: `features` values, and either a class label in [0, classes) or `targets`
/// regression values (exactly one of classes and targets is set).
struct RowShape {
  std::size_t features = 0;
  std::size_t classes = 0;  ///< classification: labels are 0 .. classes - 1
  std::size_t targets = 0;  ///< regression: values per row
};

/// Collects rows into a Dataset. Every call that gets something wrong throws DatasetError naming
/// the dataset, the row's index, what it got and what it expected; the rejected row is not added.
/// Not thread-safe.
///
///     convoy::io::DatasetBuilder blobs{"blobs", {.features = 2, .classes = 3}};
///     blobs.add(point, label);          // point: std::vector<float> of 2 values, label 0..2
///     convoy::io::Dataset train = blobs.build();
class DatasetBuilder {
 public:
  /// Throws DatasetError when `shape` has no features, or not exactly one of classes and targets.
  DatasetBuilder(std::string name, RowShape shape) : shape_(shape) {
    data_.name = std::move(name);
    data_.cols = shape.features;
    data_.target_cols = shape.targets;
    if (shape.features == 0) {
      fail("RowShape::features is 0; set .features to the number of values in a row");
    }
    if ((shape.classes == 0) == (shape.targets == 0)) {
      fail("RowShape has classes " + std::to_string(shape.classes) + " and targets " +
           std::to_string(shape.targets) +
           "; set exactly one: .classes for labels, .targets for regression values");
    }
  }

  /// Adds a row of shape.features values with class `label`. Throws DatasetError for a row of
  /// another length, a value that is not finite, a label outside [0, classes), or a dataset made
  /// for regression targets.
  DatasetBuilder& add(std::span<float const> row, std::int32_t label) {
    if (shape_.classes == 0) {
      fail("row " + std::to_string(rows_) + " has a label, but the dataset holds " +
           std::to_string(shape_.targets) +
           " regression targets per row (RowShape::targets); add it with add(row, targets)");
    }
    check_values(row, shape_.features, "features", "RowShape::features");
    if (label < 0 || static_cast<std::size_t>(label) >= shape_.classes) {
      fail("row " + std::to_string(rows_) + " has label " + std::to_string(label) +
           ", expected 0 to " + std::to_string(shape_.classes - 1) + " (RowShape::classes is " +
           std::to_string(shape_.classes) + ")");
    }
    data_.features.insert(data_.features.end(), row.begin(), row.end());
    data_.labels.push_back(label);
    ++rows_;
    return *this;
  }
  DatasetBuilder& add(std::initializer_list<float> row, std::int32_t label) {
    return add(std::span(row.begin(), row.size()), label);
  }

  /// Adds a row of shape.features values with shape.targets regression values. Throws
  /// DatasetError for either of another length, a value that is not finite, or a dataset made for
  /// class labels.
  DatasetBuilder& add(std::span<float const> row, std::span<float const> targets) {
    if (shape_.targets == 0) {
      fail("row " + std::to_string(rows_) +
           " has regression targets, but the dataset holds class labels (RowShape::classes is " +
           std::to_string(shape_.classes) + "); add it with add(row, label)");
    }
    check_values(row, shape_.features, "features", "RowShape::features");
    check_values(targets, shape_.targets, "targets", "RowShape::targets");
    data_.features.insert(data_.features.end(), row.begin(), row.end());
    data_.targets.insert(data_.targets.end(), targets.begin(), targets.end());
    ++rows_;
    return *this;
  }
  DatasetBuilder& add(std::initializer_list<float> row, std::initializer_list<float> targets) {
    return add(std::span(row.begin(), row.size()), std::span(targets.begin(), targets.size()));
  }

  /// Rows added so far.
  std::size_t rows() const { return rows_; }

  /// The dataset of every row added. Throws DatasetError when there is none: training would have
  /// nothing to sample. The rvalue form moves the rows out instead of copying them.
  Dataset build() const& {
    require_rows();
    return data_;
  }
  Dataset build() && {
    require_rows();
    return std::move(data_);
  }

 private:
  [[noreturn]] void fail(std::string const& what) const {
    throw DatasetError("convoy: dataset '" + data_.name + "': " + what);
  }

  void check_values(std::span<float const> values, std::size_t expected, char const* what,
                    char const* field) const {
    if (values.size() != expected) {
      fail("row " + std::to_string(rows_) + " has " + std::to_string(values.size()) + " " + what +
           ", expected " + std::to_string(expected) + " (" + field + ")");
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        fail("row " + std::to_string(rows_) + ": " + what + "[" + std::to_string(i) + "] is " +
             std::to_string(values[i]) + ", expected a finite value");
      }
    }
  }

  void require_rows() const {
    if (rows_ == 0) {
      fail(
          "no rows were added; add at least one with add(row, label) or add(row, targets) "
          "before build()");
    }
  }

  RowShape shape_;
  Dataset data_;
  std::size_t rows_ = 0;
};

}  // namespace convoy::io
