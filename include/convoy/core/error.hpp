// The exceptions convoy throws. Every one names the thing at fault (a variable, a file, a replica)
// so that a user can act on the message without a debugger.
#pragma once

#include <stdexcept>
#include <string>

namespace convoy {

/// Base of every exception convoy throws on purpose.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A variable name is duplicated, unknown or missing.
struct NameError : Error {
  using Error::Error;
};

/// A tensor has a shape other than the one its variable declares.
struct ShapeError : Error {
  using Error::Error;
};

/// Loading weights found unknown, missing or mis-shaped names; the message lists all of them.
struct LoadError : Error {
  using Error::Error;
};

/// A checkpoint file is absent, truncated, damaged or from another format version.
struct CheckpointError : Error {
  using Error::Error;
};

/// A dataset file is absent or malformed.
struct DatasetError : Error {
  using Error::Error;
};

/// A placement cannot be honoured (for example a GPU placement in a CPU-only build under strict
/// placement).
struct PlacementError : Error {
  using Error::Error;
};

/// A replica failed to deliver within a synchronization timeout.
struct TimeoutError : Error {
  using Error::Error;
};

}  // namespace convoy
