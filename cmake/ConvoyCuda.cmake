# convoy::cuda: the CUDA device backend (exec::Cuda, place::Gpu on a device, the math in
# convoy/math/cuda.cuh). An INTERFACE target linking convoy::convoy, the CUDA runtime and cuBLAS,
# with what nvcc needs to compile convoy's headers: C++20, __host__ __device__ lambdas
# (--extended-lambda) and constexpr standard functions on the device (--expt-relaxed-constexpr),
# and convoy_cuda_kernels (below). A file of a program that links it compiles as CUDA (.cu) only
# when it has device functions of its own. C++20 is a flag, not the
# cuda_std_20 compile feature, which CMake before 3.28 does not know for CUDA 13. The installed
# package defines it again through convoy-cuda.cmake (find_package(convoy COMPONENTS cuda)).
#
# Input: CONVOY_ENABLE_CUDA, AUTO or ON (cmake/ConvoyOptionalPart.cmake). Included at file scope,
# because enable_language(CUDA) must be.

include(CheckLanguage)
include(ConvoyCudaDependencies)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  _convoy_find_cuda_libraries(_convoy_cuda_missing CUDA::cudart CUDA::cublas)
else()
  string(CONCAT _convoy_cuda_missing "a CUDA compiler, which was not found: install the CUDA "
    "toolkit (Debian: nvidia-cuda-toolkit; or NVIDIA's cuda-toolkit) or set CMAKE_CUDA_COMPILER to "
    "its nvcc")
endif()
convoy_optional_part_require(CONVOY_ENABLE_CUDA convoy::cuda _convoy_cuda_missing)

# nvcc is slow and every architecture is another device compile of each .cu file: one by default,
# sm_90 (H100, H200). Set CMAKE_CUDA_ARCHITECTURES (for example "80;90" or "native") for others.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)

add_library(convoy_cuda INTERFACE)
add_library(convoy::cuda ALIAS convoy_cuda)
set_target_properties(convoy_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(convoy_cuda INTERFACE convoy CUDA::cudart CUDA::cublas)
# CONVOY_WITH_CUDA tells the headers (place/gpu.hpp) that the CUDA runtime is linked. OpenMP's
# imported target gives -fopenmp to C++ files only; convoy's host math (OpenMP loops) needs it in
# the host half of .cu files too. nvcc finds the toolkit's own Thrust and CUB (CCCL) itself.
target_compile_definitions(convoy_cuda INTERFACE CONVOY_WITH_CUDA=1)
target_compile_options(convoy_cuda INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --extended-lambda --expt-relaxed-constexpr -Xcompiler=-fopenmp>)

# convoy_cuda_kernels: the device code of convoy's own kernels (the named functors of the layers,
# losses, optimizers and collectives), compiled once (src/cuda_kernels.cu). With it a file whose
# only device code is convoy's compiles as C++ (math/cuda_compiled.hpp), at about half nvcc's CPU
# time (docs/env.md). Installed and exported with convoy::cuda.
add_library(convoy_cuda_kernels STATIC "${PROJECT_SOURCE_DIR}/src/cuda_kernels.cu")
set_target_properties(convoy_cuda_kernels PROPERTIES EXPORT_NAME cuda_kernels
  POSITION_INDEPENDENT_CODE ON)
target_link_libraries(convoy_cuda_kernels PUBLIC convoy CUDA::cudart CUDA::cublas)
target_compile_definitions(convoy_cuda_kernels PRIVATE CONVOY_WITH_CUDA=1)
target_compile_options(convoy_cuda_kernels PRIVATE
  -std=c++20 --extended-lambda --expt-relaxed-constexpr -Xcompiler=-fopenmp)
target_link_libraries(convoy_cuda INTERFACE convoy_cuda_kernels)
message(STATUS "convoy: convoy::cuda is built (CUDA compiler: ${CMAKE_CUDA_COMPILER})")
