// Training speed on one GPU: the Fashion-MNIST MLP (784-500-10, as bench_training) at batch 100 and
// at batch 4096, on synthetic data of that shape (constant pixels, labels 0..9 in turn; the speed
// does not depend on the values), with SGD. Each step is what the engines run on one replica:
// nn::Mlp::forward_backward in exec::Cuda, the exchange, then optim::Optimizer::apply. Its time is
// split, with CUDA events on the context's stream, into
//   compute    forward_backward (the batch's copy to the device included; it returns once the loss
//              is summed, with the backward kernels queued),
//   exchange   what the gradient exchange adds after that: none under comm::InProcess with one
//              replica; under comm::Nccl (one rank, where convoy::nccl is built) the bucketed
//              allreduce as CollectiveReplica runs it, buckets started during the backward pass on
//              the exchange's stream, until the compute stream has them all,
//   optimizer  Optimizer::apply (which waits for the stream before it returns),
//   other      the rest of the step's wall time on the stream: the gaps between the phases.
// The floor, measured in the same run and the same way: the cuBLAS SGEMMs of the same shapes
// alone, for each Dense layer y = x W (rows x in by in x out), dW = x^T dy and, past the first
// layer (the model computes no gradient for its input), dx = dy W^T, on non-zero matrices. Beside
// it, also in the same run, the batch's copy to the device alone (exec::Cuda::stage): "pageable",
// from a std::vector, and "locked", from the page-locked memory the Trainer gathers a GPU
// replica's batches in (exec::Cuda::batch_memory), where the timed steps read theirs too. Aim: a step within 1.3x the
// floor at batch 4096. Kernel launches per layer are not counted: a step synchronizes for its loss,
// so it cannot be captured into a CUDA graph, and counting them otherwise needs a profiler.
//
// Run: build/benchmarks/bench_gpu_training [--steps N] [--warmup N] [--batch N] [--model WIDTHS]
//      [--device N] [--quick] [--csv PATH] [--json PATH]; --help lists the options. Without a CUDA
//      device it says so and exits 77.
#include <algorithm>
#include <charconv>
#include <concepts>
#include <convoy/comm/nccl.hpp>
#include <convoy/core/batch.hpp>
#include <convoy/core/error.hpp>
#include <convoy/exec/cuda.hpp>
#include <convoy/math/cuda_compiled.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/optim/optimizer.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory_resource>
#include <string>
#include <string_view>
#include <vector>
#if CONVOY_WITH_NCCL
#include <convoy/comm/buckets/bucket_plan.hpp>
#include <convoy/comm/buckets/bucket_reducer.hpp>
#include <convoy/comm/nccl/bucket_allreduce.hpp>
#include <convoy/comm/nccl/communicator.hpp>
#endif

#include "options.hpp"
#include "report.hpp"

using namespace convoy;

namespace {

using exec::cuda::check;

// Timing events, created on the context's device and destroyed with this.
class Events {
 public:
  Events(exec::Cuda const& ctx, std::size_t count) : device_(ctx.device()), events_(count) {
    for (auto& e : events_) check(cudaEventCreate(&e), "cudaEventCreate", device_);
  }
  ~Events() {
    for (auto e : events_) (void)cudaEventDestroy(e);
  }
  Events(Events const&) = delete;
  Events& operator=(Events const&) = delete;

  void record(std::size_t i, cudaStream_t stream) {
    check(cudaEventRecord(events_[i], stream), "cudaEventRecord", device_);
  }
  /// Seconds from event `from` to event `to` (both done).
  double seconds(std::size_t from, std::size_t to) const {
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, events_[from], events_[to]), "cudaEventElapsedTime", device_);
    return static_cast<double>(ms) / 1e3;
  }

 private:
  int device_;
  std::vector<cudaEvent_t> events_;
};

// Mean seconds per step of each phase.
struct Phases {
  double step = 0, compute = 0, exchange = 0, optimizer = 0, other = 0;
};

// comm::InProcess with one replica: nothing to exchange.
struct NoExchange {};

