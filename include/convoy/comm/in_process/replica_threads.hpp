// Replica threads and their watch: every replica of an in-process run computes on a thread of its
// own while the thread that called run() watches the clock. A replica whose step outlasts the
// timeout is abandoned: the others are told to stop, run() throws a TimeoutError naming it and
// returns, and its thread is left to finish (or not) on its own, holding shared ownership of what
// it touches. Also: the first error of any replica, and chunk bounds of the arenas.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace convoy::comm::in_process {

/// [begin, end) of part `index` of `parts` over n floats. Bounds are multiples of 16 floats, one
/// 64-byte line, and the arenas start on a line, so two threads never write the same line.
inline std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, std::size_t parts,
                                                        std::size_t index) {
  constexpr std::size_t floats_per_line = 16;
  std::size_t const per = (n + parts - 1) / parts;
  std::size_t const rounded = (per + floats_per_line - 1) / floats_per_line * floats_per_line;
  std::size_t const begin = std::min(n, index * rounded);
  return {begin, std::min(n, begin + rounded)};
}

/// The first exception any replica thread raised; later ones are dropped.
class FirstError {
 public:
  void capture(std::exception_ptr error = std::current_exception()) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  bool has_error() const {
    std::lock_guard lock(mutex_);
    return error_ != nullptr;
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

/// When each replica began the step it is computing, and which replicas were abandoned. Shared by
/// the replica threads and the watching thread; a stuck thread keeps its copy alive after run().
class Watch {
 public:
  using clock = std::chrono::steady_clock;

  Watch(std::size_t replicas, std::chrono::milliseconds timeout)
      : timeout_(timeout), busy_since_(replicas), finished_(replicas, 0), abandoned_(replicas, 0) {}

  /// Replica r starts the timed piece of its step: its batch and forward_backward, the user's code.
  /// Until end(), the thread may read only its own stack (see run_replica_threads).
  void begin(std::size_t r) {
    std::lock_guard lock(mutex_);
    busy_since_[r] = clock::now();
  }
  /// Replica r has finished that piece. False when r was abandoned meanwhile: its thread must then
  /// return at once and touch nothing of the run.
  bool end(std::size_t r) {
    std::lock_guard lock(mutex_);
    busy_since_[r].reset();
    return !abandoned_[r];
  }
  /// Replica r's thread is done.
  void finish(std::size_t r) {
    {
      std::lock_guard lock(mutex_);
      finished_[r] = 1;
    }
    changed_.notify_all();
  }

  /// Blocks until every replica's thread is done or abandoned. A replica busy for longer than the
  /// timeout is abandoned, and `stop_others()` (which must not throw) is called once so that the
  /// others leave their waits. Returns the abandoned replicas.
  template <class Stop>
  std::vector<std::size_t> supervise(Stop&& stop_others) {
    auto const poll = std::clamp(timeout_ / 8, std::chrono::milliseconds(1),
                                 std::chrono::milliseconds(100));
    std::vector<std::size_t> stuck;
    std::unique_lock lock(mutex_);
    for (;;) {
      bool all_done = true;
      for (std::size_t r = 0; r < finished_.size(); ++r) {
        all_done = all_done && (finished_[r] || abandoned_[r]);
      }
      if (all_done) return stuck;
      changed_.wait_for(lock, poll);
      auto const now = clock::now();
      bool newly = false;
      for (std::size_t r = 0; r < busy_since_.size(); ++r) {
        if (!finished_[r] && !abandoned_[r] && busy_since_[r] && now - *busy_since_[r] > timeout_) {
          abandoned_[r] = 1;
          stuck.push_back(r);
          newly = true;
        }
      }
      if (newly) {
        lock.unlock();
        stop_others();
        lock.lock();
      }
    }
  }

 private:
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::optional<clock::time_point>> busy_since_;
  std::vector<char> finished_;
  std::vector<char> abandoned_;
};

/// Runs loop(r) for r in [0, replicas) on threads of their own and watches them from the calling
/// thread (see Watch::supervise). The threads wait at a gate until every one of them exists, so a
/// failure to start one (std::system_error) lets the others go home instead of waiting for a
/// replica that never came. Returns the abandoned replicas; their threads are detached, the others
/// joined. `loop` must not throw, and must return at once when watch->end(r) says so.
template <class Loop, class Stop>
std::vector<std::size_t> run_replica_threads(std::size_t replicas,
                                             std::shared_ptr<Watch> const& watch, Loop& loop,
                                             Stop&& stop_others) {
  std::atomic<int> gate{0};  // 0: wait, 1: run, 2: abandon
  std::vector<std::thread> threads;
  threads.reserve(replicas);
  try {
    for (std::size_t r = 0; r < replicas; ++r) {
      // The watch is captured by value: a detached thread still holds it after run() returns.
      threads.emplace_back([watch, &loop, &gate, r] {
        gate.wait(0);
        if (gate.load() == 1) loop(r);
        watch->finish(r);
      });
    }
  } catch (...) {
    gate = 2;
    gate.notify_all();
    for (auto& t : threads) t.join();
    throw;
  }
  gate = 1;
  gate.notify_all();
  auto const stuck = watch->supervise(std::forward<Stop>(stop_others));
  for (std::size_t r = 0; r < replicas; ++r) {
    if (std::find(stuck.begin(), stuck.end(), r) != stuck.end()) {
      threads[r].detach();
    } else {
      threads[r].join();
    }
  }
  return stuck;
}

/// What a replica thread keeps alive on its own stack, so that nothing it touches is freed under it
/// when it is abandoned in user code and run() returns: the group (its model and arenas), the plan
/// (its batch buffers) and the watch.
template <class Group, class Plan>
struct ThreadHold {
  std::shared_ptr<Group> group;
  std::shared_ptr<Plan const> plan;
  std::shared_ptr<Watch> watch;
  std::shared_ptr<typename Group::model_type> model;

  ThreadHold(std::shared_ptr<Group> g, std::shared_ptr<Plan const> p, std::shared_ptr<Watch> w,
             std::size_t replica)
      : group(std::move(g)), plan(std::move(p)), watch(std::move(w)), model(group->handle(replica)) {}
};

/// "replica 1" or "replicas 0, 2".
inline std::string name_replicas(std::vector<std::size_t> const& replicas) {
  std::string text = replicas.size() == 1 ? "replica " : "replicas ";
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(replicas[i]);
  }
  return text;
}

}  // namespace convoy::comm::in_process
