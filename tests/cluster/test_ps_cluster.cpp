// Parameter-server clusters of real processes on loopback. The test program starts itself once per
// task ("--task <scenario> <dir>"), each with its TF_CONFIG, exactly as tools/convoy-launch does;
// every task writes what it saw into <dir>, and the test reads it back. Every cluster is bounded in
// time: a task still running after its deadline is killed and the test fails.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster_model.hpp"
#include "processes.hpp"
#include "task_checks.hpp"
#include "synthetic.hpp"
#include "temp_dir.hpp"

namespace test_cluster_ps_cluster {

using namespace convoy;

constexpr std::int64_t steps = 30;
constexpr std::size_t batch_size = 48;

using testing::SlowMlp;
io::Dataset data() { return testing::cluster_data(); }
nn::Mlp make_model() { return testing::cluster_mlp(); }
optim::Optimizer optimizer() { return testing::cluster_optimizer(); }

// ---- the tasks ------------------------------------------------------------------------------


// Scenario flags after the policy's name: ":slow=<rank>:<ms>", ":steps=<n>", ":ckpt" (checkpoints
// every 10 steps into <dir>/ckpt, resuming from the latest).
struct Flags {
  int slow_rank = -1, slow_ms = 0;
  int quit_rank = -1, quit_step = 0;  // ":quit=<rank>:<step>": that worker's callback stops it
  std::int64_t run_steps = steps;
  bool checkpoints = false;
  int nofile = 0;  // ":nofile=<n>": the ps task's file limit (RLIMIT_NOFILE)
  int late_rank = -1, late_ms = 0;  // ":late=<rank>:<ms>": that worker starts this much later
};

template <class Sync>
int run_task(Sync sync, std::filesystem::path const& dir, Flags const& flags) {
  int const slow_rank = flags.slow_rank, slow_ms = flags.slow_ms;
  using S = Strategy<SlowMlp, place::Sharded<>, comm::ZmqPs, Sync>;
  auto const cluster = Cluster::from_environment();
  if (flags.nofile > 0 && cluster.is_ps()) {
    ::rlimit const limit{static_cast<rlim_t>(flags.nofile), static_cast<rlim_t>(flags.nofile)};
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 3;
  }
  if (!cluster.is_ps() && cluster.worker_rank() == flags.late_rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.late_ms));
  }
  SlowMlp m;
  if (cluster.worker_rank() == slow_rank) m.sleep_ms = slow_ms;
  Trainer<S> trainer{S{m, {}, comm::ZmqPs{.connect_timeout = std::chrono::seconds(20),
                                   .exit_after_serving = false}, sync},
                     optimizer()};
  auto const train = data();
  std::ofstream losses(dir / ("losses-" + cluster.job + std::to_string(cluster.index) + ".txt"));
  auto const result = trainer.fit(
      train, {.steps = flags.run_steps,
              .batch_size = batch_size,
              .log_every = 10,
              .checkpoint_dir = flags.checkpoints ? dir / "ckpt" : std::filesystem::path(),
              .checkpoint_every = flags.checkpoints ? 10 : 0,
              .callbacks = {[&](StepReport const& r) {
                losses << r.global_step << " " << r.local_step << " " << r.loss << "\n";
                return !(cluster.worker_rank() == flags.quit_rank && r.local_step >= flags.quit_step);
              }}});
  auto const& c = trainer.strategy().counters();
  std::ofstream out(dir / ("result-" + cluster.job + std::to_string(cluster.index) + ".txt"));
  out << c.global_step << " " << c.applied << " " << c.dropped << " " << c.batches() << "\n";
  if (!cluster.is_ps()) {
    auto const w = trainer.strategy().weights();
    for (float v : w) out << v << " ";
    out << "\n" << trainer.evaluate(train).accuracy() << "\n";
  }
  (void)result;
  return 0;
}

