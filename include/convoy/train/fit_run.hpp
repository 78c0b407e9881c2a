// FitRun: one Trainer::fit call as named steps (check what it will write, resume, plan the data,
// begin, train, finish) and what those steps share: the plan, the progress, the result so far.
// after_step is the plan's callback, called one call at a time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "../io/checkpoint.hpp"
#include "../io/dataset.hpp"
#include "../io/prefetch.hpp"
#include "../io/sampler.hpp"
#include "fit_options.hpp"
#include "hooks.hpp"
#include "progress.hpp"
#include "run_progress.hpp"
#include "step.hpp"

namespace convoy::detail {

/// `Trainer` gives strategy(), evaluate(data), save_checkpoint(dir, seed), restore(loaded) and
/// save_weights(path). Lives in fit()'s frame, which run() does not leave while a replica runs.
template <class Trainer>
class FitRun {
  using Clock = std::chrono::steady_clock;
  using Model = typename Trainer::Model;

 public:
  FitRun(Trainer& trainer, io::Dataset const& train, FitOptions const& options)
      : trainer_(trainer),
        strategy_(trainer.strategy()),
        train_(train),
        options_(options),
        log_(options.log),
        seed_(options.seed),
        control_(make_control()),
        // In a cluster only the chief reads and writes checkpoints: the shards hold one state.
        checkpoints_(!options.checkpoint_dir.empty() && strategy_.chief()) {}
  FitRun(FitRun const&) = delete;
  FitRun& operator=(FitRun const&) = delete;

  /// Refuses now, rather than after the last step, every path the run would write: the hooks'
  /// outputs and the checkpoint directory, where what a killed writer left is cleared.
  void check_outputs() {
    for (auto const& hooks : options_.hooks) {
      if (hooks.on_check) hooks.on_check(control_);
    }
    if (!checkpoints_) return;
    io::require_writable_directory(options_.checkpoint_dir, "checkpoint directory");
    io::remove_stale_temporaries(options_.checkpoint_dir);
  }

  /// Continues from the checkpoint directory's latest checkpoint, when asked and there is one,
  /// with the data order that run used.
  void resume() {
    if (!checkpoints_ || !options_.resume) return;
    // A checkpoint that reads well but does not fit the model is refused as a damaged one is,
    // and the next older one tried; what the restore itself meets (a shard that refuses, a
    // timeout) ends the resume as before.
    auto latest =
        io::load_latest_checkpoint(options_.checkpoint_dir, warnings(),
                                   [&](io::LoadedCheckpoint const& c) { trainer_.check_fits(c); });
    if (!latest) return;
    // A run whose group changed before the checkpoint goes on from the row where it stood, with
    // this run's own batch over its own replicas.
    if (auto& data = latest->checkpoint.state.counters.data; data != DataOrigin{}) {
      io::Sampler const sampler(train_.rows(), options_.batch_size, strategy_.planned_replicas(),
                                latest->checkpoint.data_seed);
      auto const step = latest->checkpoint.state.counters.global_step;
      data = {.step = step, .row = sampler.row_at(data, step), .batch = 0, .replicas = 0};
    }
    seed_ = trainer_.restore(*latest);
    if (log_) {
      *log_ << "convoy: resumed from " << latest->file.string() << " at global step "
            << strategy_.global_step() << "\n";
    }
  }

