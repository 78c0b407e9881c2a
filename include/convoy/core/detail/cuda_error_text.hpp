// How convoy's checks word a CUDA runtime error: its name and the runtime's description,
// "cudaErrorNoDevice (no CUDA-capable device is detected)". Shared by exec/cuda.hpp and
// comm/nccl/check.hpp; plain C++ over the runtime's host API, so it needs neither cuBLAS nor nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace convoy::detail {

/// "<name> (<description>)" of `status`.
inline std::string cuda_error_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

}  // namespace convoy::detail
