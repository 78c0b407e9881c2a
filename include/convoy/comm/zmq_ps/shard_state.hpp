// A parameter-server shard's state and how each request changes it: its pieces of the variables
// and their optimizer slots, the Sync policy's rule object (sync/rules.hpp), driven exactly as the
// in-process central store drives it, the requests the rules hold back, the counters, which
// workers have said goodbye or were lost, and on ps:0 which slice of the data each trains next
// (data_slices.hpp). No socket: a request comes in as frames with its decoded
// header, and the answers it releases go out through answers(), in order, for the serving loop
// (shard.hpp) to send or the fuzz targets to read.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "../../core/error.hpp"
#include "../../core/snapshot.hpp"
#include "../../io/checkpoint_parts.hpp"
#include "../../optim/optimizer.hpp"
#include "../../place/sharded.hpp"
#include "../../sync/rules.hpp"
#include "data_slices.hpp"
#include "fingerprint.hpp"
#include "lost_worker.hpp"
#include "shard_options.hpp"
#include "shard_store.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

/// An answer to send: the addressee's identity, the header, the payload.
struct Answer {
  zmq::message_t peer;
  Header header;
  std::vector<zmq::message_t> payload;
};

template <class Sync>
class ShardState {
 public:
  using Rules = decltype(std::declval<Sync const&>().make_rules(std::declval<Counters const&>()));

  ShardState(std::vector<place::Piece const*> const& pieces, optim::Optimizer optimizer, Sync sync,
             ShardOptions const& options)
      : index_(options.index),
        shards_(options.shards),
        workers_(options.workers),
        log_(options.log),
        sync_(sync),
        fingerprint_(zmq_ps::fingerprint(pieces, optimizer, sync, options.shards, options.workers)),
        counters_{.local_steps = std::vector<std::int64_t>(options.workers, 0)},
        rules_(sync.make_rules(counters_)),
        store_(pieces, optimizer, options.state_ranges, rules_.accumulates(), name()) {}
  ShardState(ShardState const&) = delete;
  ShardState& operator=(ShardState const&) = delete;

  std::string name() const { return "ps:" + std::to_string(index_); }
  Counters const& counters() const { return counters_; }
  std::span<place::Piece const> pieces() const { return store_.pieces(); }
  std::size_t elements() const { return store_.elements(); }
  std::uint64_t fingerprint() const { return fingerprint_; }
  /// The most frames a request carries: the peer, the header, weights and slots for each piece.
  std::size_t most_frames() const { return 2 + store_.most_arrays() * store_.pieces().size(); }

  /// The answers released so far, in order; the caller sends them and clears it.
  std::vector<Answer>& answers() { return answers_; }

