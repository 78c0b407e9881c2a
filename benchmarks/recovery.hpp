// The recovery benchmark of bench_ps (the MLP), bench_torch (the ResNet example) and bench_gloo
// (the MLP, 3 Gloo workers): a synchronous cluster whose last worker (or the one named) is killed
// with SIGKILL once it has done `kill_after` steps. Measured: the time from the kill to the next
// step worker 0 completes (worker 1, when worker 0 is the one killed), and from starting it again
// to its first step in the group, convoy's way (the others train on; the killed worker rejoins),
// against the peers' way (torchrun's: every task stopped at once and the whole job started again,
// the chief resuming from the latest checkpoint), with the global steps that way trains a second
// time. Every task is the benchmark program itself, started again with `--task SCENARIO DIR`
// (tests/support/processes.hpp); it logs each step with a StepLog.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <convoy/cluster/cluster.hpp>
#include <convoy/train/step.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "files.hpp"
#include "processes.hpp"
#include "report.hpp"
#include "temp_dir.hpp"

namespace convoy::bench::recovery {

using clock_type = std::chrono::steady_clock;

/// A task's side: every step's time (the steady clock, the machine's monotonic one, the same in
/// every process) and global step, written to DIR/steps-<job><index>-<pid>.txt as they happen.
class StepLog {
 public:
  StepLog(std::filesystem::path const& dir, Cluster const& cluster)
      : out_(dir / ("steps-" + cluster.job + std::to_string(cluster.index) + "-" +
                    std::to_string(::getpid()) + ".txt")) {}
  /// The callback for FitOptions::callbacks.
  std::function<bool(StepReport const&)> callback() {
    return [this](StepReport const& r) {
      out_ << clock_type::now().time_since_epoch().count() << " " << r.global_step << std::endl;
      return true;
    };
  }

