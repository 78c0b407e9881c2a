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
//
// Two processes on one kernel (one machine, or network namespaces of one) send in turns: rank 0,
// then rank 1 once it has rank 0's buffer. Both directions of such a connection are the same
// cores copying through the same kernel, so sending both at once gains no bandwidth, and on a
// machine whose cores the two processes fill it costs three times as long: each side's write
// contends with the other's reader for the cores and the sockets (1.6 MB took 1.2-1.3 ms to write
// and 0.7 ms more to arrive, against 0.3 ms each way in turns; docs/gloo.md). Across machines the
// two directions are separate links and both go at once. peers_share_kernel() tells which.
#pragma once

#include <gloo/algorithm.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/transport/buffer.h>

#include <array>
#include <cstddef>
#include <fstream>
#include <memory>
#include <random>
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
  /// How the two buffers cross: both at once, or rank 0's and then rank 1's (peers_share_kernel).
  enum class Sending { at_once, in_turns };

  PairExchange(std::shared_ptr<::gloo::Context> const& context, std::span<float> values,
               Sending sending)
      : ::gloo::Algorithm(context),
        values_(values),
        receives_first_(sending == Sending::in_turns && contextRank_ == 1) {
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
    if (receives_first_) recv_[k]->waitRecv();
    send_[k]->send();
    if (!receives_first_) recv_[k]->waitRecv();
    send_[k]->waitSend();  // values_ is the send's source until here
    ::gloo::sum<float>(values_.data(), inbox_[k].data(), values_.size());
  }

 private:
  std::span<float> values_;
  bool receives_first_;  // rank 1 in turns: it sends once rank 0's buffer is in
  std::array<std::vector<float>, 2> inbox_;
  std::array<std::unique_ptr<::gloo::transport::Buffer>, 2> send_, recv_;
  std::size_t round_ = 0;
};

/// Whether the 2 processes of `context` run on one kernel (one machine, or namespaces or containers
/// of one): they swap the kernel's boot id on a slot of their own. Collective: both call it at the
/// same point. Where the id cannot be read a random one stands in, so that processes never take
/// themselves for one machine wrongly (sending at once is right anywhere, only slower on one).
inline bool peers_share_kernel(::gloo::Context& context) {
  if (context.size != 2) {
    throw std::invalid_argument("convoy: peers_share_kernel compares 2 processes, the context has " +
                                std::to_string(context.size));
  }
  std::array<char, 64> mine{}, theirs{};
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  if (!in.read(mine.data(), 36)) {
    std::random_device random;
    for (auto& c : mine) c = static_cast<char>(random());
  }
  auto& peer = context.getPair(1 - context.rank);
  int const slot = context.nextSlot();
  auto const send = peer->createSendBuffer(slot, mine.data(), mine.size());
  auto const recv = peer->createRecvBuffer(slot, theirs.data(), theirs.size());
  send->send();
  recv->waitRecv();
  send->waitSend();
  return mine == theirs;
}

}  // namespace convoy::comm::gloo_fabric
