// ctest-labels: unit fault
// Checkpoints: every field survives a round trip; latest_checkpoint and pruning go by step; a
// missing, truncated, damaged, foreign, newer-version or invalid file is refused with a message
// saying so; loading falls back past damaged files; stale temporaries of dead writers go.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <convoy/io/checkpoint.hpp>
#include <convoy/optim/optimizer.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <helpers.hpp>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace test_io_checkpoint {

using convoy::testing::read_file;
using convoy::testing::write_file;

namespace {

namespace fs = std::filesystem;
using convoy::io::Checkpoint;

Checkpoint make_checkpoint(std::int64_t step) {
  convoy::Variables vars;
  vars.add("dense/kernel", {3, 4});
  vars.add("dense/bias", {4});
  for (std::size_t i = 0; i < vars.element_count(); ++i) {
    vars.weights()[i] = static_cast<float>(i) * 0.25f - 1.0f + static_cast<float>(step);
  }
  convoy::optim::Optimizer const adam{convoy::optim::Adam{}};
  auto state = adam.make_state(vars.element_count());
  for (std::size_t i = 0; i < vars.element_count(); ++i) {
    state.slots[0][i] = static_cast<float>(i) * 0.5f;
    state.slots[1][i] = static_cast<float>(i) * 0.125f + 3.0f;
  }

  std::mt19937_64 rng(99);
  rng.discard(1000);
  std::ostringstream rng_text;
  rng_text << rng;

  Checkpoint c;
  auto& s = c.state;
  s.weights = vars.get_weights();
  s.optimizer = std::string(adam.name());
  s.slots = convoy::optim::named_slots(adam, state, vars);
  s.optimizer_updates = step / 2;
  s.counters.global_step = step;
  s.counters.applied = 4 * step + 3;
  s.counters.dropped = 2;
  s.counters.local_steps = {step, step + 1, step + 3};
  s.generators = {rng_text.str(), rng_text.str(), rng_text.str()};
  c.data_seed = 0xfeedfacecafebeefULL;
  return c;
}

std::set<std::string> file_names(fs::path const& dir) {
  std::set<std::string> names;
  for (auto const& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

// The message of the CheckpointError load_checkpoint(file) throws, or "" when it throws nothing.
std::string load_error(fs::path const& file) {
  try {
    convoy::io::load_checkpoint(file);
  } catch (convoy::CheckpointError const& e) {
    return e.what();
  }
  return "";
}

bool contains(std::string const& text, std::string const& part) {
  return text.find(part) != std::string::npos;
}

constexpr std::size_t header_size = 24;

// A checkpoint file as the documented layout has it (magic, version 2, payload length, CRC-32 of
// the payload, little-endian), built here so that payloads save_checkpoint() refuses can be tried.
std::string framed(std::string const& payload) {
  auto const crc = static_cast<std::uint32_t>(::crc32(
      0L, reinterpret_cast<Bytef const*>(payload.data()), static_cast<uInt>(payload.size())));
  std::string header = "CONVOYCK";
  for (int i = 0; i < 4; ++i) header += static_cast<char>(i == 0 ? 2 : 0);
  for (int i = 0; i < 8; ++i) header += static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  for (int i = 0; i < 4; ++i) header += static_cast<char>((crc >> (8 * i)) & 0xff);
  return header + payload;
}

// The payload save_checkpoint() would write for `c`, without its checks.
std::string payload_of(Checkpoint const& c) {
  std::ostringstream out;
  {
    cereal::PortableBinaryOutputArchive ar(out);
    ar(c);
  }
  return out.str();
}

}  // namespace

TEST_CASE("a checkpoint round trip restores every field") {
  convoy::testing::TempDir dir("ckpt-roundtrip");
  auto const saved = make_checkpoint(42);
  auto const file = convoy::io::save_checkpoint(dir.path, saved);
  CHECK(file == dir / "checkpoint-0000000042.convoy");
  REQUIRE(fs::exists(file));

  auto const loaded = convoy::io::load_checkpoint(file);
  CHECK(loaded.state == saved.state);
  CHECK(loaded.state.weights.size() == 2);
  CHECK(loaded.state.optimizer == "Adam");
  CHECK(loaded.state.slots.size() == 4);
  CHECK(loaded.state.optimizer_updates == 21);
  CHECK(loaded.state.counters.global_step == 42);
  CHECK(loaded.state.counters.applied == 171);
  CHECK(loaded.state.counters.dropped == 2);
  CHECK(loaded.state.counters.local_steps == std::vector<std::int64_t>{42, 43, 45});
  CHECK(loaded.data_seed == 0xfeedfacecafebeefULL);

  // The RNG text restores a generator that continues where the saved one stood.
  std::mt19937_64 expected(99);
  expected.discard(1000);
  std::mt19937_64 restored;
  std::istringstream(loaded.state.generators.at(1)) >> restored;
  CHECK(restored() == expected());
}

TEST_CASE("the file starts with the documented little-endian header") {
  convoy::testing::TempDir dir("ckpt-header");
  auto const bytes = read_file(convoy::io::save_checkpoint(dir.path, make_checkpoint(1)));
  REQUIRE(bytes.size() > header_size);
  CHECK(bytes.substr(0, 8) == "CONVOYCK");
  CHECK(bytes.substr(8, 4) == std::string("\x03\x00\x00\x00", 4));
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[12 + i]);
  CHECK(length == bytes.size() - header_size);
  std::uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = stored << 8 | static_cast<unsigned char>(bytes[20 + i]);
  auto const payload = bytes.substr(header_size);
  CHECK(stored == ::crc32(0L, reinterpret_cast<Bytef const*>(payload.data()),
                          static_cast<uInt>(payload.size())));
}

TEST_CASE("latest_checkpoint picks the highest step and ignores other files") {
  convoy::testing::TempDir dir("ckpt-latest");
  CHECK_FALSE(convoy::io::latest_checkpoint(dir / "absent").has_value());
  CHECK_FALSE(convoy::io::latest_checkpoint(dir.path).has_value());

  for (std::int64_t step : {5, 120, 30})
    convoy::io::save_checkpoint(dir.path, make_checkpoint(step), 0);
  write_file(dir / "checkpoint-0000000999.convoy.tmp-12345", "half written");
  write_file(dir / "checkpoint-abc.convoy", "x");
  write_file(dir / "checkpoint-.convoy", "x");
  write_file(dir / "notes.txt", "x");
  fs::create_directory(dir / "checkpoint-0000005000.convoy");  // a directory, not a checkpoint

  auto const latest = convoy::io::latest_checkpoint(dir.path);
  REQUIRE(latest.has_value());
  CHECK(*latest == dir / "checkpoint-0000000120.convoy");
  CHECK(convoy::io::load_checkpoint(*latest).state.counters.global_step == 120);

  // Steps past ten digits still compare as numbers, not as text.
  convoy::io::save_checkpoint(dir.path, make_checkpoint(12345678901), 0);
  CHECK(convoy::io::latest_checkpoint(dir.path) == dir / "checkpoint-12345678901.convoy");
}

TEST_CASE("save_checkpoint keeps the newest three by default and leaves other files alone") {
  convoy::testing::TempDir dir("ckpt-keep");
  write_file(dir / "notes.txt", "x");
  for (std::int64_t step = 1; step <= 5; ++step) {
    convoy::io::save_checkpoint(dir.path, make_checkpoint(step * 10));
  }
  CHECK(file_names(dir.path) == std::set<std::string>{"checkpoint-0000000030.convoy",
                                                      "checkpoint-0000000040.convoy",
                                                      "checkpoint-0000000050.convoy", "notes.txt"});
  convoy::io::save_checkpoint(dir.path, make_checkpoint(60), 1);
  CHECK(file_names(dir.path) == std::set<std::string>{"checkpoint-0000000060.convoy", "notes.txt"});

  // An older step saved after newer ones is kept: it was just written.
  convoy::io::save_checkpoint(dir.path, make_checkpoint(7), 1);
  CHECK(file_names(dir.path) == std::set<std::string>{"checkpoint-0000000007.convoy",
                                                      "checkpoint-0000000060.convoy", "notes.txt"});
}

TEST_CASE("save_checkpoint creates the directory and refuses a negative step") {
  convoy::testing::TempDir dir("ckpt-create");
  auto const file = convoy::io::save_checkpoint(dir / "a" / "b", make_checkpoint(0));
  CHECK(file == dir / "a" / "b" / "checkpoint-0000000000.convoy");
  CHECK(fs::exists(file));
  CHECK_THROWS_AS(convoy::io::save_checkpoint(dir.path, make_checkpoint(-1)),
                  convoy::CheckpointError);
}

TEST_CASE("a truncated checkpoint is refused, saying how many bytes were expected and found") {
  convoy::testing::TempDir dir("ckpt-truncated");
  auto const file = convoy::io::save_checkpoint(dir.path, make_checkpoint(3));
  auto const whole = read_file(file);
  auto const payload = whole.size() - header_size;

  SUBCASE("by one byte") {
    write_file(file, whole.substr(0, whole.size() - 1));
    auto const message = load_error(file);
    CHECK(contains(message, "truncated"));
    CHECK(contains(message, file.string()));
    CHECK(contains(
        message, std::to_string(payload) + " payload bytes, found " + std::to_string(payload - 1)));
  }
  SUBCASE("by half") {
    write_file(file, whole.substr(0, whole.size() / 2));
    auto const message = load_error(file);
    CHECK(contains(message, "truncated"));
    CHECK(contains(message, file.string()));
  }
  SUBCASE("inside the header") {
    write_file(file, whole.substr(0, 10));
    auto const message = load_error(file);
    CHECK(contains(message, "truncated"));
    CHECK(contains(message, "found 10"));
  }
  SUBCASE("to nothing") {
    write_file(file, "");
    CHECK(contains(load_error(file), "truncated"));
  }
}

TEST_CASE("one flipped payload byte fails the checksum") {
  convoy::testing::TempDir dir("ckpt-flipped");
  auto const file = convoy::io::save_checkpoint(dir.path, make_checkpoint(3));
  auto const whole = read_file(file);
  for (std::size_t at : {header_size, header_size + 40, whole.size() - 1}) {
    CAPTURE(at);
    auto damaged = whole;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    write_file(file, damaged);
    auto const message = load_error(file);
    CHECK(contains(message, "checksum mismatch"));
    CHECK(contains(message, file.string()));
  }
}

TEST_CASE("bytes appended after the payload are refused") {
  convoy::testing::TempDir dir("ckpt-appended");
  auto const file = convoy::io::save_checkpoint(dir.path, make_checkpoint(3));
  write_file(file, read_file(file) + "xyz");
  CHECK(contains(load_error(file), "3 unexpected bytes"));
}

TEST_CASE("a file without the magic is not a convoy checkpoint") {
  convoy::testing::TempDir dir("ckpt-magic");
  auto const file = convoy::io::save_checkpoint(dir.path, make_checkpoint(3));
  auto bytes = read_file(file);
  bytes[0] = 'X';
  write_file(file, bytes);
  CHECK(contains(load_error(file), "not a convoy checkpoint"));
  write_file(file, "{\"weights\": []}\n");
  CHECK(contains(load_error(file), "not a convoy checkpoint"));
}

TEST_CASE("another format version is refused with both versions named") {
  convoy::testing::TempDir dir("ckpt-version");
  auto const file = convoy::io::save_checkpoint(dir.path, make_checkpoint(3));
  auto bytes = read_file(file);
  bytes[8] = '\x07';
  write_file(file, bytes);
  CHECK(contains(load_error(file), "format version 7, this build reads 2 to 3"));
  bytes[8] = '\x01';
  write_file(file, bytes);
  CHECK(contains(load_error(file), "format version 1, this build reads 2 to 3"));
}

TEST_CASE("a re-formed group's data origin and retired batches are kept; version 2 reads as none") {
  convoy::testing::TempDir dir("ckpt-origin");
  auto saved = make_checkpoint(42);
  saved.state.counters.data = {.step = 30, .row = 1234, .batch = 32, .replicas = 2};
  saved.state.counters.retired = 25;
  auto const loaded = convoy::io::load_checkpoint(convoy::io::save_checkpoint(dir.path, saved));
  CHECK(loaded.state.counters.data == saved.state.counters.data);
  CHECK(loaded.state.counters.retired == 25);
  CHECK(loaded.state.counters.batches() == 42 + 43 + 45 + 25);

  // Version 2: the same payload without the origin.
  auto const file = dir / "checkpoint-0000000050.convoy";
  write_file(file, framed(payload_of(make_checkpoint(50))));
  auto const old = convoy::io::load_checkpoint(file);
  CHECK(old.state.counters.data == convoy::DataOrigin{});
  CHECK(old.state == make_checkpoint(50).state);

  // A global batch kept over more replicas than the run began with: retired goes below 0, the
  // batches in all never do.
  saved.state.counters.retired = -100;
  auto const grown = convoy::io::load_checkpoint(convoy::io::save_checkpoint(dir.path, saved));
  CHECK(grown.state.counters.batches() == 42 + 43 + 45 - 100);
  saved.state.counters.retired = -131;
  CHECK_THROWS_WITH_AS(convoy::io::save_checkpoint(dir.path, saved),
                       doctest::Contains("retired is -131, more below 0 than the replicas' steps"),
                       convoy::CheckpointError);
  saved.state.counters.retired = 25;

  saved.state.counters.data.step = 43;
  CHECK_THROWS_WITH_AS(convoy::io::save_checkpoint(dir.path, saved),
                       doctest::Contains("data_step is 43, past global_step (42)"),
                       convoy::CheckpointError);
}

TEST_CASE("a payload with a valid checksum that cereal cannot parse is refused") {
  convoy::testing::TempDir dir("ckpt-unparsable");
  auto const file = dir / "checkpoint-0000000001.convoy";
  write_file(file, framed(std::string(1, '\x01') + std::string(40, '\xff')));
  auto const message = load_error(file);
  CHECK(contains(message, "cannot be parsed"));
  CHECK(contains(message, file.string()));
}

TEST_CASE("a missing checkpoint is refused by name") {
  convoy::testing::TempDir dir("ckpt-missing");
  auto const file = dir / "checkpoint-0000000001.convoy";
  auto const message = load_error(file);
  CHECK(contains(message, file.string()));
  CHECK(contains(message, "does not exist"));
}

namespace {

struct BadField {
  char const* what;                        // the message's account of the field
  std::function<void(Checkpoint&)> spoil;  // applied to make_checkpoint(42)
};

std::vector<BadField> bad_fields() {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t above = (std::int64_t{1} << 53) + 1;
  float const nan = std::numeric_limits<float>::quiet_NaN();
  float const inf = std::numeric_limits<float>::infinity();
  return {
      {"local_steps[1] is 9223372036854775807, above 2^53",
       [=](Checkpoint& c) { c.state.counters.local_steps[1] = max; }},
      {"local_steps[0] is -1, below 0",
       [](Checkpoint& c) { c.state.counters.local_steps[0] = -1; }},
      {"global_step is 9007199254740993, above 2^53",
       [=](Checkpoint& c) {
         c.state.counters.global_step = above;
         c.state.counters.applied = max;
       }},
      {"applied is -5, below 0", [](Checkpoint& c) { c.state.counters.applied = -5; }},
      {"dropped is -1, below 0", [](Checkpoint& c) { c.state.counters.dropped = -1; }},
      {"optimizer_updates is -3, below 0", [](Checkpoint& c) { c.state.optimizer_updates = -3; }},
      {"optimizer_updates is 43, more than global_step (42)",
       [](Checkpoint& c) { c.state.optimizer_updates = 43; }},
      {"global_step is 42, more than applied (41)",
       [](Checkpoint& c) { c.state.counters.applied = 41; }},
      {"local_steps is empty",
       [](Checkpoint& c) {
         c.state.counters.local_steps.clear();
         c.state.generators.clear();
       }},
      {"local_steps has 65537 entries, more than 65536",
       [](Checkpoint& c) {
         c.state.counters.local_steps.assign(65537, 1);
         c.state.generators.clear();
       }},
      {"generators has 2 entries; expected none or one per local step (3)",
       [](Checkpoint& c) { c.state.generators.pop_back(); }},
      {"generators[1] is not a std::mt19937_64 state",
       [](Checkpoint& c) { c.state.generators[1] = "12 34 56"; }},
      {"generators[2] has text left after its std::mt19937_64 state",
       [](Checkpoint& c) { c.state.generators[2] += " 7"; }},
      {"weights 'dense/bias' holds nan at index 2",
       [=](Checkpoint& c) { c.state.weights.at("dense/bias").data[2] = nan; }},
      {"weights 'dense/kernel' holds -inf at index 0",
       [=](Checkpoint& c) { c.state.weights.at("dense/kernel").data[0] = -inf; }},
      {"slots 'dense/kernel/m' holds inf at index 5",
       [=](Checkpoint& c) { c.state.slots.at("dense/kernel/m").data[5] = inf; }},
      {"slots 'orphan/m' belongs to no weight ('orphan' is not among them)",
       [](Checkpoint& c) {
         c.state.slots["orphan/m"] = convoy::Tensor{{1}, {0.0f}};
       }},
      {"slots 'loose' is not named \"<weight>/<slot>\"",
       [](Checkpoint& c) {
         c.state.slots["loose"] = convoy::Tensor{{1}, {0.0f}};
       }},
      {"slots 'dense/bias/v' has shape {2, 2} but its weight has {4}",
       [](Checkpoint& c) {
         c.state.slots.at("dense/bias/v").shape = {2, 2};
       }},
  };
}

}  // namespace

TEST_CASE("a checkpoint with a valid checksum but an invalid field is refused, naming the field") {
  convoy::testing::TempDir dir("ckpt-invalid");
  auto const file = dir / "checkpoint-0000000042.convoy";
  for (auto const& bad : bad_fields()) {
    CAPTURE(bad.what);
    auto checkpoint = make_checkpoint(42);
    bad.spoil(checkpoint);
    write_file(file, framed(payload_of(checkpoint)));
    auto const message = load_error(file);
    CHECK(contains(message, file.string()));
    CHECK(contains(message, "fails validation: " + std::string(bad.what)));

    // Saving refuses what loading would, and leaves nothing behind.
    fs::remove(file);
    auto const refused = convoy::testing::message_of<convoy::CheckpointError>(
        [&] { convoy::io::save_checkpoint(dir.path, checkpoint); });
    CHECK(contains(refused, "refusing to save checkpoint"));
    CHECK(contains(refused, bad.what));
    CHECK(fs::is_empty(dir.path));
  }

  // No generators at all is valid: asynchronous runs save none.
  auto checkpoint = make_checkpoint(42);
  checkpoint.state.generators.clear();
  CHECK(convoy::io::load_checkpoint(convoy::io::save_checkpoint(dir.path, checkpoint)).state ==
        checkpoint.state);
}

TEST_CASE("a generator count claiming 2^64 entries is refused before any allocation") {
  convoy::testing::TempDir dir("ckpt-generators");
  auto const file = dir / "checkpoint-0000000042.convoy";
  auto checkpoint = make_checkpoint(42);
  checkpoint.state.generators.clear();
  auto const payload = payload_of(checkpoint);
  // The payload ends with the generators' count (8 bytes, 0 here) and then the data seed.
  REQUIRE(payload.substr(payload.size() - 16, 8) == std::string(8, '\0'));
  for (auto const& [count, expected] :
       {std::pair<std::string, std::string>{std::string(8, '\xff'),
                                            "generators claims 18446744073709551615 entries, "
                                            "more than the 65536 allowed"},
        {std::string("\x01\x00\x01\x00\x00\x00\x00\x00", 8),
         "generators claims 65537 entries, more than the 65536 allowed"},
        {std::string("\x00\x04\x00\x00\x00\x00\x00\x00", 8), "cannot be parsed"}}) {
    auto const& wanted = expected;  // clang 14 cannot capture a structured binding in CAPTURE
    CAPTURE(wanted);
    auto forged = payload;
    forged.replace(payload.size() - 16, 8, count);
    write_file(file, framed(forged));
    auto const message = load_error(file);
    CHECK(contains(message, file.string()));
    CHECK(contains(message, expected));
  }
}

TEST_CASE("a checkpoint that is a FIFO is refused by name without blocking") {
  convoy::testing::TempDir dir("ckpt-fifo");
  auto const file = dir / "checkpoint-0000000001.convoy";
  REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
  auto const message = load_error(file);
  CHECK(contains(message, file.string()));
  CHECK(contains(message, "not a regular file"));
  // Listing ignores it: it is no checkpoint file.
  CHECK_FALSE(convoy::io::load_latest_checkpoint(dir.path, nullptr).has_value());
}

TEST_CASE("a newest checkpoint that is a symbolic link loop or leads nowhere costs a line naming it") {
  convoy::testing::TempDir dir("ckpt-symlink");
  auto const older = convoy::io::save_checkpoint(dir.path, make_checkpoint(10), 0);
  auto const loop = dir / "checkpoint-0000000030.convoy";
  auto const dangling = dir / "checkpoint-0000000020.convoy";
  fs::create_symlink(loop.filename(), loop);
  fs::create_symlink("gone.convoy", dangling);
  CHECK(contains(load_error(loop), "is a symbolic link loop"));
  CHECK(contains(load_error(dangling), "is a symbolic link to 'gone.convoy', which does not exist"));
  std::ostringstream warnings;
  auto const loaded = convoy::io::load_latest_checkpoint(dir.path, &warnings);
  REQUIRE(loaded.has_value());
  CHECK(loaded->file == older);
  auto const text = warnings.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  CHECK(contains(text, loop.string() + "' is a symbolic link loop"));
  CHECK(contains(text, "falling back to the older checkpoint '" + dangling.string() + "'"));
  CHECK(contains(text, "falling back to the older checkpoint '" + older.string() + "'"));
}

TEST_CASE("load_latest_checkpoint falls back past damaged checkpoints, warning once for each") {
  convoy::testing::TempDir dir("ckpt-fallback");
  CHECK_FALSE(convoy::io::load_latest_checkpoint(dir / "absent", nullptr).has_value());
  CHECK_FALSE(convoy::io::load_latest_checkpoint(dir.path, nullptr).has_value());

  std::vector<fs::path> files;
  for (std::int64_t step : {10, 20, 30}) {
    files.push_back(convoy::io::save_checkpoint(dir.path, make_checkpoint(step), 0));
  }
  std::ostringstream warnings;
  auto loaded = convoy::io::load_latest_checkpoint(dir.path, &warnings);
  REQUIRE(loaded.has_value());
  CHECK(loaded->file == files[2]);
  CHECK(loaded->checkpoint.state == make_checkpoint(30).state);
  CHECK(warnings.str().empty());

  SUBCASE("the newest cut short") {
    auto const whole = read_file(files[2]);
    write_file(files[2], whole.substr(0, whole.size() - 5));
    loaded = convoy::io::load_latest_checkpoint(dir.path, &warnings);
    REQUIRE(loaded.has_value());
    CHECK(loaded->file == files[1]);
    CHECK(loaded->checkpoint.state.counters.global_step == 20);
    auto const line = warnings.str();
    CHECK(std::count(line.begin(), line.end(), '\n') == 1);
    CHECK(contains(line, files[2].string()));
    CHECK(contains(line, "is truncated"));
    CHECK(contains(line, "falling back to the older checkpoint '" + files[1].string() + "'"));
  }
  SUBCASE("the two newest empty and invalid") {
    write_file(files[2], "");
    auto invalid = make_checkpoint(20);
    invalid.state.counters.local_steps[2] = -7;
    write_file(files[1], framed(payload_of(invalid)));
    loaded = convoy::io::load_latest_checkpoint(dir.path, &warnings);
    REQUIRE(loaded.has_value());
    CHECK(loaded->file == files[0]);
    auto const text = warnings.str();
    CHECK(std::count(text.begin(), text.end(), '\n') == 2);
    CHECK(contains(text, files[2].string() + "' is truncated"));
    CHECK(contains(text, "falling back to the older checkpoint '" + files[1].string() + "'"));
    CHECK(contains(text, files[1].string() + "' fails validation: local_steps[2] is -7"));
    CHECK(contains(text, "falling back to the older checkpoint '" + files[0].string() + "'"));
  }
  SUBCASE("every one damaged: the run must not start over") {
    for (auto const& file : files) write_file(file, "garbage");
    auto const message = convoy::testing::message_of<convoy::CheckpointError>(
        [&] { convoy::io::load_latest_checkpoint(dir.path, &warnings); });
    CHECK(contains(message, files[2].string() + "' is not a convoy checkpoint"));
    CHECK(contains(message, "the 2 older checkpoints"));
    CHECK(contains(message, "must not silently start over"));
    auto const text = warnings.str();
    CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  }
  SUBCASE("a single damaged one, without a warnings stream") {
    fs::remove(files[0]);
    fs::remove(files[1]);
    write_file(files[2], "");
    auto const message = convoy::testing::message_of<convoy::CheckpointError>(
        [&] { convoy::io::load_latest_checkpoint(dir.path, nullptr); });
    CHECK(contains(message, files[2].string() + "' is truncated"));
    CHECK(contains(message, "there is no older checkpoint"));
  }
}

TEST_CASE("remove_stale_temporaries removes only temporaries of dead writers") {
  convoy::testing::TempDir dir("ckpt-stale");
  CHECK(convoy::io::remove_stale_temporaries(dir / "absent") == 0);

  // A pid that was a process and no longer is: a child that exited and was reaped.
  pid_t const dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) std::_Exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);

  auto const target = convoy::io::checkpoint_file_name(40);
  auto const temp = [&](pid_t pid) { return target + ".tmp-" + std::to_string(pid); };
  std::set<std::string> const kept{
      temp(::getppid()),  // a live writer: it may still rename its file
      temp(::getpid()),   // this process: another thread may be saving
      target,
      "notes.tmp-" + std::to_string(dead),  // not a checkpoint's temporary
      target + ".tmp-",
      target + ".tmp-0",
  };
  for (auto const& name : kept) write_file(dir / name, "x");
  write_file(dir / temp(dead), "half written");
  write_file(dir / (convoy::io::checkpoint_file_name(50) + ".tmp-" + std::to_string(dead)), "x");

  CHECK(convoy::io::remove_stale_temporaries(dir.path) == 2);
  CHECK(file_names(dir.path) == kept);
  CHECK(convoy::io::remove_stale_temporaries(dir.path) == 0);
}

}  // namespace test_io_checkpoint
