// Single-threaded SGEMM at the six shapes of a 784-500-10 MLP step at batch 200 (nn/dense.hpp:
// each layer's forward, dW = x^T dy and dx = dy W^T), on each kernel set of the host's OpenBLAS
// this CPU can run: as OpenBLAS detected it, its generic Prescott (what an Intel CPU newer than
// Debian's OpenBLAS 0.3.21 gets), Sandybridge, Haswell, Zen, SkylakeX and Cooperlake, and, where
// their libraries are installed, BLIS's and oneDNN's SGEMM. It chose the cores convoy selects for
// a CPU OpenBLAS does not know (math/blas_kernels.hpp); docs/benchmarks.md has the figures.
//
// One process: OpenBLAS is switched from core to core between measurements (as convoy's selection
// does), so every kernel set is timed in the same minute, interleaved, on the same buffers. BLIS
// and oneDNN are opened with dlopen, each kept to itself (RTLD_LOCAL): libblis exports a
// cblas_sgemm too, which linked in would take OpenBLAS's place; and so this program builds where
// neither is installed, and says so in its table.
//
// Run: build/benchmarks/bench_gemm [--repeats N] [--seconds S] [--quick] [--csv PATH] [--json PATH]
#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <convoy/exec/host.hpp>
#include <convoy/math/blas_kernels.hpp>
#include <convoy/math/host.hpp>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "options.hpp"
#include "report.hpp"

namespace bench = convoy::bench;

namespace {

struct Shape {
  std::string name;  // "200x500x784 NN": m x n x k, then op(A) op(B)
  bool transpose_a, transpose_b;
  std::int64_t m, n, k;
  float beta;
};

std::vector<Shape> const shapes{{"200x500x784 NN", false, false, 200, 500, 784, 1.0f},
                                {"784x500x200 TN", true, false, 784, 500, 200, 0.0f},
                                {"200x784x500 NT", false, true, 200, 784, 500, 0.0f},
                                {"200x10x500 NN", false, false, 200, 10, 500, 1.0f},
                                {"500x10x200 TN", true, false, 500, 10, 200, 0.0f},
                                {"200x500x10 NT", false, true, 200, 500, 10, 0.0f}};

// One SGEMM of a shape on the operands below (row-major, as math::gemm).
using Gemm = std::function<void(Shape const&, float const*, float const*, float*)>;

struct Kernels {
  std::string name;  // the row's label
  std::string key;   // in the JSON line
  std::string core;  // the OpenBLAS core to switch to first; "" for another library
  Gemm gemm;
  std::string missing;  // why it is not measured; "" when it is
};

void openblas_gemm(Shape const& s, float const* a, float const* b, float* c) {
  cblas_sgemm(CblasRowMajor, s.transpose_a ? CblasTrans : CblasNoTrans,
              s.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(s.m),
              static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a,
              static_cast<int>(s.transpose_a ? s.m : s.k), b,
              static_cast<int>(s.transpose_b ? s.k : s.n), s.beta, c, static_cast<int>(s.n));
}

// BLIS 0.9's typed API, whose strides express the transposes (so only BLIS_NO_TRANSPOSE, 0, is
// named here); dim_t and inc_t are its 64-bit gint_t, which bli_info_get_int_type_size confirms.
using BliSgemm = void (*)(int, int, std::int64_t, std::int64_t, std::int64_t, float*, float*,
                          std::int64_t, std::int64_t, float*, std::int64_t, std::int64_t, float*,
                          float*, std::int64_t, std::int64_t);

Kernels blis() {
  Kernels k{"BLIS", "blis", "", {}, ""};
  void* lib = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return k.missing = "libblis.so.4 not found (Debian's libblis4)", k;
  auto const sgemm = reinterpret_cast<BliSgemm>(dlsym(lib, "bli_sgemm"));
  auto const int_size =
      reinterpret_cast<std::int64_t (*)()>(dlsym(lib, "bli_info_get_int_type_size"));
  auto const threads =
      reinterpret_cast<void (*)(std::int64_t)>(dlsym(lib, "bli_thread_set_num_threads"));
  if (sgemm == nullptr || int_size == nullptr || int_size() != 64) {
    return k.missing = "libblis.so.4 lacks bli_sgemm or has no 64-bit dim_t", k;
  }
  if (threads != nullptr) threads(1);
  if (char const* (*version)() =
          reinterpret_cast<char const* (*)()>(dlsym(lib, "bli_info_get_version_str"))) {
    k.name += std::string(" ") + version();
  }
  k.gemm = [sgemm](Shape const& s, float const* a, float const* b, float* c) {
    float alpha = 1.0f, beta = s.beta;
    // Row-major op(A) (m x k): A itself has rows of k, or, transposed, is stored k x m.
    std::int64_t const rs_a = s.transpose_a ? 1 : s.k, cs_a = s.transpose_a ? s.m : 1;
    std::int64_t const rs_b = s.transpose_b ? 1 : s.n, cs_b = s.transpose_b ? s.k : 1;
    sgemm(0, 0, s.m, s.n, s.k, &alpha, const_cast<float*>(a), rs_a, cs_a, const_cast<float*>(b),
          rs_b, cs_b, &beta, c, s.n, 1);
  };
  return k;
}

// oneDNN's row-major dnnl_sgemm (2.x), which returns dnnl_success (0).
using DnnlSgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, float const*,
                          std::int64_t, float const*, std::int64_t, float, float*, std::int64_t);

