// Clusters of real processes on loopback for tests and benchmarks: a program starts itself once
// per task ("<program> --task <scenario> <dir>"), each with the variables a launcher would set,
// and waits for all of them within a deadline, killing what is left.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "files.hpp"

extern char** environ;

namespace convoy::testing {

/// Binds a TCP socket to 127.0.0.1:`port` (0: one the kernel picks) and closes it again; returns
/// the port bound, or 0 when it was taken.
inline int bind_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    bound = ntohs(a.sin_port);
  }
  ::close(fd);
  return bound;
}

/// The ports free_port() and free_port_block() gave this process: nothing binds one between two
/// calls, so a second draw of it would find it free (one test_gloo_kill trial got one port for two
/// workers of a TF_CONFIG).
inline std::set<int>& ports_handed_out() {
  static std::set<int> given;
  return given;
}

/// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range
/// (net.ipv4.ip_local_port_range): a port the kernel hands out for a bind to port 0 (Gloo's and
/// ZeroMQ's own listeners, every outgoing connection) could be taken by any process between this
/// answer and the task's bind, as a test_gloo_kill trial once saw ("Address already in use").
/// Below the range only another test drawing the same random port can. A port is never handed out
/// twice by one process (ports_handed_out()).
inline int free_port() {
  int low = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  int const first = std::max(1024, low - 12000);
  if (low - first >= 1000) {
    static std::mt19937 draw(std::random_device{}());
    auto& given = ports_handed_out();
    std::uniform_int_distribution<int> pick(first, low - 64);  // room for a block above it
    for (int attempt = 0; attempt < 100; ++attempt) {
      int const port = pick(draw);
      if (given.contains(port)) continue;
      if (bind_loopback(port)) {
        given.insert(port);
        return port;
      }
    }
  }
  return bind_loopback(0);  // no room below the range: a port the kernel picks, as before
}

/// "127.0.0.1:<port>" with a port free_port() gave: an address for a server of a test to bind.
inline std::string free_loopback_address() { return "127.0.0.1:" + std::to_string(free_port()); }

/// A base port b such that b+1 .. b+n are free: the rank-only launchers put rank r at b + 1 + r.
inline int free_port_block(int n) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int const base = free_port();
    bool ok = base + n < 65535;
    for (int i = 1; ok && i <= n; ++i) {
      ok = !ports_handed_out().contains(base + i) && bind_loopback(base + i) != 0;
    }
    if (ok) {
      for (int i = 1; i <= n; ++i) ports_handed_out().insert(base + i);
      return base;
    }
  }
  throw std::runtime_error("no block of free ports");
}

/// The variables each launcher sets for rank `rank` of `size` (ps tasks first, as CONVOY_PS_TASKS
/// splits them), beside CONVOY_PS_TASKS when there are ps tasks: without any, the program's own
/// default must make every rank a worker (RankJobs::all_workers).
inline std::vector<std::string> launcher_environment(std::string const& launcher, int rank,
                                                     int size, int ps, int base) {
  auto const r = std::to_string(rank), n = std::to_string(size), b = std::to_string(base);
  std::vector<std::string> env;
  if (ps > 0) env.push_back("CONVOY_PS_TASKS=" + std::to_string(ps));
  if (launcher == "torchrun") {
    env.insert(env.end(),
               {"RANK=" + r, "LOCAL_RANK=" + r, "WORLD_SIZE=" + n, "LOCAL_WORLD_SIZE=" + n,
                "GROUP_RANK=0", "ROLE_RANK=" + r, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + b,
                "TORCHELASTIC_RESTART_COUNT=0"});
  } else if (launcher == "Open MPI") {
    env.insert(env.end(), {"OMPI_COMM_WORLD_RANK=" + r, "OMPI_COMM_WORLD_SIZE=" + n,
                           "OMPI_COMM_WORLD_LOCAL_RANK=" + r, "OMPI_COMM_WORLD_LOCAL_SIZE=" + n,
                           "CONVOY_PORT=" + b});
  } else if (launcher == "MPICH") {
    env.insert(env.end(), {"PMI_RANK=" + r, "PMI_SIZE=" + n, "CONVOY_PORT=" + b});
  } else if (launcher == "Slurm") {
    env.insert(env.end(), {"SLURM_PROCID=" + r, "SLURM_NTASKS=" + n, "SLURM_LOCALID=" + r,
                           "SLURM_JOB_NODELIST=localhost", "SLURM_NODELIST=localhost",
                           "SLURM_TASKS_PER_NODE=" + n, "SLURM_JOB_ID=1", "CONVOY_PORT=" + b});
  }
  return env;
}

