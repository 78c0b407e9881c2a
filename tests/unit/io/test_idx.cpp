// Tests for io/idx.hpp and io/fashion_mnist.hpp: IDX files written here (gzipped and plain) round
// trip, every malformed file is a DatasetError naming the file and the problem, a fake
// Fashion-MNIST directory loads with the right scaling, and the real test split loads when Debian's
// package is there. Hostile input (special files, gzip bombs, lying headers, cut trailers) is
// refused without blocking or allocating what the header promises.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <convoy/io/fashion_mnist.hpp>
#include <convoy/io/idx.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "temp_dir.hpp"

namespace test_io_idx {

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

// No cap of the caller's beyond read_idx's own 2^32 elements.
constexpr std::uint64_t any_size = std::uint64_t{1} << 32;

convoy::io::IdxArray read_idx(fs::path const& path) { return convoy::io::read_idx(path, any_size); }

// The message of the DatasetError that read_idx(path, max_elements) throws, or "" when it throws
// none.
std::string idx_error(fs::path const& path, std::uint64_t max_elements = any_size) {
  try {
    (void)convoy::io::read_idx(path, max_elements);
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
    auto const array = read_idx(path);
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
  auto const array = read_idx(path);
  CHECK(array.shape == std::vector<std::uint32_t>{300, 70000});
  CHECK(array.data == data);
}

TEST_CASE("read_idx accepts empty arrays and 1-D files") {
  TempDir dir("idx-edge");
  write_plain(dir / "empty", idx_bytes({0, 28, 28}, {}));
  auto const empty = read_idx(dir / "empty");
  CHECK(empty.shape == std::vector<std::uint32_t>{0, 28, 28});
  CHECK(empty.data.empty());

  write_gz(dir / "labels.gz", idx_bytes({4}, {9, 0, 1, 2}));
  auto const labels = read_idx(dir / "labels.gz");
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
    CHECK(contains(message, "promise more than the 4294967296 elements expected"));
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

namespace {

// Runs `body` in a child process that SIGALRM kills after `seconds`; returns its exit status, or
// 128 + the signal that ended it. Keeps a hang (a blocking open) or an allocation under a memory
// limit from taking the test program with it.
template <class Body>
int in_child(unsigned seconds, Body&& body) {
  std::fflush(nullptr);
  pid_t const child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(seconds);
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    std::_Exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Streams `header` and then `zeros` zero bytes through gzwrite, run-length coded, so gigabytes of
// data take a file of about a thousandth of their size and a second to write.
void write_gz_zeros(fs::path const& path, std::vector<std::uint8_t> const& header,
                    std::uint64_t zeros) {
  gzFile file = gzopen(path.string().c_str(), "wb9R");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, header.data(), static_cast<unsigned>(header.size())) ==
          static_cast<int>(header.size()));
  std::vector<std::uint8_t> const block(std::size_t{1} << 20, 0);
  for (std::uint64_t left = zeros; left > 0;) {
    auto const take = static_cast<unsigned>(std::min<std::uint64_t>(left, block.size()));
    REQUIRE(gzwrite(file, block.data(), take) == static_cast<int>(take));
    left -= take;
  }
  REQUIRE(gzclose(file) == Z_OK);
}

std::string bytes_of(fs::path const& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(fs::path const& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("read_idx refuses a header promising more elements than its caller expects") {
  TempDir dir("idx-cap");
  auto const path = dir / "images.gz";
  write_gz(path, idx_bytes({3, 2, 2}, counting(12)));
  CHECK(convoy::io::read_idx(path, 12).data == counting(12));  // exactly the cap loads

  auto const message = idx_error(path, 11);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "sizes 3 x 2 x 2 promise more than the 11 elements expected"));
}

TEST_CASE("read_idx allocates with the data read, not with the header's promise") {
  TempDir dir("idx-memory");
  // 2^32 elements promised, 3 present. Under an address-space limit 64 MiB above what the child
  // already maps, any allocation sized from the promise (even a 256 MiB down payment) fails.
  auto const path = dir / "liar";
  write_plain(path, idx_bytes({65536, 65536}, {1, 2, 3}));
  int const code = in_child(60, [&] {
    std::ifstream status("/proc/self/status");
    std::uint64_t mapped_kib = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("VmSize:")) mapped_kib = std::stoull(line.substr(7));
    }
    if (mapped_kib == 0) return 3;
    rlim_t const limit = (mapped_kib << 10) + (rlim_t{64} << 20);
    rlimit const cap{limit, limit};
    if (::setrlimit(RLIMIT_AS, &cap) != 0) return 4;
    try {
      (void)convoy::io::read_idx(path, any_size);
    } catch (DatasetError const& e) {
      return contains(e.what(), "promises 4294967296 bytes, found 3") ? 0 : 5;
    } catch (std::bad_alloc const&) {
      return 6;
    }
    return 7;
  });
  CHECK(code == 0);  // 6: an allocation followed the header rather than the data
}

TEST_CASE("read_idx refuses a FIFO, a socket and a device without blocking, naming the path") {
  TempDir dir("idx-special");
  auto const fifo = dir / "fifo.gz";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO with no writer blocks forever; the child is killed after 10 s if it does.
  int const code = in_child(10, [&] {
    auto const message = idx_error(fifo);
    return contains(message, fifo.string()) && contains(message, "a FIFO, not a regular file") ? 0
                                                                                               : 1;
  });
  CHECK(code == 0);  // 142 (128 + SIGALRM): read_idx blocked opening the FIFO

  auto const socket_path = dir / "socket";
  int const fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(socket_path.string().size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr const*>(&address), sizeof address) == 0);
  auto const socket_message = idx_error(socket_path);
  ::close(fd);
  CHECK(contains(socket_message, socket_path.string()));
  CHECK(contains(socket_message, "a socket, not a regular file"));

