// The central store: the in-process engine for everything that is not lock step (asynchronous
// updates, bounded staleness, and synchronous steps that aggregate the first M of R gradients).
// The central weights are the truth, cut into chunks that each have their own lock: a replica
// pulls a copy chunk by chunk, computes on it without any lock, and applies (or adds) its gradients
// chunk by chunk, so two replicas update different chunks at the same time and the serial part of
// an update is a counter increment. The Sync policy's rule object decides who may start and what
// an arriving gradient does; the store only moves floats.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "../../core/concepts.hpp"
#include "../../core/detail/aligned_allocator.hpp"
#include "../../core/error.hpp"
#include "../../sync/rules.hpp"
#include "../../train/step.hpp"
#include "replica_threads.hpp"

namespace convoy::comm::in_process {

/// An arena cut into chunks under locks of their own. Locks striped by chunk rather than relaxed
/// atomic writes (Hogwild): every chunk of a pulled copy is one consistent state, each update of a
/// chunk is whole, and Adam's slots stay coherent with the weights they belong to.
class StripedArena {
 public:
  /// Chunks of at least 4096 floats (16 KiB: a lock per chunk costs nothing beside the copy), at
  /// most 64 of them.
  StripedArena(std::span<float> arena, std::size_t replicas)
      : arena_(arena),
        chunks_(std::clamp<std::size_t>(arena.size() / 4096, 1, 64)),
        locks_(std::make_unique<std::mutex[]>(chunks_)),
        replicas_(std::max<std::size_t>(replicas, 1)) {}

  /// Calls f(begin, end) for every chunk under its lock, starting at a chunk that depends on
  /// `replica`, so replicas that update at the same time start apart instead of queueing.
  template <class F>
  void for_each_chunk(std::size_t replica, F&& f) const {
    std::size_t const first = replica * chunks_ / replicas_;
    for (std::size_t i = 0; i < chunks_; ++i) {
      std::size_t const k = (first + i) % chunks_;
      auto const [begin, end] = chunk_bounds(arena_.size(), chunks_, k);
      if (begin == end) continue;
      std::lock_guard lock(locks_[k]);
      f(begin, end);
    }
  }
  std::span<float> arena() const { return arena_; }

 private:
  std::span<float> arena_;
  std::size_t chunks_;
  std::unique_ptr<std::mutex[]> locks_;
  std::size_t replicas_;
};

/// One run of the central store: one thread per replica, each a loop of named steps (claim a
/// batch, pull, compute, admit, deliver, wait for the step), and the state they share under one
/// mutex. A replica thread abandoned for outlasting the timeout may outlive this object: between
/// the watch's begin() and end() it reads only its own stack and ThreadHold (compute), and once
/// end() says it was abandoned it returns without touching anything here.
template <class Group, class Sync>
class CentralStoreRun {
  using clock = std::chrono::steady_clock;
  using rules_type = typename Sync::rules_type;

 public:
  CentralStoreRun(std::shared_ptr<Group> const& group, std::shared_ptr<RunPlan const> const& plan,
                  Sync const& policy)
      : group_ptr_(group),
        plan_ptr_(plan),
        policy_(policy),
        g_(*group),
        plan_(*plan),
        counters_(g_.counters()),
        rules_(policy.make_rules(counters_)),
        accumulates_(rules_.accumulates()),
        carry_on_(policy.continue_after_error()),
        weights_(g_.central(), g_.size()),
        sum_storage_(accumulates_ ? g_.layout().element_count() : 0, 0.0f),
        sum_(sum_storage_, g_.size()),
        claimed_(counters_.batches()),
        promised_(counters_.global_step),
        watch_(std::make_shared<Watch>(g_.size(), policy.timeout)) {}
  CentralStoreRun(CentralStoreRun const&) = delete;
  CentralStoreRun& operator=(CentralStoreRun const&) = delete;

  /// Blocks until the run ends. Returns the replicas abandoned for outlasting the policy's timeout;
  /// else rethrows the first error, or throws ReplicaError naming every replica that failed when
  /// the policy carries on after errors.
  std::vector<std::size_t> run() {
    auto loop = [this](std::size_t r) { replica_loop(r); };
    g_.set_at_rest(false);
    auto const stuck = run_replica_threads(g_.size(), watch_, loop, [this] {
      std::lock_guard lock(locks_->state);
      stop_ = true;
      locks_->changed.notify_all();
    });
    g_.set_at_rest(true);
    if (!stuck.empty()) return stuck;
    g_.publish_central();
    if (!failed_.empty() && carry_on_) throw_replica_error();
    locks_->error.rethrow();
    return {};
  }

