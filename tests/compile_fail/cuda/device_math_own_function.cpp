// A file g++ compiles gets convoy's kernels compiled in convoy::cuda (math/cuda_compiled.hpp); a
// function of its own on exec::Cuda has no device code there, and the compile says what to do.
// expected-error: runs a function of your own only in a file nvcc compiles
// expected-error: compile this file as CUDA
#include <convoy/exec/cuda.hpp>
#include <convoy/math/host.hpp>
#include <cstddef>

namespace {

struct Doubles {
  float* p;
  void operator()(std::size_t i) const { p[i] *= 2.0f; }
};

}  // namespace

void doubled(convoy::exec::Cuda const& gpu, float* p, std::size_t n) {
  convoy::math::for_each_index(gpu, n, Doubles{p});
}
