// Records: the {name, shape, data} sequence weights files and checkpoints hold, saved and loaded
// through any cereal archive. Needs only cereal's core; each file format includes the archive it
// writes (weights.hpp all three, the checkpoints only the portable binary one).
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../core/variables.hpp"

namespace convoy::io {

namespace detail {

// Binary archives drop NVP names and read sizes straight from the bytes; JSON reads sizes from a
// parsed document. The two need different guards on load (see load_sequence).
template <class Archive>
inline constexpr bool reads_binary =
    cereal::traits::is_input_serializable<cereal::BinaryData<char>, Archive>::value;
template <class Archive>
inline constexpr bool writes_binary =
    cereal::traits::is_output_serializable<cereal::BinaryData<char>, Archive>::value;

template <class T>
struct is_flat_sequence : std::false_type {};
template <>
struct is_flat_sequence<std::string> : std::true_type {};
template <class T>
requires std::is_arithmetic_v<T> &&
    (!std::is_same_v<T, bool>)struct is_flat_sequence<std::vector<T>> : std::true_type {
};

// Elements read per step of load_sequence: 4 MiB, so a damaged size field costs at most that much
// memory before the read fails, while a genuine large tensor still loads in few calls.
inline constexpr std::size_t load_chunk_bytes = std::size_t{4} << 20;

// Reads a string or arithmetic vector written by cereal's own save (a size tag, then the raw
// elements) from a binary archive. cereal's load would resize to whatever size the bytes claim,
// and a garbage file would then allocate (and zero) terabytes; here memory grows only as bytes
// actually arrive, so a lying size ends in cereal's "failed to read" exception.
template <class Archive, class Sequence>
void load_sequence(Archive& ar, Sequence& out) {
  using Value = typename Sequence::value_type;
  constexpr std::size_t chunk = load_chunk_bytes / sizeof(Value);
  cereal::size_type size = 0;
  ar(cereal::make_size_tag(size));
  out.clear();
  out.reserve(static_cast<std::size_t>(std::min<cereal::size_type>(size, chunk)));
  while (out.size() < size) {
    std::size_t const done = out.size();
    auto const take = static_cast<std::size_t>(std::min<cereal::size_type>(size - done, chunk));
    out.resize(done + take);
    ar(cereal::binary_data(out.data() + done, take * sizeof(Value)));
  }
}

// One field of a record: guarded for binary archives, by name for the others.
template <class Archive, class T>
void load_field(Archive& ar, char const* name, T& value) {
  if constexpr (reads_binary<Archive> && is_flat_sequence<T>::value) {
    load_sequence(ar, value);
  } else {
    ar(cereal::make_nvp(name, value));
  }
}

// Saves a span exactly as cereal saves a std::vector of the same elements, so one loader reads
// both and JSON shows an ordinary array.
template <class T>
struct SpanView {
  std::span<T const> values;

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(values.size())));
    if constexpr (writes_binary<Archive>) {
      ar(cereal::binary_data(values.data(), values.size_bytes()));
    } else {
      for (T const& v : values) ar(v);
    }
  }
};

// The one place a record's layout is written: NamedTensor and the no-copy views below share it.
template <class Archive>
void save_record(Archive& ar, std::string const& name, std::span<std::uint64_t const> shape,
                 std::span<float const> data) {
  ar(cereal::make_nvp("name", name), cereal::make_nvp("shape", SpanView<std::uint64_t>{shape}),
     cereal::make_nvp("data", SpanView<float>{data}));
}

}  // namespace detail

/// One record of a weights file or checkpoint: a tensor and its variable's full name. Files hold
/// an ordered sequence of these because binary archives drop cereal's NVP names; matching by the
/// stored name lets binary and JSON files be checked the same way. Loading from a binary archive
/// never allocates more than the bytes actually present (plus 4 MiB), whatever the sizes claim.
struct NamedTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> data;

  template <class Archive>
  void save(Archive& ar) const {
    detail::save_record(ar, name, shape, data);
  }
  template <class Archive>
  void load(Archive& ar) {
    detail::load_field(ar, "name", name);
    detail::load_field(ar, "shape", shape);
    detail::load_field(ar, "data", data);
  }

  friend bool operator==(NamedTensor const&, NamedTensor const&) = default;
};

namespace detail {

// A record to be written, pointing into a map or a Variables arena instead of copying the floats.
struct RecordView {
  std::string const* name;
  std::vector<std::uint64_t> shape;
  std::span<float const> data;

  template <class Archive>
  void save(Archive& ar) const {
    save_record(ar, *name, shape, data);
  }
};

inline std::vector<std::uint64_t> to_dims(Shape const& shape) {
  return {shape.begin(), shape.end()};
}

inline std::vector<RecordView> record_views(std::map<std::string, Tensor> const& named) {
  std::vector<RecordView> views;
  views.reserve(named.size());
  for (auto const& [name, tensor] : named)
    views.push_back({&name, to_dims(tensor.shape), tensor.data});
  return views;
}

inline std::vector<RecordView> record_views(Variables const& vars) {
  std::vector<RecordView> views;
  views.reserve(vars.size());
  for (auto const& v : vars.list()) {
    views.push_back({&v.name, to_dims(v.shape), vars.weights().subspan(v.offset, v.size)});
  }
  return views;
}

// The sequence of records, written like a std::vector<NamedTensor>.
struct RecordsOut {
  std::vector<RecordView> const& records;

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(records.size())));
    for (auto const& r : records) ar(r);
  }
};

// Reads records one at a time into a map: never sized up front from the file, since a damaged
// binary count would otherwise allocate before the first record is read. Its LoadError messages
// lack the "convoy: <source>" prefix, which only the caller knows.
struct RecordsIn {
  std::map<std::string, Tensor>& named;

  template <class Archive>
  void load(Archive& ar) {
    cereal::size_type count = 0;
    ar(cereal::make_size_tag(count));
    for (cereal::size_type i = 0; i < count; ++i) {
      NamedTensor record;
      ar(record);
      std::size_t expected = 1;
      bool overflow = false;
      Shape shape;
      shape.reserve(record.shape.size());
      for (auto dim : record.shape) {
        overflow = overflow || dim > std::numeric_limits<std::size_t>::max() ||
                   (dim != 0 && expected > std::numeric_limits<std::size_t>::max() / dim);
        if (!overflow) expected *= static_cast<std::size_t>(dim);
        shape.push_back(static_cast<std::size_t>(dim));
      }
      if (overflow || expected != record.data.size()) {
        throw LoadError("record '" + record.name + "' has shape " + to_string(shape) +
                        (overflow ? " (too large)" : " (" + std::to_string(expected) + " values)") +
                        " but holds " + std::to_string(record.data.size()) + " values");
      }
      auto const name = record.name;
      if (!named.try_emplace(name, Tensor{std::move(shape), std::move(record.data)}).second) {
        throw LoadError("record '" + name + "' appears twice");
      }
    }
  }
};

template <class Archive>
void save_records(Archive& ar, char const* name, std::vector<RecordView> const& records) {
  ar(cereal::make_nvp(name, RecordsOut{records}));
}

template <class Archive>
void load_records(Archive& ar, char const* name, std::map<std::string, Tensor>& named) {
  ar(cereal::make_nvp(name, RecordsIn{named}));
}

}  // namespace detail

}  // namespace convoy::io
