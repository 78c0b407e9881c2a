// What a parameter-server shard stores and computes: its pieces of the variables, their optimizer
// slots and the open synchronous step's sum of gradients, read from and written to a request's
// payload frames. No rules and no socket: the shard's state machine (shard_state.hpp) says when.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "../../core/detail/aligned_allocator.hpp"
#include "../../core/error.hpp"
#include "../../core/variables.hpp"
#include "../../exec/host.hpp"
#include "../../io/checkpoint_parts.hpp"
#include "../../optim/optimizer.hpp"
#include "../../place/sharded.hpp"
#include "lent_weights.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

class ShardStore {
 public:
  /// `pieces` of the variables, in this shard's flat arena; `state_ranges` (the model's state
  /// variables, Variables::state_ranges) are applied as `w -= scale * g` instead of by the
  /// optimizer; `sums`: the Sync rules sum gradients into an open step.
  ShardStore(std::vector<place::Piece const*> const& pieces, optim::Optimizer optimizer,
             std::vector<ArenaRange> const& state_ranges, bool sums, std::string name)
      : optimizer_(std::move(optimizer)), weights_(elements_of(pieces)), name_(std::move(name)) {
    for (auto const* p : pieces) pieces_.push_back(*p);
    slots_ = optimizer_.make_state(elements());
    // The state ranges in this shard's own arena: each piece's overlap with them.
    for (auto const& p : pieces_) {
      for (auto const& r : state_ranges) {
        std::size_t const from = std::max(r.begin, p.begin), to = std::min(r.end, p.end);
        if (from < to)
          slots_.assigned.push_back({p.offset + from - p.begin, p.offset + to - p.begin});
      }
    }
    std::ranges::sort(slots_.assigned, {}, &ArenaRange::begin);
    if (sums) sum_.assign(elements(), 0.0f);
  }
  ShardStore(ShardStore const&) = delete;
  ShardStore& operator=(ShardStore const&) = delete;

  std::span<place::Piece const> pieces() const { return pieces_; }
  std::size_t elements() const { return weights_.view().size(); }
  optim::Optimizer const& optimizer() const { return optimizer_; }
  /// Optimizer updates applied so far (Adam's bias correction counts them).
  std::int64_t updates() const { return slots_.updates; }
  /// Arrays a request may carry for each piece: the weights and every optimizer slot.
  std::size_t most_arrays() const { return 1 + optimizer_.slot_names().size(); }

  /// Throws ProtocolError unless the payload (frames 2...) is `arrays` arrays of each piece's
  /// floats.
  void check_payload(std::vector<zmq::message_t> const& frames, Header const& h,
                     std::size_t arrays) const {
    if (frames.size() - 2 != arrays * pieces_.size()) {
      throw ProtocolError("convoy: a " + describe(h.op) + " to " + name_ + " carries " +
                          std::to_string(frames.size() - 2) + " payload frames, expected " +
                          std::to_string(arrays * pieces_.size()));
    }
    std::size_t at = 2;
    for (std::size_t a = 0; a < arrays; ++a) {
      for (auto const& p : pieces_) {
        check_floats(frames[at++], p.end - p.begin,
                     "the payload of '" + p.variable + "' in a " + describe(h.op) + " to " + name_);
      }
    }
  }

  /// The weights from the payload's first array.
  void write_weights(std::vector<zmq::message_t> const& frames) {
    auto& weights = weights_.writable();
    std::size_t at = 2;
    for (auto const& p : pieces_) {
      auto const src = floats(frames[at++], scratch_);
      std::copy(src.begin(), src.end(), weights.begin() + static_cast<std::ptrdiff_t>(p.offset));
    }
  }
  /// The weights and every slot from the payload, and the optimizer's count of updates; the open
  /// step's sum is emptied.
  void restore(std::vector<zmq::message_t> const& frames, std::int64_t updates) {
    write_weights(frames);
    for (std::size_t s = 0; s < slots_.slots.size(); ++s) {
      std::size_t at = 2 + (1 + s) * pieces_.size();
      for (auto const& p : pieces_) {
        auto const src = floats(frames[at++], scratch_);
        std::copy(src.begin(), src.end(),
                  slots_.slots[s].begin() + static_cast<std::ptrdiff_t>(p.offset));
      }
    }
    slots_.updates = updates;
    sum_empty_ = true;
  }