// `steps` timed steps after `warmup` untimed ones, of the model on `batch` in `ctx`, with
// `exchange` between the backward pass and the update.
template <class Exchange>
Phases time_steps(nn::Mlp& model, exec::Cuda const& ctx, Batch const& batch,
                  optim::Optimizer const& sgd, optim::OptimizerState& state, Exchange& exchange,
                  int warmup, int steps) {
  auto& vars = model.variables();
  cudaStream_t const stream = ctx.stream();
  std::size_t const per_step = 4;  // before compute, after compute, after exchange, after update
  Events events(ctx, per_step * static_cast<std::size_t>(steps));
  std::int64_t update = state.updates;
  for (int s = -warmup; s < steps; ++s) {
    bool const timed = s >= 0;
    std::size_t const e = timed ? per_step * static_cast<std::size_t>(s) : 0;
    if (timed) events.record(e, stream);
    if constexpr (std::same_as<Exchange, NoExchange>) {
      (void)model.forward_backward(batch, ctx);
      if (timed) events.record(e + 1, stream);
    } else {
      exchange.reducer.begin_step();
      (void)model.forward_backward(batch, ctx, exchange.reducer.hook());
      if (timed) events.record(e + 1, stream);
      exchange.finish(vars.size());
    }
    if (timed) events.record(e + 2, stream);
    sgd.apply(ctx, vars.weights(), vars.grads(), state, 0, 1.0f, ++update);
    if (timed) events.record(e + 3, stream);
  }
  state.updates = update;
  ctx.synchronize();
  Phases p;
  for (int s = 0; s < steps; ++s) {
    std::size_t const e = per_step * static_cast<std::size_t>(s);
    p.compute += events.seconds(e, e + 1) / steps;
    p.exchange += events.seconds(e + 1, e + 2) / steps;
    p.optimizer += events.seconds(e + 2, e + 3) / steps;
  }
  p.step = events.seconds(0, per_step * static_cast<std::size_t>(steps) - 1) / steps;
  p.other = p.step - p.compute - p.exchange - p.optimizer;
  return p;
}

#if CONVOY_WITH_NCCL
// comm::Nccl's exchange with one rank on the context's device, as CollectiveReplica drives it:
// buckets start during the backward pass; finish() starts the rest and waits for all. The compute
// stream then waits for the exchange's stream, so the event after the exchange falls after it.
struct NcclExchange {
  NcclExchange(nn::Mlp& model, exec::Cuda const& ctx, std::size_t bucket_bytes)
      : comm(comm::nccl::make_unique_id(), 0, 1, ctx.device()),
        allreduce(comm, ctx),
        plan(model.variables(), bucket_bytes),
        reducer(plan, model.variables().grads(), allreduce),
        compute(ctx.stream()),
        device(ctx.device()) {
    check(cudaEventCreateWithFlags(&summed, cudaEventDisableTiming), "cudaEventCreateWithFlags",
          device);
  }
  ~NcclExchange() { (void)cudaEventDestroy(summed); }
  NcclExchange(NcclExchange const&) = delete;
  NcclExchange& operator=(NcclExchange const&) = delete;

  void finish(std::size_t variables) {
    reducer.ready(VariableId{0}, VariableId{variables - 1});  // starts every bucket not started
    check(cudaEventRecord(summed, allreduce.stream()), "cudaEventRecord", device);
    check(cudaStreamWaitEvent(compute, summed, 0), "cudaStreamWaitEvent", device);
    reducer.finish();
  }

  comm::nccl::Communicator comm;
  comm::nccl::BucketAllreduce allreduce;
  comm::BucketPlan plan;
  comm::BucketReducer<comm::nccl::BucketAllreduce> reducer;
  cudaStream_t compute;
  int device;
  cudaEvent_t summed = nullptr;
};
#endif