 private:
  // A batch handed to a replica: the step its gradient is tagged for, its lead over the slowest
  // (bounded staleness), and its local step (which slice of the data).
  struct Claim {
    std::int64_t tag = 0;
    std::int64_t lead = 0;
    std::int64_t local = 0;
  };
  struct Computed {
    float loss = 0.0f;
    double seconds = 0.0;
  };
  enum class Delivered { reported, pending, failed };

  void replica_loop(std::size_t r) {
    ThreadHold const hold(group_ptr_, plan_ptr_, watch_, r);
    auto const ctx = g_.context(r);
    auto const scope = ctx.enter();
    auto& vars = hold.model->variables();
    bool pulled = false;  // the replica's weights already hold its own last update
    while (auto const claim = next_claim(r)) {
      if (!pulled) pull(r, vars.weights());
      pulled = false;
      Computed computed;
      hold.watch->begin(r);
      try {
        computed = compute(hold, ctx, r, claim->local);
      } catch (...) {
        if (!hold.watch->end(r)) return;
        fail_replica(r);
        break;
      }
      if (!hold.watch->end(r)) return;  // abandoned: the run and its state are gone
      auto const admission = admit(r, claim->tag);
      if (!admission) break;
      if (*admission == sync::Admission::drop) continue;
      auto const delivered = deliver(ctx, r, vars, *admission, *claim, computed, pulled);
      if (delivered == Delivered::failed) break;
      if (delivered == Delivered::pending && !wait_for_step(r, claim->tag)) break;
    }
    std::lock_guard lock(locks_->state);
    rules_.retire(r);
    locks_->changed.notify_all();
  }

  // With the mutex held. Each batch handed out becomes one update unless the rules accumulate
  // (and may drop).
  bool finished() const {
    return stop_ || plan_.reached(accumulates_ ? counters_.global_step : promised_, claimed_);
  }
  // With the mutex held.
  void fail_all(std::exception_ptr what) {
    locks_->error.capture(std::move(what));
    stop_ = true;
    locks_->changed.notify_all();
  }

  // Replica r's next batch once the rules let it start; nullopt when the run is over for it.
  std::optional<Claim> next_claim(std::size_t r) {
    std::unique_lock lock(locks_->state);
    if (finished()) return std::nullopt;
    if (!rules_.may_start(r)) {
      bool const ok = locks_->changed.wait_for(lock, policy_.timeout,
                                               [&] { return finished() || rules_.may_start(r); });
      if (!ok) {
        fail_all(std::make_exception_ptr(
            TimeoutError("convoy: replica " + std::to_string(r) + " waited " +
                         std::to_string(policy_.timeout.count()) + " ms under " +
                         std::string(Sync::name) + " for " + rules_.waiting_for(r))));
      }
      if (finished()) return std::nullopt;
    }
    Claim claim;
    if constexpr (sync::bounds_staleness<rules_type>) claim.lead = rules_.lead(r);
    ++claimed_;
    ++promised_;
    ++computing_;
    claim.tag = rules_.open_step();
    claim.local = counters_.local_steps[r];
    return claim;
  }

  // The central weights into the replica's own, chunk by chunk.
  void pull(std::size_t r, std::span<float> into) const {
    weights_.for_each_chunk(r, [&](std::size_t b, std::size_t e) {
      std::copy(weights_.arena().begin() + b, weights_.arena().begin() + e, into.begin() + b);
    });
  }

  // The user's code, timed by the watch: reads only the thread's hold and its own arguments.
  template <class Context>
  static Computed compute(ThreadHold<Group, RunPlan> const& hold, Context const& ctx, std::size_t r,
                          std::int64_t local) {
    Batch const batch = hold.plan->batch(r, local);
    auto const start = clock::now();
    Computed computed;
    computed.loss = forward_backward_in(*hold.model, batch, ctx);
    computed.seconds = std::chrono::duration<double>(clock::now() - start).count();
    return computed;
  }

  // In the handler of replica r's error: its batch goes back (another replica trains on it), and
  // the run stops, or, when the policy carries on after errors, goes on without r.
  void fail_replica(std::size_t r) {
    std::unique_lock lock(locks_->state);
    --claimed_;
    --promised_;
    --computing_;
    if (!carry_on_) {
      fail_all(std::current_exception());
      return;
    }
    std::string what = "unknown error";
    try {
      throw;
    } catch (std::exception const& e) {
      what = e.what();
    } catch (...) {
    }
    std::clog << "convoy: replica " << r << " failed and stops; the others carry on: " << what
              << std::endl;
    locks_->error.capture();
    failed_.push_back(r);
  }

