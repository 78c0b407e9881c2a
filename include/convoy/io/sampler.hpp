// Sampler: which rows each replica trains on at each step. A global batch of B rows is drawn from a
// per-epoch permutation of the dataset and replica r of R takes its r-th contiguous B/R rows. So
// synchronous training on R replicas sees exactly the rows one replica sees with batch B, every
// replica gets the same number of rows at every step (none runs dry), and the rows of any step are
// a pure function of (seed, step): resuming from a checkpoint needs only the step.
//
// A group that re-forms mid-run (comm::Gloo) goes on from a DataOrigin: the row after the last
// step's batch, with a global batch for its new size. Within an epoch no row is then drawn twice,
// and none is skipped but the epoch's tail, shorter than a batch, as without a change.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../core/batch.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "dataset.hpp"

namespace convoy::io {

/// One replica's gathered rows; reused from step to step so steady-state training allocates
/// nothing. The rows live in `memory`: page-locked host memory for a replica on a GPU
/// (Strategy::batch_memory), which the device copies in by DMA at several times the speed of a
/// copy from pageable memory.
struct BatchBuffer {
  BatchBuffer() = default;
  explicit BatchBuffer(std::pmr::memory_resource* memory)
      : features(memory), labels(memory), targets(memory) {}

  std::pmr::vector<float> features;
  std::pmr::vector<std::int32_t> labels;
  std::pmr::vector<float> targets;
  std::vector<std::uint32_t> permutation;  ///< cached permutation of `epoch`
  std::int64_t epoch = -1;

  Batch view(std::size_t rows) const { return Batch{features, labels, targets, rows}; }
};

class Sampler {
 public:
  /// Throws DatasetError when the batch does not divide over the replicas or exceeds the data.
  Sampler(std::size_t rows, std::size_t global_batch, std::size_t replicas, std::uint64_t seed)
      : rows_(rows), batch_(global_batch), replicas_(replicas), seed_(seed) {
    if (replicas == 0 || global_batch == 0 || global_batch % replicas != 0) {
      throw DatasetError("convoy: a batch of " + std::to_string(global_batch) +
                         " does not split evenly over " + std::to_string(replicas) +
                         " replicas; pick a batch size that is a multiple of " +
                         std::to_string(replicas));
    }
    if (rows >= (std::size_t{1} << 32)) {
      throw DatasetError("convoy: the sampler orders up to 2^32 - 1 rows; shard a dataset of " +
                         std::to_string(rows) + " rows first");
    }
    if (global_batch > rows) {
      throw DatasetError("convoy: a batch of " + std::to_string(global_batch) +
                         " is larger than the dataset (" + std::to_string(rows) + " rows)");
    }
  }

  std::size_t steps_per_epoch() const { return rows_ / batch_; }
  std::size_t rows_per_replica() const { return batch_ / replicas_; }

  /// Where a global step's batch lies: its epoch, the offset of its first row in that epoch's
  /// order, its rows and the replicas it is split over.
  struct Place {
    std::int64_t epoch = 0;
    std::size_t offset = 0;
    std::size_t batch = 0;
    std::size_t replicas = 0;
    /// Replica r's rows: [first(r), first(r + 1)) of the batch, as even as the rows allow.
    std::size_t first(std::size_t replica) const { return replica * batch / replicas; }
  };

  /// Global step `step`'s place under `origin`: the origin's batches one after the other, and a
  /// batch that no longer fits in its epoch starts the next one. Throws DatasetError for a step
  /// before the origin or an origin this data cannot hold.
  Place place(DataOrigin const& origin, std::int64_t step) const {
    Place p{.epoch = 0, .offset = 0, .batch = batch_of(origin), .replicas = replicas_of(origin)};
    if (step < origin.step || origin.row < 0 || p.batch > rows_ || p.batch < p.replicas) {
      throw DatasetError("convoy: the data planned from global step " +
                         std::to_string(origin.step) + " (row " + std::to_string(origin.row) +
                         ", " + std::to_string(p.batch) + " rows over " +
                         std::to_string(p.replicas) + " replicas) cannot give global step " +
                         std::to_string(step) + " of " + std::to_string(rows_) + " rows");
    }
    auto const rows = static_cast<std::int64_t>(rows_);
    auto const batch = static_cast<std::int64_t>(p.batch);
    auto const start_epoch = origin.row / rows;
    auto const start_offset = origin.row % rows;
    auto const left_in_first = (rows - start_offset) / batch;
    auto const j = step - origin.step;
    if (j < left_in_first) {
      p.epoch = start_epoch;
      p.offset = static_cast<std::size_t>(start_offset + j * batch);
    } else {
      auto const per_epoch = rows / batch;
      auto const later = j - left_in_first;
      p.epoch = start_epoch + 1 + later / per_epoch;
      p.offset = static_cast<std::size_t>((later % per_epoch) * batch);
    }
    return p;
  }

  /// Where a group going on at global step `step` after `from` starts: the row after the last
  /// step's batch, of the epochs' orders laid end to end.
  std::int64_t row_at(DataOrigin const& from, std::int64_t step) const {
    if (step <= from.step) return from.row;
    auto const last = place(from, step - 1);
    return last.epoch * static_cast<std::int64_t>(rows_) +
           static_cast<std::int64_t>(last.offset + last.batch);
  }

