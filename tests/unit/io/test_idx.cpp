// Tests for io/idx.hpp and io/fashion_mnist.hpp: IDX files written here (gzipped and plain) round
// trip, every malformed file is a DatasetError naming the file and the problem, a fake
// Fashion-MNIST directory loads with the right scaling, and the real test split loads when Debian's
// package is there.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <convoy/io/fashion_mnist.hpp>
#include <convoy/io/idx.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using convoy::DatasetError;
using convoy::testing::TempDir;

// The bytes of an IDX file: magic (0, 0, type, dims), big-endian sizes, then `data`.
std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> const& shape,
                                    std::vector<std::uint8_t> const& data,
                                    std::uint8_t type = 0x08) {
  std::vector<std::uint8_t> out = {0, 0, type, static_cast<std::uint8_t>(shape.size())};
  for (std::uint32_t size : shape) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(size >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_plain(fs::path const& path, std::vector<std::uint8_t> const& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<char const*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  REQUIRE(file.good());
}

void write_gz(fs::path const& path, std::vector<std::uint8_t> const& bytes) {
  gzFile file = gzopen(path.string().c_str(), "wb");
  REQUIRE(file != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(file) == Z_OK);
}

// The message of the DatasetError that read_idx(path) throws, or "" when it throws none.
std::string idx_error(fs::path const& path) {
  try {
    (void)convoy::io::read_idx(path);
  } catch (DatasetError const& e) {
    return e.what();
  }
  return "";
}

std::string fashion_error(convoy::io::Split split, fs::path const& dir) {
  try {
    (void)convoy::io::load_fashion_mnist(split, dir);
  } catch (DatasetError const& e) {
    return e.what();
  }
  return "";
}

bool contains(std::string const& text, std::string const& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::uint8_t> counting(std::size_t n) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return out;
}

}  // namespace

TEST_CASE("read_idx round-trips shape and data, gzipped and plain") {
  TempDir dir("idx-roundtrip");
  auto const data = counting(2 * 3 * 5);
  for (bool gz : {true, false}) {
    CAPTURE(gz);
    auto const path = dir / (gz ? "a.idx.gz" : "a.idx");
    (gz ? write_gz : write_plain)(path, idx_bytes({2, 3, 5}, data));
    auto const array = convoy::io::read_idx(path);
    CHECK(array.shape == std::vector<std::uint32_t>{2, 3, 5});
    CHECK(array.data == data);
  }
}

TEST_CASE("read_idx reads sizes big-endian and data larger than one chunk") {
  TempDir dir("idx-large");
  // 300 x 70000 = 21 MB: more than one 16 MiB read chunk, and sizes that use several header bytes.
  auto const data = counting(300u * 70000u);
  auto const path = dir / "large.gz";
  write_gz(path, idx_bytes({300, 70000}, data));
  auto const array = convoy::io::read_idx(path);
  CHECK(array.shape == std::vector<std::uint32_t>{300, 70000});
  CHECK(array.data == data);
}

TEST_CASE("read_idx accepts empty arrays and 1-D files") {
  TempDir dir("idx-edge");
  write_plain(dir / "empty", idx_bytes({0, 28, 28}, {}));
  auto const empty = convoy::io::read_idx(dir / "empty");
  CHECK(empty.shape == std::vector<std::uint32_t>{0, 28, 28});
  CHECK(empty.data.empty());

  write_gz(dir / "labels.gz", idx_bytes({4}, {9, 0, 1, 2}));
  auto const labels = convoy::io::read_idx(dir / "labels.gz");
  CHECK(labels.shape == std::vector<std::uint32_t>{4});
  CHECK(labels.data == std::vector<std::uint8_t>{9, 0, 1, 2});
}

TEST_CASE("read_idx refuses a missing file, naming it") {
  TempDir dir("idx-missing");
  auto const message = idx_error(dir / "nope.gz");
  CHECK(contains(message, (dir / "nope.gz").string()));
  CHECK(contains(message, "no such file"));

  auto const directory = idx_error(dir.path);
  CHECK(contains(directory, dir.path.string()));
  CHECK(contains(directory, "directory"));
}

TEST_CASE("read_idx refuses bad magic") {
  TempDir dir("idx-magic");
  for (bool gz : {true, false}) {
    CAPTURE(gz);
    auto const path = dir / (gz ? "magic.gz" : "magic");
    auto bytes = idx_bytes({2}, {1, 2});
    bytes[0] = 0x1F;
    bytes[1] = 0x42;
    (gz ? write_gz : write_plain)(path, bytes);
    auto const message = idx_error(path);
    CHECK(contains(message, path.string()));
    CHECK(contains(message, "bad magic 0x1F 0x42"));
  }
  // A file shorter than the magic itself.
  write_plain(dir / "tiny", {0, 0});
  auto const tiny = idx_error(dir / "tiny");
  CHECK(contains(tiny, (dir / "tiny").string()));
  CHECK(contains(tiny, "too short"));
}

TEST_CASE("read_idx refuses element types other than unsigned byte, naming the code") {
  TempDir dir("idx-type");
  auto const path = dir / "floats.gz";
  write_gz(path, idx_bytes({2}, std::vector<std::uint8_t>(8, 0), 0x0D));
  auto const message = idx_error(path);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "unsupported element type 0x0D"));
  CHECK(contains(message, "0x08"));
}