inline bool set_by_a_launcher(std::string_view entry) {
  for (std::string_view prefix :
       {"TF_CONFIG=", "RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
        "OMPI_", "PMI_", "SLURM_", "CONVOY_PS_TASKS=", "CONVOY_PORT=", "CONVOY_COORDINATOR="}) {
    if (entry.starts_with(prefix)) return true;
  }
  return false;
}

struct Task {
  std::string job;
  int index = 0;
  pid_t pid = -1;
  int status = -1;            ///< exit status, 128 + signal, or -1 when killed at the deadline
  std::filesystem::path log;  ///< its stdout and stderr (read_file(), files.hpp)
};

/// The TF_CONFIG "cluster" of `ps` ps tasks and `workers` workers on free loopback ports (no
/// "ps" job at all without ps tasks: TF_CONFIG refuses an empty one).
inline std::string cluster_spec(int ps, int workers) {
  auto list = [&](int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      out += std::string(i ? "," : "") + "\"127.0.0.1:" + std::to_string(free_port()) + "\"";
    }
    return out;
  };
  std::string const ps_job = ps > 0 ? "\"ps\": [" + list(ps) + "], " : "";
  return "{" + ps_job + "\"worker\": [" + list(workers) + "]}";
}

/// This process's environment without any launcher's variables, plus `more`.
inline std::vector<std::string> task_environment(std::vector<std::string> const& more) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (!set_by_a_launcher(*e)) env.emplace_back(*e);
  }
  env.insert(env.end(), more.begin(), more.end());
  return env;
}

/// TF_CONFIG for task `job`:`index` of the cluster `spec` (cluster_spec()).
inline std::string tf_config(std::string const& spec, std::string const& job, int index) {
  return "TF_CONFIG={\"cluster\": " + spec + ", \"task\": {\"type\": \"" + job +
         "\", \"index\": " + std::to_string(index) + "}}";
}

/// Starts `argv` with `env`, its stdout and stderr into `log`; returns its process id.
inline pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env,
                   std::filesystem::path const& log) {
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string const log_path = log.string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  int const rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  return pid;
}

/// Reaps `t` if it has ended; true once it has (its status set).
inline bool reap(Task& t, int flags = WNOHANG) {
  if (t.pid < 0) return true;
  int status = 0;
  if (::waitpid(t.pid, &status, flags) != t.pid) return false;
  t.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  t.pid = -1;
  return true;
}

/// Waits until every task has ended or `deadline` passes; then kills what is left (status -1).
/// Returns how many were killed at the deadline.
inline int finish(std::vector<Task>& tasks, std::chrono::steady_clock::time_point deadline) {
  std::size_t left = tasks.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    left = 0;
    for (auto& t : tasks) left += reap(t) ? 0 : 1;
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int killed = 0;
  for (auto& t : tasks) {
    if (t.pid > 0) {
      ::kill(t.pid, SIGKILL);
      ::waitpid(t.pid, nullptr, 0);
      t.pid = -1;
      ++killed;
    }
  }
  return killed;
}

