// How many replicas a threaded placement runs when the user leaves the count at 0: one per hardware
// thread, since each replica's math is single-threaded.
#pragma once

#include <algorithm>
#include <thread>

namespace convoy::place::detail {

inline int replicas_or_one_per_core(int wanted) {
  return wanted > 0 ? wanted : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace convoy::place::detail