Kernels onednn() {
  Kernels k{"oneDNN", "onednn", "", {}, ""};
  void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return k.missing = "libdnnl.so.2 not found (Debian's libdnnl2)", k;
  auto const sgemm = reinterpret_cast<DnnlSgemm>(dlsym(lib, "dnnl_sgemm"));
  if (sgemm == nullptr) return k.missing = "libdnnl.so.2 lacks dnnl_sgemm", k;
  struct Version {
    int major, minor, patch;
    char const* hash;
    unsigned cpu_runtime, gpu_runtime;
  };
  if (auto const version = reinterpret_cast<Version const* (*)()>(dlsym(lib, "dnnl_version"))) {
    auto const* v = version();
    k.name += " " + std::to_string(v->major) + "." + std::to_string(v->minor);
  }
  k.gemm = [sgemm](Shape const& s, float const* a, float const* b, float* c) {
    sgemm(s.transpose_a ? 'T' : 'N', s.transpose_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a,
          s.transpose_a ? s.m : s.k, b, s.transpose_b ? s.k : s.n, s.beta, c, s.n);
  };
  return k;
}

// Calls per second of one shape: as many calls as fill `seconds` (at least 3), after one to warm.
double calls_per_second(Kernels const& k, Shape const& s, std::vector<float> const& a,
                        std::vector<float> const& b, std::vector<float>& c, double seconds) {
  k.gemm(s, a.data(), b.data(), c.data());
  auto const start = std::chrono::steady_clock::now();
  std::int64_t calls = 0;
  double elapsed = 0.0;
  do {
    k.gemm(s, a.data(), b.data(), c.data());
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds || calls < 3);
  return static_cast<double>(calls) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  double seconds = 0.05;
  bool quick = false;
  bench::CommandLine cli("bench_gemm",
                         "Single-threaded SGEMM at the 784-500-10 MLP's shapes on each kernel set "
                         "of OpenBLAS, BLIS and oneDNN.");
  cli.integer("--repeats", "N", repeats, 1, "rounds over every kernel set, best kept (default 5)");
  cli.option("--seconds", "S", "time to spend on each shape per round (default 0.05)",
             [&seconds](std::string_view v) {
               double parsed = 0.0;
               auto const [end, error] = std::from_chars(v.data(), v.data() + v.size(), parsed);
               if (error != std::errc{} || end != v.data() + v.size() || !(parsed > 0.0) ||
                   parsed > 60.0) {
                 return std::string("a number of seconds in (0, 60]");
               }
               seconds = parsed;
               return std::string();
             });
  cli.flag("--quick", quick, "a smoke run: 1 round of 0.002 s per shape");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (quick) {
    repeats = 1;
    seconds = 0.002;
  }
  // What convoy selects, and what OpenBLAS had chosen by itself before that.
  auto const& chosen = convoy::math::host_blas_kernels();
  std::string const& detected = chosen.detected;
  auto const cpu = convoy::math::cpu_vectors();
  convoy::exec::Host::ReplicaScope const one_thread;  // one OpenMP and one OpenBLAS thread

  std::vector<Kernels> sets;
  auto const openblas = chosen.library.empty() ? std::string("CBLAS") : chosen.library;
  sets.push_back({openblas + " as detected (" + (detected.empty() ? "?" : detected) + ")",
                  "openblas_detected", detected, openblas_gemm, ""});
  struct Core {
    char const* name;
    bool runs;  // whether this CPU has the instructions the core's kernels use
  };
  for (auto const& [core, runs] :
       {Core{"Prescott", true}, Core{"Sandybridge", cpu.avx2_fma}, Core{"Haswell", cpu.avx2_fma},
        Core{"Zen", cpu.avx2_fma}, Core{"SkylakeX", cpu.avx512},
        Core{"Cooperlake", cpu.avx512_bf16}}) {
    Kernels k{openblas + " " + core, std::string("openblas_") + core, core, openblas_gemm, ""};
    if (!chosen.selectable) k.missing = "not a DYNAMIC_ARCH OpenBLAS";
    if (!runs) k.missing = "this CPU lacks its instructions";
    // 0.3.21 takes "Cooperlake" only through its fallback by features: check what it runs.
    if (k.missing.empty() && convoy::math::detail::force_openblas_core(core) != core) {
      k.missing = "this OpenBLAS does not run it here";
    }
    sets.push_back(std::move(k));
  }
  sets.push_back(blis());
  sets.push_back(onednn());

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto random = [&](std::int64_t count) {
    std::vector<float> v(static_cast<std::size_t>(count));
    for (float& x : v) x = uniform(rng);
    return v;
  };
  std::vector<std::vector<float>> as, bs, cs;
  for (auto const& s : shapes) {
    as.push_back(random(s.m * s.k));
    bs.push_back(random(s.k * s.n));
    cs.push_back(random(s.m * s.n));
  }
  // Interleaved: each round visits every kernel set in turn, switching OpenBLAS's core first.
  std::vector<std::vector<double>> best(sets.size(), std::vector<double>(shapes.size(), 0.0));
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t i = 0; i < sets.size(); ++i) {
      if (!sets[i].missing.empty()) continue;
      if (!sets[i].core.empty()) convoy::math::detail::force_openblas_core(sets[i].core);
      for (std::size_t j = 0; j < shapes.size(); ++j) {
        best[i][j] = std::max(best[i][j],
                              calls_per_second(sets[i], shapes[j], as[j], bs[j], cs[j], seconds));
      }
    }
  }
  if (chosen.selectable) convoy::math::detail::force_openblas_core(chosen.core);

  // A step's GEMM time is the sum of its six shapes' (each at its best rate).
  auto step_seconds = [&](std::size_t i) {
    double total = 0.0;
    for (std::size_t j = 0; j < shapes.size(); ++j) total += 1.0 / best[i][j];
    return total;
  };
  double const prescott = sets[1].missing.empty() ? step_seconds(1) : 0.0;
  std::printf(
      "SGEMM, 1 thread, MLP 784-500-10 at batch 200; CPU with %s; OpenBLAS detected %s, "
      "convoy selects %s; best of %d rounds, interleaved\n",
      convoy::math::vectors_text(cpu).c_str(), detected.empty() ? "?" : detected.c_str(),
      chosen.core.empty() ? "nothing" : chosen.core.c_str(), repeats);
  std::printf("%-40s", "GFLOP/s");
  for (auto const& s : shapes) std::printf(" %15s", s.name.c_str());
  std::printf(" %9s %12s\n", "step ms", "vs Prescott");
  bench::Record record;
  record.set("benchmark", "gemm")
      .set("cpu", convoy::math::vectors_text(cpu))
      .set("detected", detected)
      .set("selected", chosen.core)
      .set("repeats", repeats);
  for (std::size_t i = 0; i < sets.size(); ++i) {
    auto const& k = sets[i];
    if (!k.missing.empty()) {
      std::printf("%-40s %s\n", k.name.c_str(), ("not measured: " + k.missing).c_str());
      continue;
    }
    std::printf("%-40s", k.name.c_str());
    for (std::size_t j = 0; j < shapes.size(); ++j) {
      auto const& s = shapes[j];
      double const gflops = best[i][j] * 2.0 * static_cast<double>(s.m * s.n * s.k) / 1e9;
      std::printf(" %15.1f", gflops);
      record.add("results", bench::Record{}
                                .set("kernels", k.name)
                                .set("key", k.key)
                                .set("shape", s.name)
                                .set("gflops", gflops));
    }
    double const step = step_seconds(i);
    double const over = prescott > 0.0 ? prescott / step : 0.0;
    std::printf(" %9.3f %12.2f\n", step * 1e3, over);
    record.set(k.key + "_step_ms", step * 1e3);
    if (prescott > 0.0) record.set(k.key + "_over_prescott", over);
  }
  results.add(std::move(record));
  return results.write() ? 0 : 1;
}
