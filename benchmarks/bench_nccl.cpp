// NCCL's allreduce through convoy's communicator (comm/nccl/communicator.hpp): a sum of float32
// buffers, in place, from 1 MiB to 256 MiB, over this process's devices (one rank per device,
// started together by Communicator::for_devices), reported as nccl-tests reports it: time per
// operation (mean of N after a warm-up, CUDA events on each rank's stream, the slowest rank's),
// algbw = bytes / time and busbw = algbw x 2(n-1)/n for n ranks. Reference, measured in the same
// run on device 0: a device-to-device cudaMemcpyAsync of the same size, bytes / time, the same
// convention as algbw. The ratio is busbw / copy, or algbw / copy with one rank, where busbw is not
// defined (nothing crosses a link; NCCL copies at most).
//
// Each operation is enqueued as convoy's engine enqueues it (allreduce_sum, which also polls the
// non-blocking communicator until the call is in the queue), so small sizes include that.
//
// Run: build/benchmarks/bench_nccl [--devices N] [--iterations N] [--warmup N] [--max-mib N]
//      [--quick] [--csv PATH] [--json PATH]; --help lists the options. Without a CUDA device it
//      says so and exits 77.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <convoy/comm/nccl/check.hpp>
#include <convoy/comm/nccl/communicator.hpp>
#include <convoy/core/error.hpp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "options.hpp"
#include "report.hpp"

using namespace convoy;
using comm::nccl::Caller;
using comm::nccl::check;

namespace {

// What decides NCCL's algorithm: the environment when set, else NCCL's own tuning, which no API
// reports (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING prints it).
std::string nccl_setting(char const* name) {
  char const* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : "NCCL's choice";
}

std::string nccl_version() {
  int code = 0;
  check(ncclGetVersion(&code), "ncclGetVersion", Caller{0, -1});
  // Since NCCL 2.9: major * 10000 + minor * 100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
         std::to_string(code % 100);
}

// One pair of timing events on each rank's stream.
struct Timer {
  std::vector<cudaEvent_t> start, stop;
  std::vector<int> devices;

  explicit Timer(std::span<int const> on)
      : start(on.size()), stop(on.size()), devices(on.begin(), on.end()) {
    for (std::size_t d = 0; d < devices.size(); ++d) {
      Caller const who{static_cast<int>(d), devices[d]};
      check(cudaSetDevice(devices[d]), "cudaSetDevice", who);
      check(cudaEventCreate(&start[d]), "cudaEventCreate", who);
      check(cudaEventCreate(&stop[d]), "cudaEventCreate", who);
    }
  }
  ~Timer() {
    for (std::size_t d = 0; d < devices.size(); ++d) {
      (void)cudaEventDestroy(start[d]);
      (void)cudaEventDestroy(stop[d]);
    }
  }
  Timer(Timer const&) = delete;
  Timer& operator=(Timer const&) = delete;

  void record(std::vector<cudaEvent_t>& which, std::span<cudaStream_t const> streams) {
    for (std::size_t d = 0; d < streams.size(); ++d) {
      check(cudaEventRecord(which[d], streams[d]), "cudaEventRecord",
            Caller{static_cast<int>(d), devices[d]});
    }
  }
  // Seconds between the events, the slowest rank's: an allreduce ends when every rank has it.
  double seconds() const {
    float slowest = 0.0f;
    for (std::size_t d = 0; d < devices.size(); ++d) {
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, start[d], stop[d]), "cudaEventElapsedTime",
            Caller{static_cast<int>(d), devices[d]});
      slowest = std::max(slowest, ms);
    }
    return static_cast<double>(slowest) / 1e3;
  }
};

struct Figures {
  double seconds;       // per allreduce
  double copy_seconds;  // per copy
};

