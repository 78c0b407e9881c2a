// BucketPlan: how the gradient arena is cut into buckets for a bucketed exchange. A bucket is a run
// of whole variables, contiguous in the arena, of at least the requested bytes (the last one may
// be smaller; one variable larger than that is a bucket alone). Buckets are cut from the last
// variable backwards, because a backward pass finishes the last layers first: bucket 0 is the
// first to be complete.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/variables.hpp"

namespace convoy::comm {

/// One bucket: variables [first_variable, last_variable] in declaration order, which occupy
/// elements [offset, offset + size) of the arenas.
struct Bucket {
  std::size_t first_variable = 0;
  std::size_t last_variable = 0;
  std::size_t offset = 0;
  std::size_t size = 0;
  friend bool operator==(Bucket const&, Bucket const&) = default;
};

class BucketPlan {
 public:
  /// Cuts `layout`'s variables into buckets of at least `bucket_bytes` bytes of float gradients.
  /// Throws Error for bucket_bytes 0 and for a layout without variables.
  BucketPlan(Variables const& layout, std::size_t bucket_bytes) {
    if (bucket_bytes == 0) throw Error("convoy: a bucket size of 0 bytes holds no gradient");
    auto const list = layout.list();
    if (list.empty()) {
      throw Error("convoy: the model '" + layout.scope() + "' has no variables to exchange");
    }
    bucket_of_.resize(list.size());
    std::size_t last = list.size() - 1, bytes = 0;
    for (std::size_t v = list.size(); v-- > 0;) {
      bytes += list[v].size * sizeof(float);
      bucket_of_[v] = buckets_.size();
      if (bytes >= bucket_bytes || v == 0) {
        buckets_.push_back(Bucket{.first_variable = v,
                                  .last_variable = last,
                                  .offset = list[v].offset,
                                  .size = list[last].offset + list[last].size - list[v].offset});
        last = v - 1;  // wraps at v == 0, where the loop ends
        bytes = 0;
      }
    }
  }

  /// In the order they complete during a backward pass: bucket 0 holds the last variables.
  std::span<Bucket const> buckets() const { return buckets_; }
  std::size_t size() const { return buckets_.size(); }
  Bucket const& operator[](std::size_t b) const { return buckets_[b]; }
  /// The bucket that holds variable `v` (declaration order).
  std::size_t bucket_of(std::size_t v) const { return bucket_of_.at(v); }

 private:
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
};

}  // namespace convoy::comm
