// Which GEMM kernels the host's BLAS runs, and convoy's choice of them where OpenBLAS does not know
// the processor. A DYNAMIC_ARCH OpenBLAS picks its kernels by the CPU's family and model; one older
// than the CPU may fall back to generic SSE3 kernels (Debian's 0.3.21 names an Intel family 6 model
// 207 "Prescott") and train the Fashion-MNIST MLP at a third of the speed (docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// OpenBLAS's own entry points; weak, so that convoy links and runs with any CBLAS: each is null
// where the BLAS lacks it (another BLAS, or an OpenBLAS built for one core without the two
// gotoblas_dynamic_* of a DYNAMIC_ARCH build), and convoy then selects nothing.
extern "C" char* openblas_get_corename(void) __attribute__((weak));
extern "C" char* openblas_get_config(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace convoy::math {

/// The vector units of the processor that OpenBLAS's GEMM kernels use, each counted only when the
/// operating system saves its registers (XCR0).
struct CpuVectors {
  bool avx2_fma = false;     ///< AVX2 and FMA: OpenBLAS's Haswell kernels
  bool avx512 = false;       ///< AVX-512 F, DQ, BW and VL: its SkylakeX kernels
  bool avx512_bf16 = false;  ///< AVX-512 with BF16 as well: its Cooperlake kernels
  friend bool operator==(CpuVectors const&, CpuVectors const&) = default;
};

/// Reads the calling processor's CpuVectors with cpuid; all false on other architectures.
/// Thread-safe.
inline CpuVectors cpu_vectors() {
  CpuVectors v;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return v;
  bool const fma = (c & (1u << 12)) != 0, osxsave = (c & (1u << 27)) != 0;
  if (!osxsave || (c & (1u << 28)) == 0) return v;  // no AVX the system saves: nothing wider
  unsigned low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0u));
  std::uint64_t const xcr0 = (std::uint64_t{high} << 32) | low;
  if ((xcr0 & 0x6u) != 0x6u) return v;  // XMM and YMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return v;
  v.avx2_fma = fma && (b & (1u << 5)) != 0;
  // F (16), DQ (17), BW (30), VL (31), and the opmask and ZMM state (XCR0 bits 5-7).
  unsigned const avx512_bits = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  v.avx512 = v.avx2_fma && (b & avx512_bits) == avx512_bits && (xcr0 & 0xe0u) == 0xe0u;
  if (v.avx512 && a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    v.avx512_bf16 = (a & (1u << 5)) != 0;
  }
#endif
  return v;
}

/// The CpuVectors in words: "AVX-512 with BF16", "AVX-512", "AVX2" or "no AVX2".
inline std::string vectors_text(CpuVectors v) {
  if (v.avx512_bf16) return "AVX-512 with BF16";
  if (v.avx512) return "AVX-512";
  if (v.avx2_fma) return "AVX2";
  return "no AVX2";
}

namespace detail {

// How wide a vector an OpenBLAS core's SGEMM kernel uses: 2 for AVX-512, 1 for AVX2 with FMA (Zen's
// are Haswell's), 0 for the rest (SSE3 Prescott, Core2, Nehalem; AVX Sandybridge; AMD's older).
constexpr int core_width(std::string_view core) {
  if (core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids") return 2;
  if (core == "Haswell" || core == "Zen") return 1;
  return 0;
}

}  // namespace detail

/// The OpenBLAS core whose kernels the CPU's widest vectors call for, or "" where it has no AVX2.
constexpr std::string_view core_for(CpuVectors v) {
  if (v.avx512_bf16) return "Cooperlake";
  if (v.avx512) return "SkylakeX";
  if (v.avx2_fma) return "Haswell";
  return "";
}

/// The core convoy selects when OpenBLAS named `detected`: core_for(v) when its vectors are wider
/// than `detected`'s, else "" (OpenBLAS's choice stands, including any AVX2 or AVX-512 core it
/// knows better, such as Zen on a CPU without AVX-512).
constexpr std::string_view core_to_select(std::string_view detected, CpuVectors v) {
  auto const wanted = core_for(v);
  if (wanted.empty() || detail::core_width(detected) >= detail::core_width(wanted)) return "";
  return wanted;
}

/// Who chose the GEMM kernels in use.
enum class KernelChoice {
  blas,         ///< the BLAS itself (OpenBLAS's detection, or a BLAS convoy cannot steer)
  convoy,       ///< convoy, from the CPU's vectors, over a generic core OpenBLAS named
  environment,  ///< the user, through OPENBLAS_CORETYPE, which convoy leaves as set
};

/// What host_blas_kernels() found and did. A regular value: printable, comparable.
struct BlasKernels {
  std::string library;  ///< "OpenBLAS 0.3.21", or "" for a CBLAS other than OpenBLAS
  std::string core;     ///< the OpenBLAS core in use ("Cooperlake"); "" where the BLAS does not say
  std::string detected;  ///< the core OpenBLAS named before convoy's choice (== core unless moved)
  bool selectable = false;  ///< a DYNAMIC_ARCH OpenBLAS, whose kernels can be selected at run time
  KernelChoice chosen_by = KernelChoice::blas;
  CpuVectors cpu;
  friend bool operator==(BlasKernels const&, BlasKernels const&) = default;