  // What the rules do with replica r's gradient for step `tag`; nullopt once the run stopped.
  std::optional<sync::Admission> admit(std::size_t r, std::int64_t tag) {
    std::shared_lock gate(g_.gate());  // counters change: not while a snapshot reads them
    std::lock_guard lock(locks_->state);
    --computing_;
    if (stop_) return std::nullopt;
    auto const admission = rules_.admit(r, tag);
    if (admission == sync::Admission::drop) {
      // Late: the gradient is dropped, but not its rows. The batch goes back and the replica
      // computes it again on fresher weights, so a run of N epochs learns from N passes over the
      // data whatever M is, and no straggler's slice of it is lost.
      ++counters_.dropped;
      --claimed_;
      locks_->changed.notify_all();
      return admission;
    }
    ++counters_.local_steps[r];
    return admission;
  }

  // The gradient into the open step's sum (accumulate) or the weights (apply); the update, when it
  // completes one, reported. Library code, not timed: it always finishes, and an abandoned thread
  // must not be in it.
  template <class Context>
  Delivered deliver(Context const& ctx, std::size_t r, Variables& vars, sync::Admission admission,
                    Claim const& claim, Computed computed, bool& pulled) {
    bool complete = admission == sync::Admission::apply;
    StepReport done;
    try {
      if (admission == sync::Admission::accumulate) complete = add_to_sum(r, vars, computed.loss);
      if (complete) {
        done = apply_update(ctx, r, vars, admission == sync::Admission::accumulate, claim, computed,
                            pulled);
      }
    } catch (...) {
      std::lock_guard lock(locks_->state);
      fail_all(std::current_exception());
      return Delivered::failed;
    }
    if (!complete) return Delivered::pending;
    report(done);
    return Delivered::reported;
  }