// The floor: the SGEMMs of one step of the model's Dense layers at `rows` rows, alone, on the
// context's stream; mean seconds per step over `steps` after `warmup`.
double gemm_floor(exec::Cuda const& ctx, std::vector<std::size_t> const& widths, std::size_t rows,
                  int warmup, int steps) {
  struct Layer {
    std::size_t in, out;
    float *x, *w, *y, *dy, *dw, *dx;
  };
  std::vector<float*> owned;
  auto const filled = [&](std::size_t n) {  // 0x3c3c3c3c, about 0.0115: not zeros, which can run faster
    void* p = nullptr;
    check(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc", ctx.device(), "the floor's matrices");
    owned.push_back(static_cast<float*>(p));
    check(cudaMemsetAsync(p, 0x3c, n * sizeof(float), ctx.stream()), "cudaMemsetAsync", ctx.device());
    return static_cast<float*>(p);
  };
  double seconds = 0.0;
  try {
    std::vector<Layer> layers;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
      std::size_t const in = widths[l], out = widths[l + 1];
      layers.push_back({in, out, filled(rows * in), filled(in * out), filled(rows * out),
                        filled(rows * out), filled(in * out), l > 0 ? filled(rows * in) : nullptr});
    }
    auto const one_step = [&] {
      for (auto const& L : layers) {  // the transpositions nn::Dense uses
        math::gemm(ctx, false, false, rows, L.out, L.in, 1.0f, L.x, L.w, 1.0f, L.y);
        math::gemm(ctx, true, false, L.in, L.out, rows, 1.0f, L.x, L.dy, 0.0f, L.dw);
        if (L.dx != nullptr)
          math::gemm(ctx, false, true, rows, L.in, L.out, 1.0f, L.dy, L.w, 0.0f, L.dx);
      }
    };
    for (int s = 0; s < warmup; ++s) one_step();
    Events events(ctx, 2);
    events.record(0, ctx.stream());
    for (int s = 0; s < steps; ++s) one_step();
    events.record(1, ctx.stream());
    ctx.synchronize();
    seconds = events.seconds(0, 1) / steps;
  } catch (...) {
    for (float* p : owned) (void)cudaFree(p);
    throw;
  }
  for (float* p : owned) (void)cudaFree(p);
  return seconds;
}

// The batch's copy to the device alone, as forward_backward makes it (exec::Cuda::stage), from
// `batch`'s memory; mean seconds per copy over `steps` after `warmup`, with CUDA events.
double stage_seconds(exec::Cuda const& ctx, Batch const& batch, int warmup, int steps) {
  for (int s = 0; s < warmup; ++s) (void)ctx.stage(batch);
  Events events(ctx, 2);
  events.record(0, ctx.stream());
  for (int s = 0; s < steps; ++s) (void)ctx.stage(batch);
  events.record(1, ctx.stream());
  ctx.synchronize();
  return events.seconds(0, 1) / steps;
}

std::string model_name(std::vector<std::size_t> const& widths) {
  std::string name;
  for (std::size_t w : widths) {
    if (!name.empty()) name += '-';
    name += std::to_string(w);
  }
  return name;
}

struct Options {
  std::vector<std::size_t> widths{784, 500, 10};
  std::vector<std::size_t> batches{100, 4096};
  int steps = 50, warmup = 10, device = 0;
  bool quick = false;
};

