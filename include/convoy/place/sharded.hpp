// place::Sharded<Rule>: the weights live on parameter-server shards (ps tasks), spread by a
// sharding rule (sharding_rules.hpp); each worker process runs one replica that pulls copies and
// pushes gradients, on the host or on a GPU of its own (worker_gpu). The placement says where
// every part of every variable lives (a ShardMap); a parameter-server communication policy moves
// the floats.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "../core/concepts.hpp"
#include "../core/variables.hpp"
#include "../exec/host.hpp"
#include "gpu.hpp"
#include "shard_map.hpp"
#include "sharded_fwd.hpp"
#include "sharding_rules.hpp"

namespace convoy::place {

namespace detail {

/// The concatenation of `*Parts`, as a std::string_view into static storage: a constant
/// expression, so it can name a policy (`static constexpr std::string_view name`). Pointers, not
/// references: nvcc 13 writes reference arguments back out as pointers in the host code it
/// generates, which then does not compile.
template <std::string_view const*... Parts>
struct joined {
  static constexpr auto chars = [] {
    std::array<char, (Parts->size() + ... + 0) + 1> text{};
    std::size_t at = 0;
    for (std::string_view part : {*Parts...}) {
      for (char c : part) text[at++] = c;
    }
    return text;  // the last char stays '\0', so data() is also a C string
  }();
  static constexpr std::string_view value{chars.data(), chars.size() - 1};
};

inline constexpr std::string_view sharded_open = "Sharded<";
inline constexpr std::string_view sharded_close = ">";

}  // namespace detail

/// Variables on parameter-server shards, spread by `Rule` (RoundRobin, GreedyBySize or
/// Partitioned, or any type that meets sharding_rule). One replica per worker process; the shards
/// hold the weights and workers pull copies of them. A regular value: knobs are `rule`,
/// `log_placement` and `worker_gpu`.
template <class Rule>  // GreedyBySize by default (sharded_fwd.hpp)
struct Sharded {
  static_assert(sharding_rule<Rule>,
                "convoy: place::Sharded<Rule> needs a regular Rule with 'static constexpr "
                "std::string_view name' and 'convoy::place::ShardMap assign(convoy::Variables "
                "const&, std::size_t shards) const'; see place::GreedyBySize in "
                "convoy/place/sharding_rules.hpp.");

  using policy_category = placement_tag;
  /// "Sharded<GreedyBySize>", built from Rule::name when compiling.
  static constexpr std::string_view name =
      detail::joined<&detail::sharded_open, &Rule::name, &detail::sharded_close>::value;
  /// The shards hold the weights; a worker pulls copies.
  static constexpr bool shared_weights = true;
  Rule rule{};
  bool log_placement = false;
  /// Where each worker's replica computes: the host when empty, else on this placement's GPU (its
  /// `device`, or the process's local rank, which a rank launcher sets and TF_CONFIG does not:
  /// there every worker of a machine takes GPU 0 unless told), falling back to the host in one
  /// line, or refusing under its `strict`, as place::Gpu does alone. The weights it pulls and the
  /// gradients it pushes pass through host memory. A ps task opens no device.
  std::optional<Gpu> worker_gpu{};
  /// Set by the engine before resolve() when the model computes on the host only (Gpu's). Leave
  /// it empty.
  std::string host_only_because{};

  using context_type = Gpu::context_type;
  /// The execution context the worker's replica computes in: worker_gpu's, or the host's.
  context_type context(std::size_t) const {
    return worker_gpu ? worker_gpu->context(0) : Gpu{}.context(0);
  }
  /// One replica per worker process; more workers means more processes.
  int replica_count() const { return 1; }
  /// Called by a worker only: opens worker_gpu's device (or falls back; place::Gpu::resolve).
  void resolve() {
    if (!worker_gpu) return;
    worker_gpu->host_only_because = host_only_because;
    worker_gpu->resolve();
  }
#if defined(CONVOY_WITH_CUDA)
  /// Moves the worker's arenas to its device (nothing on the host).
  void adopt(Variables& vars, std::size_t) const {
    if (worker_gpu) worker_gpu->adopt(vars, 0);
  }
#endif

  /// Which of `shards` ps tasks holds which part of which variable of `layout`. Deterministic.
  /// Throws Error when `shards` is 0.
  ShardMap shard(Variables const& layout, std::size_t shards) const {
    return rule.assign(layout, shards);
  }

  friend bool operator==(Sharded const&, Sharded const&) = default;
};
static_assert(placement_policy<Sharded<>>);
static_assert(gives_contexts<Sharded<>>);

}  // namespace convoy::place
