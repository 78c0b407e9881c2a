// Driving a strategy directly, without a Trainer: Feed hands each replica its slice of every global
// batch (owning the buffers, so an abandoned replica still reads live memory), and plan() builds a
// RunPlan to a global step.
#pragma once

#include <convoy/io/dataset.hpp>
#include <convoy/io/sampler.hpp>
#include <convoy/train/step.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace convoy::testing {

struct Feed {
  io::Dataset const* data;
  io::Sampler sampler;
  std::shared_ptr<std::vector<io::BatchBuffer>> buffers;

  Feed(io::Dataset const& d, std::size_t batch, std::size_t replicas, std::uint64_t seed = 3)
      : data(&d),
        sampler(d.rows(), batch, replicas, seed),
        buffers(std::make_shared<std::vector<io::BatchBuffer>>(replicas)) {}

  Batch operator()(std::size_t replica, std::int64_t local_step) const {
    return sampler.fill(*data, replica, local_step, (*buffers)[replica]);
  }
};

inline RunPlan plan(std::int64_t until, std::function<Batch(std::size_t, std::int64_t)> batch,
                    std::function<bool(StepReport const&)> after = {}) {
  RunPlan p;
  p.until = until;
  p.batch = std::move(batch);
  p.after_step = std::move(after);
  return p;
}

}  // namespace convoy::testing
