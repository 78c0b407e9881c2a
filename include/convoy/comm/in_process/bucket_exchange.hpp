// BucketExchange: the in-process exchange of a bucketed reduction (comm/buckets/). Replica threads
// hand in their span of each bucket as soon as their backward pass has finished it; a
// communication thread sums a bucket once every replica has handed it in and writes the sum back
// into every replica's span, while the replicas go on with their backward passes. Sums run in
// replica order, so the result is the same bits as the lock-step reduction's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../../core/error.hpp"

namespace convoy::comm::in_process {

class BucketExchange {
 public:
  /// For `replicas` threads and `buckets` buckets per step. A replica waiting longer than `timeout`
  /// for a bucket ends the exchange with a TimeoutError naming the replicas that did not hand it
  /// in.
  BucketExchange(std::size_t replicas, std::size_t buckets, std::chrono::milliseconds timeout)
      : replicas_(replicas), timeout_(timeout), slots_(buckets) {
    if (replicas == 0) throw Error("convoy: a bucket exchange needs at least one replica");
    for (auto& s : slots_) s.data.assign(replicas, nullptr);
    worker_ = std::jthread([this](std::stop_token stop) { reduce_loop(stop); });
  }
  ~BucketExchange() {
    worker_.request_stop();
    { std::lock_guard const lock(mutex_); }  // the loop sees the stop before it waits again
    queued_.notify_all();
  }
  BucketExchange(BucketExchange const&) = delete;
  BucketExchange& operator=(BucketExchange const&) = delete;

  /// One replica's side: a comm::bucket_exchange. Used by that replica's thread only.
  class Port {
   public:
    /// Hands in this replica's span of `bucket`; returns at once. Throws Error for a bucket out of
    /// range, or a span whose size differs from another replica's for the same bucket.
    void start(std::size_t bucket, std::span<float> grads) {
      targets_.push_back(exchange_->hand_in(replica_, bucket, grads));
    }
    /// Blocks until every bucket this replica started since the last wait() has been reduced.
    /// Throws TimeoutError (see the constructor) or the error that ended the exchange.
    void wait() {
      auto const targets = std::move(targets_);
      targets_.clear();
      exchange_->wait_for(replica_, targets);
    }

   private:
    friend class BucketExchange;
    Port(BucketExchange* exchange, std::size_t replica) : exchange_(exchange), replica_(replica) {}
    struct Target {
      std::size_t bucket;
      std::uint64_t completed;  // the bucket's completion count that covers this hand-in
    };
    BucketExchange* exchange_;
    std::size_t replica_;
    std::vector<Target> targets_;
  };

  Port port(std::size_t replica) {
    if (replica >= replicas_) {
      throw Error("convoy: replica " + std::to_string(replica) + " of a bucket exchange among " +
                  std::to_string(replicas_));
    }
    return Port(this, replica);
  }

  /// Ends the exchange: every replica waiting, and every later wait(), throws Error with `reason`.
  /// For a replica that failed, so that the others stop waiting for its buckets.
  void abort(std::string reason) {
    {
      std::lock_guard const lock(mutex_);
      if (failure_.empty()) failure_ = std::move(reason);
    }
    done_.notify_all();
  }

  /// How many times `bucket` has been reduced: once a step. Thread-safe.
  std::uint64_t completed(std::size_t bucket) const {
    std::lock_guard const lock(mutex_);
    return slots_.at(bucket).completed;
  }

 private:
  struct Slot {
    std::vector<float*> data;  // per replica; null until handed in this step
    std::size_t size = 0;
    std::size_t arrived = 0;
    std::uint64_t completed = 0;
  };

  Port::Target hand_in(std::size_t replica, std::size_t bucket, std::span<float> grads) {
    std::unique_lock lock(mutex_);
    if (bucket >= slots_.size()) {
      throw Error("convoy: replica " + std::to_string(replica) + " handed in bucket " +
                  std::to_string(bucket) + " of " + std::to_string(slots_.size()));
    }
    auto& s = slots_[bucket];
    if (s.arrived > 0 && s.size != grads.size()) {
      throw Error("convoy: replica " + std::to_string(replica) + " handed in " +
                  std::to_string(grads.size()) + " gradients for bucket " + std::to_string(bucket) +
                  ", another replica " + std::to_string(s.size) +
                  "; every replica must have the same variables");
    }
    s.size = grads.size();
    s.data[replica] = grads.data();
    Port::Target const target{bucket, s.completed + 1};
    if (++s.arrived == replicas_) {
      queue_.push_back(bucket);
      lock.unlock();
      queued_.notify_one();
    }
    return target;
  }

  void wait_for(std::size_t replica, std::vector<Port::Target> const& targets) {
    auto const deadline = std::chrono::steady_clock::now() + timeout_;
    std::unique_lock lock(mutex_);
    for (auto const& t : targets) {
      auto const reduced = [&] {
        return !failure_.empty() || slots_[t.bucket].completed >= t.completed;
      };
      if (!done_.wait_until(lock, deadline, reduced)) {
        std::string missing;
        for (std::size_t r = 0; r < replicas_; ++r) {
          if (slots_[t.bucket].data[r] == nullptr)
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        timed_out_ = true;
        failure_ = "convoy: replica " + std::to_string(replica) + " waited " +
                   std::to_string(timeout_.count()) + " ms for bucket " + std::to_string(t.bucket) +
                   ", which replica(s) " + (missing.empty() ? std::string("none") : missing) +
                   " did not hand in";
        lock.unlock();
        done_.notify_all();
        throw TimeoutError(failure_);
      }
      // Every replica reports a timeout as the timeout it is, whichever saw it first.
      if (!failure_.empty()) {
        if (timed_out_) throw TimeoutError(failure_);
        throw Error(failure_);
      }
    }
  }

  void reduce_loop(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    for (;;) {
      queued_.wait(lock, [&] { return stop.stop_requested() || !queue_.empty(); });
      if (stop.stop_requested()) return;
      std::size_t const bucket = queue_.front();
      queue_.pop_front();
      auto& s = slots_[bucket];
      std::vector<float*> const data = s.data;
      std::size_t const size = s.size;
      lock.unlock();
      // Replica 0's span accumulates, in replica order, then is copied to the others. No replica
      // touches its span until it sees the bucket completed, under the mutex.
      float* sum = data[0];
      for (std::size_t r = 1; r < data.size(); ++r) {
        float const* src = data[r];
#pragma omp simd
        for (std::size_t i = 0; i < size; ++i) sum[i] += src[i];
      }
      for (std::size_t r = 1; r < data.size(); ++r) std::memcpy(data[r], sum, size * sizeof(float));
      lock.lock();
      s.data.assign(replicas_, nullptr);
      s.arrived = 0;
      ++s.completed;
      done_.notify_all();
    }
  }

  std::size_t replicas_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable queued_;  // the communication thread waits for complete buckets
  std::condition_variable done_;    // replicas wait for reduced buckets
  std::vector<Slot> slots_;
  std::deque<std::size_t> queue_;
  std::string failure_;
  bool timed_out_ = false;  // failure_ is a timeout (not an abort)
  std::jthread worker_;  // last: stopped and joined before the members it reads go
};

}  // namespace convoy::comm::in_process
