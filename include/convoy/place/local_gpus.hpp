// The local GPUs a multi-GPU placement (place::MirroredGpus, place::CentralStorageGpus) puts one
// replica on each of: the devices asked for that the runtime sees, with one line for those left
// out, or PlacementError under strict placement; with none left, one replica on the host
// (TensorFlow's allow_soft_placement).
//
// The two placements still repeat the four one-line members that call these (replica_count,
// context, resolve, adopt): a shared base class would make every `{.devices = {0, 1}}` of theirs
// warn under GCC's -Wextra (missing-field-initializers names the base), and they are aggregates so
// that users can write exactly that.
#pragma once

#include <cstddef>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#if defined(CONVOY_WITH_CUDA)
#include "../exec/cuda.hpp"
#endif

namespace convoy::place::detail {

#if defined(CONVOY_WITH_CUDA)
/// The replicas asked for before the devices are opened: one per ordinal in `devices`, else one
/// per device the runtime sees (at least one).
inline int local_gpu_count(std::vector<int> const& devices) {
  if (!devices.empty()) return static_cast<int>(devices.size());
  int const count = exec::cuda::device_count();
  return count > 0 ? count : 1;
}

/// One context per device of `devices` (empty: every device) that the runtime sees, naming each
/// under `log`; `placement` names the caller in the lines and errors. Throws PlacementError under
/// `strict` when one is missing.
inline std::vector<exec::Cuda> open_local_gpus(std::string_view placement,
                                               std::vector<int> const& devices, bool strict,
                                               bool log) {
  int const count = exec::cuda::device_count();
  std::vector<int> asked = devices;
  if (asked.empty()) {
    for (int d = 0; d < count; ++d) asked.push_back(d);
  }
  std::vector<int> missing;
  std::vector<exec::Cuda> opened;
  for (int d : asked) {
    if (d < 0 || d >= count) {
      missing.push_back(d);
      continue;
    }
    opened.emplace_back(d);
    if (log) {
      std::clog << "convoy placement: place::" << placement << " replica " << opened.size() - 1
                << " computes on " << exec::cuda::describe(exec::cuda::device_info(d)) << "\n";
    }
  }
  if (asked.empty() || !missing.empty()) {
    std::string what = "convoy: place::" + std::string(placement) + "{";
    for (std::size_t i = 0; i < missing.size(); ++i)
      what += (i == 0 ? "device " : ", ") + std::to_string(missing[i]);
    what += "} cannot be honoured: the CUDA runtime sees ";
    what += count == 0 ? std::string("no device")
                       : std::to_string(count) + " device(s) (/gpu:0-" +
                             std::to_string(count - 1) + ")";
    if (strict) {
      throw PlacementError(what +
                           " (strict placement); name the devices there are, or turn strict off");
    }
    std::clog << what
              << (opened.empty() ? "; one replica runs on the host (/cpu:0) instead\n"
                                 : "; using the " + std::to_string(opened.size()) +
                                       " that are there\n");
  }
  if (opened.empty()) opened.push_back(exec::Cuda::host());
  return opened;
}
#else
inline int local_gpu_count(std::vector<int> const&) { return 1; }

/// This build cannot honour a GPU placement: one line, or PlacementError under `strict`.
inline void no_local_gpus(std::string_view placement, std::string_view host_alternative,
                          bool strict) {
  std::string const what = "convoy: place::" + std::string(placement) +
                           " cannot be honoured: this build has no CUDA backend";
  if (strict) {
    throw PlacementError(what + " (strict placement); use place::" +
                         std::string(host_alternative));
  }
  std::clog << what << "; one replica runs on the host (/cpu:0) instead\n";
}
#endif

}  // namespace convoy::place::detail
