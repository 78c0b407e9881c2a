// Small helpers shared by the unit tests: an exception's message, and whole files as bytes
// (files.hpp).
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "files.hpp"

namespace convoy::testing {

/// The message of the E that `f` must throw; fails the test when it throws nothing.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (E const& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

}  // namespace convoy::testing