  /// Takes one checked request ([peer id, header, payload...]): answers it now or keeps it
  /// waiting, and answers the earlier ones it releases. Throws ProtocolError for one it refuses.
  void take(std::vector<zmq::message_t>& frames, Header const& h) {
    if (void_request(frames[0], h)) return;
    if (departed_[h.worker]) come_back(h.worker);
    // Only a restore raises the generation, and only a pull may wait for it.
    if (h.generation > generation_ && h.op != Op::restore && h.op != Op::pull &&
        h.op != Op::hello && h.op != Op::bye) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " sent a " +
                          describe(h.op) + " of generation " + std::to_string(h.generation) +
                          " to " + name() + ", which is at " + std::to_string(generation_));
    }
    if (!answer_resent(frames, h)) route(frames, h);
  }

  /// Answers a request with an error saying `why`.
  void error(zmq::message_t& peer, Header const& request, std::string const& why) {
    Header h = answer_to(request, Status::error);
    h.text = why;
    answers_.push_back(Answer{std::move(peer), std::move(h), {}});
  }

  /// Applies on_loss to a worker lost before its goodbye (`what`: how, for the log), and logs
  /// what follows.
  void lose(std::size_t worker, std::string const& what) {
    if (departed_[worker] || !failure_.empty()) return;
    auto const live = live_workers() - 1;
    switch (on_loss(rules_, sync_, workers_, live, goodbyes_.size())) {
      case OnLoss::wait:
        if (log_) {
          *log_ << "convoy: " << what << "; the others wait for it under " << Sync::name
                << " (up to " << sync_.timeout.count()
                << " ms); it is served again if it reconnects" << std::endl;
        }
        return;
      case OnLoss::depart:
        return depart(worker, what, live);
      case OnLoss::fail:
        departed_[worker] = 1;
        forget_waiting(worker);
        failure_ = "convoy: " + what + "; step " + std::to_string(rules_.open_step() + 1) +
                   " needs " + std::to_string(rules_.gradients_per_update()) + " gradients and " +
                   std::to_string(live) + " worker(s) are left, so the " + std::string(Sync::name) +
                   " run stops (" + fail_reason(live) + ")";
        if (log_) *log_ << failure_ << std::endl;
        for (auto& w : waiting_) answer_error(w, failure_);  // the others hear it next time
        waiting_.clear();
        return;
    }
  }

  /// Whether `worker` said goodbye.
  bool finished(std::size_t worker) const {
    return std::find(goodbyes_.begin(), goodbyes_.end(), worker) != goodbyes_.end();
  }
  /// Every worker said goodbye or was lost for good, and the run has an outcome: some worker
  /// finished, or a loss ended it. With every worker lost and none finished, a restarted one may
  /// still come; the policy's timeout ends that wait.
  bool over() const {
    if (goodbyes_.size() + departed() < workers_) return false;
    return !goodbyes_.empty() || !failure_.empty();
  }
  /// Why a lost worker ended the run; empty while it goes on.
  std::string const& failure() const { return failure_; }
  std::chrono::milliseconds timeout() const { return sync_.timeout; }
  std::string missing_workers() const {
    std::string out;
    for (std::size_t w = 0; w < workers_; ++w) {
      if (!finished(w)) out += (out.empty() ? "" : ", ") + std::to_string(w);
    }
    return "worker(s) " + out + " have not said goodbye";
  }
  std::size_t departed() const {
    return static_cast<std::size_t>(std::count(departed_.begin(), departed_.end(), char{1}));
  }
  std::string departed_names() const {
    std::string out;
    for (std::size_t w = 0; w < departed_.size(); ++w) {
      if (departed_[w]) out += (out.empty() ? "" : ", ") + worker_name(w);
    }
    return out;
  }
  /// Pushes and pulls a worker sent again after losing its connection: answered, never applied
  /// twice.
  std::int64_t resent() const { return resent_; }
  /// Bounded staleness: the most clocks a released worker led by.
  std::int64_t largest_lead() const { return largest_lead_; }

 private:
  struct Waiting {
    zmq::message_t peer;
    std::uint32_t worker = 0;
    Op op = Op::push;
    std::int64_t tag = 0;  ///< push: the step its gradient went into
    std::uint64_t sequence = 0;
    float loss = 0.0f;             ///< apply-at-once: its own update's loss
    std::uint64_t generation = 0;  ///< the request's: a pull of a later one waits for its restore
    std::uint8_t keep_global_batch = 0;  ///< the request's: how ps:0 shares out the data

    /// What a reply to it echoes of the request: its op, worker and sequence, and what the
    /// answer's slices of the data depend on.
    Header request() const {
      Header h;
      h.op = op;
      h.worker = worker;
      h.sequence = sequence;
      h.keep_global_batch = keep_global_batch;
      return h;
    }
  };
  /// A worker's last push: its number and its answer, to answer a copy sent again without
  /// applying it twice.
  struct LastPush {
    std::uint64_t sequence = 0;
    Status status = Status::ok;
  };

  std::string worker_name(std::size_t w) const { return "worker " + std::to_string(w); }
  std::size_t live_workers() const { return workers_ - goodbyes_.size() - departed(); }
  bool waits(std::uint32_t worker) const {
    return std::any_of(waiting_.begin(), waiting_.end(),
                       [&](Waiting const& w) { return w.worker == worker; });
  }
  // Accumulating rules whose open step needs more gradients than workers are left: the step can
  // never complete, so its gradients are dropped and the waiting pushes told that the run is over.
  bool step_unreachable() const {
    if constexpr (sync::elastic<Rules>) {
      // The gradients in the open step, and those the live workers have yet to give.
      std::size_t can_come = rules_.summed();
      for (std::size_t w = 0; w < workers_; ++w) {
        can_come += !departed_[w] && !finished(w) && !rules_.contributed(w);
      }
      return can_come < rules_.gradients_per_update();
    } else {
      return rules_.accumulates() && live_workers() < rules_.gradients_per_update();
    }
  }
  // Why a lost worker stops the run, for its message.
  std::string fail_reason(std::size_t live) const {
    if constexpr (sync::survives_losses<Sync>) {
      if (live < static_cast<std::size_t>(sync_.min_workers)) {
        return std::to_string(live) +
               " is below min_workers = " + std::to_string(sync_.min_workers);
      }
      if (sync_.stop_on_lost_worker) return "stop_on_lost_worker is set";
    }
    return "replicas_to_aggregate below the worker count makes backup workers";
  }

  // A lost worker counts as departed: the group goes on without it (`live` left).
  void depart(std::size_t worker, std::string const& what, std::size_t live) {
    departed_[worker] = 1;
    forget_waiting(worker);
    slices_.give_back(worker);
    bool complete = false;
    if constexpr (sync::elastic<Rules>) {
      complete = rules_.leave(worker);
    } else {
      rules_.retire(worker);
    }
    if (log_) {
      *log_ << "convoy: " << what << "; it counts as departed under " << Sync::name << ", " << live
            << " worker(s) go on";
      if (rules_.accumulates()) {
        *log_ << " and step " << rules_.open_step() + 1 << " takes "
              << rules_.gradients_per_update() << " gradient(s)";
      }
      *log_ << "; it is served again if it comes back" << std::endl;
    }
    if (complete) apply_open_step();
    release();
  }

  // A lost worker's waiting requests: nobody is left to answer (a gradient already summed into
  // the open step stays in it).
  void forget_waiting(std::size_t worker) {
    std::erase_if(waiting_, [&](Waiting const& w) { return w.worker == worker; });
  }

  // Answers a request that can no longer be served with an error, and says so: one from before a
  // rollback (its worker has not heard of it yet: the answer carries the new generation, and its
  // worker starts over from the restored state), or any but a goodbye once a lost worker ended
  // the run.
  bool void_request(zmq::message_t& identity, Header const& h) {
    if (h.op != Op::hello && h.op != Op::bye && h.generation < generation_) {
      error(identity, h,
            "convoy: " + name() + " was rolled back to a checkpoint (generation " +
                std::to_string(generation_) + "); this " + describe(h.op) + " of generation " +
                std::to_string(h.generation) + " is void");
      return true;
    }
    if (!failure_.empty() && h.op != Op::bye) {
      error(identity, h, failure_);
      return true;
    }
    return false;
  }

  void route(std::vector<zmq::message_t>& frames, Header const& h) {
    switch (h.op) {
      case Op::hello:
        return hello(frames, h);
      case Op::init:
        return init(frames, h);
      case Op::restore:
        return restore(frames, h);
      case Op::push:
        return push(frames, h);
      case Op::pull:
        return pull(frames, h);
      case Op::snapshot:
        return snapshot(frames, h);
      case Op::bye:
        return bye(frames, h);
      case Op::save:
        return save(frames, h);
    }
  }

  // A push or pull its worker sent again after its connection was lost (heartbeats, a cut link):
  // the first copy may have come, and only its answer been lost. One still waiting is answered,
  // when its turn comes, on the new connection; a push already applied is answered again with the
  // same status, and not applied twice. Workers number their requests from 1.
  bool answer_resent(std::vector<zmq::message_t>& frames, Header const& h) {
    if ((h.op != Op::push && h.op != Op::pull) || h.sequence == 0) return false;
    auto const waiting = std::find_if(waiting_.begin(), waiting_.end(), [&](Waiting const& w) {
      return w.worker == h.worker && w.sequence == h.sequence;
    });
    bool const answered = h.op == Op::push && last_push_[h.worker].sequence == h.sequence;
    if (waiting == waiting_.end() && !answered) return false;
    ++resent_;
    if (log_) {
      *log_ << "convoy: " << name() << " got worker " << h.worker << "'s " << describe(h.op)
            << " again (its connection was lost); answering it once" << std::endl;
    }
    if (waiting != waiting_.end()) {
      waiting->peer = std::move(frames[0]);
      return true;
    }
    auto const status = last_push_[h.worker].status;
    if constexpr (sync::elastic<Rules>) {
      // Its gradient is in the step still open, and its waiting answer was forgotten when its
      // worker was lost (a heartbeat dropped it): it waits for that step again, as any push does.
      if (status == Status::ok && rules_.contributed(h.worker) && h.tag == rules_.open_step()) {
        wait(frames, h);
        return true;
      }
    }
    reply(frames[0], h, status,
          status == Status::stopped ? std::vector<zmq::message_t>{} : store_.weights_frames());
    return true;
  }

  void hello(std::vector<zmq::message_t>& frames, Header const& h) {
    // A worker's probe (sequence 0, asked of a shard whose connection came back, to learn
    // whether it is the same process) comes from the same worker process: it keeps its numbers,
    // and the request it sent again on the new connection stays waiting.
    bool const probe = h.sequence == 0;
    if (h.fingerprint != fingerprint_ || h.text != store_.optimizer().name()) {
      error(frames[0], h,
            "convoy: worker " + std::to_string(h.worker) + " and " + name() +
                " disagree on the model's variables, the optimizer (" + h.text + " vs " +
                std::string(store_.optimizer().name()) +
                ") or the cluster's size; run the same program with the same options on every "
                "task");
      return;
    }
    // A worker's hello starts it anew: what its earlier process left waiting is nobody's, and it
    // numbers its requests from 1 again.
    if (!probe) {
      last_push_[h.worker] = {};
      forget_waiting(h.worker);
    }
    reply(frames[0], h, Status::ok, {});
  }

  // A worker counted as departed sends again (a restarted process, or a connection back after
  // heartbeats dropped it): it is live again, and takes the current weights and counters.
  void come_back(std::size_t worker) {
    departed_[worker] = 0;
    if (log_) {
      *log_ << "convoy: " << name() << ": " << worker_name(worker) << " is back, at global step "
            << counters_.global_step << std::endl;
    }
  }

  void init(std::vector<zmq::message_t>& frames, Header const& h) {
    store_.check_payload(frames, h, 1);
    if (!initialized_) {
      store_.write_weights(frames);
      initialized_ = true;
      if (log_) *log_ << "convoy: " << name() << " initialized by worker " << h.worker << std::endl;
    }
    reply(frames[0], h, Status::ok, {});
    release();
  }

  void restore(std::vector<zmq::message_t>& frames, Header const& h) {
    store_.check_payload(frames, h, store_.most_arrays());
    bool const pushes_wait = std::any_of(waiting_.begin(), waiting_.end(),
                                         [](Waiting const& w) { return w.op == Op::push; });
    if (h.generation == generation_ && pushes_wait) {
      error(frames[0], h,
            "convoy: " + name() + " cannot restore while workers' gradients wait for step " +
                std::to_string(rules_.open_step() + 1) +
                "; restore before the workers train (the chief does, when it resumes)");
      return;
    }
    check_restored_counters(h);
    bool const rolls_back = h.generation > generation_;
    if (rolls_back) roll_back(h);
    slices_.restart(trained_slices(h.local), rolls_back);
    store_.restore(frames, h.optimizer_updates);
    counters_.global_step = h.global_step;
    counters_.applied = h.applied;
    counters_.dropped = h.dropped;
    counters_.local_steps = h.local;
    rules_ = sync_.make_rules(counters_);
    for (std::size_t w = 0; w < workers_; ++w) {  // the restored steps do not wait for them
      if (!departed_[w]) continue;
      if constexpr (sync::elastic<Rules>) {
        rules_.leave(w);
      } else {
        rules_.retire(w);
      }
    }
    loss_sum_ = 0.0f;
    summed_slices_ = 0;
    initialized_ = true;
    reply(frames[0], h, Status::ok, {});
    release();
  }
  // The counters only grow from a restore, by one a step: a negative one, or one past 2^62 (more
  // steps than any run takes), would overflow, and the clock table reads its largest value as a
  // worker that said goodbye.
  void check_restored_counters(Header const& h) const {
    if (h.local.size() != workers_) {
      throw ProtocolError("convoy: a restore for " + std::to_string(h.local.size()) +
                          " workers reached " + name() + " of " + std::to_string(workers_));
    }
    auto const counter = [](std::int64_t v) { return v >= 0 && v <= (std::int64_t{1} << 62); };
    if (!counter(h.global_step) || !counter(h.applied) || !counter(h.dropped) ||
        !counter(h.optimizer_updates) || !std::all_of(h.local.begin(), h.local.end(), counter)) {
      throw ProtocolError(
          "convoy: a restore to " + name() + " carries a counter outside 0..2^62 (global step " +
          std::to_string(h.global_step) + ", " + std::to_string(h.optimizer_updates) +
          " optimizer updates); restore from a checkpoint convoy wrote");
    }
  }

  // Slices the restored workers' steps trained, one a step: where the data goes on.
  static std::int64_t trained_slices(std::vector<std::int64_t> const& local) {
    constexpr std::int64_t most = std::int64_t{1} << 62;  // each is at most that (checked above)
    std::int64_t sum = 0;
    for (auto const v : local) sum = v > most - sum ? most : sum + v;
    return sum;
  }

  void push(std::vector<zmq::message_t>& frames, Header const& h) {
    store_.check_payload(frames, h, 1);
    if (!initialized_) {
      throw ProtocolError("convoy: a push reached " + name() +
                          " before its weights were initialized");
    }
    void_earlier(h.worker, h.generation);
    if (waits(h.worker)) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " pushed to " + name() +
                          " while its previous request waits");
    }
    auto const w = h.worker;
    // A gradient for a step already applied is late whatever comes next (admit() drops it below);
    // one for the open step, when too few workers are left to complete it, ends the run.
    if (step_unreachable() && h.tag >= rules_.open_step()) {
      say_step_ends(0, 1);
      last_push_[w] = {h.sequence, Status::stopped};
      reply(frames[0], h, Status::stopped, {});
      return;
    }
    bool rejoins = false;
    if constexpr (sync::elastic<Rules>) rejoins = !rules_.member(w);
    // ps:0 hands out the data: a gradient on a slice that went to another worker while this one
    // was gone is late (its step takes it nowhere), and its worker trains what it is given next.
    if (h.slices.empty() || h.slices.size() > workers_) {
      throw ProtocolError("convoy: worker " + std::to_string(w) + "'s push to " + name() +
                          " names " + std::to_string(h.slices.size()) +
                          " slices of the data it was computed on; a push names 1 to " +
                          std::to_string(workers_));
    }
    bool const stale = index_ == 0 && !slices_.may_train(w, h.slices);
    if (stale) say_stale(w, h.slices);
    auto const admission = stale && !rules_.accumulates()
                               ? sync::Admission::drop
                               : rules_.admit(w, stale ? rules_.open_step() - 1 : h.tag);
    if (rejoins && log_) {
      *log_ << "convoy: " << name() << ": " << worker_name(w)
            << " trains in the group again from step " << rules_.open_step() + 1 << " ("
            << rules_.gradients_per_update() << " gradient(s) a step)" << std::endl;
    }
    if (admission == sync::Admission::drop) {
      ++counters_.dropped;
      last_push_[w] = {h.sequence, Status::dropped};
      reply(frames[0], h, Status::dropped, store_.weights_frames());
      return;
    }
    last_push_[w] = {h.sequence, Status::ok};
    // A gradient on k slices is the mean over k slices' rows: it weighs k in its step's average,
    // and counts k of the worker's batches.
    auto const weight = h.slices.size();
    counters_.local_steps[w] += static_cast<std::int64_t>(weight);
    if (index_ == 0) slices_.trained(w, h.slices);
    if (admission == sync::Admission::accumulate) {
      store_.add(frames, static_cast<float>(weight));
      loss_sum_ += h.loss * static_cast<float>(weight);
      summed_slices_ += weight;
      wait(frames, h);
      if (!rules_.accumulated(w)) {
        // A worker back in the group needs the others' gradients too: with too few left (the
        // others said goodbye), the step can never complete, and waiting pushes hear so now.
        if (rejoins && failure_.empty() && step_unreachable()) {
          stop_waiting_pushes();
          last_push_[w].status = Status::stopped;
        }
        return;
      }
      apply_open_step();
    } else {
      store_.apply(frames);
      ++counters_.global_step;
      ++counters_.applied;
      rules_.applied(w);
      wait(frames, h, h.loss);
    }
    release();
  }

  // Applies the open step's sum, averaged over the slices of data in it (one a gradient unless the
  // global batch is kept by a smaller group), and opens the next step.
  void apply_open_step() {
    auto const m = rules_.gradients_per_update();
    auto const slices = summed_slices_ > 0 ? summed_slices_ : m;
    update_loss_ = loss_sum_ / static_cast<float>(slices);
    loss_sum_ = 0.0f;
    summed_slices_ = 0;
    store_.apply_sum(slices);
    ++counters_.global_step;
    counters_.applied += static_cast<std::int64_t>(m);
    rules_.applied(0);
  }

  void pull(std::vector<zmq::message_t>& frames, Header const& h) {
    store_.check_payload(frames, h, 0);
    void_earlier(h.worker, h.generation);
    if (waits(h.worker)) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " pulled from " + name() +
                          " while its previous request waits");
    }
    wait(frames, h);
    release();
  }

  void snapshot(std::vector<zmq::message_t>& frames, Header const& h) {
    store_.check_payload(frames, h, 0);
    reply(frames[0], h, Status::ok, store_.snapshot_frames());
  }

  // Writes this shard's part of a checkpoint, by variable name, into the directory the chief
  // names; the answer carries the part's file name for the chief's manifest. A part that cannot
  // be written (disk full, no permission) fails that save, not the shard: it is answered with the
  // reason and the shard serves on.
  void save(std::vector<zmq::message_t>& frames, Header const& h) {
    store_.check_payload(frames, h, 0);
    std::string file;
    try {
      file = store_.save(h.text, io::PartView{.step = h.global_step,
                                              .shard = index_,
                                              .shards = shards_,
                                              .nonce = static_cast<std::uint64_t>(h.tag),
                                              .optimizer = std::string(store_.optimizer().name())});
    } catch (Error const& e) {
      if (log_) *log_ << "convoy: " << name() << ": " << e.what() << std::endl;
      error(frames[0], h, "convoy: " + name() + " cannot write its checkpoint part: " + e.what());
      return;
    }
    reply(frames[0], h, Status::ok, {}, std::move(file));
  }

  void bye(std::vector<zmq::message_t>& frames, Header const& h) {
    if (!finished(h.worker)) {
      goodbyes_.push_back(h.worker);
      rules_.retire(h.worker);
      slices_.give_back(h.worker);
    }
    reply(frames[0], h, Status::ok, {});
    if (failure_.empty() && step_unreachable()) stop_waiting_pushes();
    release();
  }

  // A restore of a later generation: the chief rolls the cluster back to a checkpoint after a
  // shard lost its state. What waits from before is void (its workers connect again and pull the
  // restored state); the restore then replaces weights, slots, counters and the open step.
  void roll_back(Header const& h) {
    generation_ = h.generation;  // first: each refusal below tells its worker the new generation
    auto const voided =
        void_waiting([&](Waiting const& w) { return w.generation < h.generation; },
                     "convoy: " + name() + " was rolled back to a checkpoint by worker " +
                         std::to_string(h.worker) + "; this request is void");
    if (log_) {
      *log_ << "convoy: " << name() << " rolled back to global step " << h.global_step
            << " by worker " << h.worker << "'s restore (generation " << generation_ << "); "
            << voided << " waiting request(s) voided" << std::endl;
    }
  }

  // A worker whose request of a later generation comes while one of an earlier waits has connected
  // again after a shard lost its state: the earlier one is void. A worker keeps at most one
  // request waiting, whatever its generations.
  void void_earlier(std::uint32_t worker, std::uint64_t generation) {
    void_waiting([&](Waiting const& w) { return w.worker == worker && w.generation < generation; },
                 "convoy: worker " + std::to_string(worker) + " sent " + name() +
                     " a request of a later generation; this one is void");
  }

  // Answers the waiting requests `is_void` picks with an error saying `why`, and drops them.
  template <class Pick>
  std::size_t void_waiting(Pick is_void, std::string const& why) {
    return answer_waiting(is_void, [&](Waiting& w) { answer_error(w, why); });
  }

  // The open step can never complete: drop what it summed and tell its waiting workers. Said in
  // the log only when it drops something: at a clean finish the first goodbye leaves the open step
  // short of workers too, with nothing in it.
  void stop_waiting_pushes() {
    std::size_t discarded = 0;
    if constexpr (sync::discards_open_step<Rules>) discarded = rules_.discard();
    counters_.dropped += static_cast<std::int64_t>(discarded);
    store_.clear_sum();
    loss_sum_ = 0.0f;
    summed_slices_ = 0;
    auto const stopped = answer_waiting([](Waiting const& w) { return w.op == Op::push; },
                                        [&](Waiting& w) { answer(w, Status::stopped, {}); });
    if (discarded > 0 || stopped > 0) say_step_ends(discarded, stopped);
  }
  // Once a run: later pushes for the open step are told to stop without a line each.
  void say_step_ends(std::size_t discarded, std::size_t stopped) {
    if (said_step_ends_ || !log_) return;
    said_step_ends_ = true;
    *log_ << "convoy: " << name() << " ends the open step: " << live_workers()
          << " worker(s) left, fewer than the " << rules_.gradients_per_update() << " it needs; "
          << discarded << " gradient(s) dropped, " << stopped << " worker(s) told to stop"
          << std::endl;
  }

  void say_stale(std::size_t worker, std::vector<std::int64_t> const& slices) {
    if (!log_) return;
    *log_ << "convoy: " << name() << ": " << worker_name(worker) << "'s gradient on slice(s)";
    for (auto const s : slices) *log_ << " " << s;
    *log_ << " of the data is dropped: a slice of it went to another worker while it was gone; it "
             "trains what it is given next"
          << std::endl;
  }

  // How many slices of the data `worker` trains at once: one, or with the global batch kept
  // (lock-step Synchronous only), its share of the N slices a global batch has among the live
  // workers, the first ones by index taking one more where N does not split evenly.
  std::size_t share_of(std::size_t worker, bool keep_global_batch) const {
    if constexpr (sync::elastic<Rules>) {
      if (!keep_global_batch || !rules_.lock_step() || departed_[worker] || finished(worker)) {
        return 1;
      }
      std::size_t live = 0, before = 0;
      for (std::size_t w = 0; w < workers_; ++w) {
        if (departed_[w] || finished(w)) continue;
        ++live;
        before += w < worker;
      }
      return workers_ / live + (before < workers_ % live ? 1 : 0);
    } else {
      return 1;
    }
  }

  // Whether a waiting request may be answered now.
  bool ready(Waiting const& wait) const {
    if (!initialized_ || wait.generation > generation_) return false;
    if (wait.op != Op::push) return true;
    if (rules_.accumulates()) return rules_.open_step() != wait.tag;  // its step was applied
    return rules_.may_start(wait.worker);  // bounded staleness holds a leader back
  }
  // Answers every waiting request the rules now allow.
  void release() {
    answer_waiting([&](Waiting const& w) { return ready(w); },
                   [&](Waiting& w) {
                     if constexpr (sync::bounds_staleness<Rules>) {
                       if (w.op == Op::push)
                         largest_lead_ = std::max(largest_lead_, rules_.lead(w.worker));
                     }
                     if (w.op == Op::push && !rules_.accumulates()) update_loss_ = w.loss;
                     answer(w, Status::ok, store_.weights_frames());
                   });
  }
  // Answers (`send`) and drops the waiting requests `pick` picks, in order; says how many.
  template <class Pick, class Send>
  std::size_t answer_waiting(Pick pick, Send send) {
    std::size_t answered = 0;
    for (std::size_t i = 0; i < waiting_.size();) {
      if (!pick(waiting_[i])) {
        ++i;
        continue;
      }
      send(waiting_[i]);
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      ++answered;
    }
    return answered;
  }

  // The request keeps its place until the rules let it be answered (`loss`: an update applied at
  // once, its own loss).
  void wait(std::vector<zmq::message_t>& frames, Header const& h, float loss = 0.0f) {
    waiting_.push_back(Waiting{std::move(frames[0]), h.worker, h.op, h.tag, h.sequence, loss,
                               h.generation, h.keep_global_batch});
  }
  void answer(Waiting& w, Status status, std::vector<zmq::message_t> payload) {
    reply(w.peer, w.request(), status, std::move(payload));
  }
  void answer_error(Waiting& w, std::string const& why) { error(w.peer, w.request(), why); }

  // What every answer to `request` says: its op, worker and sequence, and who answers.
  Header answer_to(Header const& request, Status status) const {
    Header h;
    h.op = request.op;
    h.status = status;
    h.worker = request.worker;
    h.sequence = request.sequence;
    h.shard = static_cast<std::uint32_t>(index_);
    h.generation = generation_;
    h.instance = instance_;
    return h;
  }
  // An answer with the counters, the open step and `payload`.
  void reply(zmq::message_t& peer, Header const& request, Status status,
             std::vector<zmq::message_t> payload, std::string text = {}) {
    Header h = answer_to(request, status);
    h.tag = rules_.open_step();
    h.fingerprint = fingerprint_;
    h.frames = static_cast<std::uint32_t>(payload.size());
    h.loss = update_loss_;
    h.global_step = counters_.global_step;
    h.applied = counters_.applied;
    h.dropped = counters_.dropped;
    h.optimizer_updates = store_.updates();
    h.initialized = initialized_ ? 1 : 0;
    h.local = counters_.local_steps;
    h.text = std::move(text);
    bool const trains_on = status == Status::ok || status == Status::dropped;
    if (index_ == 0 && trains_on &&
        (request.op == Op::push || request.op == Op::pull || request.op == Op::init ||
         request.op == Op::restore)) {
      h.slices =
          slices_.give(request.worker, share_of(request.worker, request.keep_global_batch != 0));
    }
    answers_.push_back(Answer{std::move(peer), std::move(h), std::move(payload)});
  }

  std::size_t index_, shards_, workers_;
  std::ostream* log_;
  Sync sync_;
  std::uint64_t fingerprint_;
  Counters counters_;
  Rules rules_;
  ShardStore store_;
  float loss_sum_ = 0.0f;
  std::size_t summed_slices_ = 0;  ///< slices of data in the open step's sum
  float update_loss_ = 0.0f;
  bool initialized_ = false;
  std::uint64_t generation_ = 0;   ///< rollbacks to a checkpoint so far (see Header::generation)
  std::uint64_t const instance_ =  ///< drawn once per process (see Header::instance)
      std::random_device{}() | std::uint64_t{std::random_device{}()} << 32;
  std::vector<Waiting> waiting_;
  std::vector<std::size_t> goodbyes_;
  std::vector<char> departed_ = std::vector<char>(workers_, 0);  ///< lost, counted gone
  std::string failure_;  ///< set when a lost worker ended the run (on_loss: fail)
  std::vector<LastPush> last_push_ = std::vector<LastPush>(workers_);
  bool said_step_ends_ = false;  ///< stop_waiting_pushes() logged
  DataSlices slices_ = DataSlices(workers_);  ///< ps:0's: the data each worker trains next
  std::int64_t resent_ = 0;
  std::int64_t largest_lead_ = 0;  ///< bounded staleness: the most clocks a released worker led by
  std::vector<Answer> answers_;
};

}  // namespace convoy::comm::zmq_ps
