// Tests for io/dataset_builder.hpp: rows land in the Dataset in order with their labels or
// targets, and every mistake (row length, label range, non-finite value, wrong kind of row, a
// shape without features or kind, no rows) is refused with a message naming the dataset, the row,
// what it got and what it expected, leaving the rows added before it intact.
#include <doctest/doctest.h>

#include <convoy/io/dataset.hpp>
#include <convoy/io/dataset_builder.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "helpers.hpp"

namespace test_io_dataset_builder {

namespace {

using convoy::DatasetError;
using convoy::io::DatasetBuilder;
using convoy::testing::message_of;

}  // namespace

TEST_CASE("rows, labels and targets land in order and make a Dataset that passes io::check") {
  SUBCASE("classification") {
    std::vector<float> const second{3.0f, 4.0f};
    auto data = DatasetBuilder{"points", {.features = 2, .classes = 3}}
                    .add({1.0f, 2.0f}, 0)
                    .add(second, 2)
                    .build();
    CHECK(data.name == "points");
    CHECK(data.rows() == 2);
    CHECK(data.features == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
    CHECK(data.labels == std::vector<std::int32_t>{0, 2});
    CHECK(data.targets.empty());
    CHECK_NOTHROW(convoy::io::check(data));
    auto const batch = data.slice(1, 1);
    CHECK(batch.features[1] == 4.0f);
    CHECK(batch.labels[0] == 2);
  }
  SUBCASE("regression") {
    DatasetBuilder builder{"line", {.features = 1, .targets = 2}};
    for (int i = 0; i < 3; ++i) {
      auto const x = static_cast<float>(i);
      builder.add({x}, {2.0f * x, -x});
    }
    CHECK(builder.rows() == 3);
    auto const data = builder.build();  // a copy: the builder still holds its rows
    CHECK(builder.rows() == 3);
    CHECK(data.rows() == 3);
    CHECK(data.target_cols == 2);
    CHECK(data.targets == std::vector<float>{0.0f, -0.0f, 2.0f, -1.0f, 4.0f, -2.0f});
    CHECK(data.labels.empty());
    CHECK_NOTHROW(convoy::io::check(data));
  }
}

TEST_CASE("a row of the wrong length is refused, naming its index and the expected length") {
  DatasetBuilder builder{"points", {.features = 4, .classes = 3}};
  builder.add({1, 2, 3, 4}, 0).add({5, 6, 7, 8}, 1);
  auto const message = message_of<DatasetError>([&] { builder.add({1, 2, 3}, 0); });
  CHECK(message ==
        "convoy: dataset 'points': row 2 has 3 features, expected 4 (RowShape::features)");
  CHECK(builder.rows() == 2);  // the bad row was not added
  CHECK(builder.build().features.size() == 8);

  DatasetBuilder regression{"fit", {.features = 1, .targets = 2}};
  CHECK(message_of<DatasetError>([&] { regression.add({1.0f}, {1.0f}); }) ==
        "convoy: dataset 'fit': row 0 has 1 targets, expected 2 (RowShape::targets)");
}

TEST_CASE("a label out of range is refused, naming the row, the label and the range") {
  DatasetBuilder builder{"points", {.features = 1, .classes = 3}};
  builder.add({0.5f}, 2);
  CHECK(message_of<DatasetError>([&] { builder.add({0.5f}, 3); }) ==
        "convoy: dataset 'points': row 1 has label 3, expected 0 to 2 (RowShape::classes is 3)");
  CHECK(message_of<DatasetError>([&] { builder.add({0.5f}, -1); }) ==
        "convoy: dataset 'points': row 1 has label -1, expected 0 to 2 (RowShape::classes is 3)");
  CHECK(builder.rows() == 1);
}

TEST_CASE("a value that is not finite is refused, naming the row and the position") {
  DatasetBuilder builder{"points", {.features = 3, .classes = 2}};
  float const nan = std::numeric_limits<float>::quiet_NaN();
  auto const message = message_of<DatasetError>([&] { builder.add({0.0f, nan, 1.0f}, 1); });
  CHECK(message.starts_with("convoy: dataset 'points': row 0: features[1] is "));
  CHECK(message.ends_with(", expected a finite value"));
  DatasetBuilder regression{"fit", {.features = 1, .targets = 1}};
  float const inf = std::numeric_limits<float>::infinity();
  CHECK(message_of<DatasetError>([&] { regression.add({1.0f}, {inf}); }) ==
        "convoy: dataset 'fit': row 0: targets[0] is inf, expected a finite value");
}

TEST_CASE("a label for a regression dataset, or targets for a classification one, is refused") {
  DatasetBuilder regression{"fit", {.features = 1, .targets = 2}};
  CHECK(message_of<DatasetError>([&] { regression.add({1.0f}, 0); }) ==
        "convoy: dataset 'fit': row 0 has a label, but the dataset holds 2 regression targets per "
        "row (RowShape::targets); add it with add(row, targets)");
  DatasetBuilder classes{"points", {.features = 1, .classes = 2}};
  CHECK(message_of<DatasetError>([&] { classes.add({1.0f}, {1.0f}); }) ==
        "convoy: dataset 'points': row 0 has regression targets, but the dataset holds class "
        "labels (RowShape::classes is 2); add it with add(row, label)");
}

TEST_CASE("a shape without features, or without exactly one of classes and targets, is refused") {
  CHECK(message_of<DatasetError>([] { DatasetBuilder("empty", {.classes = 2}); }) ==
        "convoy: dataset 'empty': RowShape::features is 0; set .features to the number of values "
        "in a row");
  CHECK(message_of<DatasetError>([] { DatasetBuilder("neither", {.features = 2}); }) ==
        "convoy: dataset 'neither': RowShape has classes 0 and targets 0; set exactly one: "
        ".classes for labels, .targets for regression values");
  CHECK(message_of<DatasetError>(
            [] { DatasetBuilder("both", {.features = 2, .classes = 2, .targets = 1}); }) ==
        "convoy: dataset 'both': RowShape has classes 2 and targets 1; set exactly one: "
        ".classes for labels, .targets for regression values");
}

TEST_CASE("building with no rows is refused") {
  DatasetBuilder builder{"nothing", {.features = 2, .classes = 2}};
  auto const expected =
      "convoy: dataset 'nothing': no rows were added; add at least one with add(row, label) or "
      "add(row, targets) before build()";
  CHECK(message_of<DatasetError>([&] { (void)builder.build(); }) == expected);
  CHECK(message_of<DatasetError>([&] { (void)std::move(builder).build(); }) == expected);
}

}  // namespace test_io_dataset_builder
