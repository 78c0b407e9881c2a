// A collective Comm written outside the library, on the host (it borrows the in-process engine),
// for the compile-fail tests of strategy.hpp's capability rules.
#pragma once

#include <convoy/strategy.hpp>
#include <string_view>

struct Carrier {
  using policy_category = convoy::communication_tag;
  static constexpr std::string_view name = "Carrier";
  static constexpr bool collective = true;
  static constexpr bool host_collective = true;
  template <class Model, class Placement, class Sync>
  using engine = convoy::comm::in_process::Engine<Model, Placement, Sync>;
};
