// HostExchange: the bucket exchange of one process's replica threads when the run spans processes
// (comm::Gloo). Once every local replica has started bucket b, a communication thread sums their
// spans in shared memory, hands the sum to one allreduce across the processes, and copies the
// result back to every replica: the hierarchical reduction Horovod does between NCCL and MPI, so
// that one allreduce per bucket crosses the processes whatever the replica count. The replica
// threads go on with their backward pass meanwhile. Plain C++: the cross-process allreduce is a
// function the fabric gives (Gloo's), absent in a single process.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/error.hpp"

namespace convoy::comm::gloo_fabric {

class HostExchange {
 public:
  /// Sums `values`, the sum of bucket `bucket`'s spans, over the processes, in place. Blocks;
  /// throws on failure.
  using Allreduce = std::function<void(std::size_t bucket, std::span<float> values)>;

  /// `local` replica threads and `buckets` buckets; a wait() gives up after `timeout`. An empty
  /// `allreduce`: every replica of the run is in this process.
  HostExchange(std::size_t local, std::size_t buckets, std::chrono::milliseconds timeout,
               Allreduce allreduce)
      : local_(local), timeout_(timeout), allreduce_(std::move(allreduce)), buckets_(buckets) {
    for (auto& b : buckets_) b.spans.resize(local);
    for (std::size_t r = 0; r < local; ++r) ports_.push_back(Port(*this, r));
    thread_ = std::jthread([this](std::stop_token stop) { communicate(stop); });
  }
  HostExchange(HostExchange const&) = delete;
  HostExchange& operator=(HostExchange const&) = delete;
  ~HostExchange() { stop(); }

