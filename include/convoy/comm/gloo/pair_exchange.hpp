// PairExchange: the allreduce of 2 processes on Gloo's transport, for a buffer that stays in place
// from call to call (a bucket of the gradient arena). Each process sends its buffer to the other
// straight from where it lies, receives the other's into an inbox, and adds it in. Gloo's
// AllreduceRing does the same round with two more costs on its path: a copy of the buffer into an
// outbox (so that the sum may run while the send is in flight) and a notification each way after
// the sum (so that the next round's data does not overwrite an inbox still being read). Here the
// sum waits for the send instead, and the inboxes alternate: the peer writes round k+2 into the
// inbox of round k only after it has received this process's round k+1, which this process sends
// after it has finished reading round k. A step with one 1.6 MB bucket saves a copy of it and a
// wake-up each way (docs/gloo.md has the measurements).
#pragma once

#include <gloo/algorithm.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/transport/buffer.h>

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace convoy::comm::gloo_fabric {

/// Collective between exactly 2 processes: both construct it in the same order relative to other
/// algorithms on the context (it takes 2 slots) and call run() the same number of times. Sums
/// `values` in place; IEEE addition commutes, so both processes hold the same bits.
class PairExchange final : public ::gloo::Algorithm {
 public:
  PairExchange(std::shared_ptr<::gloo::Context> const& context, std::span<float> values)
      : ::gloo::Algorithm(context), values_(values) {
    if (contextSize_ != 2) {
      throw std::invalid_argument("convoy: PairExchange needs 2 processes, the context has " +
                                  std::to_string(contextSize_));
    }
    auto& peer = getPair(1 - contextRank_);
    for (std::size_t k = 0; k < 2; ++k) {
      inbox_[k].resize(values.size());
      int const slot = context_->nextSlot();
      send_[k] = peer->createSendBuffer(slot, values.data(), values.size_bytes());
      recv_[k] = peer->createRecvBuffer(slot, inbox_[k].data(), values.size_bytes());
    }
  }

  void run() override {
    if (values_.empty()) return;
    auto const k = round_++ % 2;
    send_[k]->send();
    recv_[k]->waitRecv();
    send_[k]->waitSend();  // values_ is the send's source until here
    ::gloo::sum<float>(values_.data(), inbox_[k].data(), values_.size());
  }

 private:
  std::span<float> values_;
  std::array<std::vector<float>, 2> inbox_;
  std::array<std::unique_ptr<::gloo::transport::Buffer>, 2> send_, recv_;
  std::size_t round_ = 0;
};

}  // namespace convoy::comm::gloo_fabric
