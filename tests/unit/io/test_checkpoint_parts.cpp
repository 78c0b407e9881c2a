// ctest-labels: unit fault
// Checkpoints in parts: pieces written by two "shards" (one variable split between them by rows)
// come back whole and by name through load_checkpoint; a missing part, a part of another save, a
// damaged part, or a manifest whose shapes outgrow its parts is refused naming it, and
// load_latest_checkpoint falls back to the older checkpoint; old parts are pruned with their
// manifests.
#include <doctest/doctest.h>

#include <algorithm>
#include <convoy/io/checkpoint.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace test_io_checkpoint_parts {

using namespace convoy;
namespace fs = std::filesystem;

namespace {

// A 4x3 kernel split by rows over two shards (rows 0-1 and 2-3), and a bias on shard 1, each
// with one slot: what a Partitioned placement gives two ps tasks.
struct Saved {
  std::string kernel = "dense/kernel", bias = "dense/bias";
  std::vector<float> k = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, b = {-1, -2, -3};
  std::vector<float> k_slot = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}, b_slot = {3, 3, 3};

  // Writes both parts and the manifest of step `step` into `dir`; returns the manifest's path. The
  // parts are named for `part_step` when given (an asynchronous cluster's chief asks for the
  // step it last saw, and shard 0 has moved on when it answers).
  fs::path write(fs::path const& dir, std::int64_t step, std::uint64_t nonce = 42,
                 std::int64_t part_step = -1) const {
    auto part = [&](std::uint64_t shard) {
      io::PartView p{.step = part_step < 0 ? step : part_step, .shard = shard, .shards = 2, .nonce = nonce,
                     .optimizer = "Momentum", .slot_suffixes = {"/momentum"}};
      std::span<float const> kw(k), ks(k_slot);
      if (shard == 0) {
        p.pieces.push_back({&kernel, 0, kw.subspan(0, 6), {ks.subspan(0, 6)}});
      } else {
        p.pieces.push_back({&kernel, 6, kw.subspan(6, 6), {ks.subspan(6, 6)}});
        p.pieces.push_back({&bias, 0, std::span<float const>(b), {std::span<float const>(b_slot)}});
      }
      return io::save_checkpoint_part(dir, p);
    };
    io::Manifest m{.shapes = {{kernel, {4, 3}}, {bias, {3}}}, .parts = {part(0), part(1)},
                   .nonce = nonce};
    io::Checkpoint c;
    c.state.optimizer = "Momentum";
    c.state.counters.global_step = step;
    c.state.counters.applied = 2 * step;
    c.state.counters.local_steps = {step, step};
    c.data_seed = 7;
    return io::save_checkpoint_manifest(dir, c, m);
  }
};

