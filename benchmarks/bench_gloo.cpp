// comm::Gloo across 2 processes on loopback, each a real process this program starts
// (tests/support/ processes.hpp). Two tables:
//   allreduce: one buffer of 64 KiB to 64 MiB summed over the 2 processes through convoy's fabric
//     (HostExchange handing it to the fabric's allreducer, as a training step does), against that
//     allreducer called alone on the same buffer (Gloo::Algorithm::automatic), against
//     gloo::allreduce's ring at every size (Gloo::Algorithm::ring: a rendezvous per segment, no
//     registered buffers), and against a TCP socket pair on loopback moving the same bytes both
//     ways at once (each process sends and receives the whole buffer: what a 2-process allreduce
//     moves, in the fewest messages).
//   training: the Fashion-MNIST MLP (784-500-10, 100 rows a process a step) with 2 processes of
//     one replica under comm::Gloo, against the same 2 processes each training alone with no
//     exchange (the ceiling), and against in-process Mirrored with 2 replicas.
// Then recovery: the last of 3 synchronous workers killed with SIGKILL, the time to worker 0's next
// step as the others regroup, against every task restarted from the checkpoint
// (benchmarks/recovery.hpp); and worker 0 killed, the time to worker 1's next step.
// Every figure is a ratio to one measured in the same run; each is the best of --repeats.
//
// Run: build/benchmarks/bench_gloo [--repeats N] [--steps N] [--quick] [--csv PATH] [--json PATH]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <convoy/comm/gloo.hpp>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "files.hpp"
#include "options.hpp"
#include "processes.hpp"
#include "recovery.hpp"
#include "report.hpp"
#include "synthetic.hpp"
#include "temp_dir.hpp"

using namespace convoy;
using namespace std::chrono_literals;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Task options travel in the scenario name: "<kind>:<repeats>:<steps>:<quick>".
struct TaskOptions {
  std::string kind;
  int repeats = 3;
  std::int64_t steps = 300;
  bool quick = false;
};
TaskOptions parse_scenario(std::string const& s) {
  TaskOptions o;
  int quick = 0;
  char kind[32] = {};
  long long steps = 0;
  std::sscanf(s.c_str(), "%31[^:]:%d:%lld:%d", kind, &o.repeats, &steps, &quick);
  o.kind = kind;
  o.steps = steps;
  o.quick = quick != 0;
  return o;
}
// 64 KiB: a bucket of a small model, where Gloo's per-call allreduce stalled (docs/gloo.md).
std::vector<std::size_t> sizes_kib(bool quick) {
  return quick ? std::vector<std::size_t>{1024}
               : std::vector<std::size_t>{64, 1024, 4 * 1024, 16 * 1024, 64 * 1024};
}

