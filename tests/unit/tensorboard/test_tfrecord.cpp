// TFRecord framing and CRC32C as TensorBoard reads them: the CRC32C check values, the mask and its
// inverse, records written and read back, a changed byte or a cut file refused by name, and
// histograms bucketed as TensorFlow does. (The event file itself, read by TensorBoard's own
// reader: tests/tensorboard.)
#include <doctest/doctest.h>

#include <cfloat>
#include <convoy/tensorboard/crc32c.hpp>
#include <convoy/tensorboard/histogram.hpp>
#include <convoy/tensorboard/tfrecord.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace test_tensorboard_tfrecord {

using namespace convoy;
using namespace convoy::tensorboard;

TEST_CASE("CRC32C gives the Castagnoli check values, not zlib's CRC-32") {
  CHECK(crc32c(std::string_view("123456789")) == 0xE3069283u);  // zlib's crc32: 0xCBF43926
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);        // RFC 3720, B.4
  CHECK(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  CHECK(crc32c(std::string_view("")) == 0u);
  // Continuing from a prefix's CRC gives the CRC of the whole.
  CHECK(crc32c(std::string_view("56789"), crc32c(std::string_view("1234"))) == 0xE3069283u);
  for (std::uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) {
    CHECK(unmask_crc(mask_crc(crc)) == crc);
    CHECK(mask_crc(crc) != crc);
  }
}

TEST_CASE("records are length, masked CRC, data, masked CRC, and read back in order") {
  std::vector<std::string> const data{"first", "", std::string(1000, 'x'), std::string("\0a\0", 3)};
  std::stringstream file;
  for (auto const& d : data) write_record(file, d);
  std::string const bytes = file.str();
  std::size_t total = 0;
  for (auto const& d : data) total += 16 + d.size();
  REQUIRE(bytes.size() == total);
  // The first record's header: its length, little-endian, then the masked CRC of those 8 bytes.
  CHECK(bytes.substr(0, 8) == std::string("\x05\0\0\0\0\0\0\0", 8));
  std::uint32_t const header_crc = mask_crc(crc32c(bytes.substr(0, 8)));
  for (int i = 0; i < 4; ++i) {
    CHECK(static_cast<unsigned char>(bytes[8 + i]) == ((header_crc >> (8 * i)) & 0xFFu));
  }
  CHECK(bytes.substr(12, 5) == "first");
  std::istringstream in(bytes);
  for (auto const& d : data) {
    auto const record = read_record(in, "mem");
    REQUIRE(record);
    CHECK(*record == d);
  }
  CHECK_FALSE(read_record(in, "mem"));
}

TEST_CASE("a changed byte or a cut record is refused, naming the file") {
  std::stringstream file;
  write_record(file, "payload");
  std::string const good = file.str();

  std::string bad_data = good;
  bad_data[14] ^= 0x01;
  std::istringstream in_data(bad_data);
  CHECK_THROWS_WITH_AS(read_record(in_data, "run/events"),
                       doctest::Contains("'run/events': the CRC of a record's data"), Error);

  std::string bad_length = good;
  bad_length[0] = 6;
  std::istringstream in_length(bad_length);
  CHECK_THROWS_WITH_AS(read_record(in_length, "run/events"),
                       doctest::Contains("the CRC of a record length"), Error);

  std::istringstream cut(good.substr(0, good.size() - 2));
  CHECK_THROWS_WITH_AS(read_record(cut, "run/events"), doctest::Contains("truncated"), Error);
}

TEST_CASE("histograms use TensorFlow's buckets and collapse runs of empty ones") {
  auto const& limits = default_bucket_limits();
  REQUIRE(limits.size() % 2 == 1);
  std::size_t const zero = limits.size() / 2;
  CHECK(limits[zero] == 0.0);
  CHECK(limits[zero + 1] == 1e-12);
  CHECK(limits.back() == DBL_MAX);
  for (std::size_t i = 1; i <= zero; ++i) CHECK(limits[zero - i] == -limits[zero + i]);

  std::vector<float> const values{-1.0f, 0.0f, 0.5f, 0.5f, 2.0f};
  Histogram const h = histogram_of(values);
  CHECK(h.min == -1.0);
  CHECK(h.max == 2.0);
  CHECK(h.num == 5.0);
  CHECK(h.sum == doctest::Approx(2.0));
  CHECK(h.sum_squares == doctest::Approx(5.5));
  REQUIRE(h.bucket.size() == h.bucket_limit.size());
  double counted = 0.0;
  std::vector<double> full_limits, full_counts;
  for (std::size_t i = 0; i < h.bucket.size(); ++i) {
    counted += h.bucket[i];
    if (h.bucket[i] > 0) {
      full_limits.push_back(h.bucket_limit[i]);
      full_counts.push_back(h.bucket[i]);
    } else if (i + 1 < h.bucket.size()) {
      CHECK(h.bucket[i + 1] > 0);  // no two empty entries in a row
    }
  }
  CHECK(counted == 5.0);
  // -1 below the first limit above it, 0 below 1e-12, both 0.5 in one bucket, 2 in another.
  REQUIRE(full_counts == std::vector<double>{1, 1, 2, 1});
  CHECK(full_limits[0] > -1.0);
  CHECK(full_limits[0] < -1.0 / 1.1 + 1e-9);
  CHECK(full_limits[1] == 1e-12);
  CHECK(full_limits[2] > 0.5);
  CHECK(full_limits[2] <= 0.5 * 1.1);
  CHECK(full_limits[3] > 2.0);

  Histogram const empty = histogram_of({});
  CHECK(empty.num == 0.0);
  CHECK(empty.bucket_limit == std::vector<double>{DBL_MAX});
  CHECK(empty.bucket == std::vector<double>{0.0});
}

}  // namespace test_tensorboard_tfrecord
