// place::ShardMap: which parameter-server shard holds which part of which variable. A sharding rule
// (sharding_rules.hpp) builds one; a parameter-server engine reads it to lay out each shard's own
// flat arena and to know where to push and pull every range of the model's arena.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../core/variables.hpp"

namespace convoy::place {

/// A contiguous part of one variable held by one shard. Offsets and sizes are in floats.
struct Piece {
  std::string variable;  ///< the variable's full name
  std::size_t shard;     ///< the ps task holding it
  std::size_t begin;     ///< first element, in the model's flat arena (Variables layout order)
  std::size_t end;       ///< one past the last element, same arena
  std::size_t offset;    ///< first element in its shard's own arena (set by ShardMap)
  std::size_t first = 0; ///< first element within its variable (set by ShardMap): its key by name

  std::size_t size() const { return end - begin; }
  friend bool operator==(Piece const&, Piece const&) = default;
};

namespace detail {

/// "/job:ps/task:3", the name TensorFlow gives parameter-server task 3.
inline std::string ps_task(std::size_t shard) {
  std::string name = "/job:ps/task:";
  name += std::to_string(shard);
  return name;
}

/// "512 B", "784 KiB", "4.0 MiB": bytes for a log line, in binary units.
inline std::string readable_bytes(std::size_t bytes) {
  constexpr double kib = 1024.0;
  char text[32];
  auto const b = static_cast<double>(bytes);
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  } else if (b < kib * kib) {
    std::snprintf(text, sizeof text, "%.0f KiB", b / kib);
  } else if (b < kib * kib * kib) {
    std::snprintf(text, sizeof text, "%.1f MiB", b / (kib * kib));
  } else {
    std::snprintf(text, sizeof text, "%.1f GiB", b / (kib * kib * kib));
  }
  return text;
}

}  // namespace detail

/// Which shard holds which part of which variable: a checked, immutable list of pieces in arena
/// order. Each shard's arena is its pieces concatenated in arena order, so a piece's `offset` is
/// the sum of the sizes of the same shard's earlier pieces. Regular and cheap to read from many
/// threads at once (every member function is const after construction).
class ShardMap {
 public:
  /// Checks `pieces` against `layout` and computes their offsets (the offsets given are ignored).
  /// The pieces may come in any order. Every element of every variable must be held by exactly one
  /// piece, each piece must lie inside the variable it names, and each shard must be below
  /// `shards`; a variable with no elements gets exactly one empty piece, so that it has a home.
  /// Throws Error when `shards` is 0, and Error naming the variable and the range otherwise.
  ShardMap(Variables const& layout, std::size_t shards, std::vector<Piece> pieces)
      : shards_(shards),
        variables_(layout.list().begin(), layout.list().end()),
        pieces_(std::move(pieces)),
        elements_(shards, 0) {
    if (shards_ == 0) {
      throw Error(
          "convoy: a ShardMap needs at least one parameter-server shard, got 0; start one "
          "or more ps tasks");
    }
    check_and_sort(layout);
    std::map<std::string_view, std::size_t> starts;
    for (auto const& v : variables_) starts.emplace(v.name, v.offset);
    for (auto& piece : pieces_) {
      piece.first = piece.begin - starts.at(piece.variable);
      piece.offset = elements_[piece.shard];
      elements_[piece.shard] += piece.size();
    }
  }

  /// The number of parameter-server shards (ps tasks) the map spreads the variables over.
  std::size_t shards() const { return shards_; }

  /// Every piece, in arena order (by variable in layout order, then by begin).
  std::span<Piece const> pieces() const { return pieces_; }

  /// The pieces `shard` holds, in arena order, which is also their order in the shard's arena.
  /// Throws Error when `shard` >= shards().
  std::vector<Piece const*> pieces_of(std::size_t shard) const {
    check_shard(shard);
    std::vector<Piece const*> out;
    for (auto const& piece : pieces_) {
      if (piece.shard == shard) out.push_back(&piece);
    }
    return out;
  }

  /// Floats `shard` holds: the size of its arena. Throws Error when `shard` >= shards().
  std::size_t elements_of(std::size_t shard) const {
    check_shard(shard);
    return elements_[shard];
  }
  /// Bytes `shard` holds. Throws Error when `shard` >= shards().
  std::size_t bytes_of(std::size_t shard) const { return elements_of(shard) * sizeof(float); }

