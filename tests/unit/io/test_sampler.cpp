// Tests for io/sampler.hpp and shard() in io/dataset.hpp: R replicas together see exactly the rows
// one replica sees with the same global batch, each epoch is a permutation, the rows are a pure
// function of (seed, step), and shards are equal, interleaved and drop the remainder.
// sampler.hpp uses std::copy_n without including <algorithm>; include it first until it does.
#include <doctest/doctest.h>

#include <algorithm>
#include <convoy/io/dataset.hpp>
#include <convoy/io/sampler.hpp>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace test_io_sampler {

namespace {

using convoy::DatasetError;
using convoy::io::BatchBuffer;
using convoy::io::Dataset;
using convoy::io::Sampler;

// `rows` examples whose every field encodes the row: features {r, r + 0.5, -r}, label r, targets
// {2r, 2r + 1}. So a gathered batch can be traced back to its rows and checked for consistency.
Dataset numbered(std::size_t rows) {
  Dataset data{.name = "numbered", .cols = 3, .target_cols = 2};
  for (std::size_t r = 0; r < rows; ++r) {
    auto const f = static_cast<float>(r);
    data.features.insert(data.features.end(), {f, f + 0.5f, -f});
    data.labels.push_back(static_cast<std::int32_t>(r));
    data.targets.insert(data.targets.end(), {2 * f, 2 * f + 1});
  }
  return data;
}

// The rows of `batch`, read from its labels, after checking that features and targets agree.
std::vector<std::int32_t> rows_of(convoy::Batch const& batch) {
  REQUIRE(batch.labels.size() == batch.rows);
  REQUIRE(batch.features.size() == batch.rows * 3);
  REQUIRE(batch.targets.size() == batch.rows * 2);
  std::vector<std::int32_t> out(batch.labels.begin(), batch.labels.end());
  for (std::size_t k = 0; k < batch.rows; ++k) {
    auto const f = static_cast<float>(out[k]);
    CHECK(batch.features[3 * k] == f);
    CHECK(batch.features[3 * k + 1] == f + 0.5f);
    CHECK(batch.features[3 * k + 2] == -f);
    CHECK(batch.targets[2 * k] == 2 * f);
    CHECK(batch.targets[2 * k + 1] == 2 * f + 1);
  }
  return out;
}

std::vector<std::int32_t> step_rows(Sampler const& sampler, Dataset const& data,
                                    std::size_t replica, std::int64_t step) {
  BatchBuffer buf;
  return rows_of(sampler.fill(data, replica, step, buf));
}

std::string sampler_error(std::size_t rows, std::size_t batch, std::size_t replicas) {
  try {
    Sampler sampler(rows, batch, replicas, 1);
  } catch (DatasetError const& e) {
    return e.what();
  }
  return "";
}

bool contains(std::string const& text, std::string const& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("R replicas at step s together see the rows of one replica with the same global batch") {
  auto const data = numbered(103);
  std::size_t const batch = 12;
  Sampler const single(data.rows(), batch, 1, 42);
  for (std::size_t replicas : {1u, 2u, 3u, 4u, 6u, 12u}) {
    CAPTURE(replicas);
    Sampler const sampler(data.rows(), batch, replicas, 42);
    CHECK(sampler.steps_per_epoch() == single.steps_per_epoch());
    CHECK(sampler.rows_per_replica() == batch / replicas);
    // One buffer per replica, reused across steps and an epoch boundary, as a trainer would.
    std::vector<BatchBuffer> buffers(replicas);
    BatchBuffer reference;
    auto const steps = static_cast<std::int64_t>(2 * sampler.steps_per_epoch() + 3);
    for (std::int64_t step = 0; step < steps; ++step) {
      CAPTURE(step);
      std::vector<std::int32_t> together;
      for (std::size_t r = 0; r < replicas; ++r) {
        auto const part = rows_of(sampler.fill(data, r, step, buffers[r]));
        CHECK(part.size() == batch / replicas);
        together.insert(together.end(), part.begin(), part.end());
      }
      CHECK(together == rows_of(single.fill(data, 0, step, reference)));
    }
  }
}

TEST_CASE("every row appears exactly once per epoch") {
  auto const data = numbered(120);
  Sampler const sampler(data.rows(), 24, 4, 7);
  REQUIRE(sampler.steps_per_epoch() == 5);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    CAPTURE(epoch);
    std::vector<int> seen(data.rows(), 0);
    for (std::int64_t s = 0; s < 5; ++s) {
      for (std::size_t r = 0; r < 4; ++r) {
        for (auto row : step_rows(sampler, data, r, epoch * 5 + s))
          ++seen[static_cast<std::size_t>(row)];
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

TEST_CASE("with a remainder, an epoch still never repeats a row") {
  auto const data = numbered(107);  // 10 steps of 10: 7 rows left out of each epoch
  Sampler const sampler(data.rows(), 10, 2, 3);
  REQUIRE(sampler.steps_per_epoch() == 10);
  std::multiset<std::int32_t> seen;
  for (std::int64_t s = 0; s < 10; ++s) {
    for (std::size_t r = 0; r < 2; ++r) {
      for (auto row : step_rows(sampler, data, r, s)) seen.insert(row);
    }
  }
  CHECK(seen.size() == 100);
  CHECK(std::set<std::int32_t>(seen.begin(), seen.end()).size() == 100);
}

TEST_CASE("two epochs have different orders") {
  auto const data = numbered(64);
  Sampler const sampler(data.rows(), 8, 2, 11);
  auto epoch_order = [&](std::int64_t epoch) {
    std::vector<std::int32_t> order;
    for (std::int64_t s = 0; s < 8; ++s) {
      for (std::size_t r = 0; r < 2; ++r) {
        auto const part = step_rows(sampler, data, r, epoch * 8 + s);
        order.insert(order.end(), part.begin(), part.end());
      }
    }
    return order;
  };
  auto const first = epoch_order(0);
  auto const second = epoch_order(1);
  CHECK(first != second);
  CHECK(std::multiset<std::int32_t>(first.begin(), first.end()) ==
        std::multiset<std::int32_t>(second.begin(), second.end()));
}

TEST_CASE("the rows of a step depend only on (seed, step)") {
  auto const data = numbered(50);
  Sampler const a(data.rows(), 10, 2, 123);
  Sampler const same(data.rows(), 10, 2, 123);
  Sampler const other(data.rows(), 10, 2, 124);

  // Same seed: same rows, whatever the buffer saw before (resuming needs only the step).
  BatchBuffer warm;
  (void)a.fill(data, 1, 13, warm);  // caches epoch 2's permutation
  for (std::int64_t step : {0, 4, 5, 17, 3}) {
    CAPTURE(step);
    for (std::size_t r = 0; r < 2; ++r) {
      auto const fresh = step_rows(same, data, r, step);
      CHECK(rows_of(a.fill(data, r, step, warm)) == fresh);
    }
  }

  // Another seed: another order (over a whole epoch, so a chance match of one batch cannot pass).
  std::vector<std::int32_t> mine, theirs;
  for (std::int64_t s = 0; s < 5; ++s) {
    for (std::size_t r = 0; r < 2; ++r) {
      auto const x = step_rows(a, data, r, s);
      auto const y = step_rows(other, data, r, s);
      mine.insert(mine.end(), x.begin(), x.end());
      theirs.insert(theirs.end(), y.begin(), y.end());
    }
  }
  CHECK(mine != theirs);
}

TEST_CASE("a gather on several threads fills the same rows as one on one thread") {
  auto const data = numbered(1000);
  Sampler const sampler(data.rows(), 300, 2, 7);
  BatchBuffer parallel;
  for (std::int64_t step : {0, 1, 2, 5, 3}) {
    for (std::size_t r = 0; r < 2; ++r) {
      CAPTURE(step);
      CAPTURE(r);
      auto const one = step_rows(sampler, data, r, step);
      CHECK(rows_of(sampler.fill(data, r, step, parallel, 4)) == one);
    }
  }
}

TEST_CASE("the data planned from the first origin is the run's own, step for step") {
  auto const data = numbered(107);
  Sampler const sampler(data.rows(), 12, 3, 5);
  // A group re-formed at once with its own size and batch goes on where it stood, too.
  auto const again = sampler.replan({}, 13, 3, false);
  CHECK(again.row == 13 * 12 - 8 * 12 + 107);  // epoch 1 (8 steps of 12 each), its 5th step
  BatchBuffer a, b, c;
  for (std::int64_t step = 0; step < 30; ++step) {
    for (std::size_t r = 0; r < 3; ++r) {
      CAPTURE(step);
      CAPTURE(r);
      auto const own = step_rows(sampler, data, r, step);
      CHECK(rows_of(sampler.fill_at(data, r, step, {}, a)) == own);
      if (step >= 13) CHECK(rows_of(sampler.fill_at(data, r, step, again, b)) == own);
      CHECK(rows_of(sampler.fill_at(data, r, step, sampler.replan({}, step, 3, true), c)) == own);
    }
  }
}

namespace {

// Trains through `changes` (global step -> replicas from then on) and checks the data the
// re-formed groups draw: within an epoch no row twice, each step's batch split whole over its
// replicas, and an epoch left only with a tail shorter than the batch that moved past it.
void check_regrouped_epochs(Sampler const& sampler, Dataset const& data,
                            std::vector<std::pair<std::int64_t, std::size_t>> const& changes,
                            bool keep_global_batch, std::size_t want_batch_after_first) {
  convoy::DataOrigin origin;
  std::size_t next = 0;
  std::vector<int> seen(data.rows(), 0);
  std::int64_t epoch = 0;
  std::size_t epochs_checked = 0;
  std::vector<BatchBuffer> buffers(8);
  for (std::int64_t step = 0; step < 60; ++step) {
    CAPTURE(step);
    if (next < changes.size() && changes[next].first == step) {
      origin = sampler.replan(origin, step, changes[next].second, keep_global_batch);
      ++next;
      if (next == 1) CHECK(static_cast<std::size_t>(origin.batch) == want_batch_after_first);
    }
    auto const place = sampler.place(origin, step);
    if (place.epoch != epoch) {
      // The epoch ended: every row but a tail shorter than this batch was drawn, once.
      auto const drawn = static_cast<std::size_t>(std::count(seen.begin(), seen.end(), 1));
      CHECK(data.rows() - drawn < place.batch);
      CHECK(place.epoch == epoch + 1);
      CHECK(place.offset == 0);
      std::fill(seen.begin(), seen.end(), 0);
      epoch = place.epoch;
      ++epochs_checked;
    }
    std::size_t rows = 0;
    for (std::size_t r = 0; r < place.replicas; ++r) {
      auto const part = rows_of(sampler.fill_at(data, r, step, origin, buffers[r]));
      CHECK(part.size() + 1 >= place.batch / place.replicas);
      rows += part.size();
      for (auto row : part) CHECK(++seen[static_cast<std::size_t>(row)] == 1);
    }
    CHECK(rows == place.batch);
  }
  CHECK(next == changes.size());
  CHECK(epochs_checked >= 4);
}

}  // namespace

TEST_CASE("a group re-formed mid-epoch goes on from the next row: no row twice, none skipped") {
  auto const data = numbered(107);
  Sampler const sampler(data.rows(), 24, 4, 9);
  // One of 4 lost at step 3 (mid-epoch), taken back at step 7, two lost at step 20 and back one
  // by one, a change at an epoch's very end (step 26 of 4 steps an epoch) among them.
  std::vector<std::pair<std::int64_t, std::size_t>> const changes{{3, 3},  {7, 4},  {20, 2},
                                                                  {21, 3}, {26, 4}, {40, 3}};
  SUBCASE("each replica's batch kept: the global batch follows the group") {
    check_regrouped_epochs(sampler, data, changes, false, 18);
  }
  SUBCASE("the global batch kept: each replica's share follows the group") {
    check_regrouped_epochs(sampler, data, changes, true, 24);
    // 24 rows over 5: as even as they go.
    auto const five = sampler.replan({}, 2, 5, true);
    auto const place = sampler.place(five, 2);
    for (std::size_t r = 0; r < 5; ++r)
      CHECK(place.first(r + 1) - place.first(r) == (r == 0 ? 4u : 5u));
  }
}

TEST_CASE("a re-formed group's data refuses what it cannot hold, naming it") {
  auto const data = numbered(30);
  Sampler const sampler(data.rows(), 12, 2, 1);
  CHECK_THROWS_AS(sampler.replan({}, 3, 6, false), DatasetError);  // 36 rows of 30
  auto const two = sampler.replan({}, 3, 2, false);
  CHECK_THROWS_AS(sampler.place(two, 2), DatasetError);  // before its origin
  BatchBuffer buf;
  CHECK_THROWS_AS(sampler.fill_at(data, 2, 3, two, buf), DatasetError);
  try {
    (void)sampler.replan({}, 3, 6, false);
  } catch (DatasetError const& e) {
    CHECK(contains(e.what(), "a group of 6 replicas cannot go on with a batch of 36 rows of 30"));
  }
}

TEST_CASE("Sampler refuses a batch that does not split over the replicas, suggesting a multiple") {
  auto const message = sampler_error(100, 10, 4);
  CHECK(contains(message, "batch of 10"));
  CHECK(contains(message, "4 replicas"));
  CHECK(contains(message, "multiple of 4"));

  CHECK_THROWS_AS(Sampler(100, 0, 1, 1), DatasetError);
  CHECK_THROWS_AS(Sampler(100, 8, 0, 1), DatasetError);
  CHECK(contains(sampler_error(10, 12, 3), "larger than the dataset (10 rows)"));
  CHECK_NOTHROW(Sampler(12, 12, 3, 1));
}

TEST_CASE("shard() cuts equal, interleaved shards and drops the remainder") {
  auto const data = numbered(11);
  std::size_t const count = 3;  // 11 = 3 x 3 + 2: rows 9 and 10 are dropped
  std::set<std::int32_t> covered;
  for (std::size_t index = 0; index < count; ++index) {
    CAPTURE(index);
    auto const part = convoy::io::shard(data, index, count);
    CHECK(part.cols == data.cols);
    CHECK(part.target_cols == data.target_cols);
    REQUIRE(part.rows() == 3);
    CHECK(contains(part.name, "numbered"));
    auto const rows = rows_of(part.slice(0, part.rows()));
    std::vector<std::int32_t> expected;
    for (std::size_t k = 0; k < 3; ++k)
      expected.push_back(static_cast<std::int32_t>(index + k * count));
    CHECK(rows == expected);
    covered.insert(rows.begin(), rows.end());
  }
  CHECK(covered.size() == 9);
  CHECK(covered.count(9) == 0);
  CHECK(covered.count(10) == 0);
}

TEST_CASE("shard() keeps datasets without labels or targets that way") {
  Dataset data{.name = "features-only", .cols = 2, .features = {0, 1, 2, 3, 4, 5, 6, 7}};
  auto const part = convoy::io::shard(data, 1, 2);
  CHECK(part.features == std::vector<float>{2, 3, 6, 7});
  CHECK(part.labels.empty());
  CHECK(part.targets.empty());
}

TEST_CASE("shard() refuses more shards than rows, and shards that do not exist") {
  auto const data = numbered(3);
  std::string message;
  try {
    (void)convoy::io::shard(data, 0, 4);
  } catch (DatasetError const& e) {
    message = e.what();
  }
  CHECK(contains(message, "'numbered'"));
  CHECK(contains(message, "3 rows"));
  CHECK(contains(message, "4 shards"));

  CHECK_THROWS_AS((void)convoy::io::shard(data, 3, 3), DatasetError);
  CHECK_THROWS_AS((void)convoy::io::shard(data, 0, 0), DatasetError);
  CHECK_NOTHROW((void)convoy::io::shard(data, 2, 3));
}

}  // namespace test_io_sampler
