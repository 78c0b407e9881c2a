// Checkpoints: everything a run needs to resume (weights, optimizer slots, steps, data order, RNG),
// in one file with a magic, a format version, a length and a CRC-32, written atomically so a crash
// never leaves a half-written checkpoint; a damaged or invalid one is refused with a message saying
// how, and loading falls back to an older one. Stale temporaries of dead writers can be removed.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cereal/archives/portable_binary.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "../core/tensor.hpp"
#include "checkpoint_parts.hpp"
#include "files.hpp"
#include "framed_file.hpp"
#include "records.hpp"

namespace convoy::io {

// The functions here that use cereal's archives are templates (`template <class = void>`) only so
// that a file that never calls them never instantiates the archives for them: a non-template inline
// function instantiates what its body uses in every file that includes it (docs/compile_time.md).

/// The state of a run at one global step: the strategy's Snapshot and the sampler's seed, so the
/// data order resumes unchanged.
struct Checkpoint {
  Snapshot state;
  std::uint64_t data_seed = 0;
};

namespace detail {

// Counters and steps above 2^53 are refused: no run comes near, and every value up to it is exact
// as a double, so a corrupt or forged count cannot pass for a real one or overflow arithmetic.
inline constexpr std::int64_t checkpoint_max_count = std::int64_t{1} << 53;
// Replicas (local steps, generators) a checkpoint may hold.
inline constexpr std::size_t checkpoint_max_replicas = 65536;

// Reads a vector of strings saved by cereal. In a binary archive cereal's own load would resize to
// whatever count the bytes claim; here a count above `max_count` is refused before any allocation
// and each string grows only as its bytes arrive (load_sequence).
template <class Archive>
void load_strings(Archive& ar, char const* name, std::vector<std::string>& out,
                  std::size_t max_count) {
  if constexpr (reads_binary<Archive>) {
    cereal::size_type count = 0;
    ar(cereal::make_size_tag(count));
    if (count > max_count) {
      throw LoadError(std::string(name) + " claims " + std::to_string(count) +
                      " entries, more than the " + std::to_string(max_count) + " allowed");
    }
    out.clear();
    out.resize(static_cast<std::size_t>(count));
    for (auto& text : out) load_sequence(ar, text);
  } else {
    ar(cereal::make_nvp(name, out));
  }
}

}  // namespace detail

/// cereal save for Checkpoint; the maps go as NamedTensor records, as in weights files.
template <class Archive>
void save(Archive& ar, Checkpoint const& c) {
  auto const& s = c.state;
  detail::save_records(ar, "weights", detail::record_views(s.weights));
  ar(cereal::make_nvp("optimizer", s.optimizer));
  detail::save_records(ar, "slots", detail::record_views(s.slots));
  ar(cereal::make_nvp("optimizer_updates", s.optimizer_updates),
     cereal::make_nvp("global_step", s.counters.global_step),
     cereal::make_nvp("applied", s.counters.applied),
     cereal::make_nvp("dropped", s.counters.dropped),
     cereal::make_nvp("local_steps", s.counters.local_steps),
     cereal::make_nvp("generators", s.generators), cereal::make_nvp("data_seed", c.data_seed));
}

/// cereal load for Checkpoint. Throws cereal::Exception on unparsable bytes and LoadError on a
/// bad record or more than 65,536 generators; never allocates more than the bytes present (plus a
/// few MiB) in a binary archive. Does not validate the values: load_checkpoint() does.
template <class Archive>
void load(Archive& ar, Checkpoint& c) {
  auto& s = c.state;
  detail::load_records(ar, "weights", s.weights);
  detail::load_field(ar, "optimizer", s.optimizer);
  detail::load_records(ar, "slots", s.slots);
  ar(cereal::make_nvp("optimizer_updates", s.optimizer_updates),
     cereal::make_nvp("global_step", s.counters.global_step),
     cereal::make_nvp("applied", s.counters.applied),
     cereal::make_nvp("dropped", s.counters.dropped));
  detail::load_field(ar, "local_steps", s.counters.local_steps);
  detail::load_strings(ar, "generators", s.generators, detail::checkpoint_max_replicas);
  ar(cereal::make_nvp("data_seed", c.data_seed));
}

namespace detail {

// The header of every checkpoint (see detail::check_framed). Version 2: the payload is a Snapshot
// and the data seed; version 3 adds what a group that re-formed counts (the counters' data origin
// and retired batches) after them, read as all zero from a version 2 file: a run never changed.
inline constexpr FramedKind checkpoint_kind{"CONVOYCK", 3, "checkpoint", 2};
inline constexpr std::uint32_t checkpoint_regroup_since = 3;

// Saves (Counters const) or loads (Counters) them, as cereal's serialize does.
template <class Archive, class C>
void regroup_counts(Archive& ar, C& c) {
  ar(c.data.step, c.data.row, c.data.batch, c.data.replicas, c.retired);
}
inline constexpr std::string_view checkpoint_prefix = "checkpoint-";
inline constexpr std::string_view checkpoint_suffix = ".convoy";

// The step a checkpoint file name holds, or nullopt for any other name (temporary files included).
inline std::optional<std::int64_t> checkpoint_step(std::filesystem::path const& file) {
  std::string const name = file.filename().string();
  if (name.size() <= checkpoint_prefix.size() + checkpoint_suffix.size() ||
      !name.starts_with(checkpoint_prefix) || !name.ends_with(checkpoint_suffix)) {
    return std::nullopt;
  }
  char const* first = name.data() + checkpoint_prefix.size();
  char const* last = name.data() + name.size() - checkpoint_suffix.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  std::int64_t step = 0;
  auto const [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc{} || end != last) return std::nullopt;
  return step;
}

// Every checkpoint file in `dir` with its step, highest step first; empty when `dir` is absent.
inline std::vector<std::pair<std::int64_t, std::filesystem::path>> list_checkpoints(
    std::filesystem::path const& dir) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return found;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    throw CheckpointError("convoy: cannot list checkpoint directory '" + dir.string() +
                          "': " + ec.message());
  }
  for (auto const& entry : it) {
    // A symbolic link is listed whatever it leads to (a loop, nothing, a FIFO), so that loading it
    // says what it is, and the fallback past it costs a line, instead of its being skipped.
    if (!entry.is_regular_file(ec) && !entry.is_symlink(ec)) continue;
    if (auto step = checkpoint_step(entry.path())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end(),
            [](auto const& a, auto const& b) { return a.first > b.first; });
  return found;
}

// "" for a count in [0, 2^53], else what is wrong with it.
inline std::string count_problem(std::string const& field, std::int64_t value) {
  if (value < 0) return field + " is " + std::to_string(value) + ", below 0";
  if (value > checkpoint_max_count) return field + " is " + std::to_string(value) + ", above 2^53";
  return {};
}

// "" when every value of `tensor` is finite, else the first that is not.
inline std::string finite_problem(std::string const& field, Tensor const& tensor) {
  auto const bad = std::find_if(tensor.data.begin(), tensor.data.end(),
                                [](float v) { return !std::isfinite(v); });
  if (bad == tensor.data.end()) return {};
  return field + " holds " + std::to_string(*bad) + " at index " +
         std::to_string(bad - tensor.data.begin()) + "; a checkpoint holds only finite values";
}

// "" when `text` is exactly one std::mt19937_64 state as operator<< writes it.
inline std::string generator_problem(std::string const& field, std::string const& text) {
  std::istringstream in(text);
  std::mt19937_64 generator;
  in >> generator;
  if (!in) return field + " is not a std::mt19937_64 state";
  if (in.peek() != std::char_traits<char>::eof()) {
    return field + " has text left after its std::mt19937_64 state";
  }
  return {};
}

// What is wrong with what a re-formed group counts (the data origin, the retired batches), or "".
inline std::string regroup_problem(Counters const& n) {
  for (auto const& [field, value] : {std::pair<char const*, std::int64_t>{"data_step", n.data.step},
                                     {"data_row", n.data.row},
                                     {"data_batch", n.data.batch},
                                     {"data_replicas", n.data.replicas}}) {
    if (auto problem = count_problem(field, value); !problem.empty()) return problem;
  }
  // retired goes below 0 where a global batch kept is split over more replicas than the run
  // began with (each draws less than the plan's batch); the batches in all never do.
  if (n.retired > checkpoint_max_count) {
    return "retired is " + std::to_string(n.retired) + ", above 2^53";
  }
  // The replicas' steps, each in [0, 2^53] (checked before), must cover a retired below 0.
  std::int64_t covered = n.retired;
  for (std::size_t r = 0; covered < 0 && r < n.local_steps.size(); ++r) covered += n.local_steps[r];
  if (covered < 0) {
    return "retired is " + std::to_string(n.retired) + ", more below 0 than the replicas' steps";
  }
  if (n.data.step > n.global_step) {
    return "data_step is " + std::to_string(n.data.step) + ", past global_step (" +
           std::to_string(n.global_step) + ")";
  }
  if (n.data.batch < n.data.replicas) {
    return "data_batch is " + std::to_string(n.data.batch) + ", fewer rows than data_replicas (" +
           std::to_string(n.data.replicas) + ")";
  }
  return "";
}

// What is wrong with `c`, naming the field, or "" when nothing is. The checks need no model: the
// counters' ranges and order, one local step per replica, one generator per replica (or none),
// finite weights and slots, and slots named "<weight>/<slot>" with their weight's shape.
inline std::string checkpoint_problem(Checkpoint const& c) {
  auto const& s = c.state;
  auto const& n = s.counters;
  for (auto const& [field, value] :
       {std::pair<char const*, std::int64_t>{"optimizer_updates", s.optimizer_updates},
        {"global_step", n.global_step},
        {"applied", n.applied},
        {"dropped", n.dropped}}) {
    if (auto problem = count_problem(field, value); !problem.empty()) return problem;
  }
  // One optimizer update per step at most, and every step applies at least one gradient.
  if (s.optimizer_updates > n.global_step) {
    return "optimizer_updates is " + std::to_string(s.optimizer_updates) +
           ", more than global_step (" + std::to_string(n.global_step) + ")";
  }
  if (n.global_step > n.applied) {
    return "global_step is " + std::to_string(n.global_step) + ", more than applied (" +
           std::to_string(n.applied) + ")";
  }
  if (n.local_steps.empty()) return "local_steps is empty; it holds one entry per replica";
  if (n.local_steps.size() > checkpoint_max_replicas) {
    return "local_steps has " + std::to_string(n.local_steps.size()) + " entries, more than " +
           std::to_string(checkpoint_max_replicas);
  }
  for (std::size_t r = 0; r < n.local_steps.size(); ++r) {
    auto problem = count_problem("local_steps[" + std::to_string(r) + "]", n.local_steps[r]);
    if (!problem.empty()) return problem;
  }
  if (auto problem = regroup_problem(n); !problem.empty()) return problem;
  if (!s.generators.empty() && s.generators.size() != n.local_steps.size()) {
    return "generators has " + std::to_string(s.generators.size()) +
           " entries; expected none or one per local step (" +
           std::to_string(n.local_steps.size()) + ")";
  }
  for (std::size_t r = 0; r < s.generators.size(); ++r) {
    auto problem = generator_problem("generators[" + std::to_string(r) + "]", s.generators[r]);
    if (!problem.empty()) return problem;
  }
  for (auto const& [name, tensor] : s.weights) {
    if (auto problem = finite_problem("weights '" + name + "'", tensor); !problem.empty()) {
      return problem;
    }
  }
  for (auto const& [name, tensor] : s.slots) {
    std::string const field = "slots '" + name + "'";
    auto const slash = name.rfind('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) {
      return field + " is not named \"<weight>/<slot>\"";
    }
    auto const weight = s.weights.find(name.substr(0, slash));
    if (weight == s.weights.end()) {
      return field + " belongs to no weight ('" + name.substr(0, slash) + "' is not among them)";
    }
    if (weight->second.shape != tensor.shape) {
      return field + " has shape " + to_string(tensor.shape) + " but its weight has " +
             to_string(weight->second.shape);
    }
    if (auto problem = finite_problem(field, tensor); !problem.empty()) return problem;
  }
  return {};
}

// `name` when it is "<checkpoint file name>.tmp-<pid>" (what write_atomically() leaves when its
// process dies), with that pid; nullopt for anything else.
inline std::optional<pid_t> temporary_writer(std::string const& name) {
  constexpr std::string_view marker = ".tmp-";
  auto const at = name.rfind(marker);
  if (at == std::string::npos) return std::nullopt;
  auto const base = name.substr(0, at);
  if (!checkpoint_step(base) && !is_part_file(base)) return std::nullopt;
  char const* first = name.data() + at + marker.size();
  char const* last = name.data() + name.size();
  if (first == last || !std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  pid_t pid = 0;
  auto const [end, ec] = std::from_chars(first, last, pid);
  // pid 0 and negative pids would address process groups in kill(): never a writer's.
  if (ec != std::errc{} || end != last || pid <= 0) return std::nullopt;
  return pid;
}

// The part files the manifest `file` names; nullopt when it is no manifest or does not read whole.
template <class = void>
std::optional<std::vector<std::string>> manifest_parts(std::filesystem::path const& file) {
  if (!starts_with_magic(file, manifest_kind)) return std::nullopt;
  try {
    auto framed = check_framed<CheckpointError>(
        open_for_reading<CheckpointError>(file, "checkpoint"), file, manifest_kind);
    Checkpoint checkpoint;
    Manifest manifest;
    parse_payload(framed, [&](auto& ar) {
      ar(checkpoint);
      if (framed.version >= manifest_regroup_since) regroup_counts(ar, checkpoint.state.counters);
      load_manifest(ar, manifest);
    });
    return manifest.parts;
  } catch (Error const&) {
    return std::nullopt;
  }
}

// Removes the part files in `dir` that no kept checkpoint names: parts of deleted checkpoints,
// and of saves that never committed. A part is kept when one of `referenced` names it, or when
// its step is one of `kept_steps` (the kept checkpoints whose manifest does not read, whose parts
// are judged by their names). A part's step can differ from its manifest's: an asynchronous
// cluster names its parts for the step the chief asked for, its manifest for shard 0's step when
// that shard wrote its part. A file that cannot be removed is left.
inline void remove_unreferenced_parts(std::filesystem::path const& dir,
                                      std::vector<std::string> const& referenced,
                                      std::vector<std::int64_t> const& kept_steps) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return;
  for (auto const& entry : it) {
    auto const name = entry.path().filename().string();
    if (!is_part_file(name)) continue;
    if (std::find(referenced.begin(), referenced.end(), name) != referenced.end()) continue;
    auto const step =
        checkpoint_step(name.substr(0, name.find('.')) + std::string(checkpoint_suffix));
    if (step && std::find(kept_steps.begin(), kept_steps.end(), *step) != kept_steps.end()) {
      continue;
    }
    std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace detail

/// The file name save_checkpoint() gives `step`: "checkpoint-0000000042.convoy" (ten digits, more
/// when needed, so names sort by step).
inline std::string checkpoint_file_name(std::int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 10) digits.insert(0, 10 - digits.size(), '0');
  return std::string(detail::checkpoint_prefix) + digits + std::string(detail::checkpoint_suffix);
}

namespace detail {

// save_checkpoint() and save_checkpoint_manifest(): a manifest, when given, follows the
// checkpoint in the payload and marks the file as one whose weights lie in parts.
template <class = void>
std::filesystem::path save_checkpoint_file(std::filesystem::path const& dir,
                                           Checkpoint const& checkpoint, Manifest const* manifest,
                                           std::size_t keep) {
  std::int64_t const step = checkpoint.state.counters.global_step;
  if (step < 0) {
    throw CheckpointError("convoy: cannot save a checkpoint of step " + std::to_string(step) +
                          " to '" + dir.string() + "'; steps start at 0");
  }
  auto const file = dir / checkpoint_file_name(step);
  // Refused here rather than when resuming: a checkpoint that cannot be loaded is no checkpoint.
  if (auto const problem = checkpoint_problem(checkpoint); !problem.empty()) {
    throw CheckpointError("convoy: refusing to save checkpoint '" + file.string() +
                          "': " + problem);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw CheckpointError("convoy: cannot create checkpoint directory '" + dir.string() +
                          "': " + ec.message());
  }
  write_atomically(file, [&](std::ostream& out) {
    write_framed(out, manifest ? manifest_kind : checkpoint_kind, [&](std::ostream& payload) {
      cereal::PortableBinaryOutputArchive ar(payload);
      ar(checkpoint);
      regroup_counts(ar, checkpoint.state.counters);
      if (manifest) save_manifest(ar, *manifest);
    });
  });
  if (keep > 0) {
    auto const all = list_checkpoints(dir);
    std::vector<std::string> referenced;
    std::vector<std::int64_t> unread;
    for (std::size_t i = 0; i < all.size(); ++i) {
      // A failed delete only costs disk space; the new checkpoint is safely written, so the save
      // must not report failure for it.
      if (i < keep || all[i].second == file) {
        auto parts = all[i].second == file && manifest ? std::optional(manifest->parts)
                                                       : manifest_parts(all[i].second);
        if (parts) {
          referenced.insert(referenced.end(), parts->begin(), parts->end());
        } else {
          unread.push_back(all[i].first);
        }
      } else {
        std::filesystem::remove(all[i].second, ec);
      }
    }
    remove_unreferenced_parts(dir, referenced, unread);
  }
  return file;
}

}  // namespace detail

/// Writes `checkpoint` to `dir/checkpoint_file_name(step)` and returns that path. The file appears
/// whole or not at all: it is written to a temporary file in `dir`, flushed, fsynced and renamed,
/// and the directory is fsynced. Creates `dir` when needed. Then keeps the `keep` checkpoints of
/// highest step in `dir` and deletes the older ones (never the one just written; keep == 0 keeps
/// all; a file that cannot be deleted is left). Blocks on file I/O; do not save into one `dir` from
/// two threads at once. Throws CheckpointError for a negative step, for a checkpoint that
/// load_checkpoint() would refuse (naming the field), or an unusable `dir`, and convoy::Error
/// naming the path and the system's reason when the file cannot be written.
template <class = void>
std::filesystem::path save_checkpoint(std::filesystem::path const& dir,
                                      Checkpoint const& checkpoint, std::size_t keep = 3) {
  return detail::save_checkpoint_file(dir, checkpoint, nullptr, keep);
}

/// Writes the manifest of a checkpoint whose weights and slots the shards wrote in parts
/// (save_checkpoint_part, one per shard, with `manifest.nonce`), as save_checkpoint() writes a
/// checkpoint: `checkpoint` holds the counters, optimizer and data seed, and no weights or slots.
/// Its renaming into place commits the checkpoint. Then keeps the `keep` newest checkpoints as
/// save_checkpoint() does and removes every part file that belongs to none of them.
template <class = void>
std::filesystem::path save_checkpoint_manifest(std::filesystem::path const& dir,
                                               Checkpoint const& checkpoint,
                                               Manifest const& manifest, std::size_t keep = 3) {
  return detail::save_checkpoint_file(dir, checkpoint, &manifest, keep);
}

/// Reads a checkpoint written by save_checkpoint(). Blocks on file I/O (it reads the file twice:
/// once for the checksum, once to parse, so no copy of the payload is held). Throws
/// CheckpointError naming the file when it is missing, not a regular file or unreadable, is not a
/// convoy checkpoint, has another format version, is truncated (saying how many bytes were
/// expected and found), fails its checksum, holds a payload that cannot be parsed, or fails
/// validation (naming the field): optimizer_updates, global_step, applied, dropped and every local
/// step within [0, 2^53]; optimizer_updates <= global_step <= applied; 1 to 65,536 local steps;
/// no generators or one per local step, each a whole std::mt19937_64 state; finite weights and
/// slots; slots named "<weight>/<slot>" with their weight's shape.
template <class = void>
Checkpoint load_checkpoint(std::filesystem::path const& file) {
  bool const in_parts = detail::starts_with_magic(file, detail::manifest_kind);
  auto framed = detail::check_framed<CheckpointError>(
      detail::open_for_reading<CheckpointError>(file, "checkpoint"), file,
      in_parts ? detail::manifest_kind : detail::checkpoint_kind);
  Checkpoint checkpoint;
  Manifest manifest;
  auto const regroup_since =
      in_parts ? detail::manifest_regroup_since : detail::checkpoint_regroup_since;
  detail::parse_payload(framed, [&](auto& ar) {
    ar(checkpoint);
    if (framed.version >= regroup_since) {
      detail::regroup_counts(ar, checkpoint.state.counters);
    }
    if (in_parts) detail::load_manifest(ar, manifest);
  });
  if (in_parts) {
    if (!checkpoint.state.weights.empty() || !checkpoint.state.slots.empty()) {
      throw framed.fail("lists parts and holds weights too");
    }
    try {
      detail::assemble(file.parent_path(), manifest, checkpoint.state.weights,
                       checkpoint.state.slots);
    } catch (CheckpointError const& e) {
      throw framed.fail("cannot be put together from its parts: " + std::string(e.what()));
    }
  }
  if (auto const problem = detail::checkpoint_problem(checkpoint); !problem.empty()) {
    throw framed.fail("fails validation: " + problem);
  }
  return checkpoint;
}

/// The checkpoint of highest step in `dir` (files named like checkpoint_file_name(); temporary and
/// other files are ignored), or nullopt when there is none or `dir` does not exist. Does not open
/// the files. Blocks on a directory listing; throws CheckpointError when `dir` exists but cannot be
/// listed.
inline std::optional<std::filesystem::path> latest_checkpoint(std::filesystem::path const& dir) {
  auto const all = detail::list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.front().second;
}

/// A checkpoint and the file it was read from.
struct LoadedCheckpoint {
  std::filesystem::path file;
  Checkpoint checkpoint;
};

/// Loads the newest usable checkpoint in `dir`, trying its checkpoint files from the highest step
/// down. Each file refused (damaged, empty, failing validation, or refused by `accept`) on the way
/// costs one line on `warnings` (when not null) naming it, the reason and the older file tried
/// next. `accept`, when given, is called on each file read whole and throws CheckpointError or
/// LoadError for one that does not fit the run (Trainer::check_fits: a variable reshaped together
/// with its slots, its checksum recomputed, reads well but fits no model of the run); it must
/// change nothing, since an older file may be tried next. Returns nullopt
/// when `dir` is absent or holds no checkpoint files. Blocks on file I/O. Throws CheckpointError
/// when every checkpoint file is refused, naming the newest and its reason, so that a run never
/// silently starts over; and when `dir` cannot be listed.
template <class = void>
std::optional<LoadedCheckpoint> load_latest_checkpoint(
    std::filesystem::path const& dir, std::ostream* warnings,
    std::function<void(LoadedCheckpoint const&)> const& accept = {}) {
  auto const all = detail::list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  std::string newest_problem;
  for (std::size_t i = 0; i < all.size(); ++i) {
    auto const& file = all[i].second;
    try {
      LoadedCheckpoint loaded{file, load_checkpoint(file)};
      try {
        if (accept) accept(loaded);
      } catch (LoadError const& e) {  // what does not fit is refused as damage is
        throw CheckpointError(e.what());
      }
      return loaded;
    } catch (CheckpointError const& e) {
      if (i == 0) newest_problem = e.what();
      if (warnings && i + 1 < all.size()) {
        *warnings << e.what() << "; falling back to the older checkpoint '"
                  << all[i + 1].second.string() << "'\n";
      }
    }
  }
  std::size_t const others = all.size() - 1;
  std::string const older =
      others == 0   ? "there is no older checkpoint in '" + dir.string() + "' to fall back to"
      : others == 1 ? "the older checkpoint in '" + dir.string() + "' is refused too"
                    : "the " + std::to_string(others) + " older checkpoints in '" + dir.string() +
                          "' are refused too";
  throw CheckpointError(newest_problem + "; " + older + ", and a run must not silently start over");
}

/// Removes the temporary files save_checkpoint() leaves in `dir` when its process dies mid-write
/// (`checkpoint-<step>.convoy.tmp-<pid>`, and a part's
/// `checkpoint-<step>.part-<s>-of-<n>.convoy.part .tmp-<pid>`) whose writer is gone: kill(pid, 0)
/// fails with ESRCH. Files of live processes are kept, this process's included, as their writer may
/// still finish; other files are never touched. Returns how many were removed; 0 when `dir` is
/// absent. Only for a directory written from this machine's process namespace: a pid from elsewhere
/// means nothing here. Blocks on file I/O. Throws CheckpointError naming `dir` or the file, and the
/// system's reason, when `dir` cannot be listed or a stale file cannot be removed.
inline std::size_t remove_stale_temporaries(std::filesystem::path const& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    throw CheckpointError("convoy: cannot list checkpoint directory '" + dir.string() +
                          "': " + ec.message());
  }
  std::size_t removed = 0;
  for (auto const& entry : it) {
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) continue;
    auto const pid = detail::temporary_writer(entry.path().filename().string());
    if (!pid) continue;
    // EPERM means a live process of another user: only ESRCH proves the writer gone.
    if (::kill(*pid, 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), ec)) {
      ++removed;
    } else if (ec && ec != std::errc::no_such_file_or_directory) {
      throw CheckpointError("convoy: cannot remove the stale temporary checkpoint '" +
                            entry.path().string() + "': " + ec.message());
    }
  }
  return removed;
}

}  // namespace convoy::io
