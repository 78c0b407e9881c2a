// A parameter-server worker's batch: the rows of the slices of the data ps:0 gave it
// (data_slices.hpp), slice k being replica k % N's share of global batch k / N in the plan for the
// cluster's N workers. One slice is the plan's own batch; several (the global batch kept by a
// smaller group) are gathered one after the other into the worker's buffer and trained as one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../../core/batch.hpp"
#include "../../core/error.hpp"
#include "../../io/sampler.hpp"
#include "../../train/step.hpp"

namespace convoy::comm::zmq_ps {

/// The rows of `slices` for worker `worker` of `workers`, valid until the next call with
/// `joined`. Throws ProtocolError when ps:0 gave it none, or a negative one.
inline Batch slice_batch(RunPlan const& plan, std::vector<std::int64_t> const& slices,
                         std::size_t worker, std::size_t workers, io::BatchBuffer& joined) {
  for (auto const s : slices) {
    if (s < 0)
      throw ProtocolError("convoy: ps:0 gave worker " + std::to_string(worker) + " slice " +
                          std::to_string(s) + " of the data");
  }
  if (slices.empty()) {
    throw ProtocolError("convoy: ps:0 gave worker " + std::to_string(worker) +
                        " no slice of the data to train on");
  }
  auto const n = static_cast<std::int64_t>(workers);
  auto const at = [&](std::int64_t s) {
    return plan.batch(static_cast<std::size_t>(s % n), s / n);
  };
  if (slices.size() == 1) return at(slices[0]);
  joined.features.clear();
  joined.labels.clear();
  joined.targets.clear();
  std::size_t rows = 0;
  for (auto const s : slices) {
    Batch const part = at(s);
    joined.features.insert(joined.features.end(), part.features.begin(), part.features.end());
    joined.labels.insert(joined.labels.end(), part.labels.begin(), part.labels.end());
    joined.targets.insert(joined.targets.end(), part.targets.begin(), part.targets.end());
    rows += part.rows;
  }
  return joined.view(rows);
}

}  // namespace convoy::comm::zmq_ps
