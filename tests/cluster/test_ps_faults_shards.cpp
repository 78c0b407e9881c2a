// Killed and restarted parameter-server shards, and kills during checkpoint writes, with real
// processes on loopback: the test program starts itself once per task ("--task <scenario> <dir>")
// with its TF_CONFIG, kills tasks with SIGKILL and starts a ps task again at its address. Every
// wait is bounded: a task still running after its deadline is killed and the test fails.
//
// A kill during a save is made certain, not left to timing: the test puts a FIFO where the task
// (which it started, so it knows the pid) will open its temporary file, and the task blocks in
// that open, inside the save, until it is killed.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster_model.hpp"
#include "processes.hpp"
#include "synthetic.hpp"
#include "temp_dir.hpp"

namespace test_cluster_ps_faults_shards {

using namespace convoy;
using clock_type = std::chrono::steady_clock;

constexpr std::int64_t steps = 30;
constexpr std::int64_t checkpoint_every = 10;
constexpr std::size_t batch_size = 48;

using testing::SlowMlp;
io::Dataset data() { return testing::cluster_data(); }
nn::Mlp make_model() { return testing::cluster_mlp(); }
optim::Optimizer optimizer() { return testing::cluster_optimizer(); }

// ---- the tasks ------------------------------------------------------------------------------

// Each step sleeps a little, so that a kill lands mid-run.
constexpr int step_sleep_ms = 15;

template <class Sync>
int run_task(Sync sync, std::filesystem::path const& dir) {
  using S = Strategy<SlowMlp, place::Sharded<>, comm::ZmqPs, Sync>;
  auto const cluster = Cluster::from_environment();
  SlowMlp model;
  model.sleep_ms = step_sleep_ms;
  Trainer<S> trainer{S{model, {}, comm::ZmqPs{.connect_timeout = sync.timeout, .exit_after_serving = false}, sync}, optimizer()};
  auto const train = data();
  // Each step's global step, for the test to time its kills by (after that step's checkpoint).
  std::ofstream progress(dir / ("steps-" + cluster.job + std::to_string(cluster.index) + ".txt"));
  trainer.fit(train, {.steps = steps,
                      .batch_size = batch_size,
                      .log_every = 10,
                      .checkpoint_dir = dir / "ckpt",
                      .checkpoint_every = checkpoint_every,
                      .callbacks = {[&](StepReport const& r) {
                        progress << r.global_step << std::endl;
                        return true;
                      }}});
  std::ofstream out(dir / ("result-" + cluster.job + std::to_string(cluster.index) + ".txt"));
  out << trainer.strategy().global_step() << "\n";
  if (!cluster.is_ps()) {
    for (float v : trainer.strategy().weights()) out << v << " ";
    out << "\n";
    std::ofstream(dir / ("accuracy-" + cluster.job + std::to_string(cluster.index) + ".txt"))
        << trainer.evaluate(train).accuracy() << "\n";
  } else {
    auto const& c = trainer.strategy().counters();
    out << c.applied << " " << c.batches() << "\n";
  }
  return 0;
}

// Scenario "sync" or "async", then ":timeout=<ms>" (the Sync timeout and the connect timeout).
int task(std::string const& scenario, std::filesystem::path const& dir) {
  std::chrono::milliseconds timeout{30000};
  if (auto at = scenario.find(":timeout="); at != std::string::npos) {
    timeout = std::chrono::milliseconds(std::atoll(scenario.c_str() + at + 9));
  }
  if (scenario.starts_with("async")) return run_task(sync::Asynchronous{.timeout = timeout}, dir);
  return run_task(sync::Synchronous{.timeout = timeout}, dir);
}

// ---- the test's side ------------------------------------------------------------------------

std::string program = testing::this_program();  // posix_spawn takes its argv as char*
testing::TaskSuite const suite("ps_faults_shards", task);

// A cluster of 2 ps tasks and 2 workers whose tasks the test starts, kills and starts again one
// by one, each at the same address as before.
class Tasks {
 public:
  Tasks(std::filesystem::path dir, std::string scenario)
      : dir_(std::move(dir)), scenario_(std::move(scenario)) {
    auto address = [] { return "\"127.0.0.1:" + std::to_string(testing::free_port()) + "\""; };
    std::string const a = address(), b = address();
    ps_addresses_ = {a.substr(1, a.size() - 2), b.substr(1, b.size() - 2)};
    spec_ = "{\"ps\": [" + a + "," + b + "], \"worker\": [" + address() + "," + address() + "]}";
  }
  ~Tasks() {
    for (auto& [name, pid] : running_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  Tasks(Tasks const&) = delete;
  Tasks& operator=(Tasks const&) = delete;

  /// Starts `job`:`index`, its output in <dir>/<log>; returns its pid.
  pid_t start(std::string const& job, int index, std::string const& log) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      if (!testing::set_by_a_launcher(*e)) env.emplace_back(*e);
    }
    env.push_back("TF_CONFIG={\"cluster\": " + spec_ + ", \"task\": {\"type\": \"" + job +
                  "\", \"index\": " + std::to_string(index) + "}}");
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string const log_path = (dir_ / log).string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string arg_task = "--task", arg_scenario = suite.scenario(scenario_),
                arg_dir = dir_.string();
    char* argv[] = {program.data(), arg_task.data(), arg_scenario.data(), arg_dir.data(), nullptr};
    pid_t pid = -1;
    int const rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(rc == 0, "cannot start " << program);
    running_[job + ":" + std::to_string(index)] = pid;
    return pid;
  }
  void start_all() {
    for (int i = 0; i < 2; ++i) start("ps", i, "ps" + std::to_string(i) + ".log");
    for (int i = 0; i < 2; ++i) start("worker", i, "worker" + std::to_string(i) + ".log");
  }
  pid_t pid(std::string const& task) const { return running_.at(task); }