Figures measure(std::vector<comm::nccl::Communicator>& comms, std::span<float* const> buffers,
                float* copy_to, std::span<cudaStream_t const> streams, std::size_t floats,
                int warmup, int iterations, Timer& timer) {
  std::vector<std::span<float>> data;
  for (float* b : buffers) data.emplace_back(b, floats);
  auto const size = std::to_string(floats * sizeof(float)) + " bytes";
  auto const allreduce = [&] { comm::nccl::Communicator::allreduce_sum(comms, data, streams); };
  auto const wait_all = [&](std::string const& what) {
    for (std::size_t d = 0; d < comms.size(); ++d) comms[d].wait(streams[d], what);
  };
  for (int i = 0; i < warmup; ++i) allreduce();
  wait_all("the warm-up allreduces of " + size);
  timer.record(timer.start, streams);
  for (int i = 0; i < iterations; ++i) allreduce();
  timer.record(timer.stop, streams);
  wait_all("the timed allreduces of " + size);
  double const seconds = timer.seconds() / iterations;

  // The reference on the first device: the same bytes copied from its buffer to another.
  auto const first = streams.first(1);
  Caller const who{0, comms[0].device()};
  check(cudaSetDevice(comms[0].device()), "cudaSetDevice", who);
  auto const copy = [&] {
    check(cudaMemcpyAsync(copy_to, buffers[0], floats * sizeof(float), cudaMemcpyDeviceToDevice,
                          streams[0]),
          "cudaMemcpyAsync", who);
  };
  for (int i = 0; i < warmup; ++i) copy();
  timer.record(timer.start, first);
  for (int i = 0; i < iterations; ++i) copy();
  timer.record(timer.stop, first);
  comms[0].wait(streams[0], "the reference copies of " + size);
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, timer.start[0], timer.stop[0]), "cudaEventElapsedTime", who);
  return {seconds, static_cast<double>(ms) / 1e3 / iterations};
}

