// Tests for io/prefetch.hpp: whatever order the steps are asked in (each in turn, a step again, a
// jump, another origin, another replica), Prefetch hands out the rows Sampler::fill_at gathers, and
// a batch stays intact while the next one is gathered into the other buffer.
#include <doctest/doctest.h>

#include <convoy/core/error.hpp>
#include <convoy/core/snapshot.hpp>
#include <convoy/io/dataset.hpp>
#include <convoy/io/prefetch.hpp>
#include <convoy/io/sampler.hpp>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <string>
#include <vector>

namespace test_io_prefetch {

namespace {

using convoy::DataOrigin;
using convoy::io::BatchBuffer;
using convoy::io::Dataset;
using convoy::io::Prefetch;
using convoy::io::Sampler;

// Row r: features {r, -r}, label r.
Dataset numbered(std::size_t rows) {
  Dataset data{.name = "numbered", .cols = 2};
  for (std::size_t r = 0; r < rows; ++r) {
    auto const f = static_cast<float>(r);
    data.features.insert(data.features.end(), {f, -f});
    data.labels.push_back(static_cast<std::int32_t>(r));
  }
  return data;
}

struct Rows {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  friend bool operator==(Rows const&, Rows const&) = default;
};
Rows rows_of(convoy::Batch const& b) {
  return {{b.features.begin(), b.features.end()}, {b.labels.begin(), b.labels.end()}};
}

}  // namespace

TEST_CASE("Prefetch hands out the sampler's rows whatever step, origin and replica are asked") {
  Dataset const data = numbered(1000);
  Sampler const sampler(data.rows(), 64, 2, 7);
  Prefetch prefetch(sampler, data, std::pmr::new_delete_resource(), 2);
  auto const expected = [&](std::size_t replica, std::int64_t step, DataOrigin const& origin) {
    BatchBuffer buf;
    return rows_of(sampler.fill_at(data, replica, step, origin, buf));
  };
  DataOrigin const start{};
  DataOrigin const regrouped = sampler.replan(start, 20, 4, false);
  struct Ask {
    std::size_t replica;
    std::int64_t step;
    DataOrigin origin;
  };
  // In turn across epochs (15 steps of 64 rows an epoch), then the same step again, a jump back,
  // a jump ahead, the other replica, and a group re-formed at step 20 with 4 replicas.
  std::vector<Ask> asks;
  for (std::int64_t s = 0; s < 40; ++s) asks.push_back({0, s, start});
  asks.push_back({0, 39, start});
  asks.push_back({0, 3, start});
  asks.push_back({0, 4, start});
  asks.push_back({0, 90, start});
  asks.push_back({1, 91, start});
  for (std::int64_t s = 20; s < 30; ++s) asks.push_back({3, s, regrouped});
  for (auto const& ask : asks) {
    CAPTURE(ask.replica);
    CAPTURE(ask.step);
    auto const batch = prefetch.next(ask.replica, ask.step, ask.origin);
    auto const held = rows_of(batch);
    CHECK(held == expected(ask.replica, ask.step, ask.origin));
    // The next step is gathered into the other buffer meanwhile: this one does not change.
    prefetch.settle();
    CHECK(rows_of(batch) == held);
  }
}

TEST_CASE("Prefetch throws the sampler's error for what was asked, and goes on after it") {
  Dataset const data = numbered(100);
  Sampler const sampler(data.rows(), 20, 2, 7);
  Prefetch prefetch(sampler, data, std::pmr::new_delete_resource(), 1);
  CHECK(prefetch.next(0, 0, {}).rows == 10);
  CHECK_THROWS_AS(prefetch.next(5, 1, {}), convoy::DatasetError);  // no replica 5 of 2
  CHECK(prefetch.next(1, 1, {}).rows == 10);
}

}  // namespace test_io_prefetch