  /// The goal, and each replica's batches in the sampler's order.
  void make_plan() {
    auto const replicas = strategy_.planned_replicas();
    io::Sampler const sampler(train_.rows(), options_.batch_size, replicas, seed_);
    rows_per_replica_ = sampler.rows_per_replica();
    auto const steps_per_epoch = static_cast<std::int64_t>(sampler.steps_per_epoch());
    batches_per_epoch_ = steps_per_epoch * static_cast<std::int64_t>(replicas);
    if (options_.steps > 0) {
      plan_.until = options_.steps;
    } else {
      plan_.until_batches = static_cast<std::int64_t>(
                                std::ceil(options_.epochs * static_cast<double>(steps_per_epoch))) *
                            static_cast<std::int64_t>(replicas);
    }
    // The buffers belong to the plan, so a replica abandoned mid-step still reads live memory.
    auto buffers = std::make_shared<std::vector<io::BatchBuffer>>();
    buffers->reserve(replicas);
    for (std::size_t r = 0; r < replicas; ++r) buffers->emplace_back(strategy_.batch_memory(r));
    // A group that grows back (comm::Gloo) may number this process's replicas past the plan's
    // count; its consecutive numbers still take distinct buffers modulo it. batch() is the plan
    // every run starts with: batch_at()'s first origin.
    // Replicas on a device have their next batch gathered while they compute (io::Prefetch),
    // made at a slot's first use: a collective run numbers this process's replicas by the run's.
    auto prefetch = std::make_shared<std::vector<std::unique_ptr<io::Prefetch>>>(replicas);
    plan_.batch_at = [&train = train_, sampler, buffers, prefetch, threads = gather_threads(),
                      on_device = replicas_on_device(), memory = strategy_.batch_memory(0)](
                         std::size_t replica, std::int64_t step, DataOrigin const& origin) {
      auto const r = replica % buffers->size();
      if (on_device) {  // each slot is one replica thread's
        auto& ahead = (*prefetch)[r];
        if (!ahead) ahead = std::make_unique<io::Prefetch>(sampler, train, memory, threads);
        return ahead->next(replica, step, origin);
      }
      return sampler.fill_at(train, replica, step, origin, (*buffers)[r], threads);
    };
    plan_.batch = [batch_at = plan_.batch_at](std::size_t replica, std::int64_t local_step) {
      return batch_at(replica, local_step, DataOrigin{});
    };
    plan_.batch_rows = static_cast<std::int64_t>(rows_per_replica_);
    plan_.keep_global_batch = options_.keep_global_batch;
    plan_.replan = [sampler, keep = options_.keep_global_batch](
                       DataOrigin const& from, std::int64_t step, std::size_t replicas) {
      return sampler.replan(from, step, replicas, keep);
    };
  }

  /// A cluster's ps task: serves its shard until every worker is done, and says so.
  FitResult serve() {
    start_ = Clock::now();
    strategy_.run(plan_);
    count_updates();
    if (log_) {
      *log_ << "convoy: served " << result_.global_step << " global steps in " << result_.seconds
            << " s" << std::endl;
    }
    return std::move(result_);
  }

  /// Counts from here, and tells the hooks the run begins.
  void begin() {
    count_from(strategy_.counters());
    for (auto const& hooks : options_.hooks) {
      if (hooks.on_begin) hooks.on_begin(control_);
    }
    sees_every_update_ = strategy_.sees_every_update();
    plan_.after_step = [this](StepReport const& report) { return after_step(report); };
  }

  // The rate and the progress count from `counters`, now.
  void count_from(Counters const& counters) {
    before_ = counters;
    start_ = Clock::now();
    progress_.emplace(
        RunProgress{.plan = plan_,
                    .start_step = before_.global_step,
                    .start_batches = before_.batches(),
                    .batches_per_epoch = batches_per_epoch_,
                    .rows_per_gradient = static_cast<double>(rows_per_replica_),
                    .lock_step_batches = lock_step_batches(),
                    .start = start_,
                    .interval = {start_, before_.global_step, before_.applied, before_.batches()}});
    previous_ = before_.global_step;
    previous_batches_ = before_.batches();
  }

  /// Runs the plan to its goal. A replica's failure keeps the survivors' work in a checkpoint
  /// before it is reported; a shard that lost its state is rolled back to the latest checkpoint,
  /// and the run goes on from there.
  void train() {
    for (;;) {
      try {
        strategy_.run(plan_);
        return;
      } catch (ReplicaError const&) {
        if (checkpoints_) save_checkpoint();
        throw;
      } catch (StateLostError const& e) {
        roll_back(e);
      }
    }
  }