/// Starts `ps` ps tasks and `workers` workers of `program --task scenario dir`, each with its
/// TF_CONFIG (or, when `launcher` is named, the variables that launcher sets); returns the running
/// tasks.
inline std::vector<Task> start_cluster(std::string const& program, std::string const& scenario,
                                       std::filesystem::path const& dir, int ps, int workers,
                                       std::string const& launcher = {}) {
  int const base = launcher.empty() ? 0 : free_port_block(ps + workers);
  std::string const spec = cluster_spec(ps, workers);
  std::vector<Task> tasks;
  for (int i = 0; i < ps + workers; ++i) {
    auto& t = tasks.emplace_back();
    t.job = i < ps ? "ps" : "worker";
    t.index = i < ps ? i : i - ps;
  }
  for (std::size_t rank = 0; rank < tasks.size(); ++rank) {
    auto& t = tasks[rank];
    auto const env = task_environment(
        launcher.empty()
            ? std::vector<std::string>{tf_config(spec, t.job, t.index)}
            : launcher_environment(launcher, static_cast<int>(rank), ps + workers, ps, base));
    t.log = dir / (t.job + std::to_string(t.index) + ".log");
    t.pid = spawn({program, "--task", scenario, dir.string()}, env, t.log);
  }
  return tasks;
}
/// The same, waiting at most `limit` for all of them; returns the tasks with their exit statuses.
inline std::vector<Task> run_cluster(std::string const& program, std::string const& scenario,
                                     std::filesystem::path const& dir, int ps, int workers,
                                     std::string const& launcher = {},
                                     std::chrono::seconds limit = std::chrono::seconds(120)) {
  auto tasks = start_cluster(program, scenario, dir, ps, workers, launcher);
  finish(tasks, std::chrono::steady_clock::now() + limit);
  return tasks;
}

/// tools/convoy-launch of this checkout, or the one CONVOY_LAUNCH names.
inline std::string convoy_launch() {
  char const* named = std::getenv("CONVOY_LAUNCH");
  if (named) return named;
  return (std::filesystem::path(__FILE__)
              .lexically_normal()
              .parent_path()
              .parent_path()
              .parent_path() /
          "tools" / "convoy-launch")
      .string();
}

/// The task half of such a program's main: for "<program> --task <scenario> <dir>", runs
/// task(scenario, dir) and returns its exit status (a throw is printed as "task failed: <what>" and
/// gives 1); for any other command line, nothing: the program goes on as the driver.
template <class Run>
std::optional<int> run_task_if_asked(int argc, char** argv, Run&& task) {
  if (argc != 4 || std::string_view(argv[1]) != "--task") return std::nullopt;
  try {
    return task(std::string(argv[2]), std::filesystem::path(argv[3]));
  } catch (std::exception const& e) {
    std::cerr << "task failed: " << e.what() << std::endl;
    return 1;
  }
}

/// This program's own file (/proc/self/exe), which a test starts once per task.
inline std::string const& this_program() {
  static std::string const path = std::filesystem::read_symlink("/proc/self/exe").string();
  return path;
}

/// The tasks of one test file of a program that several files share (tests/cluster, one
/// translation unit): `task` runs a scenario of this file's. The file starts its tasks with
/// scenario(s), which names the suite, and the shared main (tests/doctest_main.cpp) routes the
/// command line back to it with run_if_asked. Define one at namespace scope, per file.
class TaskSuite {
 public:
  using Run = std::function<int(std::string const&, std::filesystem::path const&)>;
  TaskSuite(std::string name, Run task) : name_(std::move(name)) {
    if (!suites().emplace(name_, std::move(task)).second) {
      throw std::logic_error("convoy tests: two task suites named " + name_);
    }
  }
  /// `scenario` of this suite, as a task's command line carries it.
  std::string scenario(std::string_view scenario) const {
    return name_ + "/" + std::string(scenario);
  }
  /// For "<program> --task <suite>/<scenario> <dir>": that suite's task, as run_task_if_asked
  /// runs one (a suite that is not here fails the task, saying so); nothing for any other command
  /// line.
  static std::optional<int> run_if_asked(int argc, char** argv) {
    return run_task_if_asked(argc, argv, [](std::string const& text, auto const& dir) {
      auto const slash = text.find('/');
      auto const found = suites().find(text.substr(0, slash));
      if (slash == std::string::npos || found == suites().end()) {
        throw std::runtime_error("no task suite here runs scenario '" + text + "'");
      }
      return found->second(text.substr(slash + 1), dir);
    });
  }

 private:
  static std::map<std::string, Run>& suites() {
    static std::map<std::string, Run> all;
    return all;
  }
  std::string name_;
};

}  // namespace convoy::testing
