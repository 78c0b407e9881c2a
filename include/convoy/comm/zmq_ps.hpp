// comm::ZmqPs: a parameter-server cluster over ZeroMQ TCP. Variables live on the ps tasks' shards
// (place::Sharded decides which shard holds what); workers pull weights and push gradients, and
// each shard runs the optimizer on its variables under the Sync policy's rules. Every task runs the
// same program: its role comes from the Cluster, by default Cluster::from_environment() (TF_CONFIG
// or a launcher's variables); a program that takes the TensorFlow example flags passes
// Cluster::resolve(argc, argv) as ZmqPs::cluster. Link convoy::zmq_ps to use it.
#pragma once

#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "../cluster.hpp"
#include "../core/concepts.hpp"
#include "zmq_ps/engine.hpp"

namespace convoy::comm {

struct ZmqPs {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "ZmqPs";
  static constexpr bool serves_shards = true;  ///< only with place::Sharded
  /// This task's cluster; empty: resolved from the environment (Cluster::from_environment()).
  std::optional<Cluster> cluster{};
  /// How long a worker waits for a shard to come up (it logs the shard it waits for meanwhile). A
  /// shard host name the resolver does not know stops the worker at once, with a ClusterError.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  /// The host a ps task binds; empty: the host of its own address in the cluster spec (a name is
  /// looked up and its IPv4 address bound; "*" binds every interface).
  std::string bind_host{};
  std::ostream* log = &std::clog;  ///< serving and waiting messages; null: none
  /// CurveZMQ key files, or plaintext (docs/parameter_server.md#security). A ps task bound to a
  /// non-loopback address without keys refuses to start unless `allow_plaintext` is set.
  using Security = zmq_ps::Security;
  Security security{};
  /// ZeroMQ heartbeats: a ps task and a worker notice a peer silent this long (a stopped process,
  /// a cut network), drop its connection and log it by role and index; 0: off.
  std::chrono::milliseconds heartbeat{0};
  /// The open connections a ps task keeps; one more is closed at once and logged. 0: its file
  /// limit (ulimit -n) less the descriptors it keeps for itself (64), so that idle connections never
  /// take those a checkpoint needs. A limit too low for the cluster is said at start.
  std::size_t max_connections = 0;
  /// A ps task's run() (Trainer::fit) ends its process with status 0 once its shard is done (every
  /// worker said goodbye), as TensorFlow's server.join() never returns: the code after fit, which
  /// evaluates and saves a model the ps task holds one shard of, runs on the workers only, so one
  /// program serves every task. false: run() returns on the ps task too (its counters() are the
  /// shard's), and reading or writing the weights there throws Error.
  bool exit_after_serving = true;
  /// Where a ps task's shard runs. automatic: on one CPU when the cluster's tasks on its host
  /// outnumber the CPUs it may use (a test or a small machine: shards take the CPUs in turn), so
  /// that the frames its threads hand each other stay in one core's cache; else, and with `any`,
  /// wherever the scheduler puts it. `one`: always on one CPU. Its first log line says which.
  using ShardCpu = zmq_ps::ShardCpu;
  ShardCpu shard_cpu = ShardCpu::automatic;

  template <class Model, class Placement, class Sync>
  using engine = zmq_ps::Engine<Model, Placement, Sync>;

  zmq_ps::Options options() const {
    return {cluster,   connect_timeout, bind_host,          log,      security,
            heartbeat, max_connections, exit_after_serving, shard_cpu};
  }
};
static_assert(communication_policy<ZmqPs>);

}  // namespace convoy::comm
