// Allreducer: which of Gloo's allreduce algorithms sums a bucket across the processes, and the
// buffers it keeps registered for it. Small buckets run on buffers registered once, so that a
// step's data lands in place in one round with no rendezvous per call; large ones through
// gloo::allreduce, whose ring pipelines segments. The rule and its measurements: docs/gloo.md.
#pragma once

#include <gloo/algorithm.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/context.h>
#include <gloo/math.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../gloo_algorithm.hpp"
#include "pair_exchange.hpp"

namespace convoy::comm::gloo_fabric {

/// Up to this size GlooAlgorithm::automatic keeps registered buffers: 2 processes exchange
/// whole buckets in one round (PairExchange; in turns on one machine, there at every size), more
/// run halving-doubling. Above it, gloo::allreduce's ring. 2-vCPU machine, 2 processes: 64 KiB
/// 2.5-2.8x and the MLP's 1.6 MB bucket 1.1-1.2x in training faster registered; 4-64 MiB
/// 1.2-1.5x faster through gloo::allreduce (benchmarks/bench_gloo, 2026-11-26).
inline constexpr std::size_t registered_bytes = std::size_t{2} << 20;

/// Not thread-safe: one thread reduces at a time (HostExchange sees to it). Collective: every
/// process must reduce the same buckets with the same sizes in the same order.
class Allreducer {
 public:
  /// Collective where 2 processes exchange whole buckets and `sending` is not given: they then
  /// ask each other whether they share a kernel (peers_share_kernel), so every process builds its
  /// Allreducer at the same point. Throws ::gloo::Exception if that fails.
  Allreducer(std::shared_ptr<::gloo::Context> context, GlooAlgorithm algorithm,
             std::chrono::milliseconds timeout,
             std::optional<PairExchange::Sending> sending = std::nullopt)
      : context_(std::move(context)), algorithm_(algorithm), timeout_(timeout) {
    if (sending) {
      sending_ = *sending;
    } else if (whole_exchange() && peers_share_kernel(*context_)) {
      sending_ = PairExchange::Sending::in_turns;
    }
  }

  /// How 2 processes' whole-bucket exchanges send (at_once where no whole exchange runs).
  PairExchange::Sending sending() const { return sending_; }

  /// Sums `values` (bucket `bucket`'s) over the processes, in place. Blocks up to the timeout for
  /// each piece; throws ::gloo::Exception (a timeout's message says "timeout" or "Timed out").
  void reduce(std::size_t bucket, std::span<float> values) {
    // Gloo's registered-buffer algorithms count bytes in an int: pieces of 256 MiB at most.
    constexpr std::size_t piece = std::size_t{64} << 20;
    for (std::size_t at = 0; at < values.size(); at += piece) {
      auto const part = values.subspan(at, std::min(piece, values.size() - at));
      if (registers(part.size_bytes())) {
        kept(bucket, at / piece, part).run();
      } else {
        per_call(part);
      }
    }
  }

  /// What runs a bucket of `bytes` bytes, in words.
  std::string describe(std::size_t bytes) const {
    if (!registers(bytes)) {
      return algorithm_ == GlooAlgorithm::bcube ? "gloo::allreduce, bcube"
                                                : "gloo::allreduce, ring";
    }
    if (!whole_exchange()) return "halving-doubling, registered buffers";
    return sending_ == PairExchange::Sending::in_turns
               ? "whole-bucket exchange in turns (the processes share a kernel), registered buffers"
               : "whole-bucket exchange, registered buffers";
  }

 private:
  // On registered buffers: 2 processes under automatic exchange whole buckets, else
  // halving-doubling.
  bool whole_exchange() const {
    return algorithm_ == GlooAlgorithm::automatic && context_->size == 2;
  }

  // 2 processes on one kernel exchange whole buckets in turns at every size: gloo::allreduce's
  // ring, both directions at once, trained the 784-2000-10 MLP (buckets of 4 MiB) at 1.3-1.44
  // thousand samples/s there, against 20.6-21.8 thousand in turns, in four runs of each; two
  // processes alone trained 15.5-15.7 thousand each (docs/gloo.md).
  bool registers(std::size_t bytes) const {
    return algorithm_ == GlooAlgorithm::halving_doubling ||
           (algorithm_ == GlooAlgorithm::automatic &&
            (bytes <= registered_bytes || sending_ == PairExchange::Sending::in_turns));
  }

  // Piece `piece` of bucket `bucket`'s algorithm, kept while that piece is the same memory. A
  // bucket's exchange at each step is its gradients; the start of a run shares other arrays
  // through bucket 0 once. Every process meets the same sequence of arrays, and consecutive ones
  // differ in all processes or in none (each is alive when the next comes), so the processes
  // rebuild in step and the slots of their registrations stay paired.
  ::gloo::Algorithm& kept(std::size_t bucket, std::size_t piece, std::span<float> values) {
    auto& k = kept_[{bucket, piece}];
    if (!k.algorithm || k.data != values.data() || k.size != values.size()) {
      k.algorithm.reset();
      if (whole_exchange()) {
        k.algorithm = std::make_unique<PairExchange>(context_, values, sending_);
      } else {
        std::vector<float*> const buffers{values.data()};
        int const count = static_cast<int>(values.size());
        k.algorithm =
            std::make_unique<::gloo::AllreduceHalvingDoubling<float>>(context_, buffers, count);
      }
      k.data = values.data();
      k.size = values.size();
    }
    return *k.algorithm;
  }

  void per_call(std::span<float> values) {
    ::gloo::AllreduceOptions opts(context_);
    opts.setOutput(values.data(), values.size());
    opts.setReduceFunction(
        static_cast<void (*)(void*, void const*, void const*, std::size_t)>(&::gloo::sum<float>));
    opts.setAlgorithm(algorithm_ == GlooAlgorithm::bcube
                          ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                          : ::gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(tag_++);
    opts.setTimeout(timeout_);
    ::gloo::allreduce(opts);
  }

  struct Kept {
    float* data = nullptr;
    std::size_t size = 0;
    std::unique_ptr<::gloo::Algorithm> algorithm;
  };
  std::shared_ptr<::gloo::Context> context_;  // first: destroyed after the registrations on it
  GlooAlgorithm algorithm_;
  std::chrono::milliseconds timeout_;
  std::uint32_t tag_ = 0;
  PairExchange::Sending sending_ = PairExchange::Sending::at_once;
  std::map<std::pair<std::size_t, std::size_t>, Kept> kept_;  // (bucket, piece)
};

}  // namespace convoy::comm::gloo_fabric