  /// Adds the payload's gradient, times `weight`, to the open step's sum (its first gradient is
  /// copied: no pass to clear).
  void add(std::vector<zmq::message_t> const& frames, float weight = 1.0f) {
    std::size_t at = 2;
    for (auto const& p : pieces_) {
      auto const g = floats(frames[at++], scratch_);
      float* dst = sum_.data() + p.offset;
      if (sum_empty_ && weight == 1.0f) {
        std::copy(g.begin(), g.end(), dst);
      } else if (sum_empty_) {
        for (std::size_t i = 0; i < g.size(); ++i) dst[i] = weight * g[i];
      } else if (weight == 1.0f) {
        for (std::size_t i = 0; i < g.size(); ++i) dst[i] += g[i];
      } else {
        for (std::size_t i = 0; i < g.size(); ++i) dst[i] += weight * g[i];
      }
    }
    sum_empty_ = false;
  }
  /// Applies the open step's sum of `gradients` (counted by their weights), averaged, and empties
  /// it.
  void apply_sum(std::size_t gradients) {
    auto& weights = weights_.writable();
    optimizer_.apply(exec::Host{}, std::span<float>(weights), std::span<float const>(sum_), slots_,
                     0, 1.0f / static_cast<float>(gradients), ++slots_.updates);
    sum_empty_ = true;
  }
  /// Drops the open step's sum.
  void clear_sum() { sum_empty_ = true; }
  /// Applies the payload's gradient at once.
  void apply(std::vector<zmq::message_t> const& frames) {
    auto& weights = weights_.writable();
    std::int64_t const update = ++slots_.updates;
    exec::Host const ctx;
    std::size_t at = 2;
    for (auto const& p : pieces_) {
      auto const g = floats(frames[at++], scratch_);
      optimizer_.apply(ctx, std::span<float>(weights), g, slots_, p.offset, 1.0f, update);
    }
  }

  /// The weights, lent to ZeroMQ: one frame a piece.
  std::vector<zmq::message_t> weights_frames() { return weights_.frames(pieces_); }
  /// The weights, then every slot copied (slots change): a snapshot's payload.
  std::vector<zmq::message_t> snapshot_frames() {
    auto out = weights_frames();
    for (auto const& slot : slots_.slots) {
      for (auto const& p : pieces_) {
        out.emplace_back(slot.data() + p.offset, (p.end - p.begin) * sizeof(float));
      }
    }
    return out;
  }

  /// Writes this shard's part of a checkpoint, by variable name, into `directory`: `part` says
  /// which save and which shard, and gets the pieces. Returns the part's file name. Throws Error
  /// when it cannot be written.
  std::string save(std::string const& directory, io::PartView part) const {
    for (auto const& slot : optimizer_.slot_names()) {
      part.slot_suffixes.push_back(optim::slot_suffix(slot));
    }
    std::span<float const> const weights = weights_.view();
    for (auto const& p : pieces_) {
      auto const n = p.end - p.begin;
      io::PartPieceView piece{&p.variable, p.first, weights.subspan(p.offset, n), {}};
      for (auto const& slot : slots_.slots) {
        piece.slots.push_back(std::span<float const>(slot).subspan(p.offset, n));
      }
      part.pieces.push_back(std::move(piece));
    }
    return io::save_checkpoint_part(directory, part);
  }

 private:
  static std::size_t elements_of(std::vector<place::Piece const*> const& pieces) {
    std::size_t n = 0;
    for (auto const* p : pieces) n += p->end - p->begin;
    return n;
  }

  std::vector<place::Piece> pieces_;
  optim::Optimizer optimizer_;
  LentWeights weights_;
  optim::OptimizerState slots_;
  convoy::detail::AlignedVector<float> sum_;
  bool sum_empty_ = true;       ///< sum_ holds no gradient of the open step: the next one is copied
  std::vector<float> scratch_;  ///< a payload frame ZeroMQ did not align for floats, copied
  std::string name_;
};

}  // namespace convoy::comm::zmq_ps