  /// Stops the communication thread and waits for it: at once when it is idle, once its allreduce
  /// returns when it is in one. issued() stays valid.
  void stop() {
    {
      // Under the lock: the thread checks for a stop under it before it sleeps, so a request
      // between that check and its sleep would otherwise be missed, and the join wait forever.
      std::lock_guard lock(mutex_);
      thread_.request_stop();
    }
    work_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// One replica's side, driven by its thread (BucketReducer, the collective engine).
  class Port {
   public:
    /// Hands this replica's `grads` for bucket `bucket` in; returns at once.
    void start(std::size_t bucket, std::span<float> grads) {
      owner_->start(replica_, bucket, grads);
    }
    /// Blocks until every bucket this replica started has its sum; throws the exchange's error, or
    /// TimeoutError after the exchange's timeout.
    void wait() { owner_->wait(replica_, started_); }

   private:
    friend class HostExchange;
    Port(HostExchange& owner, std::size_t replica) : owner_(&owner), replica_(replica) {}
    HostExchange* owner_;
    std::size_t replica_;
    std::vector<std::pair<std::size_t, std::uint64_t>> started_;  // bucket, round it waits for
  };

  Port& port(std::size_t replica) { return ports_.at(replica); }

  /// Ends the exchange: every wait() throws Error with `why` from now on. `then` runs once no
  /// allreduce is in progress: at once, or when the one in progress returns. (Closing the
  /// connections under an allreduce waiting for a peer's bytes would leave it waiting out the
  /// whole timeout, while the peer, alive and about to send them, fails at once.)
  void abort(std::string const& why, std::function<void()> then = {}) {
    {
      std::lock_guard lock(mutex_);
      if (!error_)
        error_ = std::make_exception_ptr(Error("convoy: the exchange was stopped: " + why));
      done_.notify_all();
      work_.notify_all();
      if (running_) {
        after_running_ = std::move(then);
        return;
      }
    }
    if (then) then();
  }

  /// Allreduces issued across the processes so far (for the liveness board).
  std::int64_t issued() const { return issued_.load(); }

 private:
  struct Bucket {
    std::vector<std::span<float>> spans;  // this round's, one per replica
    std::size_t arrived = 0;              // replicas that started this round
    std::uint64_t done = 0;               // rounds whose sum every replica has
  };

  void start(std::size_t replica, std::size_t bucket, std::span<float> grads) {
    std::lock_guard lock(mutex_);
    auto& b = buckets_.at(bucket);
    b.spans[replica] = grads;
    ports_[replica].started_.emplace_back(bucket, b.done + 1);
    if (++b.arrived == local_) {
      b.arrived = 0;
      queue_.push_back(bucket);
      // The last bucket of a step is started by a thread that waits for it next, and wait()
      // reduces it there: waking the communication thread for it would only hand it over.
      if (bucket + 1 < buckets_.size()) work_.notify_one();
    }
  }

  void wait(std::size_t replica, std::vector<std::pair<std::size_t, std::uint64_t>>& started) {
    std::unique_lock lock(mutex_);
    auto const deadline = std::chrono::steady_clock::now() + timeout_;
    for (auto const& [bucket, round] : started) {
      auto const& b = buckets_[bucket];
      while (!error_ && b.done < round) {
        // Nobody is reducing and a bucket is ready: reduce it on this thread rather than wake
        // the communication thread and wait for it (two context switches a bucket, 30% of a
        // 1 MiB allreduce's time on 2 cores). One bucket at a time, in queue order, either way.
        if (!running_ && !queue_.empty()) {
          reduce_front(lock);
          continue;
        }
        if (done_.wait_until(lock, deadline) == std::cv_status::timeout && !error_ &&
            b.done < round) {
          error_ = std::make_exception_ptr(TimeoutError(
              "convoy: replica thread " + std::to_string(replica) + " waited " +
              std::to_string(timeout_.count()) + " ms for the sum of gradient bucket " +
              std::to_string(bucket) + "; a replica of this process or another process is late"));
          work_.notify_all();
          done_.notify_all();
        }
      }
      if (error_) {
        started.clear();
        std::rethrow_exception(error_);
      }
    }
    started.clear();
  }

  // Takes the front bucket of the queue and reduces it with `lock` released: the local sum, the
  // allreduce across the processes, the copies back. Called with `lock` held and !running_.
  void reduce_front(std::unique_lock<std::mutex>& lock) {
    std::size_t const bucket = queue_.front();
    queue_.pop_front();
    // Read without the lock: no replica hands this bucket's next round in before this one is done.
    auto const& spans = buckets_[bucket].spans;
    running_ = true;
    lock.unlock();
    std::exception_ptr failed;
    try {
      auto const sum = spans[0];
      for (std::size_t r = 1; r < spans.size(); ++r) {
        if (spans[r].size() != sum.size()) {
          throw Error("convoy: the replicas of this process handed bucket " +
                      std::to_string(bucket) + " in with different sizes");
        }
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += spans[r][i];
      }
      if (allreduce_) {
        ++issued_;
        allreduce_(bucket, sum);
      }
      for (std::size_t r = 1; r < spans.size(); ++r) std::ranges::copy(sum, spans[r].begin());
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    running_ = false;
    if (failed) {
      if (!error_) error_ = failed;
    } else {
      ++buckets_[bucket].done;
    }
    done_.notify_all();
    // The communication thread only if it has something to do: woken for nothing after every
    // bucket, it took a core from the thread that reduced it (64 KiB: 0.88-0.94 of the
    // allreducer alone, 0.99-1.0 without).
    if (!queue_.empty() || error_) work_.notify_all();
    if (auto then = std::exchange(after_running_, nullptr)) {
      lock.unlock();
      then();
      lock.lock();
    }
  }

  // The communication thread: buckets in the order their last replica started them, which is the
  // plan's order in every process, as the allreduce needs.
  void communicate(std::stop_token const& stop) {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_.wait(lock,
                 [&] { return stop.stop_requested() || error_ || (!running_ && !queue_.empty()); });
      if (stop.stop_requested() || error_) return;
      reduce_front(lock);
    }
  }

  std::size_t local_;
  std::chrono::milliseconds timeout_;
  Allreduce allreduce_;
  std::mutex mutex_;
  std::condition_variable done_;  // a round finished, or the exchange failed
  std::condition_variable work_;  // a bucket is ready for the communication thread
  std::vector<Bucket> buckets_;
  std::deque<std::size_t> queue_;
  std::exception_ptr error_;
  bool running_ = false;  // a thread is reducing a bucket: the next waits for it
  std::function<void()> after_running_;  // abort()'s `then`, put off until running_ ends
  std::atomic<std::int64_t> issued_{0};
  std::vector<Port> ports_;
  std::jthread thread_;  // last: joined first
};

}  // namespace convoy::comm::gloo_fabric
