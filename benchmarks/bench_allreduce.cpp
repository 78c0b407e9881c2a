// The synchronous in-process exchange: per step, every replica thread sums its chunk of all
// replicas' gradient arenas and applies SGD to it (reduce-scatter with the update fused), then
// copies the chunks the others updated (all-gather). Compared with a memory copy by the same
// number of threads over arenas of the same size, measured in the same run.
//
// Bytes counted are the bytes each one really reads and writes: the exchange reads R gradient
// chunks and reads and writes its weight chunk, then reads and writes chunks; the copy reads
// and writes its chunk. Also printed, NCCL's bus bandwidth convention: size x 2(R-1)/R / time.
//
// Run: build/benchmarks/bench_allreduce [--replicas N] [--iterations N]
#include <convoy/comm/detail/in_process_allreduce.hpp>
#include <convoy/optim/optimizer.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace convoy;

namespace {

using clock_type = std::chrono::steady_clock;

// Runs `work(thread)` on `threads` threads `iterations` times between barriers; returns the median
// seconds of one iteration.
template <class Work>
double median_seconds(std::size_t threads, int iterations, Work work) {
  std::vector<double> times;
  clock_type::time_point start;
  std::barrier barrier(static_cast<std::ptrdiff_t>(threads), [&]() noexcept {
    auto const now = clock_type::now();
    if (start != clock_type::time_point{}) times.push_back(std::chrono::duration<double>(now - start).count());
    start = now;
  });
  auto loop = [&](std::size_t t) {
    math::OneThreadPerReplica const one_thread;
    barrier.arrive_and_wait();
    for (int i = 0; i < iterations; ++i) {
      work(t);
      barrier.arrive_and_wait();
    }
  };
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(loop, t);
    loop(0);
  }
  times.erase(times.begin());  // the first iteration warms the caches and pages
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t replicas = std::max(2u, std::thread::hardware_concurrency());
  int iterations = 21;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const arg = argv[i];
    if (arg == "--replicas") replicas = std::stoul(argv[i + 1]);
    if (arg == "--iterations") iterations = std::max(3, std::stoi(argv[i + 1]));
  }
  std::printf("in-process synchronous exchange, %zu replica threads, median of %d iterations\n", replicas, iterations);
  std::printf("%12s %14s %14s %10s %14s\n", "arena MB", "copy GB/s", "exchange GB/s", "ratio", "bus GB/s");
  std::string json = "{\"benchmark\":\"allreduce\",\"replicas\":" + std::to_string(replicas) + ",\"results\":[";
  // 397,510 floats is the Fashion-MNIST MLP; the larger arenas do not fit in any cache.
  for (std::size_t floats : {std::size_t{397510}, std::size_t{4} << 20, std::size_t{16} << 20}) {
    double const bytes = static_cast<double>(floats * sizeof(float));
    std::vector<std::vector<float>> grads(replicas, std::vector<float>(floats, 1e-3f));
    std::vector<std::vector<float>> weights(replicas, std::vector<float>(floats, 1.0f));
    std::vector<float const*> grad_ptrs;
    for (auto& g : grads) grad_ptrs.push_back(g.data());
    optim::Optimizer const sgd = optim::Sgd{1e-3f};
    auto slots = sgd.make_state(floats);

    double const copy = median_seconds(replicas, iterations, [&](std::size_t t) {
      auto [b, e] = comm::detail::chunk_bounds(floats, replicas, t);
      std::memcpy(weights[t].data() + b, grads[t].data() + b, (e - b) * sizeof(float));
    });
    double const exchange = median_seconds(replicas, iterations, [&](std::size_t t) {
      auto [b, e] = comm::detail::chunk_bounds(floats, replicas, t);
      comm::detail::reduce_and_apply(grad_ptrs, b, e, weights[t], sgd, slots, 1);
    }) + median_seconds(replicas, iterations, [&](std::size_t t) {
      for (std::size_t u = 0; u < replicas; ++u) {
        if (u == t) continue;
        auto [b, e] = comm::detail::chunk_bounds(floats, replicas, u);
        std::memcpy(weights[t].data() + b, weights[u].data() + b, (e - b) * sizeof(float));
      }
    });
    double const r = static_cast<double>(replicas);
    double const copy_rate = 2.0 * bytes / copy;
    double const exchange_bytes = r * bytes + 2.0 * bytes + 2.0 * (r - 1.0) * bytes;
    double const exchange_rate = exchange_bytes / exchange;
    double const bus = bytes * 2.0 * (r - 1.0) / r / exchange;
    std::printf("%12.1f %14.2f %14.2f %10.3f %14.2f\n", bytes / 1e6, copy_rate / 1e9, exchange_rate / 1e9,
                exchange_rate / copy_rate, bus / 1e9);
    char item[256];
    std::snprintf(item, sizeof item, "%s{\"bytes\":%.0f,\"copy_bytes_per_s\":%.4g,\"exchange_bytes_per_s\":%.4g,\"ratio\":%.4f,\"bus_bytes_per_s\":%.4g}",
                  floats == 397510 ? "" : ",", bytes, copy_rate, exchange_rate, exchange_rate / copy_rate, bus);
    json += item;
  }
  std::printf("%s]}\n", json.c_str());
}
