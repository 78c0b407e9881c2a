// Tests for math/blas_kernels.hpp: the rules that pick an OpenBLAS core from the CPU's vectors,
// that this CPU runs vector kernels once convoy has chosen, and the fallback path itself: OpenBLAS
// put on its generic Prescott kernels, convoy's selection moving it to a vector core, and GEMMs at
// the Fashion-MNIST MLP's shapes agreeing with a plain triple loop on every core it ran.
#include <doctest/doctest.h>

#include <cmath>
#include <convoy/math/blas_kernels.hpp>
#include <convoy/math/host.hpp>
#include <cstddef>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace test_math_blas_kernels {

namespace {

using convoy::math::BlasKernels;
using convoy::math::core_for;
using convoy::math::core_to_select;
using convoy::math::CpuVectors;
using convoy::math::KernelChoice;

CpuVectors const avx2{.avx2_fma = true};
CpuVectors const avx512{.avx2_fma = true, .avx512 = true};
CpuVectors const avx512_bf16{.avx2_fma = true, .avx512 = true, .avx512_bf16 = true};

// One of Dense's GEMMs (nn/dense.hpp): op(A) m x k, op(B) k x n, C m x n, row-major.
struct Shape {
  bool transpose_a, transpose_b;
  std::size_t m, n, k;
  float beta;
};

// The six GEMMs of a 784-500-10 MLP step at batch 200: each layer's forward (x W added to the bias
// already in C), dW = x^T dy, and dx = dy W^T.
std::vector<Shape> const mlp_shapes{
    {false, false, 200, 500, 784, 1.0f}, {true, false, 784, 500, 200, 0.0f},
    {false, true, 200, 784, 500, 0.0f},  {false, false, 200, 10, 500, 1.0f},
    {true, false, 500, 10, 200, 0.0f},   {false, true, 200, 500, 10, 0.0f}};

// The largest difference of math::gemm from a triple loop in double, as a fraction of the sum of
// the magnitudes of each element's products (what float rounding scales with). On every column of
// the first and last rows and of every 11th between: a wrong kernel is off everywhere, or at an
// edge, and the whole triple loop at -O0 took this test 29 s of CI's time.
double worst_relative_error(Shape const& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
  for (float& v : a) v = uniform(rng);
  for (float& v : b) v = uniform(rng);
  for (float& v : c) v = uniform(rng);
  auto const c0 = c;
  convoy::math::gemm(convoy::exec::Host{}, s.transpose_a, s.transpose_b, s.m, s.n, s.k, 1.0f,
                     a.data(), b.data(), s.beta, c.data());
  double worst = 0.0;
  for (std::size_t i = 0; i < s.m; i = (i + 11 < s.m || i + 1 == s.m) ? i + 11 : s.m - 1) {
    for (std::size_t j = 0; j < s.n; ++j) {
      double sum = s.beta * static_cast<double>(c0[i * s.n + j]);
      double magnitude = std::abs(sum);
      for (std::size_t p = 0; p < s.k; ++p) {
        double const x = s.transpose_a ? a[p * s.m + i] : a[i * s.k + p];
        double const y = s.transpose_b ? b[j * s.k + p] : b[p * s.n + j];
        sum += x * y;
        magnitude += std::abs(x * y);
      }
      worst = std::max(worst, std::abs(c[i * s.n + j] - sum) / (magnitude + 1e-30));
    }
  }
  return worst;
}

// Every MLP GEMM on the kernels now in use; float's rounding over k <= 784 terms stays far below
// 2e-5 of the magnitudes (about sqrt(k) * 6e-8 in practice; a wrong kernel is off by order 1).
void check_mlp_gemms(std::string const& core) {
  std::mt19937 rng(7);
  for (auto const& s : mlp_shapes) {
    CAPTURE(core);
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(s.transpose_a);
    CAPTURE(s.transpose_b);
    CHECK(worst_relative_error(s, rng) < 2e-5);
  }
}

// Puts OpenBLAS back on the core host_blas_kernels() chose when a test has moved it.
struct RestoreCore {
  ~RestoreCore() {
    auto const& chosen = convoy::math::host_blas_kernels();
    if (chosen.selectable) convoy::math::detail::force_openblas_core(chosen.core);
  }
};

}  // namespace

TEST_CASE("a generic core on a CPU with wider vectors is moved to the CPU's; others stand") {
  CHECK(core_for(CpuVectors{}) == "");
  CHECK(core_for(avx2) == "Haswell");
  CHECK(core_for(avx512) == "SkylakeX");
  CHECK(core_for(avx512_bf16) == "Cooperlake");
  // What Debian's OpenBLAS 0.3.21 names an Intel family 6 model 207 (AVX-512 with BF16).
  CHECK(core_to_select("Prescott", avx512_bf16) == "Cooperlake");
  CHECK(core_to_select("Prescott", avx512) == "SkylakeX");
  CHECK(core_to_select("Nehalem", avx2) == "Haswell");
  CHECK(core_to_select("Sandybridge", avx2) == "Haswell");
  CHECK(core_to_select("Haswell", avx512) == "SkylakeX");
  CHECK(core_to_select("Zen", avx512_bf16) == "Cooperlake");
  // OpenBLAS's own vector cores, and CPUs without AVX2, are left alone.
  CHECK(core_to_select("Zen", avx2) == "");
  CHECK(core_to_select("Haswell", avx2) == "");
  CHECK(core_to_select("SkylakeX", avx512_bf16) == "");
  CHECK(core_to_select("Cooperlake", avx512) == "");
  CHECK(core_to_select("Prescott", CpuVectors{}) == "");
  CHECK(core_to_select("Sandybridge", CpuVectors{}) == "");
}

