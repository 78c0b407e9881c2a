// The parameter server (comm::ZmqPs) on loopback, each figure beside a reference measured in the
// same run:
//  - exchange: push + pull bytes per second of models of 1, 4, 16 and 64 MiB (two variables, SGD)
//    with 1 shard + 1 worker and with 2 shards + 2 workers, and 2+2 over 1+1; against plain TCP
//    socket pairs on loopback doing what the ps does (one pair per worker, at once: one end sends
//    the model's bytes, the other sends them back), every figure the best of --repeats, the runs
//    interleaved;
//  - TCP on loopback, as iperf3 measures it: one direction, streaming, 1 and 2 pairs, and both
//    directions at once on 1 pair, to check the reference against;
//  - training: samples per second of the 784-500-10 MLP (global batch 100) with 1 ps and 1 or 2
//    workers under each Sync policy, against in-process Mirrored with 2 replicas;
//  - recovery: a synchronous worker killed with SIGKILL; the time from the kill to the next
//    completed step when the others train on (and from starting the worker again to its first step
//    in the group), against restarting every task from the latest checkpoint as torchrun does.
// Every task is a real process, started by this program (see tests/support/processes.hpp).
//
// Run: build/benchmarks/bench_ps [--quick] [--keep-heap] [--repeats N] [--csv PATH] [--json PATH];
//      --help lists the options.
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
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

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// A model that is only weights: its gradients are set once, so a step is the exchange alone.
struct Blob {
  Variables vars{"blob"};
  explicit Blob(std::size_t floats) {
    vars.add("a", {floats / 2});
    vars.add("b", {floats - floats / 2});
    std::fill(vars.grads().begin(), vars.grads().end(), 1e-9f);
  }
  Variables& variables() { return vars; }
  float forward_backward(Batch const&) { return 0.0f; }
};

constexpr std::size_t mib = 1024 * 1024;

// ---- tasks ----------------------------------------------------------------------------------

int exchange_task(std::size_t megabytes, std::int64_t steps, std::filesystem::path const& dir) {
  using S = Strategy<Blob, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
  auto const cluster = Cluster::from_environment();
  S strategy{Blob(megabytes * mib / sizeof(float)), {}, comm::ZmqPs{.log = nullptr}, {}};
  strategy.set_optimizer(optim::Sgd{1e-3f});
  constexpr std::int64_t warm_up = 3;
  clock_type::time_point start;
  RunPlan plan;
  plan.until = steps + warm_up;
  plan.batch = [](std::size_t, std::int64_t) { return Batch{}; };
  plan.after_step = [&](StepReport const& r) {
    if (r.global_step == warm_up) start = clock_type::now();
    return true;
  };
  strategy.run(plan);
  if (cluster.is_ps()) return 0;
  double const bytes = 2.0 * static_cast<double>(megabytes * mib) * static_cast<double>(steps);
  std::ofstream(dir / ("exchange-" + std::to_string(cluster.worker_rank()) + ".txt"))
      << bytes / seconds_since(start) << "\n";
  return 0;
}

template <class Sync>
int train_task(Sync sync, std::int64_t steps, std::filesystem::path const& dir) {
  using S = Strategy<nn::Mlp, place::Sharded<>, comm::ZmqPs, Sync>;
  auto const cluster = Cluster::from_environment();
  Trainer<S> trainer{S{nn::Mlp({784, 500, 10}), {}, comm::ZmqPs{.log = nullptr}, sync},
                     optim::Sgd{0.05f}};
  auto const data = testing::synthetic_classes(6000, 784, 10);
  auto const result = trainer.fit(data, {.steps = steps, .batch_size = 100, .log = nullptr});
  if (cluster.is_chief()) {
    std::ofstream(dir / "train.txt") << result.samples_per_second << "\n";
  }
  return 0;
}

// Synchronous training with a checkpoint every 50 steps, each step logged for the recovery
// figures (benchmarks/recovery.hpp).
int recover_task(std::int64_t steps, std::filesystem::path const& dir) {
  using S = Strategy<nn::Mlp, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
  bench::recovery::StepLog log(dir, Cluster::from_environment());
  Trainer<S> trainer{S{nn::Mlp({784, 500, 10}),
                       {},
                       comm::ZmqPs{.log = nullptr, .exit_after_serving = false},
                       sync::Synchronous{.timeout = std::chrono::seconds(30)}},
                     optim::Sgd{0.05f}};
  auto const data = testing::synthetic_classes(6000, 784, 10);
  trainer.fit(data, {.steps = steps,
                     .batch_size = 100,
                     .log = nullptr,
                     .checkpoint_dir = dir / "checkpoints",
                     .checkpoint_every = 50,
                     .callbacks = {log.callback()}});
  return 0;
}

