// The rules place::Sharded<Rule> spreads variables over parameter-server shards with: RoundRobin
// (TensorFlow's replica_device_setter), GreedyBySize (the default: balance bytes) and Partitioned
// (cut the large variables by rows over every shard, balance the rest).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/variables.hpp"
#include "shard_map.hpp"

namespace convoy::place {

/// A sharding rule: `static constexpr std::string_view name` and
/// `ShardMap assign(Variables const&, std::size_t shards) const`. Rules are small regular values,
/// and assign() is deterministic: the same layout and shard count give the same map.
template <class R>
concept sharding_rule = std::regular<R> && requires(R const& rule, Variables const& layout) {
  { R::name } -> std::convertible_to<std::string_view>;
  { rule.assign(layout, std::size_t{1}) } -> std::same_as<ShardMap>;
};

namespace detail {

/// Throws Error unless there is at least one shard to place on.
inline void check_shard_count(std::string_view rule, std::size_t shards) {
  if (shards == 0) {
    throw Error("convoy: " + std::string(rule) +
                " cannot place variables on 0 parameter-server shards; start one or more ps "
                "tasks");
  }
}

/// The whole of variable `v` as one piece on `shard`.
inline Piece whole(Variable const& v, std::size_t shard) {
  return Piece{v.name, shard, v.offset, v.offset + v.size, 0};
}

/// The shard with the fewest elements so far; the lowest index among equals.
inline std::size_t lightest(std::vector<std::size_t> const& load) {
  return static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
}

/// Places the variables at `indices` of `list` whole, largest first (ties: layout order), each on
/// the shard with the fewest elements so far (ties: lowest index). Adds to `load` and `pieces`.
inline void place_greedily(std::span<Variable const> list, std::vector<std::size_t> indices,
                           std::vector<std::size_t>& load, std::vector<Piece>& pieces) {
  std::stable_sort(indices.begin(), indices.end(),
                   [&](std::size_t a, std::size_t b) { return list[a].size > list[b].size; });
  for (std::size_t i : indices) {
    std::size_t const shard = lightest(load);
    pieces.push_back(whole(list[i], shard));
    load[shard] += list[i].size;
  }
}

}  // namespace detail

/// Variable i goes to shard i % shards, in layout order: TensorFlow's replica_device_setter with
/// its default round-robin strategy. Ignores sizes, so a model whose large variables fall on the
/// same residue puts them all on one shard. Throws Error when `shards` is 0.
struct RoundRobin {
  static constexpr std::string_view name = "RoundRobin";

  ShardMap assign(Variables const& layout, std::size_t shards) const {
    detail::check_shard_count(name, shards);
    std::vector<Piece> pieces;
    auto const list = layout.list();
    for (std::size_t i = 0; i < list.size(); ++i)
      pieces.push_back(detail::whole(list[i], i % shards));
    return ShardMap(layout, shards, std::move(pieces));
  }
  friend bool operator==(RoundRobin const&, RoundRobin const&) = default;
};

/// The default: each variable whole, largest first (ties: layout order), on the shard holding the
/// fewest bytes so far (ties: lowest index); TensorFlow's GreedyLoadBalancingStrategy with byte
/// size as the load. Deterministic. No shard ends more than the largest variable above the
/// lightest. Throws Error when `shards` is 0.
struct GreedyBySize {
  static constexpr std::string_view name = "GreedyBySize";

  ShardMap assign(Variables const& layout, std::size_t shards) const {
    detail::check_shard_count(name, shards);
    std::vector<std::size_t> all(layout.size()), load(shards, 0);
    std::iota(all.begin(), all.end(), std::size_t{0});
    std::vector<Piece> pieces;
    detail::place_greedily(layout.list(), std::move(all), load, pieces);
    return ShardMap(layout, shards, std::move(pieces));
  }
  friend bool operator==(GreedyBySize const&, GreedyBySize const&) = default;
};

/// A variable of at least `min_bytes` is cut along its first dimension into `shards` contiguous
/// parts of whole rows, whose row counts differ by at most one (the larger parts first); a
/// variable with fewer rows than shards is cut into one part per row. The parts of one variable go
/// to distinct shards, the lightest first (ties: lowest index), so with equal loads part p lands
/// on shard p. The cut variables are placed in layout order; then the others go whole, as
/// GreedyBySize places them, onto the loads the parts left. An empty or scalar variable is never
/// cut. Throws Error when `shards` is 0.
struct Partitioned {
  static constexpr std::string_view name = "Partitioned";
  std::size_t min_bytes = std::size_t{1} << 20;  ///< smallest variable that is cut, in bytes

  ShardMap assign(Variables const& layout, std::size_t shards) const {
    detail::check_shard_count(name, shards);
    auto const list = layout.list();
    std::vector<std::size_t> load(shards, 0), rest;
    std::vector<Piece> pieces;
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto const& v = list[i];
      if (v.size == 0 || v.shape.empty() || v.size * sizeof(float) < min_bytes) {
        rest.push_back(i);
        continue;
      }
      std::size_t const rows = v.shape[0], row = v.size / rows;
      std::size_t const parts = std::min(shards, rows);
      // Shards by load, lightest first; stable, so equal loads keep index order.
      std::vector<std::size_t> order(shards);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return load[a] < load[b]; });
      std::size_t first_row = 0;
      for (std::size_t p = 0; p < parts; ++p) {
        std::size_t const part_rows = rows / parts + (p < rows % parts ? 1 : 0);
        std::size_t const begin = v.offset + first_row * row;
        std::size_t const end = begin + part_rows * row;
        pieces.push_back(Piece{v.name, order[p], begin, end, 0});
        load[order[p]] += end - begin;
        first_row += part_rows;
      }
    }
    detail::place_greedily(list, std::move(rest), load, pieces);
    return ShardMap(layout, shards, std::move(pieces));
  }
  friend bool operator==(Partitioned const&, Partitioned const&) = default;
};

static_assert(sharding_rule<RoundRobin>);
static_assert(sharding_rule<GreedyBySize>);
static_assert(sharding_rule<Partitioned>);

}  // namespace convoy::place
