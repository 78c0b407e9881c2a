// The exceptions convoy throws. Every one names the thing at fault (a variable, a file, a replica)
// so that a user can act on the message without a debugger.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// A CUDA or cuBLAS call failed; the message names the call, the device and, where there is one,
/// the variable.
struct DeviceError : Error {
  using Error::Error;
};

/// A cluster description (arguments, flags, TF_CONFIG or a launcher's variables) is malformed or
/// inconsistent; the message quotes the offending part and names where it came from.
struct ClusterError : Error {
  using Error::Error;
};

/// A replica did not finish a step, or deliver a gradient, within its policy's timeout.
struct TimeoutError : Error {
  using Error::Error;
};

/// A peer sent a message that is not convoy's protocol, of another protocol version, or malformed.
struct ProtocolError : Error {
  using Error::Error;
};

/// Part of the shared training state is gone: a parameter-server shard died (it may come back
/// empty) or was rolled back to a checkpoint under this task. The chief answers it by restoring
/// every shard from the latest committed checkpoint (Trainer::fit does); the other workers wait
/// for that restore and carry on from it.
struct StateLostError : Error {
  using Error::Error;
};

/// Replicas of an asynchronous run failed while the others trained on; `replicas` lists them.
struct ReplicaError : Error {
  ReplicaError(std::string const& what, std::vector<std::size_t> failed)
      : Error(what), replicas(std::move(failed)) {}
  std::vector<std::size_t> replicas;
};

/// Throws Error unless `timeout` (of the policy named `policy`) is positive.
inline void check_timeout(std::string_view policy, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    throw Error("convoy: " + std::string(policy) + "'s timeout is " +
                std::to_string(timeout.count()) + " ms; it must be positive");
  }
}

}  // namespace convoy