int task(std::string const& scenario, std::filesystem::path const& dir) {
  unsigned long a = 0;
  long long b = 0;
  char name[32] = {};
  if (std::sscanf(scenario.c_str(), "%31[^:]:%lu:%lld", name, &a, &b) != 3) return 2;
  std::string const kind = name;
  if (kind == "exchange") return exchange_task(a, b, dir);
  if (kind == "sync") return train_task(sync::Synchronous{}, b, dir);
  if (kind == "async") return train_task(sync::Asynchronous{}, b, dir);
  if (kind == "ssp2") return train_task(sync::BoundedStaleness<2>{}, b, dir);
  if (kind == "recover") return recover_task(b, dir);
  return 2;
}

// ---- references -----------------------------------------------------------------------------

// A listening socket on loopback and `pairs` connections to it: {client, server} descriptors.
struct TcpPairs {
  std::vector<int> clients, servers;
  explicit TcpPairs(int pairs) {
    int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    ::listen(listener, pairs);
    for (int i = 0; i < pairs; ++i) {
      int c = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
      clients.push_back(c);
      servers.push_back(::accept(listener, nullptr, nullptr));
    }
    ::close(listener);
  }
  ~TcpPairs() {
    for (int fd : clients) ::close(fd);
    for (int fd : servers) ::close(fd);
  }
  TcpPairs(TcpPairs const&) = delete;
  TcpPairs& operator=(TcpPairs const&) = delete;
};

