// Links convoy::nccl (installed package or FetchContent): a unique id and one rank's communicator
// on device 0 (NCCL and the CUDA runtime). Built by ../run_consumer.cmake to check the link, never
// run: it needs a device.
#include <convoy/comm/nccl/communicator.hpp>
#include <cstdio>

#if !defined(CONVOY_WITH_NCCL)
#error "convoy::nccl should define CONVOY_WITH_NCCL"
#endif

int main() {
  namespace nccl = convoy::comm::nccl;
  nccl::Communicator communicator{nccl::make_unique_id(), 0, 1, 0};
  std::printf("convoy consumer: one NCCL rank\n");
  return 0;
}
