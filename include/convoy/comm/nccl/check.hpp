// Checks for the NCCL and CUDA runtime calls of the collective engine: a failure throws NcclError
// naming the call, the rank and the device, with NCCL's or CUDA's own words and NCCL's last
// message. Functions, not macros: the call's text is passed in.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <string_view>

#include "../../core/detail/cuda_error_text.hpp"
#include "../../core/error.hpp"

namespace convoy::comm::nccl {

/// A failed NCCL or CUDA call of the collective engine.
struct NcclError : Error {
  using Error::Error;
};

/// Who made a call: for the message.
struct Caller {
  int rank = -1;
  int device = -1;
  std::string text() const {
    return "rank " + std::to_string(rank) + " (device " + std::to_string(device) + ")";
  }
};

/// Throws NcclError unless `result` is ncclSuccess (or, when `in_progress_ok`, ncclInProgress,
/// which a non-blocking communicator answers while it works).
inline void check(ncclResult_t result, std::string_view call, Caller const& who,
                  ncclComm_t comm = nullptr, bool in_progress_ok = false) {
  if (result == ncclSuccess || (in_progress_ok && result == ncclInProgress)) return;
  std::string message = "convoy: " + std::string(call) + " failed on " + who.text() + ": " +
                        ncclGetErrorString(result);
  if (char const* last = ncclGetLastError(comm); last != nullptr && *last != '\0')
    message += " (" + std::string(last) + ")";
  throw NcclError(message);
}

/// Throws NcclError unless `result` is cudaSuccess.
inline void check(cudaError_t result, std::string_view call, Caller const& who) {
  if (result == cudaSuccess) return;
  throw NcclError("convoy: " + std::string(call) + " failed on " + who.text() + ": " +
                  convoy::detail::cuda_error_text(result));
}

}  // namespace convoy::comm::nccl