// Full-duplex TCP between the 2 processes: each sends `bytes` and receives `bytes` at once.
class SocketPair {
 public:
  SocketPair(int rank, int port) {
    if (rank == 0) {
      int const listener = ::socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
          ::listen(listener, 1) != 0) {
        throw Error("bench_gloo: cannot listen on loopback port " + std::to_string(port));
      }
      fd_ = ::accept(listener, nullptr, nullptr);
      ::close(listener);
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<std::uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      auto const deadline = std::chrono::steady_clock::now() + 20s;
      for (;;) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
        ::close(fd_);
        if (std::chrono::steady_clock::now() > deadline) throw Error("bench_gloo: no peer");
        std::this_thread::sleep_for(20ms);
      }
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~SocketPair() { ::close(fd_); }
  // Sends `out` while receiving as many bytes into `in`.
  void exchange(std::vector<char> const& out, std::vector<char>& in) {
    std::jthread sender([&] {
      std::size_t sent = 0;
      while (sent < out.size()) {
        auto const n = ::send(fd_, out.data() + sent, out.size() - sent, 0);
        if (n <= 0) return;
        sent += static_cast<std::size_t>(n);
      }
    });
    std::size_t got = 0;
    while (got < in.size()) {
      auto const n = ::recv(fd_, in.data() + got, in.size() - got, 0);
      if (n <= 0) throw Error("bench_gloo: the socket pair broke");
      got += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_ = -1;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  auto const mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// Rank 0 writes "<MiB> <fabric s> <gloo s> <gloo::allreduce s> <tcp s> <fabric / gloo>" a line:
// the first two the median of their calls, interleaved call by call, the last the median of the
// ratio of each pair of them; the others the mean of a few calls in a row, the best of the
// repeats; the four kinds interleaved.
int allreduce_task(TaskOptions const& o, std::filesystem::path const& dir) {
  auto const cluster = Cluster::from_environment();
  int const rank = cluster.worker_rank();
  auto context = comm::gloo_fabric::connect_mesh(cluster, {.host = "127.0.0.1", .interface = {}},
                                                 60s, comm::bootstrap::Options{});
  // What comm::Gloo's fabric runs (Gloo::Algorithm::automatic), and gloo::allreduce's ring for
  // every size (Gloo::Algorithm::ring: a rendezvous per segment, no registered buffers).
  comm::gloo_fabric::Allreducer automatic(context, comm::Gloo::Algorithm::automatic, 60s);
  comm::gloo_fabric::Allreducer per_call(context, comm::Gloo::Algorithm::ring, 60s);
  auto const tcp_port = parse_address(cluster.worker_address(0), "bench").port + 1;
  SocketPair pair(rank, tcp_port);
  std::ofstream out(dir / ("allreduce" + std::to_string(rank) + ".txt"));
  for (auto const kib : sizes_kib(o.quick)) {
    std::size_t const n = kib * std::size_t{1024} / sizeof(float);
    std::vector<float> values(n, 1.0f);
    std::vector<char> send(n * sizeof(float), 1), recv(n * sizeof(float));
    // The fabric: HostExchange handing the buffer to the allreducer, as a training step does.
    comm::gloo_fabric::HostExchange exchange(
        1, 1, 60s, [&](std::size_t, std::span<float> x) { automatic.reduce(0, x); });
    int const calls = static_cast<int>(std::clamp<std::size_t>(64 * 1024 / kib, 8, 64));
    auto timed = [&](auto&& call) {
      auto const t = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) call();
      return seconds_since(t) / calls;
    };
    // The fabric and the allreducer alone alternate call by call, each first in every other pair,
    // so that both meet the same moments of a machine whose loopback drifts within seconds, and
    // each is the median of its calls over all repeats (taken as blocks of a few calls, best of
    // 3, their ratio ranged over 0.57-1.16 at 1 MiB between runs).
    std::vector<double> fabric_calls, alone_calls;
    auto fabric_and_alone = [&](bool keep) {
      for (int c = 0; c < calls; ++c) {
        for (int turn = 0; turn < 2; ++turn) {
          auto const t = std::chrono::steady_clock::now();
          if ((turn == 0) == (c % 2 == 0)) {
            exchange.port(0).start(0, values);
            exchange.port(0).wait();
            if (keep) fabric_calls.push_back(seconds_since(t));
          } else {
            automatic.reduce(0, values);
            if (keep) alone_calls.push_back(seconds_since(t));
          }
        }
      }
    };
    double best_per_call = 1e30, best_tcp = 1e30;
    for (int r = 0; r < o.repeats + 1; ++r) {  // the first round warms up
      fabric_and_alone(r > 0);
      double const per_call_s = timed([&] { per_call.reduce(0, values); });
      double const tcp_s = timed([&] { pair.exchange(send, recv); });
      if (r == 0) continue;
      best_per_call = std::min(best_per_call, per_call_s);
      best_tcp = std::min(best_tcp, tcp_s);
    }
    // fabric / Gloo: the median of each pair's ratio, the two calls of a pair a moment apart.
    std::vector<double> pairs;
    for (std::size_t i = 0; i < fabric_calls.size(); ++i)
      pairs.push_back(alone_calls[i] / fabric_calls[i]);
    out << static_cast<double>(kib) / 1024 << " " << median(fabric_calls) << " "
        << median(alone_calls) << " " << best_per_call << " " << best_tcp << " " << median(pairs)
        << "\n";
  }
  return 0;
}

constexpr std::size_t rows_per_process = 100;

// Trains the MLP for `steps` steps: "gloo" with comm::Gloo, "gloo-ring" with its ring algorithm
// (gloo::allreduce at every size), "alone" with comm::InProcess (no exchange); writes samples/s.
int train_task(TaskOptions const& o, std::filesystem::path const& dir) {
  auto const cluster = Cluster::from_environment();
  auto const data = io::load_fashion_mnist(io::Split::train);
  double rate = 0.0;
  if (o.kind == "gloo" || o.kind == "gloo-ring") {
    using S = Strategy<nn::Mlp, place::Host, comm::Gloo, sync::Synchronous>;
    comm::Gloo policy;
    if (o.kind == "gloo-ring") policy.algorithm = comm::Gloo::Algorithm::ring;
    Trainer<S> trainer{S{nn::Mlp({784, 500, 10}), {}, policy}, optim::Sgd{0.1f}};
    rate = trainer
               .fit(data, {.steps = o.steps,
                           .batch_size = 2 * rows_per_process,
                           .log_every = 0,
                           .log = nullptr})
               .samples_per_second;
  } else {
    using S = Strategy<nn::Mlp, place::Host, comm::InProcess, sync::Synchronous>;
    Trainer<S> trainer{S{nn::Mlp({784, 500, 10})}, optim::Sgd{0.1f}};
    rate =
        trainer
            .fit(data,
                 {.steps = o.steps, .batch_size = rows_per_process, .log_every = 0, .log = nullptr})
            .samples_per_second;
  }
  std::ofstream(dir / (o.kind + std::to_string(cluster.worker_rank()) + ".txt")) << rate << "\n";
  return 0;
}

// The recovery figures' task (benchmarks/recovery.hpp): 3 synchronous Gloo workers, a checkpoint
// every 50 steps, each step logged.
int recover_task(TaskOptions const& o, std::filesystem::path const& dir) {
  using S = Strategy<nn::Mlp, place::Host, comm::Gloo, sync::Synchronous>;
  bench::recovery::StepLog log(dir, Cluster::from_environment(RankJobs::all_workers));
  Trainer<S> trainer{S{nn::Mlp({784, 500, 10}), {}, comm::Gloo{.timeout = 30s}}, optim::Sgd{0.05f}};
  auto const data = testing::synthetic_classes(6000, 784, 10);
  trainer.fit(data, {.steps = o.steps,
                     .batch_size = 3 * rows_per_process,
                     .log = nullptr,
                     .checkpoint_dir = dir / "checkpoints",
                     .checkpoint_every = 50,
                     .callbacks = {log.callback()}});
  return 0;
}

int task(std::string const& scenario, std::filesystem::path const& dir) {
  auto const o = parse_scenario(scenario);
  if (o.kind == "allreduce") return allreduce_task(o, dir);
  if (o.kind == "recover") return recover_task(o, dir);
  return train_task(o, dir);
}

std::string program;

void run(std::string const& scenario, std::filesystem::path const& dir) {
  auto const tasks = testing::run_cluster(program, scenario, dir, 0, 2, {}, 600s);
  for (auto const& t : tasks) {
    if (t.status != 0) {
      throw Error("bench_gloo: " + t.job + ":" + std::to_string(t.index) + " ended with status " +
                  std::to_string(t.status) + ": " + testing::read_file(t.log));
    }
  }
}

double read_rate(std::filesystem::path const& file) {
  double rate = 0.0;
  std::ifstream(file) >> rate;
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto const status = convoy::testing::run_task_if_asked(argc, argv, task)) return *status;
  program = argv[0];
  int repeats = 3;
  std::int64_t steps = 300;
  bool quick = false;
  bench::CommandLine cli("bench_gloo",
                         "comm::Gloo on loopback: the allreduce against Gloo's own and TCP, and "
                         "training samples/s against 2 processes alone.");
  cli.integer("--repeats", "N", repeats, 1, "runs of each measurement, best kept (default 3)");
  cli.integer("--steps", "N", steps, std::int64_t{1}, "training steps (default 300)");
  cli.flag("--quick", quick, "a smoke run: 1 MiB only, 20 training steps, 1 repeat");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (quick) {
    repeats = 1;
    steps = 20;
  }
  auto const tag = ":" + std::to_string(repeats) + ":" + std::to_string(steps) + ":" +
                   std::to_string(quick ? 1 : 0);
  testing::TempDir dir("bench-gloo");

  run("allreduce" + tag, dir.path);
  bench::Record allreduce;
  allreduce.set("benchmark", "gloo").set("part", "allreduce").set("processes", 2);
  std::printf(
      "allreduce of one buffer over 2 processes on loopback: fabric and Gloo the median of "
      "their calls, taken in turn; per-call and TCP the best of %d\n",
      repeats);
  std::printf("%8s %12s %12s %14s %10s %12s %10s %10s\n", "MiB", "fabric GB/s", "Gloo GB/s",
              "per-call GB/s", "TCP GB/s", "fabric/Gloo", "Gloo/TCP", "Gloo/per-call");
  {
    std::ifstream in(dir / "allreduce0.txt");
    double mib = 0, fabric = 0, own = 0, per_call = 0, tcp = 0, fabric_vs_own = 0;
    while (in >> mib >> fabric >> own >> per_call >> tcp >> fabric_vs_own) {
      double const bytes = mib * 1048576.0;
      std::printf("%8.4g %12.2f %12.2f %14.2f %10.2f %12.3f %10.3f %10.3f\n", mib,
                  bytes / fabric / 1e9, bytes / own / 1e9, bytes / per_call / 1e9,
                  bytes / tcp / 1e9, fabric_vs_own, tcp / own, per_call / own);
      allreduce.add("sizes", bench::Record{}
                                 .set("mib", mib)
                                 .set("fabric_bytes_per_second", bytes / fabric)
                                 .set("gloo_bytes_per_second", bytes / own)
                                 .set("gloo_per_call_bytes_per_second", bytes / per_call)
                                 .set("tcp_bytes_per_second", bytes / tcp)
                                 .set("fabric_vs_gloo", fabric_vs_own)
                                 .set("gloo_vs_tcp", tcp / own)
                                 .set("gloo_vs_per_call", per_call / own));
    }
  }
  results.add(std::move(allreduce));

  double best_gloo = 0.0, best_ring = 0.0, best_alone = 0.0, best_mirrored = 0.0;
  auto const data = io::load_fashion_mnist(io::Split::train);
  for (int r = 0; r < repeats; ++r) {
    run("gloo" + tag, dir.path);
    best_gloo = std::max(best_gloo, read_rate(dir / "gloo0.txt"));
    run("gloo-ring" + tag, dir.path);
    best_ring = std::max(best_ring, read_rate(dir / "gloo-ring0.txt"));
    run("alone" + tag, dir.path);
    best_alone =
        std::max(best_alone, read_rate(dir / "alone0.txt") + read_rate(dir / "alone1.txt"));
    using M = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
    Trainer<M> mirrored{M{nn::Mlp({784, 500, 10}), {.replicas = 2}}, optim::Sgd{0.1f}};
    best_mirrored = std::max(best_mirrored, mirrored
                                                .fit(data, {.steps = steps,
                                                            .batch_size = 2 * rows_per_process,
                                                            .log_every = 0,
                                                            .log = nullptr})
                                                .samples_per_second);
  }
  std::printf("training the 784-500-10 MLP, %zu rows a replica, %lld steps, best of %d\n",
              rows_per_process, static_cast<long long>(steps), repeats);
  std::printf("%-34s %12s %12s\n", "config", "samples/sec", "vs alone");
  std::printf("%-34s %12.0f %12.3f\n", "2 processes alone, no exchange", best_alone, 1.0);
  std::printf("%-34s %12.0f %12.3f\n", "2 processes, comm::Gloo", best_gloo,
              best_gloo / best_alone);
  std::printf("%-34s %12.0f %12.3f\n", "2 processes, comm::Gloo, ring", best_ring,
              best_ring / best_alone);
  std::printf("%-34s %12.0f %12.3f\n", "1 process, Mirrored 2, InProcess", best_mirrored,
              best_mirrored / best_alone);
  results.add(bench::Record{}
                  .set("benchmark", "gloo")
                  .set("part", "training")
                  .set("steps", steps)
                  .set("alone_2", best_alone)
                  .set("gloo_2", best_gloo)
                  .set("mirrored_2", best_mirrored)
                  .set("gloo_vs_alone", best_gloo / best_alone)
                  .set("gloo_ring_2", best_ring)
                  .set("gloo_ring_vs_alone", best_ring / best_alone)
                  .set("mirrored_vs_alone", best_mirrored / best_alone));

  // Recovery: the last of 3 synchronous workers killed; the others regroup and train on, and it
  // joins them when started again, against the peers' way of restarting every task from the
  // checkpoint. The run goes on long enough after the kill for the restarted worker to join.
  std::int64_t const recover_steps = quick ? 1000 : 3000, kill_after = quick ? 125 : 625;
  std::printf(
      "\nA synchronous worker killed (3 Gloo workers, the MLP, %zu rows a worker, %lld steps, "
      "worker 2 killed after %lld, a checkpoint every 50 steps), best of %d\n",
      rows_per_process, static_cast<long long>(recover_steps), static_cast<long long>(kill_after),
      repeats);
  auto const figures =
      bench::recovery::best_of({.program = program,
                                .scenario = "recover:1:" + std::to_string(recover_steps) + ":0",
                                .kill_after = kill_after,
                                .ps = 0,
                                .workers = 3},
                               repeats);
  if (!figures) return 1;
  bench::Record recovery;
  recovery.set("benchmark", "gloo").set("part", "recovery").set("recovery_steps", recover_steps);
  recovery.set("recovery_kill_after", kill_after);
  bench::recovery::report(*figures, recovery, "convoy: the other 2 train on; worker 2 rejoins");
  // Worker 0 killed instead: the rendezvous and the liveness board go with it, and the others know
  // it ended from its address, which refuses connections (comm/bootstrap/regroup.hpp).
  auto const first =
      bench::recovery::best_of({.program = program,
                                .scenario = "recover:1:" + std::to_string(recover_steps) + ":0",
                                .kill_after = kill_after,
                                .ps = 0,
                                .workers = 3,
                                .victim = 0},
                               repeats, /*with_peers=*/false);
  if (!first) return 1;
  auto const& zero = first->convoy_way;
  std::printf("%-52s %12.4f %12.1f %12.4f\n", "convoy, worker 0 killed: the other 2 train on",
              zero.to_next_step, zero.to_next_step / zero.step_seconds, zero.restart_to_step);
  std::printf("worker 0 killed / worker 2 killed, kill to the next step: %.2f\n",
              zero.to_next_step / figures->convoy_way.to_next_step);
  recovery.set("recovery_worker0_kill_to_step_seconds", zero.to_next_step)
      .set("recovery_worker0_restart_to_step_seconds", zero.restart_to_step)
      .set("recovery_worker0_over_last", zero.to_next_step / figures->convoy_way.to_next_step);
  results.add(std::move(recovery));
  return results.write() ? 0 : 1;
}