TEST_CASE("read_idx refuses truncated data, saying expected and found bytes") {
  TempDir dir("idx-truncated");
  for (bool gz : {true, false}) {
    CAPTURE(gz);
    auto const path = dir / (gz ? "short.gz" : "short");
    (gz ? write_gz : write_plain)(path, idx_bytes({2, 3}, {1, 2, 3, 4}));
    auto const message = idx_error(path);
    CHECK(contains(message, path.string()));
    CHECK(contains(message, "truncated"));
    CHECK(contains(message, "promises 6 bytes, found 4"));
  }

  // A truncated header: two dimensions declared, one size present.
  write_plain(dir / "header", {0, 0, 0x08, 2, 0, 0, 0, 3});
  auto const header = idx_error(dir / "header");
  CHECK(contains(header, (dir / "header").string()));
  CHECK(contains(header, "header truncated"));
}

TEST_CASE("read_idx refuses a gzip stream cut short") {
  TempDir dir("idx-cut");
  auto const whole = dir / "whole.gz";
  write_gz(whole, idx_bytes({100, 100}, counting(100 * 100)));
  std::ifstream in(whole, std::ios::binary);
  std::vector<char> compressed((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  REQUIRE(compressed.size() > 40);

  // Cut in the middle of the deflate data, then just before the end of the 8-byte trailer.
  for (std::size_t keep : {compressed.size() / 2, compressed.size() - 3}) {
    CAPTURE(keep);
    auto const path = dir / ("cut-" + std::to_string(keep) + ".gz");
    std::ofstream out(path, std::ios::binary);
    out.write(compressed.data(), static_cast<std::streamsize>(keep));
    out.close();
    auto const message = idx_error(path);
    CHECK(contains(message, path.string()));
    CHECK((contains(message, "truncated") || contains(message, "damaged")));
  }
}

TEST_CASE("read_idx refuses damaged compressed data and trailing bytes") {
  TempDir dir("idx-damaged");
  auto const whole = dir / "whole.gz";
  write_gz(whole, idx_bytes({64}, counting(64)));
  std::ifstream in(whole, std::ios::binary);
  std::vector<char> compressed((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  in.close();
  // Flip the stored CRC-32 (the trailer's first 4 bytes): the data decompresses but fails its
  // check.
  compressed[compressed.size() - 8] = static_cast<char>(compressed[compressed.size() - 8] ^ 0xFF);
  auto const path = dir / "crc.gz";
  std::ofstream(path, std::ios::binary)
      .write(compressed.data(), static_cast<std::streamsize>(compressed.size()));
  auto const crc = idx_error(path);
  CHECK(contains(crc, path.string()));
  CHECK(contains(crc, "damaged"));

  write_plain(dir / "long", idx_bytes({2}, {1, 2, 3}));
  auto const long_message = idx_error(dir / "long");
  CHECK(contains(long_message, (dir / "long").string()));
  CHECK(contains(long_message, "longer than its header says"));
}

TEST_CASE("read_idx refuses sizes whose product exceeds 2^32 elements without allocating them") {
  TempDir dir("idx-absurd");
  // 65536 x 65536 x 2 = 2^33; and 2^32-1 cubed, whose 64-bit product would overflow unchecked.
  for (auto const& shape : {std::vector<std::uint32_t>{65536, 65536, 2},
                            std::vector<std::uint32_t>{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}}) {
    auto const path = dir / "absurd.gz";
    write_gz(path, idx_bytes(shape, {1, 2, 3}));
    auto const message = idx_error(path);
    CHECK(contains(message, path.string()));
    CHECK(contains(message, "exceed 2^32 elements"));
  }
  // Exactly 2^32 elements is allowed by the header check; the 3 bytes present are then too few.
  write_plain(dir / "big", idx_bytes({65536, 65536}, {1, 2, 3}));
  CHECK(contains(idx_error(dir / "big"), "promises 4294967296 bytes, found 3"));
}

namespace {

// Writes a Fashion-MNIST-shaped pair of files for `prefix` ("train" or "t10k") into `dir`.
void write_fake_fashion(fs::path const& dir, std::string const& prefix,
                        std::vector<std::uint8_t> const& pixels, std::uint32_t images,
                        std::vector<std::uint8_t> const& labels) {
  write_gz(dir / (prefix + "-images-idx3-ubyte.gz"), idx_bytes({images, 28, 28}, pixels));
  write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"),
           idx_bytes({static_cast<std::uint32_t>(labels.size())}, labels));
}

}  // namespace

TEST_CASE("load_fashion_mnist scales pixels to [0, 1] and keeps labels") {
  TempDir dir("fashion-fake");
  // Image 0 all 0, image 1 all 255, image 2 a ramp.
  std::vector<std::uint8_t> pixels(3 * 784, 0);
  std::fill(pixels.begin() + 784, pixels.begin() + 2 * 784, std::uint8_t{255});
  for (std::size_t i = 0; i < 784; ++i) pixels[2 * 784 + i] = static_cast<std::uint8_t>(i % 256);
  write_fake_fashion(dir.path, "t10k", pixels, 3, {9, 0, 3});

  auto const data = convoy::io::load_fashion_mnist(convoy::io::Split::test, dir.path);
  CHECK(data.name == "fashion-mnist/test");
  CHECK(data.cols == 784);
  REQUIRE(data.rows() == 3);
  CHECK(data.labels == std::vector<std::int32_t>{9, 0, 3});
  CHECK(data.targets.empty());
  for (std::size_t i = 0; i < 784; ++i) {
    CHECK(data.features[i] == 0.0f);
    CHECK(data.features[784 + i] == 1.0f);
    CHECK(data.features[2 * 784 + i] == doctest::Approx(static_cast<float>(i % 256) / 255.0f));
  }

  // The train split reads the train-* files, uncompressed ones too when no .gz is present.
  write_plain(dir / "train-images-idx3-ubyte",
              idx_bytes({1, 28, 28}, std::vector<std::uint8_t>(784, 51)));
  write_plain(dir / "train-labels-idx1-ubyte", idx_bytes({1}, {7}));
  auto const train = convoy::io::load_fashion_mnist(convoy::io::Split::train, dir.path);
  CHECK(train.name == "fashion-mnist/train");
  REQUIRE(train.rows() == 1);
  CHECK(train.labels[0] == 7);
  CHECK(train.features[0] == doctest::Approx(0.2f));
}

TEST_CASE("load_fashion_mnist says how to get missing files") {
  TempDir dir("fashion-missing");
  write_gz(dir / "t10k-images-idx3-ubyte.gz",
           idx_bytes({1, 28, 28}, std::vector<std::uint8_t>(784, 0)));
  auto const message = fashion_error(convoy::io::Split::test, dir.path);
  CHECK(contains(message, (dir / "t10k-labels-idx1-ubyte.gz").string()));
  CHECK(contains(message, "apt-get install dataset-fashion-mnist"));
  CHECK(contains(message, "CONVOY_FASHION_MNIST_DIR"));

  auto const absent = dir / "no-such-dir";
  auto const no_dir = fashion_error(convoy::io::Split::train, absent);
  CHECK(contains(no_dir, (absent / "train-images-idx3-ubyte.gz").string()));
  CHECK(contains(no_dir, "does not exist"));
  CHECK(contains(no_dir, "dataset-fashion-mnist"));
}

TEST_CASE("load_fashion_mnist refuses mismatched counts, wrong shapes and labels of 10 or more") {
  TempDir dir("fashion-bad");
  auto const images = dir / "t10k-images-idx3-ubyte.gz";
  auto const labels = dir / "t10k-labels-idx1-ubyte.gz";

  write_fake_fashion(dir.path, "t10k", std::vector<std::uint8_t>(3 * 784, 0), 3, {1, 2});
  auto const counts = fashion_error(convoy::io::Split::test, dir.path);
  CHECK(contains(counts, labels.string()));
  CHECK(contains(counts, "2 labels"));
  CHECK(contains(counts, "3 images"));

  write_fake_fashion(dir.path, "t10k", std::vector<std::uint8_t>(2 * 784, 0), 2, {1, 10});
  auto const range = fashion_error(convoy::io::Split::test, dir.path);
  CHECK(contains(range, labels.string()));
  CHECK(contains(range, "label 10 at index 1"));

  write_gz(images, idx_bytes({2, 28, 27}, std::vector<std::uint8_t>(2 * 28 * 27, 0)));
  auto const shape = fashion_error(convoy::io::Split::test, dir.path);
  CHECK(contains(shape, images.string()));
  CHECK(contains(shape, "[2 x 28 x 27]"));

  write_fake_fashion(dir.path, "t10k", std::vector<std::uint8_t>(2 * 784, 0), 2, {1, 2});
  write_gz(labels, idx_bytes({2, 1}, {1, 2}));
  auto const label_dims = fashion_error(convoy::io::Split::test, dir.path);
  CHECK(contains(label_dims, labels.string()));
  CHECK(contains(label_dims, "2 dimensions; expected 1"));
}

TEST_CASE("default_fashion_mnist_dir honours CONVOY_FASHION_MNIST_DIR") {
  char const* saved = std::getenv("CONVOY_FASHION_MNIST_DIR");
  std::string const restore = saved ? saved : "";
  ::setenv("CONVOY_FASHION_MNIST_DIR", "/somewhere/else", 1);
  CHECK(convoy::io::default_fashion_mnist_dir() == fs::path("/somewhere/else"));
  ::unsetenv("CONVOY_FASHION_MNIST_DIR");
  CHECK(convoy::io::default_fashion_mnist_dir() == fs::path("/usr/share/datasets/fashion-mnist"));
  if (saved) ::setenv("CONVOY_FASHION_MNIST_DIR", restore.c_str(), 1);
}

TEST_CASE("fashion_mnist_class_name names the ten classes") {
  CHECK(convoy::io::fashion_mnist_class_name(0) == "T-shirt/top");
  CHECK(convoy::io::fashion_mnist_class_name(1) == "Trouser");
  CHECK(convoy::io::fashion_mnist_class_name(5) == "Sandal");
  CHECK(convoy::io::fashion_mnist_class_name(9) == "Ankle boot");
  CHECK_THROWS_AS((void)convoy::io::fashion_mnist_class_name(10), DatasetError);
  CHECK_THROWS_AS((void)convoy::io::fashion_mnist_class_name(-1), DatasetError);
}

TEST_CASE("the real Fashion-MNIST test split, when Debian's package is installed") {
  fs::path const dir = "/usr/share/datasets/fashion-mnist";
  std::error_code ignored;
  if (!fs::exists(dir / "t10k-images-idx3-ubyte.gz", ignored) ||
      !fs::exists(dir / "t10k-labels-idx1-ubyte.gz", ignored)) {
    MESSAGE("dataset-fashion-mnist is not installed (no " << dir.string()
                                                          << "); skipping the real-data check");
    return;
  }
  auto const data = convoy::io::load_fashion_mnist(convoy::io::Split::test, dir);
  CHECK(data.name == "fashion-mnist/test");
  CHECK(data.cols == 784);
  REQUIRE(data.rows() == 10000);
  REQUIRE(data.labels.size() == 10000);
  std::array<std::size_t, 10> per_class{};
  bool labels_in_range = true;
  for (std::int32_t label : data.labels) {
    if (label < 0 || label > 9) {
      labels_in_range = false;
      continue;
    }
    ++per_class[static_cast<std::size_t>(label)];
  }
  CHECK(labels_in_range);
  for (std::size_t c = 0; c < per_class.size(); ++c) {
    CAPTURE(c);
    CHECK(per_class[c] == 1000);
  }
  bool pixels_in_range = true;
  float max_pixel = 0.0f;
  for (float v : data.features) {
    pixels_in_range = pixels_in_range && v >= 0.0f && v <= 1.0f;
    max_pixel = std::max(max_pixel, v);
  }
  CHECK(pixels_in_range);
  CHECK(max_pixel == 1.0f);
}
