// Rank 0 of a two-rank rendezvous on a thread of its own, answering rank 1 with one blob: what the
// rendezvous tests (tests/unit/comm) serve while they try strangers and then the real rank 1.
#pragma once

#include <convoy/comm/bootstrap/rendezvous.hpp>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace convoy::testing {

/// Serves `id` at `address` under `options`, speaking "test/1", until rank 1 has it; join the
/// thread after rank 1 asked.
inline std::thread serve_rank0(std::string address, comm::bootstrap::Options options,
                               std::vector<std::byte> id) {
  return std::thread(
      [address = std::move(address), options = std::move(options), id = std::move(id)] {
        comm::bootstrap::serve(address, 2, options, "test/1", "the test's id",
                               [&](int, std::span<std::byte const>) {
                                 return std::optional(std::vector<std::vector<std::byte>>{id});
                               });
      });
}

}  // namespace convoy::testing
