// The synchronous in-process exchange: per step, every replica thread sums its chunk of all
// replicas' gradient arenas, applies SGD to it (reduce-scatter with the update fused) and writes
// the updated chunk into every replica's weights (all-gather), in one blocked pass. Compared with a
// memory copy by the same number of threads over arenas of the same size, in the same run.
//
// Bytes counted are the bytes each one really reads and writes. Over all R threads the exchange
// reads R gradient arenas, reads and writes one weights arena and writes R-1 more: (2R+1) x size;
// the copy reads and writes one arena: 2 x size. Also printed, NCCL's bus bandwidth convention:
// size x 2(R-1)/R / time.
//
// Run: build/benchmarks/bench_allreduce [--replicas N] [--iterations N] [--quick] [--csv PATH]
//      [--json PATH]; --help lists the options.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <convoy/comm/in_process/lock_step.hpp>
#include <convoy/optim/optimizer.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"
#include "report.hpp"

using namespace convoy;

namespace {

using clock_type = std::chrono::steady_clock;

// Runs `first(thread)` and `second(thread)` alternately on `threads` threads, `iterations` times
// each, between barriers; returns the median seconds of one iteration of each. Alternating keeps
// both measured under the same machine conditions, which drift on shared hosts.
template <class First, class Second>
std::pair<double, double> median_seconds(std::size_t threads, int iterations, First first,
                                         Second second) {
  std::vector<double> times[2];
  clock_type::time_point start;
  int phase = 0;
  std::barrier barrier(static_cast<std::ptrdiff_t>(threads), [&]() noexcept {
    auto const now = clock_type::now();
    if (phase > 0)
      times[(phase - 1) % 2].push_back(std::chrono::duration<double>(now - start).count());
    ++phase;
    start = now;
  });
  auto loop = [&](std::size_t t) {
    exec::Host::ReplicaScope const one_thread;
    barrier.arrive_and_wait();
    for (int i = 0; i < iterations; ++i) {
      first(t);
      barrier.arrive_and_wait();
      second(t);
      barrier.arrive_and_wait();
    }
  };
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(loop, t);
    loop(0);
  }
  auto median = [](std::vector<double>& v) {
    v.erase(v.begin());  // the first iteration warms the caches and pages
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(times[0]), median(times[1])};
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t replicas = std::max(2u, std::thread::hardware_concurrency());
  int iterations = 21;
  bool quick = false;
  bench::CommandLine cli("bench_allreduce",
                         "The in-process synchronous exchange against a memory copy, in bytes/s.");
  cli.integer("--replicas", "N", replicas, std::size_t{1},
              "replica threads (default: the hardware thread count, at least 2)");
  cli.integer("--iterations", "N", iterations, 1,
              "timed iterations of each, median kept (default 21; raised to 3)");
  cli.flag("--quick", quick, "a smoke run: 5 iterations over arenas of 1.6, 4.2 and 16.8 MB");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  iterations = std::max(3, quick ? std::min(iterations, 5) : iterations);
  std::printf("in-process synchronous exchange, %zu replica threads, median of %d iterations\n",
              replicas, iterations);
  std::printf("%12s %14s %14s %10s %14s\n", "arena MB", "copy GB/s", "exchange GB/s", "ratio",
              "bus GB/s");
  bench::Record record;
  record.set("benchmark", "allreduce").set("replicas", replicas);
  // 397,510 floats is the Fashion-MNIST MLP; the larger arenas do not fit in any cache.
  std::vector<std::size_t> const sizes =
      quick ? std::vector<std::size_t>{397510, std::size_t{1} << 20, std::size_t{4} << 20}
            : std::vector<std::size_t>{397510, std::size_t{4} << 20, std::size_t{16} << 20};
  for (std::size_t floats : sizes) {
    double const bytes = static_cast<double>(floats * sizeof(float));
    std::vector<std::vector<float>> grads(replicas, std::vector<float>(floats, 1e-3f));
    std::vector<std::vector<float>> weights(replicas, std::vector<float>(floats, 1.0f));
    std::vector<float const*> grad_ptrs;
    for (auto& g : grads) grad_ptrs.push_back(g.data());
    optim::Optimizer const sgd = optim::Sgd{1e-3f};
    auto slots = sgd.make_state(floats);

    std::vector<float*> weight_ptrs;
    for (auto& w : weights) weight_ptrs.push_back(w.data());
    std::vector<std::vector<float*>> destinations;
    for (std::size_t t = 0; t < replicas; ++t) {
      destinations.push_back(comm::in_process::mirrored_destinations(weight_ptrs, t));
    }
    auto const [copy, exchange] = median_seconds(
        replicas, iterations,
        [&](std::size_t t) {
          auto [b, e] = comm::in_process::chunk_bounds(floats, replicas, t);
          std::memcpy(weights[t].data() + b, grads[t].data() + b, (e - b) * sizeof(float));
        },
        [&](std::size_t t) {
          auto [b, e] = comm::in_process::chunk_bounds(floats, replicas, t);
          comm::in_process::reduce_apply_broadcast(exec::Host{}, grad_ptrs, b, e, destinations[t], floats, sgd, slots,
                                               1);
        });
    double const r = static_cast<double>(replicas);
    double const copy_rate = 2.0 * bytes / copy;
    double const exchange_bytes = (2.0 * r + 1.0) * bytes;
    double const exchange_rate = exchange_bytes / exchange;
    double const bus = bytes * 2.0 * (r - 1.0) / r / exchange;
    std::printf("%12.1f %14.2f %14.2f %10.3f %14.2f\n", bytes / 1e6, copy_rate / 1e9,
                exchange_rate / 1e9, exchange_rate / copy_rate, bus / 1e9);
    record.add("results", bench::Record{}
                              .set("bytes", static_cast<std::int64_t>(bytes))
                              .set("copy_bytes_per_s", copy_rate)
                              .set("exchange_bytes_per_s", exchange_rate)
                              .set("ratio", exchange_rate / copy_rate)
                              .set("bus_bytes_per_s", bus));
  }
  results.add(std::move(record));
  return results.write() ? 0 : 1;
}
