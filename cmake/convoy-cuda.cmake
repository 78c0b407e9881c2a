# find_package(convoy COMPONENTS cuda): convoy::cuda (cmake/ConvoyCuda.cmake), the CUDA device
# backend, with the CUDA runtime and cuBLAS found again here. Installed only by a convoy built with
# it. convoy-config.cmake includes this file; it sets convoy_cuda_FOUND, or
# _convoy_component_missing to what is missing. It enables no language: a program that compiles
# convoy's .cuh files enables CUDA itself (project(... LANGUAGES CXX CUDA)).
include("${CMAKE_CURRENT_LIST_DIR}/ConvoyCudaDependencies.cmake")
_convoy_find_cuda_libraries(_convoy_component_missing CUDA::cudart CUDA::cublas)
if(NOT _convoy_component_missing)
  include("${CMAKE_CURRENT_LIST_DIR}/convoy-cuda-targets.cmake")
  set(convoy_cuda_FOUND TRUE)
endif()