  /// One line for logs: "OpenBLAS 0.3.21, Cooperlake kernels (chosen by OpenBLAS)".
  std::string describe() const {
    if (library.empty()) return "a CBLAS other than OpenBLAS, with kernels of its own choosing";
    std::string line = library + ", " + core + " kernels (";
    if (chosen_by == KernelChoice::convoy) {
      line += "chosen by convoy from the CPU's " + vectors_text(cpu) + "; OpenBLAS named it " +
              detected;
    } else if (chosen_by == KernelChoice::environment) {
      line += "OPENBLAS_CORETYPE";
      if (core_to_select(core, cpu).empty()) {
        line += " chose them";
      } else {
        line += " chose them, over the CPU's " + vectors_text(cpu) + ", which convoy respects";
      }
    } else if (!selectable) {
      line += "an OpenBLAS built for one core; convoy selects nothing";
    } else {
      line += "chosen by OpenBLAS";
    }
    return line + ")";
  }
};

namespace detail {

inline std::string openblas_core() {
  return openblas_get_corename != nullptr ? std::string(openblas_get_corename()) : std::string();
}

/// Makes a DYNAMIC_ARCH OpenBLAS run `core`'s kernels (an OPENBLAS_CORETYPE name) and returns the
/// core it then runs: OpenBLAS re-reads its core through OPENBLAS_CORETYPE, which this sets for the
/// call and then puts back as it was (unset, or the user's value). An unknown name leaves OpenBLAS
/// to pick by the CPU's features, and 0.3.21 knows "Cooperlake" only that way. Not thread-safe: no
/// thread may call the BLAS or read the environment meanwhile. Returns "" and changes nothing
/// where the BLAS cannot be steered.
inline std::string force_openblas_core(std::string const& core) {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return {};
  char const* const before = std::getenv("OPENBLAS_CORETYPE");
  std::string const user = before != nullptr ? before : "";
  bool const was_set = before != nullptr;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  gotoblas_dynamic_quit();  // forgets the current core, so that init chooses again
  gotoblas_dynamic_init();
  if (was_set) {
    ::setenv("OPENBLAS_CORETYPE", user.c_str(), 1);
  } else {
    ::unsetenv("OPENBLAS_CORETYPE");
  }
  return openblas_core();
}

/// What the BLAS is and runs, with convoy's choice applied over `detected` (the core OpenBLAS
/// named) when `user_coretype` is null: the selection itself, apart so that a test can give it a
/// generic `detected`. Not thread-safe, like force_openblas_core.
inline BlasKernels select_kernels(std::string const& detected, char const* user_coretype,
                                  CpuVectors cpu) {
  BlasKernels k;
  k.cpu = cpu;
  if (openblas_get_corename == nullptr) return k;
  k.detected = detected;
  k.core = detected;
  std::string const config = openblas_get_config != nullptr ? openblas_get_config() : "";
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words.
  auto const second_space = config.find(' ', config.find(' ') + 1);
  k.library = config.empty() ? "OpenBLAS" : config.substr(0, second_space);
  k.selectable = gotoblas_dynamic_init != nullptr && gotoblas_dynamic_quit != nullptr;
  if (user_coretype != nullptr && *user_coretype != '\0') {
    k.chosen_by = KernelChoice::environment;
    return k;
  }
  auto const wanted = core_to_select(detected, cpu);
  if (!k.selectable || wanted.empty()) return k;
  k.core = force_openblas_core(std::string(wanted));
  k.chosen_by = KernelChoice::convoy;
  return k;
}

}  // namespace detail

/// The host BLAS's kernels, selected once per process on the first call: where a DYNAMIC_ARCH
/// OpenBLAS fell back to a core narrower than the CPU's vectors (Prescott on an AVX-512 Xeon), it
/// runs core_for(cpu_vectors()) instead, unless OPENBLAS_CORETYPE is set, which is the user's
/// choice and stands. A Strategy's constructor calls it, before its replica threads run, and
/// math::gemm before its first GEMM. Thread-safe: the first call selects while later ones wait.
/// The selection briefly sets OPENBLAS_CORETYPE, so it must not meet a BLAS call made outside
/// convoy nor another thread's getenv; a program that starts threads of its own before its
/// strategy calls it from main first (as fashion_mnist does, to print its line). Never throws but
/// std::bad_alloc.
inline BlasKernels const& host_blas_kernels() {
  static BlasKernels kernels;
  static std::once_flag once;
  std::call_once(once, [] {
    kernels = detail::select_kernels(detail::openblas_core(), std::getenv("OPENBLAS_CORETYPE"),
                                     cpu_vectors());
  });
  return kernels;
}

}  // namespace convoy::math