  /// The run's last record, checkpoint and evaluation, the hooks' end, and the summary line.
  FitResult finish() {
    count();
    auto const& after = strategy_.counters();
    // The steps since the last interval make one more, so the history covers the whole run.
    if (after.global_step > progress_->interval.step) {
      close_interval(after.global_step, after.batches(), after.applied, after.dropped);
    }
    bool const saved_last_step = options_.checkpoint_every > 0 &&
                                 after.global_step % options_.checkpoint_every == 0 &&
                                 after.global_step != before_.global_step;
    if (checkpoints_ && !saved_last_step) save_checkpoint();
    if (options_.validation) {
      // An evaluation of these very weights already made at the last step is not repeated.
      if (!last_evaluation_ || last_evaluation_->global_step != after.global_step) {
        evaluate_now(after.global_step, after.batches(), false);
      }
      result_.validation = last_evaluation_->validation;
    }
    for (auto const& hooks : options_.hooks) {
      if (hooks.on_end) hooks.on_end(control_);
    }
    if (log_) *log_ << summary_line() << std::endl;
    return std::move(result_);
  }

 private:
  // The plan's after_step: the step's loss, its lines and records, evaluation, epoch end,
  // checkpoint, callbacks and hooks, each when due.
  bool after_step(StepReport const& report) {
    // A worker taken into a run in progress (comm::Gloo: one started late, or again) takes a
    // member's counters with its state: its rate and progress count from its first step in the
    // group, not from the run's start, which it was not part of.
    if (!stepped_ && strategy_.lock_step() && report.global_step > previous_ + 1) {
      count_from(strategy_.counters());
      // As if the step before were its last: this one may still end an epoch.
      previous_ = report.global_step - 1;
      previous_batches_ = report.batches - lock_step_batches();
    }
    stepped_ = true;
    result_.last_loss = report.loss;
    Advance const advance{*this, report.global_step, report.batches};
    progress_->add_loss(report.loss);
    report_progress(report);
    // Whole epochs completed, by the data used: the update that crosses a multiple ends one.
    bool const epoch_ended =
        report.batches / batches_per_epoch_ > previous_batches_ / batches_per_epoch_;
    if (options_.validation && (due(report.global_step, options_.evaluate_every) ||
                                (options_.evaluate_each_epoch && epoch_ended))) {
      evaluate_now(report.global_step, report.batches,
                   options_.log_format == LogFormat::tensorflow);
    }
    if (epoch_ended) ask_hooks(&Hooks::on_epoch_end, report.batches / batches_per_epoch_);
    if (checkpoints_ && due(report.global_step, options_.checkpoint_every)) save_checkpoint();
    for (auto const& callback : options_.callbacks) keep_going_ = callback(report) && keep_going_;
    ask_hooks(&Hooks::on_step, report);
    return keep_going_;
  }

  // `previous_` moves on however after_step ends.
  struct Advance {
    FitRun& run;
    std::int64_t step;
    std::int64_t batches;
    ~Advance() {
      run.previous_ = std::max(run.previous_, step);
      run.previous_batches_ = std::max(run.previous_batches_, batches);
    }
  };

  // TensorFlow's line when due; the interval's record when due, and at the step that reaches the
  // goal, before that step's evaluation.
  void report_progress(StepReport const& report) {
    bool const interval_due = due(report.global_step, options_.log_every);
    if (log_ && options_.log_format == LogFormat::tensorflow && interval_due) {
      *log_ << tensorflow_line(report) << std::endl;
    }
    // (Not an interval of no steps: a joining worker counts from its first step.)
    if ((interval_due || plan_.reached(report.global_step, report.batches)) &&
        report.global_step > progress_->interval.step) {
      close_interval(report.global_step, report.batches, report.applied, report.dropped);
    }
  }

  // A cluster's worker hears only of its own updates, so a multiple of `every` may pass unseen:
  // there a periodic action fires at the first step past it.
  bool due(std::int64_t step, std::int64_t every) const {
    if (every <= 0) return false;
    return sees_every_update_ ? step % every == 0 : step / every > previous_ / every;
  }