  /// The placement log (TensorFlow's log_device_placement for a parameter server): a heading
  /// naming `rule_name`, one line per variable with its shard, or its shards and element ranges
  /// (relative to the variable, and in rows when whole) when it is partitioned, then one line per
  /// shard with its total bytes. Every line starts with "convoy placement: ".
  void print(std::ostream& out, std::string_view rule_name) const {
    std::size_t total = 0;
    for (auto const& v : variables_) total += v.size;
    out << "convoy placement: " << rule_name << " puts " << variables_.size() << " variable"
        << (variables_.size() == 1 ? "" : "s") << " ("
        << detail::readable_bytes(total * sizeof(float)) << ") on " << shards_ << " ps shard"
        << (shards_ == 1 ? "" : "s") << "\n";
    auto piece = pieces_.begin();
    for (auto const& v : variables_) {
      auto const first = piece;
      while (piece != pieces_.end() && piece->variable == v.name) ++piece;
      out << "convoy placement: " << v.name << " " << to_string(v.shape) << " -> ";
      if (piece - first == 1) {
        out << detail::ps_task(first->shard) << "\n";
        continue;
      }
      std::size_t const row = v.shape.empty() || v.shape[0] == 0 ? v.size : v.size / v.shape[0];
      for (auto p = first; p != piece; ++p) {
        std::size_t const begin = p->begin - v.offset, end = p->end - v.offset;
        out << (p == first ? "" : ", ") << detail::ps_task(p->shard) << " elements [" << begin
            << ", " << end << ")";
        if (row > 0 && begin % row == 0 && end % row == 0) {
          out << " (rows [" << begin / row << ", " << end / row << "))";
        }
      }
      out << "\n";
    }
    for (std::size_t s = 0; s < shards_; ++s) {
      std::size_t held = 0;
      std::string const* last = nullptr;
      for (auto const& p : pieces_) {
        if (p.shard != s || (last != nullptr && *last == p.variable)) continue;
        ++held;
        last = &p.variable;
      }
      out << "convoy placement: " << detail::ps_task(s) << " holds "
          << detail::readable_bytes(bytes_of(s)) << " in " << held << " variable"
          << (held == 1 ? "" : "s") << "\n";
    }
  }

  /// Same shard count and the same pieces in the same places.
  friend bool operator==(ShardMap const& a, ShardMap const& b) {
    return a.shards_ == b.shards_ && a.pieces_ == b.pieces_;
  }

 private:
  void check_shard(std::size_t shard) const {
    if (shard >= shards_) {
      throw Error("convoy: shard " + std::to_string(shard) + " does not exist; the map has " +
                  std::to_string(shards_) + " (0-" + std::to_string(shards_ - 1) + ")");
    }
  }

  static std::string range(std::size_t begin, std::size_t end) {
    std::string text = "[";  // appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) there
    text += std::to_string(begin);
    text += ", ";
    text += std::to_string(end);
    text += ")";
    return text;
  }

  // Sorts the pieces into arena order and checks that they tile every variable exactly.
  void check_and_sort(Variables const& layout) {
    std::vector<std::pair<std::size_t, std::size_t>> keys;  // (variable index, piece index)
    keys.reserve(pieces_.size());
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      auto const& p = pieces_[i];
      auto const id = layout.find(p.variable);
      if (!id) {
        throw Error("convoy: a shard piece " + range(p.begin, p.end) + " names '" + p.variable +
                    "', which is not a variable of '" + layout.scope() + "'");
      }
      auto const& v = layout[*id];
      std::string const where = "the piece " + range(p.begin, p.end) + " of '" + p.variable + "'";
      if (p.shard >= shards_) {
        throw Error("convoy: " + where + " is on shard " + std::to_string(p.shard) +
                    ", but there are only " + std::to_string(shards_) + " shards");
      }
      if (p.begin > p.end || p.begin < v.offset || p.end > v.offset + v.size) {
        throw Error("convoy: " + where + " is not inside the variable, which holds elements " +
                    range(v.offset, v.offset + v.size) + " of the arena");
      }
      if (p.begin == p.end && v.size > 0) {
        throw Error("convoy: " + where +
                    " is empty; only a variable with no elements has an "
                    "empty piece");
      }
      keys.emplace_back(id->index, i);
    }
    // Arena order: by variable, then by begin. Variables are in increasing offset order, and
    // sorting by index keeps empty variables that share an offset apart.
    std::sort(keys.begin(), keys.end(), [&](auto const& a, auto const& b) {
      return a.first != b.first ? a.first < b.first
                                : pieces_[a.second].begin < pieces_[b.second].begin;
    });
    std::vector<Piece> sorted;
    sorted.reserve(pieces_.size());
    for (auto const& key : keys) sorted.push_back(std::move(pieces_[key.second]));
    pieces_ = std::move(sorted);

    auto piece = pieces_.begin();
    for (auto const& v : variables_) {
      std::size_t covered = v.offset;  // every element of v before this one is held once
      std::size_t count = 0;
      for (; piece != pieces_.end() && piece->variable == v.name; ++piece, ++count) {
        if (piece->begin > covered) {
          throw Error("convoy: elements " + range(covered, piece->begin) + " of '" + v.name +
                      "' are held by no shard");
        }
        if (piece->begin < covered) {
          throw Error("convoy: elements " + range(piece->begin, std::min(covered, piece->end)) +
                      " of '" + v.name + "' are held twice");
        }
        covered = piece->end;
      }
      if (covered < v.offset + v.size) {
        throw Error("convoy: elements " + range(covered, v.offset + v.size) + " of '" + v.name +
                    "' are held by no shard");
      }
      if (count == 0) {
        throw Error("convoy: '" + v.name + "' (elements " + range(v.offset, v.offset) +
                    ", none) has no piece; give it one empty piece on any shard");
      }
      if (v.size == 0 && count > 1) {
        throw Error("convoy: '" + v.name + "' (elements " + range(v.offset, v.offset) +
                    ", none) has " + std::to_string(count) + " pieces; it needs exactly one");
      }
    }
  }

  std::size_t shards_;
  std::vector<Variable> variables_;  // names, shapes and ranges, for print()
  std::vector<Piece> pieces_;        // arena order
  std::vector<std::size_t> elements_;
};

}  // namespace convoy::place