int task(std::string const& scenario, std::filesystem::path const& dir) {
  Flags flags;
  if (auto at = scenario.find(":slow="); at != std::string::npos) {
    std::sscanf(scenario.c_str() + at, ":slow=%d:%d", &flags.slow_rank, &flags.slow_ms);
  }
  if (auto at = scenario.find(":steps="); at != std::string::npos) {
    flags.run_steps = std::atoll(scenario.c_str() + at + 7);
  }
  flags.checkpoints = scenario.find(":ckpt") != std::string::npos;
  if (auto at = scenario.find(":nofile="); at != std::string::npos) {
    flags.nofile = std::atoi(scenario.c_str() + at + 8);
  }
  if (auto at = scenario.find(":late="); at != std::string::npos) {
    std::sscanf(scenario.c_str() + at, ":late=%d:%d", &flags.late_rank, &flags.late_ms);
  }
  if (auto at = scenario.find(":quit="); at != std::string::npos) {
    std::sscanf(scenario.c_str() + at, ":quit=%d:%d", &flags.quit_rank, &flags.quit_step);
  }
  auto const name = scenario.substr(0, scenario.find(':'));
  std::chrono::milliseconds const timeout{30000};
  if (name == "sync") return run_task(sync::Synchronous{.timeout = timeout}, dir, flags);
  if (name == "2of3") {
    return run_task(sync::Synchronous{.replicas_to_aggregate = 2, .timeout = timeout}, dir,
                    flags);
  }
  if (name == "async") return run_task(sync::Asynchronous{.timeout = timeout}, dir, flags);
  if (name == "ssp1") {
    return run_task(sync::BoundedStaleness<1>{.timeout = timeout}, dir, flags);
  }
  std::cerr << "unknown scenario " << scenario << "\n";
  return 2;
}

// ---- the test's side ------------------------------------------------------------------------

std::string const program = testing::this_program();
testing::TaskSuite const suite("ps_cluster", task);

// Runs a cluster (testing::run_cluster) and checks that every task ended well, printing the logs
// of those that did not.
std::vector<testing::Task> run_cluster(std::string const& scenario, std::filesystem::path const& dir,
                                       int ps, int workers, std::string const& launcher = {}) {
  auto const tasks =
      testing::run_cluster(program, suite.scenario(scenario), dir, ps, workers, launcher);
  testing::check_tasks_succeeded(tasks);
  return tasks;
}