int run(Options const& o, bench::Results& results) {
  int const devices = exec::cuda::device_count();
  if (devices == 0) {
    std::puts(
        "bench_gpu_training: no CUDA device (the CUDA runtime sees none); nothing measured, "
        "skipped");
    return 77;
  }
  if (o.device >= devices) {
    std::fprintf(stderr, "bench_gpu_training: --device %d: the CUDA runtime sees %d device(s)\n",
                 o.device, devices);
    return 2;
  }
  exec::Cuda const ctx(o.device);
  auto const scope = ctx.enter();
  auto const info = exec::cuda::describe(exec::cuda::device_info(o.device));
  optim::Optimizer const sgd = optim::Sgd{0.1f};
  std::size_t const inputs = o.widths.front(), classes = o.widths.back();
#if CONVOY_WITH_NCCL
  std::size_t const bucket_bytes = comm::Nccl{}.bucket_bytes;
#endif
  std::printf(
      "MLP %s on %s, SGD, synthetic data (constant pixels), mean of %d steps after %d "
      "warm-up, CUDA events on the context's stream; times in ms per step\n",
      model_name(o.widths).c_str(), info.c_str(), o.steps, o.warmup);
  std::printf("%6s %-14s %9s %9s %9s %9s %9s %12s %9s %10s %9s %9s\n", "batch", "exchange", "step",
              "compute", "exchange", "optimizer", "other", "samples/s", "floor", "step/floor",
              "pageable", "locked");
  bench::Record record;
  record.set("benchmark", "gpu_training")
      .set("model", model_name(o.widths))
      .set("device", info)
      .set("data", "synthetic")
      .set("steps", o.steps)
      .set("warmup", o.warmup)
      .set("aim_step_over_floor", 1.3);
  for (std::size_t rows : o.batches) {
    std::vector<float> const pageable_features(rows * inputs, 0.5f);
    std::vector<std::int32_t> pageable_labels(rows);
    for (std::size_t r = 0; r < rows; ++r) pageable_labels[r] = static_cast<std::int32_t>(r % classes);
    // The steps read the batch where the Trainer gathers one for this context: page-locked memory.
    std::pmr::vector<float> const features(pageable_features.begin(), pageable_features.end(),
                                           ctx.batch_memory());
    std::pmr::vector<std::int32_t> const labels(pageable_labels.begin(), pageable_labels.end(),
                                                ctx.batch_memory());
    Batch const batch{features, labels, {}, rows};
    double const floor = gemm_floor(ctx, o.widths, rows, o.warmup, o.steps);
    double const copy = stage_seconds(ctx, Batch{pageable_features, pageable_labels, {}, rows},
                                      o.warmup, o.steps);
    double const copy_locked = stage_seconds(ctx, batch, o.warmup, o.steps);
    auto const report = [&](char const* exchange, Phases const& p) {
      double const samples = static_cast<double>(rows) / p.step;
      std::printf("%6zu %-14s %9.3f %9.3f %9.3f %9.3f %9.3f %12.0f %9.3f %10.2f %9.3f %9.3f\n", rows,
                  exchange, p.step * 1e3, p.compute * 1e3, p.exchange * 1e3, p.optimizer * 1e3,
                  p.other * 1e3, samples, floor * 1e3, p.step / floor, copy * 1e3,
                  copy_locked * 1e3);
      record.add("results", bench::Record{}
                                .set("batch", rows)
                                .set("exchange", exchange)
                                .set("step_s", p.step)
                                .set("compute_s", p.compute)
                                .set("exchange_s", p.exchange)
                                .set("optimizer_s", p.optimizer)
                                .set("other_s", p.other)
                                .set("samples_per_second", samples)
                                .set("floor_s", floor)
                                .set("step_over_floor", p.step / floor)
                                .set("copy_pageable_s", copy)
                                .set("copy_page_locked_s", copy_locked));
    };
    {  // comm::InProcess, one replica: the lock-step engine's step
      nn::Mlp model(o.widths);
      ctx.adopt(model.variables());
      auto state = sgd.make_state(model.variables().element_count(), ctx.memory());
      NoExchange none;
      report("InProcess", time_steps(model, ctx, batch, sgd, state, none, o.warmup, o.steps));
    }
#if CONVOY_WITH_NCCL
    {  // comm::Nccl, one rank: CollectiveReplica's step
      nn::Mlp model(o.widths);
      ctx.adopt(model.variables());
      auto state = sgd.make_state(model.variables().element_count(), ctx.memory());
      NcclExchange nccl(model, ctx, bucket_bytes);
      report("Nccl, 1 rank", time_steps(model, ctx, batch, sgd, state, nccl, o.warmup, o.steps));
    }
#endif
  }
  results.add(std::move(record));
  return 0;
}

// "784-500-10": two or more widths of at least 1.
std::string parse_widths(std::string_view v, std::vector<std::size_t>& out) {
  std::vector<std::size_t> widths;
  std::size_t begin = 0;
  for (;;) {
    auto const end = std::min(v.find('-', begin), v.size());
    std::size_t w = 0;
    auto const [at, error] = std::from_chars(v.data() + begin, v.data() + end, w);
    if (error != std::errc{} || at != v.data() + end || w == 0) break;
    widths.push_back(w);
    if (end == v.size()) {
      if (widths.size() < 2) break;
      out = widths;
      return {};
    }
    begin = end + 1;
  }
  return "two or more widths >= 1 joined by '-', such as 784-500-10";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::size_t batch = 0;
  bench::CommandLine cli("bench_gpu_training",
                         "Training steps of an MLP on one GPU, against its cuBLAS GEMMs alone.");
  cli.integer("--steps", "N", o.steps, 1, "timed steps per configuration, mean kept (default 50)");
  cli.integer("--warmup", "N", o.warmup, 0, "steps before timing (default 10)");
  cli.integer("--batch", "N", batch, std::size_t{1},
              "only this batch size (default: 100 and 4096)");
  cli.option("--model", "WIDTHS", "the MLP's widths, input to classes (default 784-500-10)",
             [&o](std::string_view v) { return parse_widths(v, o.widths); });
  cli.integer("--device", "N", o.device, 0, "the CUDA device (default 0)");
  cli.flag("--quick", o.quick, "a smoke run: 5 steps after 2 warm-up");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (batch != 0) o.batches = {batch};
  if (o.quick) {
    o.steps = std::min(o.steps, 5);
    o.warmup = std::min(o.warmup, 2);
  }
  try {
    if (int const status = run(o, results); status != 0) return status;
  } catch (Error const& e) {
    std::fprintf(stderr, "bench_gpu_training: %s\n", e.what());
    return 1;
  }
  return results.write() ? 0 : 1;
}
