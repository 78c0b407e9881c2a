// CONVOY_HOST_DEVICE marks the functions and lambdas that layers, losses and optimizers hand to the
// math functions, so that the one definition runs on the host (math/host.hpp) and, compiled by
// nvcc, on a CUDA device (math/cuda.cuh). Lambdas need nvcc's --extended-lambda (convoy::cuda).
#pragma once

#if defined(__CUDACC__)
#define CONVOY_HOST_DEVICE __host__ __device__
#else
#define CONVOY_HOST_DEVICE
#endif
