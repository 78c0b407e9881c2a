// Checkpoints written in parts. In a parameter-server cluster each shard writes the pieces of the
// variables it holds, with their optimizer slots, by variable name, to a part file of its own;
// then the chief writes the checkpoint file itself, a manifest naming every part with the save's
// nonce. Each file is written atomically and checksummed, and the manifest is the commit: until
// it is renamed into place its parts belong to no checkpoint, so a kill at any moment leaves the
// previous checkpoint whole. load_checkpoint() reads a manifest like any checkpoint and
// assembles the variables by name, so a checkpoint of N shards restores onto any number.
//
// The parts lie beside the manifest: every task that writes one must see the same directory (a
// shared file system across machines, as TensorFlow's checkpoints assume).
#pragma once

#include <algorithm>
#include <cereal/archives/portable_binary.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "files.hpp"
#include "framed_file.hpp"
#include "records.hpp"

namespace convoy::io {

// The functions here that use cereal's archives are templates (`template <class = void>`) only so
// that a file that never calls them never instantiates the archives for them: a non-template inline
// function instantiates what its body uses in every file that includes it (docs/compile_time.md).

/// One shard's pieces of variables, by name, to be written without copying them: a piece is
/// `size` elements of `variable` from element `first` on (a whole variable, or whole rows of one).
struct PartPieceView {
  std::string const* variable;
  std::uint64_t first = 0;
  std::span<float const> weights;
  std::vector<std::span<float const>> slots{};  ///< one per optimizer slot, in slot_names order
};

/// What a shard writes: its pieces, the save's nonce (which binds the part to one manifest) and
/// where it comes from, for messages.
struct PartView {
  std::int64_t step = 0;
  std::uint64_t shard = 0, shards = 1, nonce = 0;
  std::string optimizer;
  std::vector<std::string> slot_suffixes{};  ///< "/m", ... as optim::slot_suffix gives them
  std::vector<PartPieceView> pieces{};
};

/// A checkpoint's manifest: the counters, data seed and optimizer as in every checkpoint (weights
/// and slots empty), every variable's shape, and its parts' file names, all from one save.
struct Manifest {
  std::map<std::string, std::vector<std::uint64_t>> shapes;
  std::vector<std::string> parts;
  std::uint64_t nonce = 0;
};

namespace detail {

inline constexpr FramedKind part_kind{"CONVOYCP", 1, "checkpoint part"};
inline constexpr FramedKind manifest_kind{"CONVOYCM", 2, "checkpoint", 1};
inline constexpr std::uint32_t manifest_regroup_since = 2;  // as checkpoint_kind's 3
// A manifest names at most this many parts, and a part at most this many pieces and slots.
inline constexpr std::size_t max_parts = 65536;
inline constexpr std::size_t max_pieces = std::size_t{1} << 20;
inline constexpr std::size_t max_slots = 16;

/// "checkpoint-0000000042.part-1-of-2.convoy.part": never taken for a checkpoint by listing.
inline std::string part_file_name(std::int64_t step, std::uint64_t shard, std::uint64_t shards) {
  std::string digits = std::to_string(step);
  if (digits.size() < 10) digits.insert(0, 10 - digits.size(), '0');
  return "checkpoint-" + digits + ".part-" + std::to_string(shard) + "-of-" +
         std::to_string(shards) + ".convoy.part";
}

inline bool is_part_file(std::string const& name) {
  return name.starts_with("checkpoint-") && name.ends_with(".convoy.part");
}

template <class Archive>
void save_part(Archive& ar, PartView const& p) {
  ar(p.step, p.shard, p.shards, p.nonce, p.optimizer, p.slot_suffixes,
     cereal::make_size_tag(static_cast<cereal::size_type>(p.pieces.size())));
  for (auto const& piece : p.pieces) {
    ar(*piece.variable, piece.first, SpanView<float>{piece.weights});
    for (auto const& slot : piece.slots) ar(SpanView<float>{slot});
  }
}

template <class Archive>
void save_manifest(Archive& ar, Manifest const& m) {
  ar(m.nonce, cereal::make_size_tag(static_cast<cereal::size_type>(m.shapes.size())));
  for (auto const& [name, shape] : m.shapes) ar(name, shape);
  ar(m.parts);
}

// A count read from a binary archive, refused above `max` before anything is allocated.
template <class Archive>
std::size_t load_count(Archive& ar, char const* what, std::size_t max) {
  cereal::size_type count = 0;
  ar(cereal::make_size_tag(count));
  if (count > max) {
    throw LoadError(std::string(what) + " claims " + std::to_string(count) +
                    " entries, more than the " + std::to_string(max) + " allowed");
  }
  return static_cast<std::size_t>(count);
}

template <class Archive>
void load_manifest(Archive& ar, Manifest& m) {
  ar(m.nonce);
  auto const n = load_count(ar, "shapes", max_pieces);
  for (std::size_t i = 0; i < n; ++i) {
    std::string name;
    std::vector<std::uint64_t> shape;
    load_sequence(ar, name);
    load_sequence(ar, shape);
    m.shapes.emplace(std::move(name), std::move(shape));
  }
  m.parts.resize(load_count(ar, "parts", max_parts));
  for (auto& part : m.parts) load_sequence(ar, part);
}

// Reads `framed`'s payload with `read(archive)`; a payload that cannot be parsed becomes the
// file's own error, naming it, and bytes left over after it are refused.
template <class Framed, class Read>
void parse_payload(Framed& framed, Read&& read) {
  try {
    cereal::PortableBinaryInputArchive ar(framed.in);
    read(ar);
  } catch (cereal::Exception const& e) {
    throw framed.fail("has a payload that cannot be parsed (cereal: " + std::string(e.what()) +
                      ")");
  } catch (LoadError const& e) {
    throw framed.fail("has a payload that cannot be parsed: " + std::string(e.what()));
  }
  framed.require_consumed();
}

// A variable being put together from pieces: its weights, slots, and which elements came.
struct Assembly {
  Tensor weights;
  std::vector<Tensor> slots;
  std::vector<char> filled;
};

// Reads one part file into `vars`, checking that it belongs to this save and fits the shapes.
template <class = void>
void assemble_part(std::filesystem::path const& file, Manifest const& m,
                   std::optional<std::vector<std::string>>& slot_suffixes,
                   std::map<std::string, Assembly>& vars) {
  auto framed = check_framed<CheckpointError>(
      open_for_reading<CheckpointError>(file, "checkpoint part"), file, part_kind);
  parse_payload(framed, [&](auto& ar) {
    std::int64_t step = 0;
    std::uint64_t shard = 0, shards = 0, nonce = 0;
    std::string optimizer;
    std::vector<std::string> part_suffixes;
    ar(step, shard, shards, nonce);
    load_sequence(ar, optimizer);
    part_suffixes.resize(load_count(ar, "slot names", max_slots));
    for (auto& s : part_suffixes) load_sequence(ar, s);
    if (nonce != m.nonce) {
      throw framed.fail("belongs to another save than its checkpoint's (a part left by a save "
                        "that never committed)");
    }
    if (!slot_suffixes) {  // the first part read names the slots; the others must agree
      slot_suffixes = part_suffixes;
      for (auto& [name, v] : vars) v.slots.assign(part_suffixes.size(), Tensor(v.weights.shape));
    }
    auto const& suffixes = *slot_suffixes;
    if (part_suffixes != suffixes) throw framed.fail("holds other optimizer slots than its peers");
    auto const pieces = load_count(ar, "pieces", max_pieces);
    for (std::size_t i = 0; i < pieces; ++i) {
      std::string name;
      std::uint64_t first = 0;
      std::vector<float> values;
      load_sequence(ar, name);
      ar(first);
      load_sequence(ar, values);
      auto const it = vars.find(name);
      if (it == vars.end()) throw framed.fail("holds '" + name + "', which its checkpoint lacks");
      auto& v = it->second;
      if (first > v.filled.size() || values.size() > v.filled.size() - first) {
        throw framed.fail("holds elements " + std::to_string(first) + " to " +
                          std::to_string(first + values.size()) + " of '" + name + "', which has " +
                          std::to_string(v.filled.size()));
      }
      auto const at = static_cast<std::ptrdiff_t>(first);
      auto const n = static_cast<std::ptrdiff_t>(values.size());
      if (std::any_of(v.filled.begin() + at, v.filled.begin() + at + n, [](char c) { return c; })) {
        throw framed.fail("holds elements of '" + name + "' that another part holds too");
      }
      std::fill(v.filled.begin() + at, v.filled.begin() + at + n, 1);
      std::copy(values.begin(), values.end(), v.weights.data.begin() + at);
      for (std::size_t s = 0; s < suffixes.size(); ++s) {
        load_sequence(ar, values);
        if (values.size() != static_cast<std::size_t>(n)) {
          throw framed.fail("holds a slot of '" + name + "' of another size than its weights");
        }
        std::copy(values.begin(), values.end(), v.slots[s].data.begin() + at);
      }
    }
  });
}

// True when `file` starts with `kind`'s magic (false when it cannot be read: the loader says why).
// Only a regular file is opened: opening a FIFO would block.
inline bool starts_with_magic(std::filesystem::path const& file, FramedKind const& kind) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  std::ifstream in(file, std::ios::binary);
  std::string magic(kind.magic.size(), '\0');
  return in.read(magic.data(), static_cast<std::streamsize>(magic.size())) && magic == kind.magic;
}

// Reads the parts `m` names from `dir` and puts every variable and slot together by name into
// `weights` and `slots`. Throws CheckpointError naming what is wrong: a part missing, damaged,
// from another save, or elements of a variable that no part or two parts hold.
template <class = void>
void assemble(std::filesystem::path const& dir, Manifest const& m,
              std::map<std::string, Tensor>& weights, std::map<std::string, Tensor>& slots) {
  // Every element lies in a part as 4 bytes at least: shapes larger than the parts are forged,
  // and refused before anything is allocated for them.
  std::uintmax_t bytes = 0;
  for (auto const& part : m.parts) {
    if (!is_part_file(part) || part.find('/') != std::string::npos) {
      throw CheckpointError("part '" + part + "' is not the name of a checkpoint part");
    }
    std::error_code ec;
    auto const size = std::filesystem::file_size(dir / part, ec);
    if (ec) throw CheckpointError("part '" + (dir / part).string() + "': " + ec.message());
    bytes += size;
  }
  std::map<std::string, Assembly> vars;
  std::uintmax_t elements = 0;
  for (auto const& [name, dims] : m.shapes) {
    Shape shape(dims.begin(), dims.end());
    std::uintmax_t n = 1;
    for (auto d : dims) n = d == 0 ? 0 : (n > bytes / d ? bytes + 1 : n * d);
    elements += n;
    if (elements > bytes / sizeof(float)) {
      throw CheckpointError("its shapes hold more elements than its parts' " +
                            std::to_string(bytes) + " bytes can");
    }
    vars.emplace(name, Assembly{Tensor(shape), {}, std::vector<char>(element_count(shape), 0)});
  }
  std::optional<std::vector<std::string>> suffixes;
  for (auto const& part : m.parts) assemble_part(dir / part, m, suffixes, vars);
  for (auto& [name, v] : vars) {
    auto const missing = static_cast<std::size_t>(std::count(v.filled.begin(), v.filled.end(), 0));
    if (missing > 0) {
      throw CheckpointError("no part holds " + std::to_string(missing) + " of the " +
                            std::to_string(v.filled.size()) + " elements of '" + name + "'");
    }
    for (std::size_t s = 0; s < v.slots.size(); ++s) {
      slots.emplace(name + (*suffixes)[s], std::move(v.slots[s]));
    }
    weights.emplace(name, std::move(v.weights));
  }
}

}  // namespace detail

/// Writes one shard's part of a checkpoint into `dir` (created when needed), atomically, and
/// returns its file name. Blocks on file I/O. Throws CheckpointError naming the path and the
/// system's reason when it cannot be written.
template <class = void>
std::string save_checkpoint_part(std::filesystem::path const& dir, PartView const& part) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw CheckpointError("convoy: cannot create checkpoint directory '" + dir.string() +
                          "': " + ec.message());
  }
  auto const name = detail::part_file_name(part.step, part.shard, part.shards);
  detail::write_atomically(dir / name, [&](std::ostream& out) {
    detail::write_framed(out, detail::part_kind, [&](std::ostream& payload) {
      cereal::PortableBinaryOutputArchive ar(payload);
      detail::save_part(ar, part);
    });
  });
  return name;
}

}  // namespace convoy::io