int run(int wanted_devices, int iterations, int warmup, std::size_t max_mib, bool quick,
        bench::Results& results) {
  int available = 0;
  if (cudaGetDeviceCount(&available) != cudaSuccess || available == 0) {
    std::puts("bench_nccl: no CUDA device (the CUDA runtime sees none); nothing measured, skipped");
    return 77;
  }
  int const ranks = wanted_devices == 0 ? available : std::min(wanted_devices, available);
  std::vector<int> devices(static_cast<std::size_t>(ranks));
  for (int d = 0; d < ranks; ++d) devices[static_cast<std::size_t>(d)] = d;
  std::vector<std::size_t> mib;
  if (quick) {
    mib = {1, 2, 4};
  } else {
    for (std::size_t m = 1; m <= max_mib; m *= 2) mib.push_back(m);
  }
  std::size_t const max_floats = mib.back() * (std::size_t{1} << 20) / sizeof(float);

  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties", Caller{0, 0});
  auto const id = comm::nccl::make_unique_id();
  auto comms = comm::nccl::Communicator::for_devices(id, 0, ranks, devices);

  // Per rank: a stream and a buffer of the largest size; on the first device a copy target too.
  // Zeros: a sum of zeros stays finite however often it runs.
  std::vector<cudaStream_t> streams(devices.size(), nullptr);
  std::vector<float*> buffers(devices.size(), nullptr);
  float* copy_to = nullptr;
  auto const release = [&] {
    for (std::size_t d = 0; d < devices.size(); ++d) {
      (void)cudaSetDevice(devices[d]);
      if (buffers[d] != nullptr) (void)cudaFree(buffers[d]);
      if (streams[d] != nullptr) (void)cudaStreamDestroy(streams[d]);
    }
    if (copy_to != nullptr) (void)cudaFree(copy_to);
  };
  try {
    for (std::size_t d = 0; d < devices.size(); ++d) {
      Caller const who{static_cast<int>(d), devices[d]};
      check(cudaSetDevice(devices[d]), "cudaSetDevice", who);
      check(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", who);
      check(cudaMalloc(reinterpret_cast<void**>(&buffers[d]), max_floats * sizeof(float)),
            "cudaMalloc", who);
      check(cudaMemset(buffers[d], 0, max_floats * sizeof(float)), "cudaMemset", who);
      if (d == 0) {
        check(cudaMalloc(reinterpret_cast<void**>(&copy_to), max_floats * sizeof(float)),
              "cudaMalloc", who);
      }
      // cudaMemset runs on the legacy stream, which the non-blocking streams do not wait for.
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", who);
    }

    Timer timer(devices);
    auto const algorithm = nccl_setting("NCCL_ALGO"), protocol = nccl_setting("NCCL_PROTO");
    auto const version = nccl_version();
    bool const bus = ranks > 1;
    std::printf(
        "NCCL %s allreduce (sum, float32, in place), %d rank(s), one per device (/gpu:0: "
        "%s), algorithm %s, protocol %s; mean of %d after %d warm-up, CUDA events\n",
        version.c_str(), ranks, properties.name, algorithm.c_str(), protocol.c_str(), iterations,
        warmup);
    if (!bus) {
      std::printf(
          "one rank: busbw is not defined and the ratio is algbw / copy; an in-place sum "
          "over one rank moves no data, so the time is NCCL's cost per call\n");
    }
    std::printf("%10s %12s %12s %12s %12s %10s\n", "size MiB", "time us", "algbw GB/s",
                "busbw GB/s", "copy GB/s", bus ? "bus/copy" : "alg/copy");
    bench::Record record;
    record.set("benchmark", "nccl")
        .set("nccl_version", version)
        .set("algorithm", algorithm)
        .set("protocol", protocol)
        .set("ranks", ranks)
        .set("device", properties.name)
        .set("iterations", iterations)
        .set("warmup", warmup);
    for (std::size_t m : mib) {
      std::size_t const floats = m * (std::size_t{1} << 20) / sizeof(float);
      double const bytes = static_cast<double>(floats * sizeof(float));
      auto const f = measure(comms, buffers, copy_to, streams, floats, warmup, iterations, timer);
      double const algbw = bytes / f.seconds;
      double const busbw = bus ? algbw * 2.0 * (ranks - 1) / ranks : NAN;
      double const copy = bytes / f.copy_seconds;
      double const ratio = (bus ? busbw : algbw) / copy;
      char busbw_text[32] = "n/a";
      if (bus) std::snprintf(busbw_text, sizeof busbw_text, "%.2f", busbw / 1e9);
      std::printf("%10zu %12.1f %12.2f %12s %12.2f %10.3f\n", m, f.seconds * 1e6, algbw / 1e9,
                  busbw_text, copy / 1e9, ratio);
      record.add("results", bench::Record{}
                                .set("bytes", static_cast<std::int64_t>(bytes))
                                .set("seconds", f.seconds)
                                .set("algbw_bytes_per_s", algbw)
                                .set("busbw_bytes_per_s", busbw)
                                .set("copy_bytes_per_s", copy)
                                .set("ratio", ratio)
                                .set("ratio_of", bus ? "busbw" : "algbw"));
    }
    results.add(std::move(record));
  } catch (...) {
    release();
    throw;
  }
  release();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0, iterations = 20, warmup = 5;
  std::size_t max_mib = 256;
  bool quick = false;
  bench::CommandLine cli("bench_nccl",
                         "NCCL allreduce bandwidth over the local GPUs, against a device copy.");
  cli.integer("--devices", "N", devices, 0,
              "ranks, one per local device (default 0: every device)");
  cli.integer("--iterations", "N", iterations, 1,
              "timed allreduces per size, mean kept (default 20)");
  cli.integer("--warmup", "N", warmup, 0, "allreduces before timing, per size (default 5)");
  cli.integer("--max-mib", "N", max_mib, std::size_t{1},
              "the largest size in MiB; sizes double from 1 MiB (default 256)");
  cli.flag("--quick", quick, "a smoke run: 1, 2 and 4 MiB, 5 iterations after 2 warm-up");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (quick) {
    iterations = std::min(iterations, 5);
    warmup = std::min(warmup, 2);
  }
  try {
    if (int const status = run(devices, iterations, warmup, max_mib, quick, results); status != 0) {
      return status;
    }
  } catch (Error const& e) {
    std::fprintf(stderr, "bench_nccl: %s\n", e.what());
    return 1;
  }
  return results.write() ? 0 : 1;
}
