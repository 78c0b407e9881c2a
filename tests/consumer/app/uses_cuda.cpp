// Links convoy::cuda from the installed package: exec::Cuda opens a device (the CUDA runtime and
// cuBLAS). Built by ../run_consumer.cmake to check the link, never run: it needs a device.
#include <convoy/exec/cuda.hpp>
#include <cstdio>

#if !defined(CONVOY_WITH_CUDA)
#error "convoy::cuda should define CONVOY_WITH_CUDA"
#endif

int main() {
  convoy::exec::Cuda device{0};
  std::printf("convoy consumer: %s of %d devices\n", device.name.c_str(),
              convoy::exec::cuda::device_count());
  return 0;
}
