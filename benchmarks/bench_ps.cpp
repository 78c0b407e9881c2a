// The parameter server (comm::ZmqPs) on loopback, each figure beside a reference measured in the
// same run:
//  - exchange: push + pull bytes per second of models of 1, 4, 16 and 64 MiB (two variables, SGD)
//    with 1 shard + 1 worker and with 2 shards + 2 workers, against plain TCP socket pairs on
//    loopback sending the same bytes back and forth (one pair per worker, at once);
//  - training: samples per second of the 784-500-10 MLP (global batch 100) with 1 ps and 1 or 2
//    workers under each Sync policy, against in-process Mirrored with 2 replicas.
// Every task is a real process, started by this program (see tests/support/processes.hpp).
//
// Run: build/benchmarks/bench_ps [--quick] [--keep-heap] [--csv PATH] [--json PATH]; --help lists
//      the options.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"
#include "processes.hpp"
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
  return 2;
}

// ---- references -----------------------------------------------------------------------------

// `pairs` TCP connections on loopback at once; on each, `rounds` times, one end sends `bytes` and
// the other sends them back. Returns the bytes moved per second over all pairs.
double tcp_reference(std::size_t bytes, int pairs, int rounds) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  ::listen(listener, pairs);
  auto send_all = [](int fd, char const* p, std::size_t n) {
    while (n > 0) {
      auto const k = ::send(fd, p, n, 0);
      if (k <= 0) std::abort();
      p += k;
      n -= static_cast<std::size_t>(k);
    }
  };
  auto recv_all = [](int fd, char* p, std::size_t n) {
    while (n > 0) {
      auto const k = ::recv(fd, p, n, 0);
      if (k <= 0) std::abort();
      p += k;
      n -= static_cast<std::size_t>(k);
    }
  };
  std::vector<int> clients, servers;
  for (int i = 0; i < pairs; ++i) {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    clients.push_back(c);
    servers.push_back(::accept(listener, nullptr, nullptr));
  }
  std::vector<std::thread> threads;
  auto const start = clock_type::now();
  for (int i = 0; i < pairs; ++i) {
    threads.emplace_back([&, i] {  // the echoing end
      std::vector<char> buffer(bytes);
      for (int r = 0; r < rounds; ++r) {
        recv_all(servers[static_cast<std::size_t>(i)], buffer.data(), bytes);
        send_all(servers[static_cast<std::size_t>(i)], buffer.data(), bytes);
      }
    });
    threads.emplace_back([&, i] {
      std::vector<char> buffer(bytes, 1);
      for (int r = 0; r < rounds; ++r) {
        send_all(clients[static_cast<std::size_t>(i)], buffer.data(), bytes);
        recv_all(clients[static_cast<std::size_t>(i)], buffer.data(), bytes);
      }
    });
  }
  for (auto& t : threads) t.join();
  double const seconds = seconds_since(start);
  for (int fd : clients) ::close(fd);
  for (int fd : servers) ::close(fd);
  ::close(listener);
  return 2.0 * static_cast<double>(bytes) * rounds * pairs / seconds;
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
  auto const tasks = testing::run_cluster(program, scenario, dir, ps, workers, {},
                                          std::chrono::seconds(300));
  bool ok = true;
  for (auto const& t : tasks) {
    if (t.status != 0) {
      std::cerr << "bench_ps: " << t.job << ":" << t.index << " of " << scenario
                << " ended with status " << t.status << "; its log:\n"
                << std::ifstream(t.log).rdbuf() << "\n";
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
  bench::CommandLine cli("bench_ps",
                         "Parameter-server push+pull bytes/s against TCP, and training samples/s "
                         "under each Sync against Mirrored; every task a process on loopback.");
  cli.flag("--quick", quick, "fewer steps, for a smoke run");
  cli.flag("--keep-heap", keep_heap,
           "every task raises glibc's mmap and trim thresholds to 1 GiB");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  // glibc maps every block over its (adaptive, at most 32 MiB) threshold afresh and unmaps it on
  // free, so each received frame page-faults in; a high threshold keeps freed frames.
  if (keep_heap) setenv("CONVOY_BENCH_HEAP", "1", 1);
  program = argv[0];
  bench::Record record;
  record.set("benchmark", "ps").set("quick", quick ? 1 : 0).set("keep_heap", keep_heap ? 1 : 0);

  std::printf("Parameter-server exchange on loopback: push + pull bytes/s, against TCP socket pairs\n");
  std::printf("%8s %14s %14s %14s %8s\n", "model", "shards+workers", "ZmqPs GB/s", "TCP GB/s", "ratio");
  for (std::size_t megabytes : {1, 4, 16, 64}) {
    std::int64_t const steps = std::max<std::int64_t>(quick ? 3 : 8, (quick ? 64 : 512) / static_cast<std::int64_t>(megabytes));
    for (int n : {1, 2}) {
      testing::TempDir dir("bench-ps");
      if (!run("exchange:" + std::to_string(megabytes) + ":" + std::to_string(steps), dir.path, n, n)) return 1;
      double ps = 0.0;
      for (int w = 0; w < n; ++w) ps += read_number(dir / ("exchange-" + std::to_string(w) + ".txt"));
      double const tcp = tcp_reference(megabytes * mib, n, static_cast<int>(steps));
      std::printf("%5zu MiB %10d+%-3d %14.3f %14.3f %8.2f\n", megabytes, n, n, ps / 1e9, tcp / 1e9, ps / tcp);
      record.add("exchange", bench::Record{}
                                 .set("mib", megabytes)
                                 .set("shards", n)
                                 .set("workers", n)
                                 .set("bytes_per_second", ps)
                                 .set("tcp_bytes_per_second", tcp)
                                 .set("ratio", ps / tcp));
    }
  }

  std::int64_t const steps = quick ? 40 : 300;
  double const mirrored = mirrored_reference(steps);
  std::printf("\nTraining the 784-500-10 MLP, batch 100, %lld steps: samples/s against Mirrored (2 replicas, in process)\n",
              static_cast<long long>(steps));
  std::printf("%-28s %8s %14s %8s\n", "strategy", "workers", "samples/s", "ratio");
  std::printf("%-28s %8d %14.0f %8.2f\n", "Mirrored, InProcess", 2, mirrored, 1.0);
  for (std::string sync : {"sync", "async", "ssp2"}) {
    for (int workers : {1, 2}) {
      testing::TempDir dir("bench-ps");
      if (!run(sync + ":0:" + std::to_string(steps), dir.path, 1, workers)) return 1;
      double const s = read_number(dir / "train.txt");
      std::string const label = "Sharded, ZmqPs, " + std::string(sync == "sync" ? "Synchronous" : sync == "async" ? "Asynchronous" : "BoundedStaleness<2>");
      std::printf("%-28s %8d %14.0f %8.2f\n", label.c_str(), workers, s, s / mirrored);
      record.add("training", bench::Record{}
                                 .set("sync", sync)
                                 .set("workers", workers)
                                 .set("samples_per_second", s)
                                 .set("mirrored_samples_per_second", mirrored)
                                 .set("ratio", s / mirrored));
    }
  }
  results.add(std::move(record));
  return results.write() ? 0 : 1;
}