struct Result {
  std::int64_t global_step = 0, applied = 0, dropped = 0, batches = 0;
  std::vector<float> weights;
  double accuracy = 0.0;
};
Result read_result(std::filesystem::path const& file) {
  Result r;
  std::ifstream in(file);
  REQUIRE_MESSAGE(in.good(), "no " << file);
  in >> r.global_step >> r.applied >> r.dropped >> r.batches;
  std::string line;
  std::getline(in, line);
  if (std::getline(in, line)) {
    std::istringstream w(line);
    for (float v; w >> v;) r.weights.push_back(v);
    in >> r.accuracy;
  }
  return r;
}
std::vector<float> read_losses(std::filesystem::path const& file) {
  std::vector<float> out;
  std::ifstream in(file);
  std::int64_t global = 0, local = 0;
  for (float loss; in >> global >> local >> loss;) out.push_back(loss);
  return out;
}
std::string read_text(std::filesystem::path const& file) {
  std::ifstream in(file);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("synchronous PS with 2 workers on 1 and 2 shards matches Mirrored step by step") {
  // The reference: in-process Mirrored, 2 replicas, the same data order and optimizer.
  using Reference = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Reference> mirrored{Reference{make_model(), place::Mirrored{.replicas = 2}}, optimizer()};
  std::vector<float> expected;
  auto const train = data();
  mirrored.fit(train, {.steps = steps,
                       .batch_size = batch_size,
                       .log = nullptr,
                       .callbacks = {[&](StepReport const& r) {
                         expected.push_back(r.loss);
                         return true;
                       }}});
  auto const expected_weights = mirrored.strategy().weights();

  for (int shards : {1, 2}) {
    CAPTURE(shards);
    testing::TempDir dir("ps-sync");
    run_cluster("sync", dir.path, shards, 2);
    for (int w = 0; w < 2; ++w) {
      auto const losses = read_losses(dir / ("losses-worker" + std::to_string(w) + ".txt"));
      REQUIRE(losses.size() == expected.size());
      for (std::size_t i = 0; i < losses.size(); ++i) {
        CHECK(losses[i] == doctest::Approx(expected[i]).epsilon(1e-4));
      }
    }
    auto const chief = read_result(dir / "result-worker0.txt");
    CHECK(chief.global_step == steps);
    REQUIRE(chief.weights.size() == expected_weights.size());
    for (std::size_t i = 0; i < chief.weights.size(); ++i) {
      CHECK(chief.weights[i] == doctest::Approx(expected_weights[i]).epsilon(1e-3));
    }
    auto const ps0 = read_result(dir / "result-ps0.txt");
    CHECK(ps0.global_step == steps);
    CHECK(ps0.applied == 2 * steps);
    CHECK(ps0.dropped == 0);
    // A shard keeps to one CPU, its own in turn, where the tasks here outnumber the CPUs.
    auto const cpus = comm::zmq_ps::allowed_cpus();
    bool const crowded = static_cast<std::size_t>(shards + 2) > cpus.size();
    for (int s = 0; s < shards; ++s) {
      auto const log = read_text(dir / ("ps" + std::to_string(s) + ".log"));
      auto const mine = cpus[static_cast<std::size_t>(s) % cpus.size()];
      auto const cpu = "; on CPU " + std::to_string(mine) + " (" + std::to_string(shards + 2) +
                       " tasks of the cluster on this host, " + std::to_string(cpus.size()) +
                       " CPUs)";
      CHECK_MESSAGE((log.find(cpu) != std::string::npos) == crowded, log);
      CHECK_MESSAGE((log.find("; on CPU ") != std::string::npos) == crowded, log);
    }
  }
}

TEST_CASE("a cluster checkpoint restores by name onto another number of shards and continues exactly") {
  using Reference = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Reference> mirrored{Reference{make_model(), place::Mirrored{.replicas = 2}}, optimizer()};
  auto const train = data();
  mirrored.fit(train, {.steps = steps, .batch_size = batch_size, .log = nullptr});
  auto const expected = mirrored.strategy().weights();

  testing::TempDir dir("ps-checkpoint");
  // Two shards; the chief checkpoints at 10 and 20: each shard writes its part, the chief the
  // manifest that commits them.
  run_cluster("sync:steps=20:ckpt", dir.path, 2, 2);
  for (auto step : {"0000000010", "0000000020"}) {
    auto const stem = dir / "ckpt" / (std::string("checkpoint-") + step);
    CHECK(std::filesystem::exists(stem.string() + ".convoy"));
    CHECK(std::filesystem::exists(stem.string() + ".part-0-of-2.convoy.part"));
    CHECK(std::filesystem::exists(stem.string() + ".part-1-of-2.convoy.part"));
  }
  run_cluster("sync:ckpt", dir.path, 1, 2);  // resumes at 20 on one shard, on to 30
  auto const log = read_text(dir / "worker0.log");
  CHECK(log.find("resumed from") != std::string::npos);
  auto const chief = read_result(dir / "result-worker0.txt");
  CHECK(chief.global_step == steps);
  REQUIRE(chief.weights.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(chief.weights[i] == doctest::Approx(expected[i]).epsilon(1e-3));
  }
  // The resumed run's own checkpoint, at 30, is one part.
  CHECK(std::filesystem::exists(dir / "ckpt" / "checkpoint-0000000030.part-0-of-1.convoy.part"));
}

TEST_CASE("asynchronous PS converges and its global step is the sum of the workers' steps") {
  testing::TempDir dir("ps-async");
  run_cluster("async", dir.path, 1, 2);
  auto const ps0 = read_result(dir / "result-ps0.txt");
  CHECK(ps0.global_step >= steps);
  CHECK(ps0.global_step == ps0.batches);  // every worker's every step, summed
  CHECK(ps0.applied == ps0.global_step);
  auto const chief = read_result(dir / "result-worker0.txt");
  CHECK(chief.accuracy > 0.8);
}

TEST_CASE("bounded staleness at the shard: a fast worker never leads a slow one by more than S") {
  testing::TempDir dir("ps-ssp");
  run_cluster("ssp1:slow=1:15", dir.path, 1, 2);
  auto const log = read_text(dir / "ps0.log");
  auto const at = log.find("largest lead granted ");
  REQUIRE_MESSAGE(at != std::string::npos, log);
  int lead = -1;
  std::sscanf(log.c_str() + at, "largest lead granted %d", &lead);
  CHECK(lead == 1);  // reached, never exceeded
}

TEST_CASE("2 of 3 synchronous workers: a slow worker does not hold the others, its drops count") {
  testing::TempDir dir("ps-2of3");
  // Long enough (about a second) for the slow worker to push many times: with 30 steps of a
  // fraction of a millisecond and 40 ms a slow step, the fast workers sometimes finished before
  // its first gradient came (1 run in 20 here, once in CI), and nothing was dropped.
  run_cluster("2of3:steps=3000:slow=2:10", dir.path, 1, 3);
  auto const ps0 = read_result(dir / "result-ps0.txt");
  CHECK(ps0.global_step >= steps);
  CHECK(ps0.applied == 2 * ps0.global_step);
  CHECK(ps0.dropped > 0);
}

TEST_CASE("a worker that stops early ends a synchronous run for the others at once, not at a timeout") {
  testing::TempDir dir("ps-quit");
  auto const start = std::chrono::steady_clock::now();
  run_cluster("sync:quit=1:5", dir.path, 1, 2);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));  // timeout: 30 s
  CHECK(read_text(dir / "worker0.log").find("too few workers are left") != std::string::npos);
  CHECK(read_text(dir / "ps0.log").find("ends the open step") != std::string::npos);
  auto const ps0 = read_result(dir / "result-ps0.txt");
  CHECK(ps0.global_step == 5);
}