  // Adds replica r's gradients into the open step's sum. True when the step is complete (the M-th
  // to finish adding applies the sum); `loss` is then the step's mean loss.
  bool add_to_sum(std::size_t r, Variables& vars, float& loss) {
    {
      std::shared_lock gate(g_.gate());
      auto const grads = vars.grads();
      sum_.for_each_chunk(r, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) sum_storage_[i] += grads[i];
      });
    }
    std::lock_guard lock(locks_->state);
    loss_sum_ += loss;
    if (!rules_.accumulated(r)) return false;
    loss = loss_sum_ / static_cast<float>(rules_.gradients_per_update());
    loss_sum_ = 0.0f;
    return true;
  }

  // Applies the sum (or replica r's own gradients) to the central weights as the next update, and
  // counts it. The update's number, its floats and its counts change under one hold of the gate,
  // so a snapshot never sees the optimizer a step ahead of global_step.
  template <class Context>
  StepReport apply_update(Context const& ctx, std::size_t r, Variables& vars, bool from_sum,
                          Claim const& claim, Computed computed, bool& pulled) {
    auto const m = from_sum ? rules_.gradients_per_update() : std::size_t{1};
    std::shared_lock gate(g_.gate());
    std::int64_t update = 0;
    {
      std::lock_guard lock(locks_->state);
      update = ++g_.slots().updates;
    }
    apply(ctx, r, from_sum ? std::span<float const>(sum_storage_) : vars.grads(),
          1.0f / static_cast<float>(m), update, from_sum,
          from_sum ? std::span<float>() : vars.weights());
    pulled = !from_sum && !sync::bounds_staleness<rules_type>;
    std::lock_guard lock(locks_->state);
    ++counters_.global_step;
    counters_.applied += static_cast<std::int64_t>(m);
    rules_.applied(r);
    locks_->changed.notify_all();
    return {.global_step = counters_.global_step,
            .local_step = counters_.local_steps[r],
            .replica = r,
            .loss = computed.loss,
            .seconds = computed.seconds,
            .applied = counters_.applied,
            .dropped = counters_.dropped,
            .batches = counters_.batches(),
            .lead = claim.lead};
  }

  // Applies `grads` (scaled) to the central weights as update number `update`, chunk by chunk;
  // zeroes each chunk of the sum once applied when the gradients are the sum.
  // Without a sum, the updated chunk is also copied into the replica's own weights while it is
  // still in the cache (a push and the next pull in one pass, as ps-lite's PushPull), so its next
  // step needs no separate pull: it computes on the central weights as of its own update.
  template <class Context>
  void apply(Context const& ctx, std::size_t r, std::span<float const> grads, float scale,
             std::int64_t update, bool from_sum, std::span<float> pull_into) {
    weights_.for_each_chunk(r, [&](std::size_t b, std::size_t e) {
      g_.optimizer().apply(ctx, weights_.arena(), grads.subspan(b, e - b), g_.slots(), b, scale,
                           update);
      if (from_sum) std::fill(sum_storage_.begin() + b, sum_storage_.begin() + e, 0.0f);
      if (!pull_into.empty()) {
        std::copy(weights_.arena().begin() + b, weights_.arena().begin() + e,
                  pull_into.begin() + b);
      }
    });
  }

  // after_step, one call at a time, outside the other locks; false or an error stops the run.
  void report(StepReport const& done) {
    std::lock_guard lock(locks_->report);
    bool keep_going = true;
    try {
      keep_going = !plan_.after_step || plan_.after_step(done);
    } catch (...) {
      std::lock_guard state(locks_->state);
      fail_all(std::current_exception());
      return;
    }
    if (!keep_going) {
      std::lock_guard state(locks_->state);
      stop_ = true;
      locks_->changed.notify_all();
    }
  }

  // Waits for step `tag` to be applied, so that the next pull sees it. False when the replica
  // stops: the wait timed out, or the run ended with the step short of gradients (no replica is
  // computing any more, so it can never complete: its gradients are dropped).
  bool wait_for_step(std::size_t r, std::int64_t tag) {
    std::unique_lock lock(locks_->state);
    bool const ok = locks_->changed.wait_for(lock, policy_.timeout, [&] {
      return stop_ || rules_.open_step() != tag || (finished() && computing_ == 0);
    });
    if (!ok) {
      fail_all(std::make_exception_ptr(TimeoutError("convoy: synchronous step waited " +
                                                    std::to_string(policy_.timeout.count()) +
                                                    " ms: " + rules_.waiting_for(r))));
      return false;
    }
    if (rules_.open_step() == tag && !stop_) {  // abandoned at the end of the run
      if constexpr (sync::discards_open_step<rules_type>) {
        counters_.dropped += static_cast<std::int64_t>(rules_.discard());
      }
      locks_->changed.notify_all();
      return false;
    }
    return true;
  }

  [[noreturn]] void throw_replica_error() {
    std::sort(failed_.begin(), failed_.end());
    std::string what;
    try {
      locks_->error.rethrow();
    } catch (std::exception const& e) {
      what = e.what();
    } catch (...) {
    }
    throw ReplicaError("convoy: " + name_replicas(failed_) + " of " + std::to_string(g_.size()) +
                           " failed during the asynchronous run; the others trained on to global "
                           "step " +
                           std::to_string(counters_.global_step) + ". First error: " + what,
                       failed_);
  }

  // The run's locks live on the heap: ThreadSanitizer forgets a mutex only when its memory is
  // freed, so mutexes of successive runs at one stack address would share one lock-order history.
  struct Locks {
    std::mutex state;   // guards rules_, counters_ and the run's fields below
    std::mutex report;  // after_step: one call at a time, outside the other locks
    std::condition_variable changed;
    FirstError error;
  };

  std::shared_ptr<Group> group_ptr_;
  std::shared_ptr<RunPlan const> plan_ptr_;
  Sync const& policy_;
  Group& g_;
  RunPlan const& plan_;
  Counters& counters_;
  rules_type rules_;
  bool const accumulates_;
  bool const carry_on_;
  StripedArena const weights_;
  convoy::detail::AlignedVector<float> sum_storage_;
  StripedArena const sum_;
  std::unique_ptr<Locks> locks_ = std::make_unique<Locks>();
  bool stop_ = false;
  std::int64_t claimed_;       // batches handed out, computed or not
  std::int64_t promised_;      // not accumulating: updates handed out
  std::size_t computing_ = 0;  // replicas between claim and delivery
  float loss_sum_ = 0.0f;
  std::vector<std::size_t> failed_;
  std::shared_ptr<Watch> watch_;
};

/// Runs `plan` on the central store under `sync`'s rules: one thread per replica. Blocks until the
/// run ends. Returns the replicas abandoned for outlasting the policy's timeout; else rethrows the
/// first error, or, when the policy carries on after errors, throws ReplicaError naming every
/// replica that failed (each was logged on std::clog when it failed) once the others are done.
template <class Group, class Sync>
std::vector<std::size_t> run_central_store(std::shared_ptr<Group> const& group,
                                           std::shared_ptr<RunPlan const> const& plan,
                                           Sync const& policy) {
  return CentralStoreRun<Group, Sync>(group, plan, policy).run();
}

}  // namespace convoy::comm::in_process