  // /dev/zero would never end; a symbolic link to it is judged by what it points to.
  fs::create_symlink("/dev/zero", dir / "zero.gz");
  for (fs::path const& device : {fs::path("/dev/zero"), dir / "zero.gz"}) {
    CAPTURE(device);
    auto const message = idx_error(device);
    CHECK(contains(message, device.string()));
    CHECK(contains(message, "a character device, not a regular file"));
  }
}

TEST_CASE("a gzip bomb stops at the caller's cap") {
  TempDir dir("idx-bomb");
  constexpr std::uint64_t gib = std::uint64_t{1} << 30;
  constexpr std::uint32_t cap = 1 << 20;

  // A header promising 2^32 bytes, then zeros: refused before any data is inflated.
  auto const promise = dir / "promise.gz";
  write_gz_zeros(promise, idx_bytes({65536, 65536}, {}), gib / 16);
  CHECK(fs::file_size(promise) < 2u << 20);
  auto const promised = idx_error(promise, cap);
  CHECK(contains(promised, promise.string()));
  CHECK(contains(promised, "promise more than the 1048576 elements expected"));

  // An honest header within the cap, then the same gigabyte: read stops one byte past the data.
  auto const trailing = dir / "trailing.gz";
  write_gz_zeros(trailing, idx_bytes({cap}, {}), cap + gib);
  auto const longer = idx_error(trailing, cap);
  CHECK(contains(longer, trailing.string()));
  CHECK(contains(longer, "longer than its header says (1048576 bytes of data)"));

  // Fashion-MNIST states its own caps: 60,000 training images of 28 x 28.
  write_gz_zeros(dir / "train-images-idx3-ubyte.gz", idx_bytes({60001, 28, 28}, {}), gib / 16);
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({1}, {0}));
  auto const fashion = fashion_error(convoy::io::Split::train, dir.path);
  CHECK(contains(fashion, (dir / "train-images-idx3-ubyte.gz").string()));
  CHECK(contains(fashion, "sizes 60001 x 28 x 28 promise more than the 47040000 elements"));
}

TEST_CASE("a gzip file whose trailer is cut by 1 to 8 bytes is refused whatever its size") {
  TempDir dir("idx-trailer");
  // 24 MB of data: reads of 16 MiB chunks end exactly at the last data byte, where zlib's gzread
  // used to report a clean end of file although the trailer was missing.
  auto const whole = dir / "whole.gz";
  write_gz(whole, idx_bytes({300, 80000}, counting(300u * 80000u)));
  auto const compressed = bytes_of(whole);
  REQUIRE(read_idx(whole).data.size() == 300u * 80000u);
  for (std::size_t cut = 1; cut <= 8; ++cut) {
    CAPTURE(cut);
    auto const path = dir / ("cut-" + std::to_string(cut) + ".gz");
    write_bytes(path, std::string_view(compressed).substr(0, compressed.size() - cut));
    auto const message = idx_error(path);
    CHECK(contains(message, path.string()));
    CHECK(contains(message, "compressed stream truncated after 24000012 bytes of data"));
  }

  fs::path const real = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  std::error_code ignored;
  if (!fs::exists(real, ignored)) {
    MESSAGE("dataset-fashion-mnist is not installed (no " << real.string()
                                                          << "); skipping the real-file check");
    return;
  }
  auto const real_bytes = bytes_of(real);
  auto const path = dir / "train-images-idx3-ubyte.gz";
  write_bytes(path, std::string_view(real_bytes).substr(0, real_bytes.size() - 8));
  auto const message = idx_error(path);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "compressed stream truncated after 47040016 bytes of data"));
}

TEST_CASE("read_idx reads a gzip file of several members and refuses bytes after the last") {
  TempDir dir("idx-members");
  auto const data = idx_bytes({2, 4}, counting(8));
  auto const first = dir / "first.gz";
  auto const second = dir / "second.gz";
  write_gz(first, std::vector<std::uint8_t>(data.begin(), data.begin() + 7));
  write_gz(second, std::vector<std::uint8_t>(data.begin() + 7, data.end()));
  auto const joined = dir / "joined.gz";
  write_bytes(joined, bytes_of(first) + bytes_of(second));
  CHECK(read_idx(joined).data == counting(8));

  auto const padded = dir / "padded.gz";
  write_bytes(padded, bytes_of(first) + bytes_of(second) + std::string(4, '\0'));
  auto const message = idx_error(padded);
  CHECK(contains(message, padded.string()));
  CHECK(contains(message, "damaged compressed data"));
}

}  // namespace test_io_idx