// A peer on loopback (any local user can reach a plaintext ps there) that first sends a goodbye
// naming worker 1, with the run's fingerprint, then 15,000 requests whose answers it never reads
// (a 1 KiB receive buffer), and leaves: once worker 1 is training, and once before worker 1 has
// said hello (it starts 1.5 s late). Before: each answer the shard could not send held it for
// 1 s (a 3000-step run fell from 40 steps/s to 1), and the goodbye ended worker 1's part of the
// run (the one before its hello, once in a few runs, even after that was mended for the other).
// Now: the goodbye is refused (it comes on a connection worker 1 does not use, or before worker 1
// said hello), the answers are dropped and counted, the log names the peer by its address once
// per 10 s, and the run finishes its steps within the cluster's time limit.
TEST_CASE("a forged goodbye and a peer that never reads its answers change nothing for the workers") {
  struct Case {
    char const* scenario;
    char const* wait_for;  // in worker1.log, when not empty: worker 1 is training
    char const* refused;
  };
  for (auto const& c :
       {Case{"sync:steps=400:slow=1:20", "step 10/",
             "a goodbye naming worker 1 came on a connection that worker does not use"},
        Case{"sync:steps=400:slow=1:20:late=1:1500", "",
             "a goodbye naming worker 1 came before that worker said hello"}}) {
    std::string const scenario = c.scenario;
    CAPTURE(scenario);
    testing::TempDir dir("ps-hostile");
    std::jthread hostile([&] {
      // The ps's address, from its first log line, once worker 0 has initialized it.
      std::string endpoint;
      auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (std::chrono::steady_clock::now() < deadline) {
        auto const log = read_text(dir.path / "ps0.log");
        auto const at = log.find(" on tcp://");
        bool const ready =
            *c.wait_for == 0 ||
            read_text(dir.path / "worker1.log").find(c.wait_for) != std::string::npos;
        if (at != std::string::npos && log.find("initialized by worker") != std::string::npos &&
            ready) {
          endpoint = log.substr(at + 4, log.find(' ', at + 4) - at - 4);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (endpoint.empty()) return;  // the test fails below: no run
      SlowMlp m;
      auto const map = place::Sharded<>{}.shard(m.variables(), 1);
      using Policy = sync::Synchronous;
      Policy const policy{.timeout = std::chrono::milliseconds(30000)};
      auto const fp = comm::zmq_ps::fingerprint(map.pieces_of(0), optimizer(), policy, 1, 2);
      zmq::context_t context(1);
      zmq::socket_t peer(context, zmq::socket_type::dealer);
      peer.set(zmq::sockopt::linger, 0);
      peer.set(zmq::sockopt::rcvbuf, 1024);
      peer.set(zmq::sockopt::rcvhwm, 1);
      peer.set(zmq::sockopt::sndtimeo, 5000);
      peer.connect(endpoint);
      comm::zmq_ps::Header bye;
      bye.op = comm::zmq_ps::Op::bye;
      bye.worker = 1;
      bye.fingerprint = fp;
      (void)peer.send(comm::zmq_ps::encode(bye), zmq::send_flags::none);
      comm::zmq_ps::Header hello;  // answered (another layout), never read
      hello.op = comm::zmq_ps::Op::hello;
      hello.fingerprint = fp + 1;
      for (int i = 0; i < 15000; ++i) {
        if (!peer.send(comm::zmq_ps::encode(hello), zmq::send_flags::none)) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    });
    run_cluster(c.scenario, dir.path, 1, 2);
    hostile.join();
    auto const ps0 = read_result(dir.path / "result-ps0.txt");
    CHECK(ps0.global_step == 400);
    auto const log = read_text(dir.path / "ps0.log");
    CHECK_MESSAGE(log.find(c.refused) != std::string::npos, log);
    auto const first = log.find("does not read its answers (from peer 127.0.0.1)");
    CHECK_MESSAGE(first != std::string::npos, log);
    CHECK(log.find("does not read its answers", first + 1) == std::string::npos);  // once
    CHECK(log.find(" answers dropped unread") != std::string::npos);
  }
}

// 200 idle TCP connections to a ps task whose file limit is 128, opened once worker 0 has
// initialized the shard (worker 1 may connect only after them). Before: they took every
// descriptor, the next checkpoint part could not be opened ("Too many open files") and the run
// ended. Now: the shard keeps 64 connections (its limit less the 64 it keeps for itself), each new
// one beyond them closing the oldest idle one, so a worker arriving late still gets in; a line per
// peer and interval; and every checkpoint is written.
TEST_CASE("idle connections beyond the cap are closed and never take a checkpoint's descriptors") {
  testing::TempDir dir("ps-nofile");
  std::vector<int> idle;
  std::jthread crowd([&] {
    int port = 0;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline && port == 0) {
      auto const log = read_text(dir / "ps0.log");
      auto const at = log.find(" on tcp://127.0.0.1:");
      if (at != std::string::npos && log.find("initialized by worker") != std::string::npos) {
        port = std::atoi(log.c_str() + at + 20);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 200 && port != 0; ++i) {
      int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) break;
      if (::connect(fd, reinterpret_cast<::sockaddr const*>(&address), sizeof address) != 0) {
        ::close(fd);
        break;
      }
      idle.push_back(fd);
    }
  });
  run_cluster("sync:steps=60:ckpt:nofile=128:slow=1:30", dir.path, 1, 2);
  crowd.join();
  for (int fd : idle) ::close(fd);
  CHECK(idle.size() == 200);
  auto const ps0 = read_result(dir / "result-ps0.txt");
  CHECK(ps0.global_step == 60);
  CHECK(std::filesystem::exists(dir / "ckpt" / "checkpoint-0000000060.part-0-of-1.convoy.part"));
  auto const log = read_text(dir / "ps0.log");
  CHECK_MESSAGE(log.find("closed an idle one: 64 are open, its cap") != std::string::npos, log);
  CHECK(log.find("connection(s) over the cap closed") != std::string::npos);
  CHECK(log.find("fewer than the") == std::string::npos);  // 64 is room enough for 2 workers
}

TEST_CASE("the same program runs unchanged under the variables of torchrun, Open MPI, MPICH and Slurm") {
  for (std::string launcher : {"torchrun", "Open MPI", "MPICH", "Slurm"}) {
    CAPTURE(launcher);
    testing::TempDir dir("ps-launcher");
    run_cluster("sync", dir.path, 1, 2, launcher);
    auto const chief = read_result(dir / "result-worker0.txt");
    CHECK(chief.global_step == steps);
    auto const ps0 = read_result(dir / "result-ps0.txt");
    CHECK(ps0.applied == 2 * steps);
  }
}

}  // namespace test_cluster_ps_cluster
