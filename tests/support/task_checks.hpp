// The cluster tests' check of how their tasks ended: every one with status 0, and the log of each
// that did not printed, so that a failure shows what the task said.
#pragma once

#include <doctest/doctest.h>

#include <iostream>
#include <vector>

#include "processes.hpp"

namespace convoy::testing {

inline void check_tasks_succeeded(std::vector<Task> const& tasks) {
  for (auto const& t : tasks) {
    if (t.status != 0) {
      std::cout << "---- " << t.job << ":" << t.index << " (status " << t.status << ")\n"
                << read_file(t.log) << "\n";
    }
    CHECK_MESSAGE(t.status == 0, t.job << ":" << t.index << " ended with status " << t.status);
  }
}

}  // namespace convoy::testing