  /// SIGKILLs `task` and reaps it.
  void kill(std::string const& task) {
    auto const it = running_.find(task);
    REQUIRE(it != running_.end());
    ::kill(it->second, SIGKILL);
    ::waitpid(it->second, nullptr, 0);
    running_.erase(it);
  }

  /// Waits for every running task to end, at most `limit`; kills what is left. Returns each
  /// task's exit status (-1: killed at the deadline).
  std::map<std::string, int> wait(std::chrono::seconds limit) {
    std::map<std::string, int> status;
    auto const deadline = clock_type::now() + limit;
    while (!running_.empty() && clock_type::now() < deadline) {
      for (auto it = running_.begin(); it != running_.end();) {
        int s = 0;
        if (::waitpid(it->second, &s, WNOHANG) == it->second) {
          status[it->first] = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto const& [name, pid] : running_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      status[name] = -1;
    }
    running_.clear();
    return status;
  }

  std::string const& ps_address(int i) const { return ps_addresses_[static_cast<std::size_t>(i)]; }

 private:
  std::filesystem::path dir_;
  std::string scenario_;
  std::string spec_;
  std::vector<std::string> ps_addresses_;
  std::map<std::string, pid_t> running_;
};

std::string read_text(std::filesystem::path const& file) {
  std::ifstream in(file);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The highest global step the chief has finished (its checkpoint, when due, written), or -1.
std::int64_t chief_step(std::filesystem::path const& dir) {
  std::ifstream in(dir / "steps-worker0.txt");
  std::int64_t step = -1;
  for (std::int64_t s; in >> s;) step = std::max(step, s);
  return step;
}

// True once some thread of `pid` is blocked opening a FIFO that has no reader.
bool blocked_on_fifo(pid_t pid) {
  std::error_code ec;
  for (auto const& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    if (read_text(t.path() / "wchan").find("wait_for_partner") != std::string::npos) return true;
  }
  return false;
}

// True once `pid` blocks in the save of step 20 on the FIFO: seen in /proc, or, where the kernel
// does not show wait channels, the chief has been at step 19 for 2 s (its steps take tens of ms).
struct SaveBlocked {
  pid_t pid;
  std::filesystem::path dir;
  clock_type::time_point since{};
  bool operator()() {
    if (blocked_on_fifo(pid)) return true;
    if (chief_step(dir) != 19) {
      since = {};
      return false;
    }
    if (since == clock_type::time_point{}) since = clock_type::now();
    return clock_type::now() - since > std::chrono::seconds(2);
  }
};

// Polls `done` every 10 ms until it holds or `limit` passes; returns whether it held.
template <class Done>
bool within(std::chrono::milliseconds limit, Done&& done) {
  auto const deadline = clock_type::now() + limit;
  while (clock_type::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// The weights and slots an uninterrupted run holds after `n` steps: in-process Mirrored with 2
// replicas, which a synchronous 2-worker cluster matches step by step.
Snapshot reference(std::int64_t n) {
  using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Mirrored> t{Mirrored{make_model(), place::Mirrored{.replicas = 2}}, optimizer()};
  t.fit(data(), {.steps = n, .batch_size = batch_size, .log = nullptr});
  return t.strategy().snapshot();
}

void check_close(std::map<std::string, Tensor> const& got,
                 std::map<std::string, Tensor> const& expected, std::string const& what) {
  REQUIRE_MESSAGE(got.size() == expected.size(), what);
  for (auto const& entry : expected) {  // no structured binding: doctest's lambdas capture it
    auto const& name = entry.first;
    auto const& want = entry.second.data;
    CAPTURE(what);
    CAPTURE(name);
    REQUIRE(got.contains(name));
    auto const& g = got.at(name).data;
    REQUIRE(g.size() == want.size());
    for (std::size_t i = 0; i < g.size(); ++i)
      CHECK(g[i] == doctest::Approx(want[i]).epsilon(1e-3));
  }
}

// The chief's final weights (result-worker0.txt) against an uninterrupted run's.
void check_final_weights(std::filesystem::path const& dir, Snapshot const& expected) {
  std::ifstream in(dir / "result-worker0.txt");
  REQUIRE_MESSAGE(in.good(), "no result-worker0.txt");
  std::int64_t step = 0;
  in >> step;
  CHECK(step == steps);
  std::vector<float> weights;
  for (float v; in >> v;) weights.push_back(v);
  Variables layout = make_model().variables();
  REQUIRE(weights.size() == layout.element_count());
  check_close(layout.named(weights), expected.weights, "final weights");
}

// The newest committed checkpoint in `ckpt` loads whole and holds what the run had at `step`.
void check_latest_checkpoint(std::filesystem::path const& ckpt, std::int64_t step,
                             Snapshot const& expected) {
  std::ostringstream warnings;
  auto const latest = io::load_latest_checkpoint(ckpt, &warnings);
  REQUIRE(latest);
  CHECK(warnings.str().empty());  // the newest manifest is whole: nothing to fall back from
  CHECK(latest->file.filename() == io::checkpoint_file_name(step));
  CHECK(latest->checkpoint.state.counters.global_step == step);
  check_close(latest->checkpoint.state.weights, expected.weights, "checkpointed weights");
  check_close(latest->checkpoint.state.slots, expected.slots, "checkpointed slots");
}

void print_logs(std::filesystem::path const& dir) {
  for (auto const& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".log") {
      std::cout << "---- " << e.path().filename().string() << "\n" << read_text(e.path()) << "\n";
    }
  }
}

void check_ended_well(std::map<std::string, int> const& status, std::filesystem::path const& dir) {
  bool ok = status.size() == 4;
  for (auto const& entry : status) {
    CHECK_MESSAGE(entry.second == 0, entry.first << " ended with status " << entry.second);
    ok = ok && entry.second == 0;
  }
  if (!ok) print_logs(dir);
}

// CONVOY_FAULT_TRIALS=N repeats it N times, the later trials killing ps:0 or ps:1 after a random
// step between 11 and 18 (the figures in docs/parameter_server.md); by default once, ps:1 after 12.
TEST_CASE(
    "a shard killed mid-run and started again rejoins; the cluster rolls back to the latest "
    "checkpoint and ends at an uninterrupted run's weights") {
  auto const expected = reference(steps);
  char const* asked = std::getenv("CONVOY_FAULT_TRIALS");
  int const trials = asked ? std::max(1, std::atoi(asked)) : 1;
  std::mt19937 random(std::random_device{}());
  std::int64_t steps_again = 0;
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(trial);
    int const shard = trial == 0 ? 1 : trial % 2;
    std::int64_t const kill_after =
        trial == 0 ? 12 : std::uniform_int_distribution<std::int64_t>(11, 18)(random);
    auto const victim = "ps:" + std::to_string(shard);
    auto const survivor = "ps" + std::to_string(1 - shard);
    testing::TempDir dir("ps-shard-restart");
    Tasks cluster(dir.path, "sync");
    cluster.start_all();
    // Past the checkpoint at 10, well before the one at 20.
    REQUIRE_MESSAGE(
        within(std::chrono::seconds(60), [&] { return chief_step(dir.path) >= kill_after; }),
        read_text(dir / "worker0.log"));
    cluster.kill(victim);
    auto const killed_at = chief_step(dir.path);
    auto const latest = io::latest_checkpoint(dir / "ckpt");
    REQUIRE(latest);
    auto const back_to = *io::detail::checkpoint_step(*latest);
    // Long enough for the workers to log that they wait for it.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    cluster.start("ps", shard, "ps" + std::to_string(shard) + "-restarted.log");
    check_ended_well(cluster.wait(std::chrono::seconds(60)), dir.path);
    MESSAGE("killed " << victim << " after global step " << killed_at << "; rolled back to "
                      << back_to);
    steps_again += killed_at - back_to;

    auto const chief = read_text(dir / "worker0.log");
    auto const other = read_text(dir / "worker1.log");
    auto const lost = victim + " at " + cluster.ps_address(shard);
    for (auto const* log : {&chief, &other}) {
      CHECK(log->find("lost " + lost) != std::string::npos);
      CHECK(log->find("waiting for " + lost) != std::string::npos);
    }
    CHECK(chief.find("rolled back to " + latest->string()) != std::string::npos);
    CHECK(other.find("worker 1 carries on from global step " + std::to_string(back_to)) !=
          std::string::npos);
    CHECK(read_text(dir / (survivor + ".log"))
              .find("rolled back to global step " + std::to_string(back_to)) != std::string::npos);
    check_final_weights(dir.path, expected);
  }
  if (trials > 1) MESSAGE(trials << " trials, " << steps_again << " steps trained again in all");
}

TEST_CASE("asynchronous: a shard killed and started again rejoins, and the run converges") {
  testing::TempDir dir("ps-shard-restart-async");
  Tasks cluster(dir.path, "async");
  cluster.start_all();
  REQUIRE_MESSAGE(within(std::chrono::seconds(60), [&] { return chief_step(dir.path) >= 14; }),
                  read_text(dir / "worker0.log"));
  cluster.kill("ps:0");  // the one that keeps the run's counters
  auto const killed_at = chief_step(dir.path);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  cluster.start("ps", 0, "ps0-restarted.log");
  check_ended_well(cluster.wait(std::chrono::seconds(60)), dir.path);
  auto const chief = read_text(dir / "worker0.log");
  auto const at = chief.find("convoy: rolled back to ");
  REQUIRE_MESSAGE(at != std::string::npos, chief);
  MESSAGE("killed ps:0 after global step " << killed_at << "; "
                                           << chief.substr(at, chief.find('\n', at) - at));
  CHECK(read_text(dir / "worker1.log").find("worker 1 carries on from global step") !=
        std::string::npos);
  std::ifstream ps0(dir / "result-ps0.txt");
  std::int64_t global_step = 0, applied = 0, batches = 0;
  ps0 >> global_step >> applied >> batches;
  CHECK(global_step >= steps);
  CHECK(global_step == batches);  // still the sum of the workers' steps
  CHECK(applied == global_step);
  double accuracy = 0.0;
  std::ifstream(dir / "accuracy-worker0.txt") >> accuracy;
  CHECK(accuracy > 0.8);
}

TEST_CASE(
    "a shard killed while it writes its checkpoint part leaves the previous checkpoint whole") {
  auto const at10 = reference(10);
  auto const expected = reference(steps);
  testing::TempDir dir("ps-shard-kill-save");
  std::filesystem::create_directories(dir / "ckpt");
  Tasks cluster(dir.path, "sync");
  pid_t const ps1 = cluster.start("ps", 1, "ps1.log");
  // ps:1 will block opening its part's temporary file at the save of step 20.
  auto const part =
      dir / "ckpt" / ("checkpoint-0000000020.part-1-of-2.convoy.part.tmp-" + std::to_string(ps1));
  REQUIRE(::mkfifo(part.c_str(), 0600) == 0);
  cluster.start("ps", 0, "ps0.log");
  for (int i = 0; i < 2; ++i) cluster.start("worker", i, "worker" + std::to_string(i) + ".log");
  REQUIRE_MESSAGE(within(std::chrono::seconds(60), SaveBlocked{ps1, dir.path}),
                  read_text(dir / "ps1.log"));
  cluster.kill("ps:1");
  std::filesystem::remove(part);
  // The save of step 20 never committed: step 10 is the newest checkpoint, whole.
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt" / io::checkpoint_file_name(20)));
  check_latest_checkpoint(dir / "ckpt", 10, at10);

  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  cluster.start("ps", 1, "ps1-restarted.log");
  check_ended_well(cluster.wait(std::chrono::seconds(60)), dir.path);
  CHECK(read_text(dir / "worker0.log").find("rolled back to") != std::string::npos);
  check_final_weights(dir.path, expected);
  check_latest_checkpoint(dir / "ckpt", steps, expected);
}

TEST_CASE(
    "a chief killed while it commits a checkpoint leaves the previous one whole; a new run "
    "resumes from it and never uses the uncommitted parts") {
  auto const at10 = reference(10);
  auto const expected = reference(steps);
  testing::TempDir dir("ps-chief-kill-save");
  std::filesystem::create_directories(dir / "ckpt");
  {
    Tasks cluster(dir.path, "sync");
    pid_t const chief = cluster.start("worker", 0, "worker0.log");
    // The chief will block opening the manifest's temporary file at step 20, after every shard
    // wrote its part: the moment the parts exist and nothing names them yet.
    auto const manifest =
        dir / "ckpt" / (io::checkpoint_file_name(20) + ".tmp-" + std::to_string(chief));
    REQUIRE(::mkfifo(manifest.c_str(), 0600) == 0);
    for (int i = 0; i < 2; ++i) cluster.start("ps", i, "ps" + std::to_string(i) + ".log");
    cluster.start("worker", 1, "worker1.log");
    REQUIRE_MESSAGE(within(std::chrono::seconds(60), SaveBlocked{chief, dir.path}),
                    read_text(dir / "worker0.log"));
    cluster.kill("worker:0");
    std::filesystem::remove(manifest);
    // Both parts of step 20 were written; they belong to no checkpoint.
    for (auto const* p : {"checkpoint-0000000020.part-0-of-2.convoy.part",
                          "checkpoint-0000000020.part-1-of-2.convoy.part"}) {
      CHECK(std::filesystem::exists(dir / "ckpt" / p));
    }
    CHECK_FALSE(std::filesystem::exists(dir / "ckpt" / io::checkpoint_file_name(20)));
    check_latest_checkpoint(dir / "ckpt", 10, at10);
  }  // the rest of that cluster is killed
  auto const stale_part = read_text(dir / "ckpt" / "checkpoint-0000000020.part-0-of-2.convoy.part");

  // A new cluster resumes from step 10 and writes step 20 afresh, with a nonce of its own.
  Tasks again(dir.path, "sync");
  again.start_all();
  check_ended_well(again.wait(std::chrono::seconds(60)), dir.path);
  CHECK(read_text(dir / "worker0.log")
            .find("resumed from " + (dir / "ckpt" / io::checkpoint_file_name(10)).string()) !=
        std::string::npos);
  check_final_weights(dir.path, expected);
  check_latest_checkpoint(dir / "ckpt", steps, expected);
  // Step 20's committed part is not the one the killed save left.
  auto const committed = dir / "ckpt" / "checkpoint-0000000020.part-0-of-2.convoy.part";
  REQUIRE(std::filesystem::exists(committed));
  CHECK(read_text(committed) != stale_part);
}

TEST_CASE("a shard that never comes back stops every worker within its timeout, naming it") {
  testing::TempDir dir("ps-shard-gone");
  Tasks cluster(dir.path, "sync:timeout=3000");
  cluster.start_all();
  REQUIRE_MESSAGE(within(std::chrono::seconds(60), [&] { return chief_step(dir.path) >= 10; }),
                  read_text(dir / "worker0.log"));
  cluster.kill("ps:1");
  auto const killed = clock_type::now();
  auto const status = cluster.wait(std::chrono::seconds(30));
  auto const took = clock_type::now() - killed;
  MESSAGE("every task ended " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                              << " ms after the kill (timeout 3000 ms)");
  CHECK(took < std::chrono::seconds(12));
  auto const ps1 = "ps:1 at " + cluster.ps_address(1);
  for (std::string worker : {"worker:0", "worker:1"}) {
    CAPTURE(worker);
    REQUIRE(status.contains(worker));
    CHECK(status.at(worker) == 1);
    auto const log = read_text(dir / ("worker" + worker.substr(7) + ".log"));
    CHECK_MESSAGE(log.find("task failed: convoy: worker " + worker.substr(7) +
                           " waited 3000 ms for " + ps1) != std::string::npos,
                  log);
  }
  CHECK(status.at("ps:0") != -1);  // it ended by its own timeout, not the test's deadline
}

}  // namespace test_cluster_ps_faults_shards
