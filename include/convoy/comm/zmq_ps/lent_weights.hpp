// A shard's weights as ZeroMQ sends them: every answer lends the buffer to the frames that carry
// it, without a copy, and the shard writes into a buffer only while no send holds it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>
#include <zmq.hpp>

#include "../../core/detail/aligned_allocator.hpp"
#include "../../place/sharded.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

/// Weights that ZeroMQ may still be sending: a reply lends the buffer, and the shard writes into a
/// buffer only while no send holds it (otherwise it copies into a free one first, see writable()).
struct LentBuffer {
  convoy::detail::AlignedVector<float> data;
  std::atomic<int> lent{0};
};

class LentWeights {
 public:
  explicit LentWeights(std::size_t elements) : current_(std::make_shared<LentBuffer>()) {
    current_->data.assign(elements, 0.0f);
  }

  /// The weights, for reading.
  std::span<float const> view() const { return current_->data; }

  /// The weights, for writing: the current buffer when no send holds it, else a copy of it in a
  /// buffer no send holds (one copy, only when ZeroMQ has not finished sending the last answer).
  convoy::detail::AlignedVector<float>& writable() {
    if (current_->lent.load(std::memory_order_acquire) == 0) return current_->data;
    std::shared_ptr<LentBuffer> spare;
    for (auto& b : spares_) {
      if (b->lent.load(std::memory_order_acquire) == 0) {
        spare = b;
        break;
      }
    }
    if (!spare) {
      spare = std::make_shared<LentBuffer>();
      spares_.push_back(spare);
    }
    spare->data.assign(current_->data.begin(), current_->data.end());
    std::swap(current_, spare);
    // `spare` now holds the old buffer: it stays in spares_ (or joins it) until its sends finish.
    if (std::find(spares_.begin(), spares_.end(), spare) == spares_.end()) spares_.push_back(spare);
    spares_.erase(std::remove(spares_.begin(), spares_.end(), current_), spares_.end());
    return current_->data;
  }

  /// One frame per piece lending the current weights to ZeroMQ; each frame holds the buffer
  /// until ZeroMQ has sent it.
  std::vector<zmq::message_t> frames(std::span<place::Piece const> pieces) {
    std::vector<zmq::message_t> out;
    out.reserve(pieces.size());
    for (auto const& p : pieces) {
      auto* hold = new std::shared_ptr<LentBuffer>(current_);
      current_->lent.fetch_add(1, std::memory_order_relaxed);
      out.push_back(lend(std::span<float const>(current_->data).subspan(p.offset, p.end - p.begin),
                         &give_back, hold));
    }
    return out;
  }

 private:
  static void give_back(void*, void* hint) {
    auto* hold = static_cast<std::shared_ptr<LentBuffer>*>(hint);
    (*hold)->lent.fetch_sub(1, std::memory_order_release);
    delete hold;
  }

  std::shared_ptr<LentBuffer> current_;
  std::vector<std::shared_ptr<LentBuffer>> spares_;
};

}  // namespace convoy::comm::zmq_ps