TEST_CASE("the log line says which kernels run and who chose them") {
  BlasKernels k{.library = "OpenBLAS 0.3.21",
                .core = "Cooperlake",
                .detected = "Cooperlake",
                .selectable = true,
                .cpu = avx512_bf16};
  CHECK(k.describe() == "OpenBLAS 0.3.21, Cooperlake kernels (chosen by OpenBLAS)");
  k.detected = "Prescott";
  k.chosen_by = KernelChoice::convoy;
  CHECK(k.describe() ==
        "OpenBLAS 0.3.21, Cooperlake kernels (chosen by convoy from the CPU's AVX-512 with BF16; "
        "OpenBLAS named it Prescott)");
  k.core = k.detected = "Prescott";
  k.chosen_by = KernelChoice::environment;
  CHECK(k.describe() ==
        "OpenBLAS 0.3.21, Prescott kernels (OPENBLAS_CORETYPE chose them, over the CPU's AVX-512 "
        "with BF16, which convoy respects)");
  k = {.library = "OpenBLAS 0.3.21", .core = "Haswell", .detected = "Haswell", .cpu = avx512};
  CHECK(
      k.describe() ==
      "OpenBLAS 0.3.21, Haswell kernels (an OpenBLAS built for one core; convoy selects nothing)");
  CHECK(BlasKernels{}.describe() ==
        "a CBLAS other than OpenBLAS, with kernels of its own choosing");
}

TEST_CASE("this CPU runs kernels as wide as its vectors once convoy has chosen") {
  auto const& k = convoy::math::host_blas_kernels();
  MESSAGE("host math: " << k.describe());
  CHECK(k.cpu == convoy::math::cpu_vectors());
  CHECK(&k == &convoy::math::host_blas_kernels());         // chosen once
  if (k.library.empty()) return;                           // not OpenBLAS: nothing to choose
  CHECK(convoy::math::detail::openblas_core() == k.core);  // what OpenBLAS says it runs now
  if (!k.selectable || k.chosen_by == KernelChoice::environment) {
    MESSAGE("OpenBLAS cannot be steered here, or OPENBLAS_CORETYPE chose: not checked");
    return;
  }
  CHECK(core_to_select(k.core, k.cpu) == "");
  if (k.cpu.avx2_fma) CHECK(convoy::math::detail::core_width(k.core) >= 1);
  if (k.cpu.avx512) CHECK(convoy::math::detail::core_width(k.core) == 2);
  check_mlp_gemms(k.core);
}

TEST_CASE("OpenBLAS on Prescott is moved to a vector core, and its GEMMs stay right") {
  auto const& chosen = convoy::math::host_blas_kernels();  // before any forcing: chosen as found
  if (!chosen.selectable) {
    MESSAGE("not a DYNAMIC_ARCH OpenBLAS: its core cannot be changed, nothing to test");
    return;
  }
  RestoreCore const restore;
  char const* const user = std::getenv("OPENBLAS_CORETYPE");
  std::string const before = user != nullptr ? user : "(unset)";
  REQUIRE(convoy::math::detail::force_openblas_core("Prescott") == "Prescott");
  char const* const after = std::getenv("OPENBLAS_CORETYPE");
  CHECK((after != nullptr ? after : "(unset)") == before);  // the environment as it was
  check_mlp_gemms("Prescott");

  // OPENBLAS_CORETYPE given by the user stands, whatever the CPU.
  auto const kept = convoy::math::detail::select_kernels("Prescott", "Prescott", chosen.cpu);
  CHECK(kept.chosen_by == KernelChoice::environment);
  CHECK(kept.core == "Prescott");
  CHECK(convoy::math::detail::openblas_core() == "Prescott");

  auto const moved = convoy::math::detail::select_kernels("Prescott", nullptr, chosen.cpu);
  CHECK(moved.detected == "Prescott");
  CHECK(moved.core == convoy::math::detail::openblas_core());
  if (!chosen.cpu.avx2_fma) {
    CHECK(moved.chosen_by == KernelChoice::blas);
    CHECK(moved.core == "Prescott");
    return;
  }
  CHECK(moved.chosen_by == KernelChoice::convoy);
  CHECK(moved.core == core_for(chosen.cpu));
  CHECK(moved.describe().find("chosen by convoy from the CPU's") != std::string::npos);
  check_mlp_gemms(moved.core);
}

}  // namespace test_math_blas_kernels
