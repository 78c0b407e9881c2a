// Prefetch: a replica's next batch gathered on a thread of its own while its device computes the
// current one, so that the gather (4096 Fashion-MNIST rows: more than an H200's whole step) is off
// the step's path. Two buffers: the batch handed out, which the device reads until the replica asks
// for the next one (its forward_backward has waited for its loss by then), and the next, being
// filled. The rows are the Sampler's, whatever is asked: a request for another step or origin than
// the one prefetched (a resume, a group re-formed mid-run) waits for the prefetch and gathers what
// was asked. One thread for the object's life, so that its OpenMP team is made once, not per step.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "../core/batch.hpp"
#include "../core/snapshot.hpp"
#include "dataset.hpp"
#include "sampler.hpp"

namespace convoy::io {

class Prefetch {
 public:
  /// Batches of `data` as `sampler` draws them, gathered in `memory` (page-locked for a replica on
  /// a GPU) on `threads` OpenMP threads. `data` must outlive this object.
  Prefetch(Sampler sampler, Dataset const& data, std::pmr::memory_resource* memory, int threads)
      : sampler_(std::move(sampler)),
        data_(&data),
        buffers_{BatchBuffer(memory), BatchBuffer(memory)},
        threads_(threads),
        worker_([this] { serve(); }) {}
  Prefetch(Prefetch const&) = delete;
  Prefetch& operator=(Prefetch const&) = delete;
  ~Prefetch() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    worker_.join();  // after the gather in flight, which writes a buffer this object owns
  }

  /// Replica `replica`'s rows of global step `step` from `origin` (Sampler::fill_at), valid until
  /// the next call; then starts gathering step + 1 into the other buffer. Throws what fill_at
  /// throws.
  Batch next(std::size_t replica, std::int64_t step, DataOrigin const& origin) {
    Key const wanted{replica, step, origin};
    std::optional<Batch> batch;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !job_; });
      if (gathered_ && !failed_ && prefetched_ == wanted) {
        batch = *gathered_;
        current_ = 1 - current_;  // the filled buffer is now the one handed out
      }
      gathered_.reset();
      failed_ = nullptr;  // gathered again below, where its error, if any, is thrown
    }
    if (!batch)
      batch = sampler_.fill_at(*data_, replica, step, origin, buffers_[current_], threads_);
    {
      std::lock_guard lock(mutex_);
      prefetched_ = Key{replica, step + 1, origin};
      job_ = prefetched_;
    }
    changed_.notify_all();
    return *batch;
  }

  /// Waits until the batch being gathered is there (or its gather failed).
  void settle() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !job_; });
  }

 private:
  struct Key {
    std::size_t replica = 0;
    std::int64_t step = -1;
    DataOrigin origin{};
    friend bool operator==(Key const&, Key const&) = default;
  };

  // The thread: gathers each job into the buffer not handed out, until the object goes.
  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || job_; });
      if (stopping_) return;
      Key const key = *job_;
      int const into = 1 - current_;
      lock.unlock();
      std::optional<Batch> batch;
      std::exception_ptr error;
      try {
        batch =
            sampler_.fill_at(*data_, key.replica, key.step, key.origin, buffers_[into], threads_);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      gathered_ = batch;
      failed_ = error;
      job_.reset();
      changed_.notify_all();
    }
  }

  Sampler sampler_;
  Dataset const* data_;
  BatchBuffer buffers_[2];
  int threads_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int current_ = 0;         // the buffer handed out; the other one is being filled
  Key prefetched_;          // what the last job gathers
  std::optional<Key> job_;  // set: being gathered
  std::optional<Batch> gathered_;
  std::exception_ptr failed_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once everything it reads is made
};

}  // namespace convoy::io