  // The interval since the last record: recorded, printed, and handed to the hooks.
  void close_interval(std::int64_t step, std::int64_t batches, std::int64_t applied,
                      std::int64_t dropped) {
    HistoryRecord record = progress_->close_interval(step, batches, applied);
    record.lr = strategy_.optimizer().learning_rate();
    std::int64_t const group_was = group_changed(record);
    if (progress_lines()) {
      *log_ << progress_line(record, progress_->totals(step, batches), dropped, group_was)
            << std::endl;
    } else if (log_ && group_was > 0) {  // TensorFlow's lines: one of its own
      *log_ << "  " << group_change(record, group_was) << " (by global step " << step << ")"
            << std::endl;
    }
    result_.history.push_back(record);
    ask_hooks(&Hooks::on_interval, record);
  }

  // The gradients a step of the intervals before `record`, when the group (the gradients a step,
  // rounded) changed with it: a synchronous parameter-server run goes on without a lost worker and
  // takes it back; 0 otherwise.
  std::int64_t group_changed(HistoryRecord const& record) {
    if (!record.gradients_per_step) return 0;
    auto const now = std::llround(*record.gradients_per_step);
    std::int64_t const was = group_ > 0 && now != group_ ? group_ : 0;
    group_ = now;
    return was;
  }

  // An evaluation: recorded, printed, and handed to the hooks.
  void evaluate_now(std::int64_t step, std::int64_t batches, bool tensorflow_line) {
    HistoryRecord record = progress_->record(RecordKind::evaluation, step, batches);
    record.lr = strategy_.optimizer().learning_rate();
    record.validation = evaluate_validation();
    if (log_ && tensorflow_line) {
      *log_ << "  validation after " << step << " steps: accuracy " << record.validation->accuracy()
            << ", loss " << record.validation->mean_loss() << std::endl;
    } else if (progress_lines()) {
      *log_ << evaluation_line(record, progress_->totals(step, batches)) << std::endl;
    }
    result_.history.push_back(record);
    last_evaluation_ = record;
    ask_hooks(&Hooks::on_evaluate, record);
  }

  // A parameter-server shard lost its state: the chief rolls the cluster back to the latest
  // committed checkpoint, so nothing it holds is lost, and trains on from there.
  void roll_back(StateLostError const& e) {
    if (!checkpoints_) {
      throw StateLostError(std::string(e.what()) +
                           "; without checkpoints to roll back to "
                           "(FitOptions::checkpoint_dir) the run cannot go on");
    }
    if (log_) *log_ << e.what() << std::endl;
    auto latest =
        io::load_latest_checkpoint(options_.checkpoint_dir, warnings(),
                                   [&](io::LoadedCheckpoint const& c) { trainer_.check_fits(c); });
    if (!latest) {
      throw StateLostError(std::string(e.what()) + "; '" + options_.checkpoint_dir.string() +
                           "' holds no checkpoint to roll back to yet");
    }
    trainer_.restore(*latest);
    // The steps after the checkpoint are trained again: so are their logs and checkpoints.
    previous_ = strategy_.global_step();
    previous_batches_ = strategy_.counters().batches();
    if (log_) {
      *log_ << "convoy: rolled back to " << latest->file.string() << " at global step "
            << strategy_.global_step() << std::endl;
    }
  }

  // Hands `args` and the control to every hook `which` names; one that answers false stops the
  // run once the steps under way finish.
  template <class Hook, class... Args>
  void ask_hooks(Hook Hooks::*which, Args const&... args) {
    for (auto const& hooks : options_.hooks) {
      auto const& hook = hooks.*which;
      if (hook) keep_going_ = hook(args..., control_) && keep_going_;
    }
  }

  void save_checkpoint() { trainer_.save_checkpoint(options_.checkpoint_dir, seed_); }

  // evaluate() for models that have it; Trainer::check refuses validation for the others.
  Metrics evaluate_validation() {
    if constexpr (has_evaluate<Model>) {
      return trainer_.evaluate(*options_.validation);
    } else {
      return Metrics{};
    }
  }

  // Batches a lock step trains (0: not in lock step): one a replica, or, where the data was
  // planned again with its global batch kept (a run resumed after its group changed), as many of
  // the plan's as its rows make (count_lock_step's count).
  std::int64_t lock_step_batches() const {
    if (!strategy_.lock_step()) return 0;
    if (before_.data.batch > 0 && rows_per_replica_ > 0)
      return std::max<std::int64_t>(
          1, before_.data.batch / static_cast<std::int64_t>(rows_per_replica_));
    return static_cast<std::int64_t>(strategy_.replicas());
  }