 private:
  std::ofstream out_;
};

/// A step a task wrote: when, and the global step it reached.
struct StepMark {
  clock_type::time_point at;
  std::int64_t global = 0;
};
inline std::vector<StepMark> read_marks(std::filesystem::path const& file) {
  std::vector<StepMark> out;
  std::ifstream in(file);
  long long ticks = 0, global = 0;
  while (in >> ticks >> global) {
    out.push_back({clock_type::time_point(clock_type::duration(ticks)), global});
  }
  return out;
}
/// The step files of a task ("worker1"), oldest process first.
inline std::vector<std::filesystem::path> step_files(std::filesystem::path const& dir,
                                                     std::string const& task) {
  return testing::files_starting(dir, "steps-" + task + "-");
}
/// The first step `task` completed after `after`, by any of its processes but the first `skip`,
/// that reached global step `from` or later; waits up to `patience`.
inline std::optional<StepMark> first_step_after(std::filesystem::path const& dir,
                                                std::string const& task,
                                                clock_type::time_point after, std::size_t skip,
                                                std::chrono::seconds patience,
                                                std::int64_t from = 0) {
  auto const deadline = clock_type::now() + patience;
  while (clock_type::now() < deadline) {
    std::optional<StepMark> first;
    auto const files = step_files(dir, task);
    for (std::size_t f = skip; f < files.size(); ++f) {
      for (auto const& m : read_marks(files[f])) {
        if (m.at > after && m.global >= from && (!first || m.at < first->at)) first = m;
      }
    }
    if (first) return first;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return std::nullopt;
}

/// One trial's figures.
struct Trial {
  double step_seconds = 0.0;      ///< the median step before the kill
  double to_next_step = 0.0;      ///< kill -> the next step any worker completes
  double restart_to_step = 0.0;   ///< worker 1 started again -> its first step (convoy's way)
  std::int64_t steps_redone = 0;  ///< global steps trained a second time (the peers' way)
  bool ok = false;
};

/// What a trial runs: `program --task scenario DIR` as each of `ps` ps tasks and `workers`
/// workers; `patience` bounds each wait.
struct Setup {
  std::string program;
  std::string scenario;
  std::int64_t kill_after = 0;
  std::chrono::seconds patience{60};
  int ps = 1;
  int workers = 2;
  int victim = -1;  ///< the worker killed; -1: the last (worker 1 then watches for the next step)
};

/// One trial, convoy's way or the peers' way.
inline Trial trial(Setup const& setup, bool peers_way) {
  testing::TempDir dir("bench-recover");
  std::filesystem::create_directories(dir.path / "checkpoints");
  std::string const spec = testing::cluster_spec(setup.ps, setup.workers);
  std::size_t const count = static_cast<std::size_t>(setup.ps + setup.workers);
  int const victim_worker = setup.victim < 0 ? setup.workers - 1 : setup.victim;
  std::size_t const victim = static_cast<std::size_t>(setup.ps + victim_worker);
  std::string const victim_name = "worker" + std::to_string(victim_worker);
  std::string const watched = victim_worker == 0 ? "worker1" : "worker0";  // for the next step
  std::vector<testing::Task> tasks(count);
  // `again`: a task started again, told so as tools/convoy-launch tells it (CONVOY_RESTART).
  auto start = [&](testing::Task& t, std::string const& log, bool again = false) {
    t.log = dir.path / log;
    t.status = -1;
    std::vector<std::string> env{testing::tf_config(spec, t.job, t.index)};
    if (again) env.push_back("CONVOY_RESTART=1");
    t.pid = testing::spawn({setup.program, "--task", setup.scenario, dir.path.string()},
                           testing::task_environment(env), t.log);
  };
  for (std::size_t i = 0; i < count; ++i) {
    bool const ps = static_cast<int>(i) < setup.ps;
    tasks[i].job = ps ? "ps" : "worker";
    tasks[i].index = ps ? static_cast<int>(i) : static_cast<int>(i) - setup.ps;
    start(tasks[i], "task" + std::to_string(i) + ".log");
  }
  Trial r;
  auto const deadline = clock_type::now() + setup.patience;
  std::vector<StepMark> before;
  while (clock_type::now() < deadline) {
    auto const files = step_files(dir.path, victim_name);
    if (!files.empty()) before = read_marks(files.front());
    if (static_cast<std::int64_t>(before.size()) >= setup.kill_after) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (static_cast<std::int64_t>(before.size()) < setup.kill_after) {
    testing::finish(tasks, clock_type::now());
    return r;
  }
  std::vector<double> gaps;
  for (std::size_t i = before.size() / 2; i + 1 < before.size(); ++i) {
    gaps.push_back(std::chrono::duration<double>(before[i + 1].at - before[i].at).count());
  }
  std::ranges::sort(gaps);
  r.step_seconds = gaps.empty() ? 0.0 : gaps[gaps.size() / 2];
  auto const killed = clock_type::now();
  ::kill(tasks[victim].pid, SIGKILL);
  testing::reap(tasks[victim], 0);
  if (peers_way) {
    // As torchrun's agent: every other task stopped, then the whole job started again.
    for (std::size_t i = 0; i < count; ++i)
      if (i != victim) ::kill(tasks[i].pid, SIGKILL);
    for (std::size_t i = 0; i < count; ++i)
      if (i != victim) testing::reap(tasks[i], 0);
    auto const last = read_marks(step_files(dir.path, watched).front());
    for (std::size_t i = 0; i < count; ++i) start(tasks[i], "again" + std::to_string(i) + ".log");
    // A step the watched worker had in flight may end after the kill: only the new process's count.
    auto const next = first_step_after(dir.path, watched, killed, 1, setup.patience);
    if (!next || last.empty()) return r;
    r.to_next_step = std::chrono::duration<double>(next->at - killed).count();
    r.steps_redone = last.back().global - (next->global - 1);
  } else {
    // The next step the killed worker took no part in: a step it had finished may end a moment
    // later on worker 0, and so may the one after its last line, whose exchange it may have
    // finished before the kill came and before it wrote the line.
    auto const victim_steps = read_marks(step_files(dir.path, victim_name).front());
    std::int64_t const from = victim_steps.empty() ? 0 : victim_steps.back().global + 2;
    auto const next = first_step_after(dir.path, watched, killed, 0, setup.patience, from);
    if (!next) return r;
    r.to_next_step = std::chrono::duration<double>(next->at - killed).count();
    auto const restarted = clock_type::now();
    start(tasks[victim], "again" + std::to_string(victim) + ".log", /*again=*/true);
    auto const joined = first_step_after(dir.path, victim_name, restarted, 0, setup.patience);
    if (!joined) return r;
    r.restart_to_step = std::chrono::duration<double>(joined->at - restarted).count();
  }
  int const hangs = testing::finish(tasks, clock_type::now() + 2 * setup.patience);
  r.ok = hangs == 0 && std::ranges::all_of(tasks, [](auto const& t) { return t.status == 0; });
  if (!r.ok) {
    for (auto const& t : tasks) {
      std::cerr << "recovery: " << t.job << ":" << t.index << " ended with status " << t.status
                << "; its log:\n"
                << testing::read_file(t.log) << "\n";
    }
  }
  return r;
}

/// Both ways, `repeats` times each, interleaved; the best of each (the quickest to the next step).
/// Empty when a trial failed (its tasks' logs are on std::cerr).
struct Figures {
  Trial convoy_way, peers_way;
};
/// `with_peers` false: convoy's way only.
inline std::optional<Figures> best_of(Setup const& setup, int repeats, bool with_peers = true) {
  Figures best;
  for (int r = 0; r < repeats; ++r) {
    for (bool peers : {false, true}) {
      if (peers && !with_peers) continue;
      auto const got = trial(setup, peers);
      if (!got.ok) return std::nullopt;
      auto& kept = peers ? best.peers_way : best.convoy_way;
      if (!kept.ok || got.to_next_step < kept.to_next_step) kept = got;
    }
  }
  return best;
}

/// The table, and the figures as `record`'s recovery_* fields.
inline void report(Figures const& f, Record& record,
                   std::string const& convoy_way =
                       "convoy: the others train on; worker 1 "
                       "rejoins") {
  std::printf("%-52s %12s %12s %12s\n", "", "kill->step s", "in steps", "restart->step s");
  std::printf("%-52s %12.4f %12.1f %12.4f\n", convoy_way.c_str(), f.convoy_way.to_next_step,
              f.convoy_way.to_next_step / f.convoy_way.step_seconds, f.convoy_way.restart_to_step);
  std::printf("%-52s %12.4f %12.1f %12s\n", "peers: every task restarted, from the checkpoint",
              f.peers_way.to_next_step, f.peers_way.to_next_step / f.peers_way.step_seconds, "-");
  std::printf(
      "peers' way / convoy's way, kill to the next step: %.1f; global steps trained again "
      "by the peers' way: %lld; a step before the kill: %.4f s\n",
      f.peers_way.to_next_step / f.convoy_way.to_next_step,
      static_cast<long long>(f.peers_way.steps_redone), f.convoy_way.step_seconds);
  record.set("recovery_step_seconds", f.convoy_way.step_seconds)
      .set("recovery_kill_to_step_seconds", f.convoy_way.to_next_step)
      .set("recovery_restart_to_step_seconds", f.convoy_way.restart_to_step)
      .set("recovery_peers_kill_to_step_seconds", f.peers_way.to_next_step)
      .set("recovery_peers_steps_redone", f.peers_way.steps_redone)
      .set("recovery_peers_over_convoy", f.peers_way.to_next_step / f.convoy_way.to_next_step);
}

}  // namespace convoy::bench::recovery