std::string failure(fs::path const& file) {
  try {
    io::load_checkpoint(file);
  } catch (CheckpointError const& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a checkpoint in parts comes back whole and by name") {
  testing::TempDir dir("parts");
  Saved const saved;
  auto const file = saved.write(dir.path, 10);
  CHECK(file.filename() == "checkpoint-0000000010.convoy");
  auto const c = io::load_checkpoint(file);
  CHECK(c.data_seed == 7);
  CHECK(c.state.counters.global_step == 10);
  REQUIRE(c.state.weights.count("dense/kernel") == 1);
  CHECK(c.state.weights.at("dense/kernel").shape == Shape{4, 3});
  CHECK(c.state.weights.at("dense/kernel").data == saved.k);
  CHECK(c.state.weights.at("dense/bias").data == saved.b);
  CHECK(c.state.slots.at("dense/kernel/momentum").data == saved.k_slot);
  CHECK(c.state.slots.at("dense/bias/momentum").data == saved.b_slot);
}

TEST_CASE("a part that is missing, damaged or from another save is refused, and loading falls back") {
  testing::TempDir dir("parts-bad");
  Saved const saved;
  saved.write(dir.path, 10);
  auto const newest = saved.write(dir.path, 20);
  auto const part1 = dir.path / "checkpoint-0000000020.part-1-of-2.convoy.part";
  REQUIRE(fs::exists(part1));

  SUBCASE("missing") {
    fs::remove(part1);
    CHECK(failure(newest).find("part-1-of-2") != std::string::npos);
  }
  SUBCASE("damaged") {
    std::fstream f(part1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
    f.close();
    CHECK(failure(newest).find("checksum") != std::string::npos);
  }
  SUBCASE("from a save that never committed") {
    testing::TempDir other("parts-other");
    saved.write(other.path, 20, 43);
    fs::copy_file(other.path / part1.filename(), part1, fs::copy_options::overwrite_existing);
    CHECK(failure(newest).find("another save") != std::string::npos);
  }
  std::ostringstream warnings;
  auto const loaded = io::load_latest_checkpoint(dir.path, &warnings);
  REQUIRE(loaded);
  CHECK(loaded->file.filename() == "checkpoint-0000000010.convoy");
  CHECK(warnings.str().find("falling back") != std::string::npos);
}

TEST_CASE("a manifest whose shapes outgrow its parts is refused before allocating them") {
  testing::TempDir dir("parts-forged");
  Saved const saved;
  auto const real = saved.write(dir.path, 10);  // for its parts
  io::Manifest m{.shapes = {{"dense/kernel", {1u << 20, 1u << 20}}, {"dense/bias", {3}}},
                 .parts = {"checkpoint-0000000010.part-0-of-2.convoy.part",
                           "checkpoint-0000000010.part-1-of-2.convoy.part"},
                 .nonce = 42};
  io::Checkpoint c = io::load_checkpoint(real);
  c.state.weights.clear();
  c.state.slots.clear();
  c.state.counters.global_step = c.state.counters.applied = 11;
  auto const forged = io::save_checkpoint_manifest(dir.path, c, m, 0);
  CHECK(failure(forged).find("more elements than its parts") != std::string::npos);
}

TEST_CASE("old parts go with their manifests, and so do parts of saves that never committed") {
  testing::TempDir dir("parts-prune");
  Saved const saved;
  for (std::int64_t step : {10, 20, 30, 40}) saved.write(dir.path, step);  // keeps 3
  std::ofstream(dir.path / "checkpoint-0000000050.part-0-of-2.convoy.part") << "orphan";
  saved.write(dir.path, 60);
  std::vector<std::string> names;
  for (auto const& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{
                     "checkpoint-0000000030.convoy", "checkpoint-0000000030.part-0-of-2.convoy.part",
                     "checkpoint-0000000030.part-1-of-2.convoy.part", "checkpoint-0000000040.convoy",
                     "checkpoint-0000000040.part-0-of-2.convoy.part",
                     "checkpoint-0000000040.part-1-of-2.convoy.part", "checkpoint-0000000060.convoy",
                     "checkpoint-0000000060.part-0-of-2.convoy.part",
                     "checkpoint-0000000060.part-1-of-2.convoy.part"});
}

TEST_CASE("parts named for an earlier step than their manifest stay with it") {
  testing::TempDir dir("parts-async");
  Saved const saved;
  // An asynchronous cluster: the chief asked for step 9, shard 0 was at 12 when it wrote its part.
  auto const file = saved.write(dir.path, 12, 42, 9);
  CHECK(fs::exists(dir.path / "checkpoint-0000000009.part-0-of-2.convoy.part"));
  CHECK(failure(file).empty());
  saved.write(dir.path, 25, 43, 21);  // keeps both: their parts are named in their manifests
  CHECK(failure(file).empty());
  for (std::int64_t step : {30, 40}) saved.write(dir.path, step);  // keeps 3: 12 goes
  CHECK_FALSE(fs::exists(file));
  CHECK_FALSE(fs::exists(dir.path / "checkpoint-0000000009.part-0-of-2.convoy.part"));
  CHECK(fs::exists(dir.path / "checkpoint-0000000021.part-1-of-2.convoy.part"));
  CHECK(failure(dir.path / "checkpoint-0000000025.convoy").empty());
}

}  // namespace test_io_checkpoint_parts
