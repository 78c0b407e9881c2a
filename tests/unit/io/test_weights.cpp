// Weights files: round trips in every format, name-by-name checking on load, and refusal (never a
// crash) of missing, truncated, damaged, garbage, too deeply nested and inconsistent files.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <convoy/io/weights.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <helpers.hpp>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace test_io_weights {

using convoy::testing::read_file;
using convoy::testing::write_file;

namespace {

namespace fs = std::filesystem;
using convoy::Variables;
using convoy::io::Format;

// Values whose bits a lossy format would change: a denormal, negative zero, the extremes, and
// fractions with no short decimal form.
std::vector<float> tricky_values(std::size_t count, float offset) {
  std::vector<float> values{1e-40f, -0.0f, FLT_MAX, -FLT_MIN, 1.0f / 3.0f, 0.1f};
  for (std::size_t i = values.size(); i < count; ++i) {
    values.push_back(offset + static_cast<float>(i) * 0.3711f - 2.0f / 7.0f);
  }
  values.resize(count);
  return values;
}

Variables make_dense(float offset) {
  Variables vars;
  auto kernel = vars.add("dense/kernel", {3, 4});
  auto bias = vars.add("dense/bias", {4});
  auto k = tricky_values(12, offset);
  auto b = tricky_values(4, offset + 100.0f);
  std::copy(k.begin(), k.end(), vars.value(kernel).begin());
  std::copy(b.begin(), b.end(), vars.value(bias).begin());
  return vars;
}

std::vector<std::uint32_t> bits(Variables const& vars) {
  std::vector<std::uint32_t> out;
  for (float f : vars.weights()) out.push_back(std::bit_cast<std::uint32_t>(f));
  return out;
}

// The message of the LoadError `load` throws, or "" when it throws nothing.
template <class Load>
std::string load_error(Load&& load) {
  try {
    load();
  } catch (convoy::LoadError const& e) {
    return e.what();
  }
  return "";
}

struct Case {
  char const* file;
  Format format;
};

// A binary weights file's documented layout: magic, version, payload length and CRC-32, all
// little-endian, then the payload. Written here independently of the library's writer.
std::string framed(std::string const& magic, std::uint32_t version, std::string const& payload) {
  auto const crc = static_cast<std::uint32_t>(::crc32(
      0L, reinterpret_cast<Bytef const*>(payload.data()), static_cast<uInt>(payload.size())));
  std::string out = magic;
  for (int i = 0; i < 4; ++i) out += static_cast<char>((version >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) out += static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((crc >> (8 * i)) & 0xff);
  return out + payload;
}

std::string magic_of(Format format) { return format == Format::binary ? "CONVOYWB" : "CONVOYWP"; }

constexpr std::size_t header_size = 24;

bool contains(std::string const& text, std::string const& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> file_names(fs::path const& dir) {
  std::vector<std::string> names;
  for (auto const& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}
constexpr Case all_formats[] = {
    {"w.bin", Format::binary}, {"w.pbin", Format::portable_binary}, {"w.json", Format::json}};

}  // namespace

TEST_CASE("format_for maps the three extensions and names the path and choices otherwise") {
  CHECK(convoy::io::format_for("a/w.bin") == Format::binary);
  CHECK(convoy::io::format_for("a/w.pbin") == Format::portable_binary);
  CHECK(convoy::io::format_for("a/w.json") == Format::json);
  try {
    convoy::io::format_for("a/weights.txt");
    FAIL("format_for accepted .txt");
  } catch (convoy::Error const& e) {
    std::string const message = e.what();
    CHECK(message.find("a/weights.txt") != std::string::npos);
    CHECK(message.find(".bin") != std::string::npos);
    CHECK(message.find(".pbin") != std::string::npos);
    CHECK(message.find(".json") != std::string::npos);
  }
}

TEST_CASE("save_weights with an unknown extension throws and writes nothing") {
  convoy::testing::TempDir dir("weights-ext");
  auto vars = make_dense(0.0f);
  CHECK_THROWS_WITH_AS(convoy::io::save_weights(dir / "w.txt", vars), doctest::Contains("w.txt"),
                       convoy::Error);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("every format restores bit-identical weights into a fresh set with the same names") {
  convoy::testing::TempDir dir("weights-roundtrip");
  auto const saved = make_dense(1.5f);
  for (auto const& c : all_formats) {
    CAPTURE(c.file);
    convoy::io::save_weights(dir / c.file, saved);
    auto loaded = make_dense(-7.0f);
    REQUIRE(bits(loaded) != bits(saved));
    convoy::io::load_weights(dir / c.file, loaded);
    CHECK(bits(loaded) == bits(saved));
  }
}

TEST_CASE("save_weights reads arenas bound to a device's memory through their copy") {
  // A stand-in for device memory: arenas the host may read only through the set's copy, which
  // counts the floats it moves; every format must come out as from host arenas.
  convoy::testing::TempDir dir("weights-device");
  auto const reference = make_dense(1.5f);
  auto bound = make_dense(1.5f);
  auto const n = bound.element_count();
  auto memory = std::make_shared<std::vector<float>>(2 * n);
  std::size_t moved = 0;
  bound.bind_arenas({memory->data(), n}, {memory->data() + n, n}, memory,
                    [&](float* to, float const* from, std::size_t count) {
                      std::copy_n(from, count, to);
                      moved += count;
                    });
  for (auto const& c : all_formats) {
    CAPTURE(c.file);
    moved = 0;
    convoy::io::save_weights(dir / c.file, bound);
    CHECK(moved == n);
    auto loaded = make_dense(-7.0f);
    convoy::io::load_weights(dir / c.file, loaded);
    CHECK(bits(loaded) == bits(reference));
  }
}

TEST_CASE("an explicit format overrides the extension") {
  convoy::testing::TempDir dir("weights-explicit");
  auto const saved = make_dense(2.0f);
  convoy::io::save_weights(dir / "w.bin", saved, Format::json);
  CHECK(read_file(dir / "w.bin").find("\"dense/kernel\"") != std::string::npos);
  auto loaded = make_dense(0.0f);
  convoy::io::load_weights(dir / "w.bin", loaded, Format::json);
  CHECK(bits(loaded) == bits(saved));
}

TEST_CASE("a JSON weights file holds the variable names as text") {
  convoy::testing::TempDir dir("weights-json");
  convoy::io::save_weights(dir / "w.json", make_dense(0.0f));
  auto const text = read_file(dir / "w.json");
  CHECK(text.find("\"dense/kernel\"") != std::string::npos);
  CHECK(text.find("\"dense/bias\"") != std::string::npos);
}

TEST_CASE("a stream round trip through write_named/read_named keeps names, shapes and values") {
  std::map<std::string, convoy::Tensor> named{
      {"a/scalar", convoy::Tensor{{}, {4.25f}}},
      {"a/empty", convoy::Tensor{{0, 3}, {}}},
      {"b/matrix", convoy::Tensor{{2, 3}, tricky_values(6, 9.0f)}},
  };
  for (auto const& c : all_formats) {
    CAPTURE(c.file);
    std::stringstream stream;
    convoy::io::write_named(stream, named, c.format);
    auto const back = convoy::io::read_named(stream, c.format, "'memory'");
    REQUIRE(back.size() == named.size());
    for (auto const& [name, tensor] : named) {
      auto const& variable = name;  // clang 14 cannot capture a structured binding in CAPTURE
      CAPTURE(variable);
      REQUIRE(back.contains(name));
      CHECK(back.at(name).shape == tensor.shape);
      CHECK(back.at(name) == tensor);
    }
  }
}

TEST_CASE("loading into mismatched variables names every offender and changes nothing") {
  convoy::testing::TempDir dir("weights-mismatch");
  Variables saved;
  saved.add("dense/kernel", {3, 4});
  saved.add("dense/bias", {4});
  saved.add("old/gamma", {2});
  std::fill(saved.weights().begin(), saved.weights().end(), 5.0f);

  for (auto const& c : all_formats) {
    CAPTURE(c.file);
    convoy::io::save_weights(dir / c.file, saved);
    Variables target;
    target.add("dense/kernel", {4, 3});  // mis-shaped
    target.add("dense/bias", {4});       // matches, yet must not be loaded alone
    target.add("new/beta", {5});         // missing from the file
    auto const values = tricky_values(target.element_count(), 0.5f);
    std::copy(values.begin(), values.end(), target.weights().begin());
    auto const before = bits(target);

    auto const message = load_error([&] { convoy::io::load_weights(dir / c.file, target); });
    CHECK(message.find((dir / c.file).string()) != std::string::npos);
    CHECK(message.find("unknown: 'old/gamma'") != std::string::npos);
    CHECK(message.find("missing: 'new/beta'") != std::string::npos);
    CHECK(message.find("'dense/kernel' is {3, 4}, expected {4, 3}") != std::string::npos);
    CHECK(message.find("'dense/bias'") == std::string::npos);
    CHECK(bits(target) == before);
  }
}

TEST_CASE("a record whose value count differs from its shape is refused by name") {
  convoy::testing::TempDir dir("weights-record");
  // The file layout is a sequence of NamedTensor records, so cereal can forge a bad one directly.
  std::vector<convoy::io::NamedTensor> records{
      {"dense/kernel", {3, 4}, std::vector<float>(12, 1.0f)},
      {"dense/bias", {4}, std::vector<float>(3, 1.0f)},
  };
  for (auto const& c : all_formats) {
    CAPTURE(c.file);
    {
      std::ostringstream out;
      if (c.format == Format::binary) {
        cereal::BinaryOutputArchive ar(out);
        ar(cereal::make_nvp("tensors", records));
      } else if (c.format == Format::portable_binary) {
        cereal::PortableBinaryOutputArchive ar(out);
        ar(cereal::make_nvp("tensors", records));
      } else {
        cereal::JSONOutputArchive ar(out);
        ar(cereal::make_nvp("tensors", records));
      }
      // Binary files carry the header; JSON is plain.
      write_file(dir / c.file,
                 c.format == Format::json ? out.str() : framed(magic_of(c.format), 1, out.str()));
    }
    auto vars = make_dense(0.0f);
    auto const before = bits(vars);
    auto const message = load_error([&] { convoy::io::load_weights(dir / c.file, vars); });
    CHECK(message.find("'dense/bias'") != std::string::npos);
    CHECK(message.find("holds 3 values") != std::string::npos);
    CHECK(message.find((dir / c.file).string()) != std::string::npos);
    CHECK(bits(vars) == before);

    // The same records with a consistent bias load: the forged layout is the real one.
    records[1].data.resize(4);
    {
      std::ostringstream out;
      {
        cereal::BinaryOutputArchive ar(out);
        ar(cereal::make_nvp("tensors", records));
      }
      write_file(dir / "ok.bin", framed("CONVOYWB", 1, out.str()));
    }
    convoy::io::load_weights(dir / "ok.bin", vars);
    CHECK(vars.value(vars.at("dense/kernel"))[11] == 1.0f);
    records[1].data.resize(3);
  }
}

TEST_CASE("a record name stored twice is refused") {
  std::vector<convoy::io::NamedTensor> records{{"x", {1}, {1.0f}}, {"x", {1}, {2.0f}}};
  std::stringstream stream;
  {
    cereal::PortableBinaryOutputArchive ar(stream);
    ar(cereal::make_nvp("tensors", records));
  }
  CHECK_THROWS_WITH_AS(convoy::io::read_named(stream, Format::portable_binary, "'memory'"),
                       doctest::Contains("'x' appears twice"), convoy::LoadError);
}

TEST_CASE("a binary file cut at any byte gives LoadError naming the path") {
  convoy::testing::TempDir dir("weights-truncated");
  for (auto const& c : {all_formats[0], all_formats[1]}) {
    CAPTURE(c.file);
    convoy::io::save_weights(dir / c.file, make_dense(0.0f));
    auto const whole = read_file(dir / c.file);
    for (std::size_t size = 0; size < whole.size(); ++size) {
      CAPTURE(size);
      write_file(dir / c.file, whole.substr(0, size));
      auto vars = make_dense(3.0f);
      auto const before = bits(vars);
      auto const message = load_error([&] { convoy::io::load_weights(dir / c.file, vars); });
      CHECK(message.find((dir / c.file).string()) != std::string::npos);
      CHECK(message.find("is truncated") != std::string::npos);
      CHECK(bits(vars) == before);
    }
  }
}

TEST_CASE("a JSON file cut in half gives LoadError naming the path") {
  convoy::testing::TempDir dir("weights-truncated-json");
  convoy::io::save_weights(dir / "w.json", make_dense(0.0f));
  auto const whole = read_file(dir / "w.json");
  write_file(dir / "w.json", whole.substr(0, whole.size() / 2));
  auto vars = make_dense(0.0f);
  CHECK_THROWS_WITH_AS(convoy::io::load_weights(dir / "w.json", vars),
                       doctest::Contains((dir / "w.json").string().c_str()), convoy::LoadError);
}

TEST_CASE("garbage in any format gives LoadError, even with sizes claiming exabytes") {
  convoy::testing::TempDir dir("weights-garbage");
  std::string const text = "this is not a weights file\n";
  std::string const ones(64, '\xff');  // every size field reads as 2^64 - 1
  std::string const json_wrong_types = R"({"tensors": [{"name": 7, "shape": "x", "data": {}}]})";
  for (auto const& c : all_formats) {
    for (auto const* bytes : {&text, &ones, &json_wrong_types}) {
      CAPTURE(c.file);
      CAPTURE(*bytes);
      write_file(dir / c.file, *bytes);
      auto vars = make_dense(0.0f);
      auto const message = load_error([&] { convoy::io::load_weights(dir / c.file, vars); });
      CHECK(message.find((dir / c.file).string()) != std::string::npos);
    }
  }
}

TEST_CASE("a missing file gives convoy::Error naming the path") {
  convoy::testing::TempDir dir("weights-missing");
  auto vars = make_dense(0.0f);
  auto const path = (dir / "absent.bin").string();
  CHECK_THROWS_WITH_AS(convoy::io::load_weights(path, vars), doctest::Contains(path.c_str()),
                       convoy::Error);
}

TEST_CASE("an unwritable target names the path and the system's reason") {
  convoy::testing::TempDir dir("weights-unwritable");
  auto const path = dir / "no" / "such" / "w.bin";
  CHECK_THROWS_WITH_AS(convoy::io::save_weights(path, make_dense(0.0f)),
                       doctest::Contains("No such file or directory"), convoy::Error);
  CHECK_THROWS_WITH_AS(convoy::io::save_weights(path, make_dense(0.0f)),
                       doctest::Contains(path.string().c_str()), convoy::Error);
}

TEST_CASE("saving replaces the file and leaves no temporary file behind") {
  convoy::testing::TempDir dir("weights-atomic");
  for (auto const& c : all_formats) {
    CAPTURE(c.file);
    convoy::io::save_weights(dir / c.file, make_dense(1.0f));
    auto const second = make_dense(2.0f);
    convoy::io::save_weights(dir / c.file, second);
    auto loaded = make_dense(0.0f);
    convoy::io::load_weights(dir / c.file, loaded);
    CHECK(bits(loaded) == bits(second));
  }
  std::vector<std::string> names;
  for (auto const& entry : fs::directory_iterator(dir.path))
    names.push_back(entry.path().filename());
  CHECK(names.size() == 3);
  for (auto const& name : names) {
    CAPTURE(name);
    CHECK(name.find(".tmp-") == std::string::npos);
  }
}

TEST_CASE("a binary weights file starts with the documented little-endian header") {
  convoy::testing::TempDir dir("weights-header");
  for (auto const& c : {all_formats[0], all_formats[1]}) {
    CAPTURE(c.file);
    convoy::io::save_weights(dir / c.file, make_dense(0.5f));
    auto const bytes = read_file(dir / c.file);
    REQUIRE(bytes.size() > header_size);
    // Rebuilding the header from the payload gives the same bytes: magic, version 1, length, CRC.
    CHECK(bytes == framed(magic_of(c.format), 1, bytes.substr(header_size)));
  }
  convoy::io::save_weights(dir / "w.json", make_dense(0.5f));
  CHECK(read_file(dir / "w.json").starts_with("{"));
}

TEST_CASE("binary weights files that are random, cut, damaged or of another version are refused") {
  convoy::testing::TempDir dir("weights-framed");
  for (auto const& c : {all_formats[0], all_formats[1]}) {
    CAPTURE(c.file);
    auto const path = dir / c.file;
    convoy::io::save_weights(path, make_dense(0.0f));
    auto const whole = read_file(path);
    auto const refusal = [&](std::string const& bytes) {
      write_file(path, bytes);
      auto vars = make_dense(3.0f);
      auto const before = bits(vars);
      auto const message = load_error([&] { convoy::io::load_weights(path, vars); });
      CHECK(message.find(path.string()) != std::string::npos);
      CHECK(bits(vars) == before);
      return message;
    };

    std::mt19937 rng(7);
    std::string random(4096, '\0');
    for (auto& b : random) b = static_cast<char>(rng());
    std::string const noun = c.format == Format::binary ? "binary" : "portable binary";
    CHECK(refusal(random).find("is not a convoy " + noun + " weights file") != std::string::npos);
    // Random bytes behind a genuine magic and version: the length they hold does not fit.
    CHECK(refusal(magic_of(c.format) + std::string("\x01\0\0\0", 4) + random)
              .find("is truncated: the header promises ") != std::string::npos);

    auto const payload = whole.size() - header_size;
    CHECK(refusal(whole.substr(0, whole.size() - 1))
              .find("is truncated: the header promises " + std::to_string(payload) +
                    " payload bytes, found " + std::to_string(payload - 1)) != std::string::npos);

    for (std::size_t at : {header_size, header_size + payload / 2, whole.size() - 1}) {
      CAPTURE(at);
      auto flipped = whole;
      flipped[at] = static_cast<char>(flipped[at] ^ 0x04);
      CHECK(refusal(flipped).find("checksum mismatch") != std::string::npos);
    }

    auto other = whole;
    other[8] = '\x02';
    CHECK(refusal(other).find("has format version 2, this build reads 1") != std::string::npos);

    // The other binary format's file is refused by its magic, not misread.
    convoy::io::save_weights(path, make_dense(0.0f),
                             c.format == Format::binary ? Format::portable_binary : Format::binary);
    CHECK(refusal(read_file(path)).find("does not start with \"" + magic_of(c.format)) !=
          std::string::npos);
  }
}

TEST_CASE("JSON nested 200,000 deep is refused by name instead of overflowing the stack") {
  convoy::testing::TempDir dir("weights-deep");
  std::string const deep(200000, '[');
  for (std::string const& text :
       {deep, "{\"tensors\":" + deep, "{\"tensors\": [{\"name\": " + deep}) {
    CAPTURE(text.substr(0, 30));
    write_file(dir / "w.json", text);
    auto vars = make_dense(0.0f);
    auto const message = load_error([&] { convoy::io::load_weights(dir / "w.json", vars); });
    CHECK(message.find((dir / "w.json").string()) != std::string::npos);
    CHECK(message.find("nest more than 64 levels deep") != std::string::npos);

    // A stream that cannot seek is read into memory and checked the same way.
    std::stringbuf text_buffer(text);
    struct NoSeek : std::streambuf {
      std::stringbuf* from;
      explicit NoSeek(std::stringbuf* source) : from(source) {}
      int_type underflow() override { return from->sgetc(); }
      int_type uflow() override { return from->sbumpc(); }
    } no_seek(&text_buffer);
    std::istream stream(&no_seek);
    CHECK_THROWS_WITH_AS(convoy::io::read_named(stream, Format::json, "'pipe'"),
                         doctest::Contains("'pipe': JSON arrays and objects nest more than 64"),
                         convoy::LoadError);
  }
}

TEST_CASE("brackets inside JSON strings do not count as nesting") {
  std::string const name = std::string(100, '[') + "\\\"" + std::string(100, '{');
  std::map<std::string, convoy::Tensor> const named{{name, convoy::Tensor{{1}, {2.5f}}}};
  std::stringstream stream;
  convoy::io::write_named(stream, named, Format::json);
  REQUIRE(stream.str().find(std::string(100, '[')) != std::string::npos);
  CHECK(convoy::io::read_named(stream, Format::json, "'memory'") == named);
}

TEST_CASE("require_writable_directory creates a missing directory and leaves nothing in it") {
  convoy::testing::TempDir dir("writable-dir");
  auto const fresh = dir / "a" / "b";
  convoy::io::require_writable_directory(fresh, "checkpoint directory");
  CHECK(fs::is_directory(fresh));
  CHECK(fs::is_empty(fresh));
  convoy::io::require_writable_directory(fresh, "checkpoint directory");  // existing: fine too
  CHECK(fs::is_empty(fresh));
}

TEST_CASE("require_writable_directory names the role, the path and the reason") {
  convoy::testing::TempDir dir("unwritable-dir");
  write_file(dir / "plain", "x");
  auto const refusal = [](fs::path const& path) {
    return convoy::testing::message_of<convoy::Error>(
        [&] { convoy::io::require_writable_directory(path, "checkpoint directory"); });
  };

  // Under a regular file: no one, root included, can create it.
  auto const under_file = refusal(dir / "plain" / "ckpt");
  CHECK(contains(under_file, "checkpoint directory '" + (dir / "plain" / "ckpt").string() + "'"));
  CHECK(contains(under_file, "cannot be created: Not a directory"));

  auto const file = refusal(dir / "plain");
  CHECK(
      contains(file, "checkpoint directory '" + (dir / "plain").string() + "' is not a directory"));

  // /proc exists and is a directory, but takes no new files, whatever the user's privileges.
  auto const proc = refusal("/proc");
  CHECK(contains(proc, "checkpoint directory '/proc' is not writable"));
  auto const in_proc = refusal("/proc/convoy-no-such-dir");
  CHECK(contains(in_proc, "'/proc/convoy-no-such-dir' cannot be created"));
}

TEST_CASE("require_writable_file refuses directories, bad parents and unknown extensions") {
  convoy::testing::TempDir dir("writable-file");
  auto const refusal = [](fs::path const& path, bool weights_format) {
    return convoy::testing::message_of<convoy::Error>(
        [&] { convoy::io::require_writable_file(path, "weights file", weights_format); });
  };
  // Absent or existing regular files in a writable directory pass, and nothing is changed.
  convoy::io::require_writable_file(dir / "w.bin", "weights file", true);
  write_file(dir / "w.pbin", "old");
  convoy::io::require_writable_file(dir / "w.pbin", "weights file", true);
  CHECK(read_file(dir / "w.pbin") == "old");
  CHECK(file_names(dir.path) == std::vector<std::string>{"w.pbin"});

  fs::create_directory(dir / "d.bin");
  auto const directory = refusal(dir / "d.bin", true);
  CHECK(contains(directory, "weights file '" + (dir / "d.bin").string() + "' is a directory"));

  write_file(dir / "plain", "x");
  auto const under_file = refusal(dir / "plain" / "w.bin", true);
  CHECK(contains(under_file, (dir / "plain" / "w.bin").string()));
  CHECK(
      contains(under_file, "its directory '" + (dir / "plain").string() + "' is not a directory"));

  auto const missing = refusal(dir / "no" / "w.bin", false);
  CHECK(contains(missing, "its directory '" + (dir / "no").string() + "' does not exist"));

  auto const proc = refusal("/proc/w.bin", true);
  CHECK(contains(proc, "weights file '/proc/w.bin': its directory '/proc' is not writable"));

  auto const extension = refusal(dir / "w.txt", true);
  CHECK(contains(extension, (dir / "w.txt").string()));
  CHECK(contains(extension, "*.bin"));
  convoy::io::require_writable_file(dir / "w.txt", "log file");  // no format asked for

  REQUIRE(::mkfifo((dir / "fifo.bin").c_str(), 0600) == 0);
  CHECK(contains(refusal(dir / "fifo.bin", true), "is not a regular file"));
}

TEST_CASE("a weights file that is a FIFO or a directory is refused by name without blocking") {
  convoy::testing::TempDir dir("weights-special");
  REQUIRE(::mkfifo((dir / "w.json").c_str(), 0600) == 0);
  fs::create_directory(dir / "w.bin");
  auto vars = make_dense(0.0f);
  for (char const* name : {"w.json", "w.bin"}) {
    CAPTURE(name);
    auto const message = convoy::testing::message_of<convoy::Error>(
        [&] { convoy::io::load_weights(dir / name, vars); });
    CHECK(contains(message, (dir / name).string()));
    CHECK((contains(message, "not a regular file") || contains(message, "is a directory")));
  }
}

}  // namespace test_io_weights