void send_all(int fd, char const* p, std::size_t n) {
  while (n > 0) {
    auto const k = ::send(fd, p, n, 0);
    if (k <= 0) std::abort();
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}
void recv_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    auto const k = ::recv(fd, p, n, 0);
    if (k <= 0) std::abort();
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

// TCP on loopback as iperf3 measures it: `total` bytes in writes of 128 KiB (iperf3's default),
// one direction on each of `pairs` pairs at once, or both directions at once on each (`duplex`).
// Returns the bytes received per second over all pairs and directions.
double tcp_stream(std::size_t total, int pairs, bool duplex) {
  TcpPairs tcp(pairs);
  constexpr std::size_t chunk = 128 * 1024;
  auto sender = [&](int fd) {
    std::vector<char> buffer(chunk, 1);
    for (std::size_t sent = 0; sent < total; sent += chunk) {
      send_all(fd, buffer.data(), std::min(chunk, total - sent));
    }
  };
  auto receiver = [&](int fd) {
    std::vector<char> buffer(chunk);
    for (std::size_t got = 0; got < total;) {
      auto const k = ::recv(fd, buffer.data(), chunk, 0);
      if (k <= 0) std::abort();
      got += static_cast<std::size_t>(k);
    }
  };
  std::vector<std::thread> threads;
  auto const start = clock_type::now();
  for (int i = 0; i < pairs; ++i) {
    auto const c = tcp.clients[static_cast<std::size_t>(i)];
    auto const s = tcp.servers[static_cast<std::size_t>(i)];
    threads.emplace_back(sender, c);
    threads.emplace_back(receiver, s);
    if (duplex) {
      threads.emplace_back(sender, s);
      threads.emplace_back(receiver, c);
    }
  }
  for (auto& t : threads) t.join();
  return static_cast<double>(total) * pairs * (duplex ? 2 : 1) / seconds_since(start);
}

// What the ps does, over plain TCP: `pairs` connections on loopback at once (one per worker); on
// each, `rounds` times, one end sends `bytes` (the push) and the other sends them back (the
// answer). Returns the bytes moved per second over all pairs.
double tcp_reference(std::size_t bytes, int pairs, int rounds) {
  TcpPairs tcp(pairs);
  std::vector<std::thread> threads;
  auto const start = clock_type::now();
  for (int i = 0; i < pairs; ++i) {
    threads.emplace_back([&, i] {  // the echoing end
      std::vector<char> buffer(bytes);
      int const fd = tcp.servers[static_cast<std::size_t>(i)];
      for (int r = 0; r < rounds; ++r) {
        recv_all(fd, buffer.data(), bytes);
        send_all(fd, buffer.data(), bytes);
      }
    });
    threads.emplace_back([&, i] {
      std::vector<char> buffer(bytes, 1);
      int const fd = tcp.clients[static_cast<std::size_t>(i)];
      for (int r = 0; r < rounds; ++r) {
        send_all(fd, buffer.data(), bytes);
        recv_all(fd, buffer.data(), bytes);
      }
    });
  }
  for (auto& t : threads) t.join();
  return 2.0 * static_cast<double>(bytes) * rounds * pairs / seconds_since(start);
}

double mirrored_reference(std::int64_t steps) {
  using M = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<M> trainer{M{nn::Mlp({784, 500, 10}), place::Mirrored{.replicas = 2}}, optim::Sgd{0.05f}};
  auto const data = testing::synthetic_classes(6000, 784, 10);
  return trainer.fit(data, {.steps = steps, .batch_size = 100, .log = nullptr}).samples_per_second;
}

double read_number(std::filesystem::path const& file) {
  double v = 0.0;
  std::ifstream(file) >> v;
  return v;
}

std::string program;

bool run(std::string const& scenario, std::filesystem::path const& dir, int ps, int workers) {
  auto const tasks =
      testing::run_cluster(program, scenario, dir, ps, workers, {}, std::chrono::seconds(300));
  bool ok = true;
  for (auto const& t : tasks) {
    if (t.status != 0) {
      std::cerr << "bench_ps: " << t.job << ":" << t.index << " of " << scenario
                << " ended with status " << t.status << "; its log:\n"
                << testing::read_file(t.log) << "\n";
      ok = false;
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  auto const keep_heap_task = [](std::string const& scenario, std::filesystem::path const& dir) {
    if (std::getenv("CONVOY_BENCH_HEAP")) {  // --keep-heap, passed to every task
      mallopt(M_MMAP_THRESHOLD, 1 << 30);
      mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    return task(scenario, dir);
  };
  if (auto const status = convoy::testing::run_task_if_asked(argc, argv, keep_heap_task)) {
    return *status;
  }
  bool quick = false, keep_heap = false;
  int repeats = 3;
  bench::CommandLine cli("bench_ps",
                         "Parameter-server push+pull bytes/s against TCP, and training samples/s "
                         "under each Sync against Mirrored; every task a process on loopback.");
  cli.flag("--quick", quick, "fewer steps, for a smoke run");
  cli.flag("--keep-heap", keep_heap, "every task raises glibc's mmap and trim thresholds to 1 GiB");
  cli.integer(
      "--repeats", "N", repeats, 1,
      "runs of each exchange and TCP figure, interleaved, best kept (default 3; --quick: 1)");
  if (auto const status = cli.parse(argc, argv)) return *status;
  if (quick) repeats = 1;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  // glibc maps every block over its (adaptive, at most 32 MiB) threshold afresh and unmaps it on
  // free, so each received frame page-faults in; a high threshold keeps freed frames.
  if (keep_heap) setenv("CONVOY_BENCH_HEAP", "1", 1);
  program = argv[0];
  bench::Record record;
  record.set("benchmark", "ps").set("quick", quick ? 1 : 0).set("keep_heap", keep_heap ? 1 : 0);

  // The references first: TCP on loopback as iperf3 measures it.
  std::size_t const stream_bytes = (quick ? 256 : 2048) * mib;
  auto const stream = bench::best_of({[&] { return tcp_stream(stream_bytes, 1, false); },
                                      [&] { return tcp_stream(stream_bytes, 2, false); },
                                      [&] { return tcp_stream(stream_bytes, 1, true); }},
                                     repeats);
  std::printf(
      "TCP on loopback, streaming (as iperf3 measures it), best of %d: 1 pair %.3f GB/s, "
      "2 pairs %.3f GB/s, 1 pair both ways %.3f GB/s\n\n",
      repeats, stream[0] / 1e9, stream[1] / 1e9, stream[2] / 1e9);
  record.set("tcp_stream_bytes_per_second", stream[0])
      .set("tcp_stream_2_pairs_bytes_per_second", stream[1])
      .set("tcp_duplex_bytes_per_second", stream[2]);

  std::printf(
      "Parameter-server exchange on loopback: push + pull bytes/s, best of %d, against TCP "
      "socket pairs doing the same (send, echo)\n",
      repeats);
  std::printf("%8s %11s %11s %8s %11s %11s %9s %9s\n", "model", "1+1 GB/s", "2+2 GB/s", "2+2/1+1",
              "TCP 1 GB/s", "TCP 2 GB/s", "1+1/TCP", "2+2/TCP");
  for (std::size_t megabytes : {1, 4, 16, 64}) {
    std::int64_t const steps = std::max<std::int64_t>(
        quick ? 3 : 16, (quick ? 64 : 1024) / static_cast<std::int64_t>(megabytes));
    bool failed = false;
    auto exchange = [&](int n) {
      testing::TempDir dir("bench-ps");
      if (!run("exchange:" + std::to_string(megabytes) + ":" + std::to_string(steps), dir.path, n,
               n)) {
        failed = true;
        return 0.0;
      }
      double ps = 0.0;
      for (int w = 0; w < n; ++w)
        ps += read_number(dir / ("exchange-" + std::to_string(w) + ".txt"));
      return ps;
    };
    auto const best =
        bench::best_of({[&] { return exchange(1); }, [&] { return exchange(2); },
                        [&] { return tcp_reference(megabytes * mib, 1, static_cast<int>(steps)); },
                        [&] { return tcp_reference(megabytes * mib, 2, static_cast<int>(steps)); }},
                       repeats);
    if (failed) return 1;
    std::printf("%4zu MiB %11.3f %11.3f %8.2f %11.3f %11.3f %9.2f %9.2f\n", megabytes,
                best[0] / 1e9, best[1] / 1e9, best[1] / best[0], best[2] / 1e9, best[3] / 1e9,
                best[0] / best[2], best[1] / best[3]);
    for (int n : {1, 2}) {
      double const ps = best[static_cast<std::size_t>(n - 1)],
                   tcp = best[static_cast<std::size_t>(n + 1)];
      record.add("exchange", bench::Record{}
                                 .set("mib", megabytes)
                                 .set("shards", n)
                                 .set("workers", n)
                                 .set("bytes_per_second", ps)
                                 .set("tcp_bytes_per_second", tcp)
                                 .set("ratio", ps / tcp)
                                 .set("over_1_1", ps / best[0]));
    }
  }

  std::int64_t const steps = quick ? 40 : 300;
  double const mirrored = mirrored_reference(steps);
  std::printf(
      "\nTraining the 784-500-10 MLP, batch 100, %lld steps: samples/s against Mirrored (2 "
      "replicas, in process)\n",
      static_cast<long long>(steps));
  std::printf("%-28s %8s %14s %8s\n", "strategy", "workers", "samples/s", "ratio");
  std::printf("%-28s %8d %14.0f %8.2f\n", "Mirrored, InProcess", 2, mirrored, 1.0);
  for (std::string sync : {"sync", "async", "ssp2"}) {
    for (int workers : {1, 2}) {
      testing::TempDir dir("bench-ps");
      if (!run(sync + ":0:" + std::to_string(steps), dir.path, 1, workers)) return 1;
      double const s = read_number(dir / "train.txt");
      std::string const label =
          "Sharded, ZmqPs, " + std::string(sync == "sync"    ? "Synchronous"
                                           : sync == "async" ? "Asynchronous"
                                                             : "BoundedStaleness<2>");
      std::printf("%-28s %8d %14.0f %8.2f\n", label.c_str(), workers, s, s / mirrored);
      record.add("training", bench::Record{}
                                 .set("sync", sync)
                                 .set("workers", workers)
                                 .set("samples_per_second", s)
                                 .set("mirrored_samples_per_second", mirrored)
                                 .set("ratio", s / mirrored));
    }
  }

  // Recovery: a worker of a synchronous run killed, convoy's way against the peers' way.
  std::int64_t const recover_steps = quick ? 300 : 1500, kill_after = quick ? 120 : 600;
  std::printf(
      "\nA synchronous worker killed (1 ps + 2 workers, the MLP, %lld steps, worker 1 "
      "killed after %lld, a checkpoint every 50 steps), best of %d\n",
      static_cast<long long>(recover_steps), static_cast<long long>(kill_after), repeats);
  auto const figures =
      bench::recovery::best_of({.program = program,
                                .scenario = "recover:0:" + std::to_string(recover_steps),
                                .kill_after = kill_after},
                               repeats);
  if (!figures) return 1;
  record.set("recovery_steps", recover_steps).set("recovery_kill_after", kill_after);
  bench::recovery::report(*figures, record);
  results.add(std::move(record));
  return results.write() ? 0 : 1;
}