  /// The origin a group of `replicas` goes on from at global step `step`, after `from`: its first
  /// row follows the last step's batch; its batch keeps each replica's rows (the default, as
  /// Horovod does: the global batch follows the group) or, with `keep_global_batch`, the global
  /// batch, split as evenly as the rows allow.
  DataOrigin replan(DataOrigin const& from, std::int64_t step, std::size_t replicas,
                    bool keep_global_batch) const {
    DataOrigin next{.step = step, .row = row_at(from, step), .batch = 0, .replicas = 0};
    std::size_t const batch =
        keep_global_batch ? batch_of(from) : batch_of(from) / replicas_of(from) * replicas;
    if (replicas == 0 || batch > rows_ || batch < replicas) {
      throw DatasetError("convoy: a group of " + std::to_string(replicas) +
                         " replicas cannot go on with a batch of " + std::to_string(batch) +
                         " rows of " + std::to_string(rows_));
    }
    next.batch = static_cast<std::int64_t>(batch);
    next.replicas = static_cast<std::int64_t>(replicas);
    return next;
  }

  /// Gathers replica `replica`'s slice of global batch number `step` (0-based) into `buf`; returns
  /// the view. Synchronous training passes the step every replica is at; asynchronous training
  /// passes each replica's own step count, so every replica still walks its own slice of the data.
  /// `threads` > 1 gathers the rows on that many OpenMP threads (the same bytes): for a replica on
  /// a GPU, whose host cores are otherwise idle and whose step is shorter than the gather (4096
  /// Fashion-MNIST rows: about 4 ms on one core of the CI machines). Throws DatasetError for a
  /// replica, step or dataset this sampler was not made for.
  Batch fill(Dataset const& data, std::size_t replica, std::int64_t step, BatchBuffer& buf,
             int threads = 1) const {
    check(data);  // sizes only: labels and targets cover every row
    if (replica >= replicas_ || step < 0 || data.rows() != rows_) {
      throw DatasetError("convoy: sampler for " + std::to_string(rows_) + " rows and " +
                         std::to_string(replicas_) + " replicas asked for replica " +
                         std::to_string(replica) + ", step " + std::to_string(step) + " of '" +
                         data.name + "' (" + std::to_string(data.rows()) + " rows)");
    }
    return gather(data, place(DataOrigin{}, step), replica, buf, threads);
  }

  /// As fill, replica `replica` of `origin`'s replicas at global step `step` of the data planned
  /// from `origin` (a group re-formed mid-run).
  Batch fill_at(Dataset const& data, std::size_t replica, std::int64_t step,
                DataOrigin const& origin, BatchBuffer& buf, int threads = 1) const {
    check(data);
    auto const p = place(origin, step);
    if (replica >= p.replicas || data.rows() != rows_) {
      throw DatasetError("convoy: sampler for " + std::to_string(rows_) + " rows and " +
                         std::to_string(p.replicas) + " replicas asked for replica " +
                         std::to_string(replica) + " of '" + data.name + "' (" +
                         std::to_string(data.rows()) + " rows)");
    }
    return gather(data, p, replica, buf, threads);
  }

 private:
  // An origin's batch and replicas; 0 is the run's own.
  std::size_t batch_of(DataOrigin const& o) const {
    return o.batch > 0 ? static_cast<std::size_t>(o.batch) : batch_;
  }
  std::size_t replicas_of(DataOrigin const& o) const {
    return o.replicas > 0 ? static_cast<std::size_t>(o.replicas) : replicas_;
  }

  Batch gather(Dataset const& data, Place const& p, std::size_t replica, BatchBuffer& buf,
               int threads) const {
    if (buf.epoch != p.epoch) {
      permute(p.epoch, buf.permutation);
      buf.epoch = p.epoch;
    }
    std::size_t const first = p.offset + p.first(replica);
    std::size_t const n = p.first(replica + 1) - p.first(replica);
    buf.features.resize(n * data.cols);
    buf.labels.resize(data.labels.empty() ? 0 : n);
    buf.targets.resize(data.targets.empty() ? 0 : n * data.target_cols);
    auto const gather_row = [&](std::size_t k) {
      std::size_t const row = buf.permutation[first + k];
      std::copy_n(data.features.data() + row * data.cols, data.cols,
                  buf.features.data() + k * data.cols);
      if (!buf.labels.empty()) buf.labels[k] = data.labels[row];
      if (!buf.targets.empty()) {
        std::copy_n(data.targets.data() + row * data.target_cols, data.target_cols,
                    buf.targets.data() + k * data.target_cols);
      }
    };
    if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::size_t k = 0; k < n; ++k) gather_row(k);
    } else {
      for (std::size_t k = 0; k < n; ++k) gather_row(k);
    }
    return buf.view(n);
  }

  // Fisher-Yates on mt19937_64's raw output, which the standard fixes bit for bit, so the order is
  // the same with every standard library (std::shuffle's is not).
  void permute(std::int64_t epoch, std::vector<std::uint32_t>& out) const {
    out.resize(rows_);
    std::iota(out.begin(), out.end(), 0u);
    std::mt19937_64 engine(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch));
    for (std::size_t i = rows_ - 1; i > 0; --i) {
      std::swap(out[i], out[engine() % (i + 1)]);
    }
  }

  std::size_t rows_, batch_, replicas_;
  std::uint64_t seed_;
};

}  // namespace convoy::io