  // The counters and the wall time since start_ into the result.
  void count_updates() {
    auto const& after = strategy_.counters();
    result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    result_.global_step = after.global_step;
    result_.applied = after.applied;
    result_.dropped = after.dropped;
  }
  // The same, with the epochs and the rate of this run.
  void count() {
    count_updates();
    auto const& after = strategy_.counters();
    result_.epochs = static_cast<double>(after.batches()) / static_cast<double>(batches_per_epoch_);
    // Rows of applied gradients only: a dropped gradient trained nothing. In lock step, the
    // data's batches (RunProgress::trained).
    double const rows = static_cast<double>(progress_->trained(
                            after.applied - before_.applied, after.batches() - before_.batches())) *
                        static_cast<double>(rows_per_replica_);
    result_.samples_per_second = result_.seconds > 0 ? rows / result_.seconds : 0.0;
  }

  std::string summary_line() const {
    std::ostringstream line;
    line << "convoy: " << result_.global_step << " global steps (" << result_.applied
         << " gradients applied";
    if (result_.dropped > 0) line << ", " << result_.dropped << " dropped";
    line << ", " << std::setprecision(3) << result_.epochs << " epochs) in " << result_.seconds
         << " s, " << std::setprecision(6) << result_.samples_per_second << " samples/sec";
    return line.str();
  }

  // How many threads gather a replica's rows. A replica on a GPU gathers on its share of the
  // host's cores, which it leaves idle: its step is shorter than a one-core gather. Replicas on a
  // device share the cores as the run's replicas would share one machine's (a process per GPU);
  // on the host the replicas use the cores themselves, one thread each.
  int gather_threads() const {
    if (!replicas_on_device()) return 1;
    auto const here =
        std::max<std::size_t>(1, std::min(strategy_.planned_replicas(), strategy_.replicas()));
    return static_cast<int>(
        std::clamp<std::size_t>(std::max(1u, std::thread::hardware_concurrency()) / here, 1, 8));
  }
  // Whether this process's replicas compute on a device: a placement puts all of them there or
  // none (a device it cannot open is left out, or the whole placement falls back to the host).
  bool replicas_on_device() const { return strategy_.replicas() > 0 && strategy_.on_device(0); }

  // What the hooks may do: reach back into the trainer.
  RunControl make_control() {
    RunControl control;
    control.global_step = [this] { return strategy_.global_step(); };
    control.learning_rate = [this] { return strategy_.optimizer().learning_rate(); };
    control.set_learning_rate = [this](float rate) { strategy_.set_learning_rate(rate); };
    control.weights = [this] { return strategy_.get_weights(); };
    control.gradients = [this] { return strategy_.get_gradients(); };
    control.save_weights = [this](std::filesystem::path const& path) {
      trainer_.save_weights(path);
    };
    control.log = log_;
    control.chief = strategy_.chief();
    return control;
  }

  bool progress_lines() const { return log_ && options_.log_format == LogFormat::progress; }
  std::ostream* warnings() const { return log_ ? log_ : &std::clog; }

  Trainer& trainer_;
  std::remove_reference_t<decltype(std::declval<Trainer&>().strategy())>& strategy_;
  io::Dataset const& train_;
  FitOptions const& options_;
  std::ostream* log_;
  std::uint64_t seed_;
  RunControl control_;
  bool checkpoints_;
  RunPlan plan_;
  std::size_t rows_per_replica_ = 0;
  std::int64_t batches_per_epoch_ = 1;
  Counters before_;
  bool stepped_ = false;  // after_step has seen this run's first step
  Clock::time_point start_;
  std::optional<RunProgress> progress_;
  bool sees_every_update_ = true;
  std::int64_t previous_ = 0;          // the latest step after_step saw
  std::int64_t previous_batches_ = 0;  // and the batches then
  std::int64_t group_ = 0;             // gradients a step, rounded, of the last interval
  bool keep_going_ = true;             // false once a hook asked to stop
  std::optional<HistoryRecord> last_evaluation_;
  FitResult result_;
};

}  // namespace convoy::detail
