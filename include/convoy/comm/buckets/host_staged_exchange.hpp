// HostStagedExchange: a replica on a device in front of a fabric whose exchange reads host memory
// (comm::Gloo's, which sums the buckets on the host and sends them over TCP). Each bucket the
// backward pass hands in is copied to page-locked host memory on the replica's stream, and handed
// to the fabric by a host function queued behind that copy, so the device goes on computing while
// the host reduces the buckets already there, as NCCL's buckets overlap on a stream of their own;
// wait() waits for the stream, then for the fabric, and copies the sums back on the stream before
// the optimizer reads them. Generic over the context: anything with the four calls below
// (exec::Cuda), so this header needs no CUDA.
#pragma once

#include <concepts>
#include <cstddef>
#include <exception>
#include <memory>
#include <memory_resource>
#include <span>
#include <utility>
#include <vector>

#include "bucket_reducer.hpp"

namespace convoy::comm {

/// An execution context that may compute on a device and can stage its memory through the host:
/// on_device(), copy_async(to, from, count) of floats on its stream, then_on_host(fn, arg) in its
/// stream's order, batch_memory() (page-locked host memory on a device) and synchronize().
template <class C>
concept stages_through_host = requires(C const& c, float* to, float const* from, std::size_t n,
                                       void (*fn)(void*), void* arg) {
  { c.on_device() } -> std::same_as<bool>;
  c.copy_async(to, from, n);
  c.then_on_host(fn, arg);
  { c.batch_memory() } -> std::convertible_to<std::pmr::memory_resource*>;
  c.synchronize();
};

/// Optional on a collective fabric: `static constexpr bool reads_host_memory = true` when its
/// exchanges read and write the spans they are handed on the host (Gloo's), so that a replica on
/// a device stages its buckets through host memory (HostStagedExchange).
template <class F>
concept reads_host_memory = requires {
  requires F::reads_host_memory;
};

/// One page-locked copy of a bucket: what the fabric reduces in place of the device's memory.
struct HostStage {
  explicit HostStage(std::pmr::memory_resource* memory) : host(memory) {}
  std::pmr::vector<float> host;  // page-locked
  std::span<float> device;       // where it came from, and where its sum goes back
  std::size_t bucket = 0;
  void* exchange = nullptr;   // the HostStagedExchange that hands it in
  std::exception_ptr failed;  // what handing it in threw
};
/// One replica's stages, by order of start() in a round. The fabric may still read and write a
/// stage after the exchange that handed it in is gone (an exchange that failed or timed out
/// leaves its bucket with the fabric's thread), so whoever keeps them must outlive the fabric:
/// the collective engine does, across its runs.
using HostStages = std::vector<std::unique_ptr<HostStage>>;

/// One replica's exchange: `Port`, the fabric's, fed from device memory through page-locked host
/// memory (`stages`) when `ctx` is on a device, and `Port` itself otherwise. Driven by the
/// replica's thread (start() may also be called from the thread that runs the model's backward
/// pass); `port` must outlive it, and `stages` the fabric. `Context` is checked in the body, not
/// the template's head, so that naming the type for a host context (a branch not taken) is not an
/// error.
template <bucket_exchange Port, class Context>
class HostStagedExchange {
  static_assert(stages_through_host<Context>,
                "convoy: HostStagedExchange needs a context with on_device(), copy_async(), "
                "then_on_host(), batch_memory() and synchronize() (exec::Cuda)");

 public:
  HostStagedExchange(Port& port, Context ctx, HostStages& stages)
      : port_(&port), ctx_(std::move(ctx)), stages_(&stages) {}
  HostStagedExchange(HostStagedExchange const&) = delete;
  HostStagedExchange& operator=(HostStagedExchange const&) = delete;
  // No host function queued by start() may outlive the exchange it points at.
  ~HostStagedExchange() {
    try {
      if (used_ > 0) ctx_.synchronize();
    } catch (...) {  // a failed device: its error was, or will be, reported by the run
    }
  }

  /// Copies `values` (device memory, or memory the device writes) to host memory behind the work
  /// already queued on the stream, and hands that copy to the fabric once it is there.
  void start(std::size_t bucket, std::span<float> values) {
    if (!ctx_.on_device()) {
      port_->start(bucket, values);
      return;
    }
    auto& stages = *stages_;
    if (used_ == stages.size()) stages.push_back(std::make_unique<HostStage>(ctx_.batch_memory()));
    HostStage& s = *stages[used_++];
    s.exchange = this;
    s.bucket = bucket;
    s.device = values;
    s.failed = nullptr;
    // A stage grows only here, when the work of the last round that used it has finished (wait()
    // ends with a synchronize()), so it never moves under a copy.
    s.host.resize(values.size());
    ctx_.copy_async(s.host.data(), values.data(), values.size());
    ctx_.then_on_host(&hand_in, &s);
  }

  /// Waits until every bucket started has its sum in the memory it came from; throws what the
  /// fabric throws, or what a hand-in threw.
  void wait() {
    if (!ctx_.on_device()) {
      port_->wait();
      return;
    }
    ctx_.synchronize();  // every stage is on the host and handed in
    std::size_t const used = std::exchange(used_, 0);
    auto& stages = *stages_;
    for (std::size_t i = 0; i < used; ++i) {
      if (auto failed = stages[i]->failed) {
        // Buckets handed in before it still hold the fabric: let it finish or fail them.
        try {
          port_->wait();
        } catch (...) {
        }
        std::rethrow_exception(failed);
      }
    }
    port_->wait();
    for (std::size_t i = 0; i < used; ++i) {
      auto const& s = *stages[i];
      ctx_.copy_async(s.device.data(), s.host.data(), s.host.size());
    }
    // The caller may read the sums on the host (the counters a run starts with), and the next
    // round reuses the stages.
    ctx_.synchronize();
  }

 private:
  // On the driver's thread, in the stream's order: the stage's copy has landed.
  static void hand_in(void* stage) noexcept {
    auto& s = *static_cast<HostStage*>(stage);
    try {
      static_cast<HostStagedExchange*>(s.exchange)
          ->port_->start(s.bucket, std::span<float>(s.host));
    } catch (...) {
      s.failed = std::current_exception();
    }
  }

  Port* port_;
  Context ctx_;
  HostStages* stages_;
  std::size_t used_ = 0;  // stages started this round
};

}  // namespace convoy::comm
