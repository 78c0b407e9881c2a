# find_package(convoy COMPONENTS nccl): convoy::nccl (cmake/ConvoyNccl.cmake), the NCCL collective
# engine, with the CUDA runtime and NCCL found again here as convoy's build found them (NCCL_ROOT,
# the toolkit's folders, the system's). Installed only by a convoy built with it, which also
# exported convoy::zmq_ps. convoy-config.cmake includes this file; it sets convoy_nccl_FOUND, or
# _convoy_component_missing to what is missing.
include("${CMAKE_CURRENT_LIST_DIR}/ConvoyCudaDependencies.cmake")
_convoy_find_nccl(_convoy_component_missing)
if(NOT _convoy_component_missing)
  include("${CMAKE_CURRENT_LIST_DIR}/convoy-nccl-targets.cmake")
  set(convoy_nccl_FOUND TRUE)
endif()
