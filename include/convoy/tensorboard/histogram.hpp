// Histogram: the summary of a tensor's values that TensorBoard draws, bucketed exactly as
// TensorFlow's tf.summary.histogram (TF 1) does: exponential bucket limits growing by 1.1 from
// 1e-12 to 1e20 on both sides of zero, runs of empty buckets collapsed into one.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <span>
#include <vector>

namespace convoy::tensorboard {

/// TensorFlow's default bucket limits (1549 of them), ascending, the last DBL_MAX. Each bucket
/// holds the values below its limit and at or above the previous one.
inline std::vector<double> const& default_bucket_limits() {
  static std::vector<double> const limits = [] {
    std::vector<double> positive;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * positive.size() + 1);
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

/// The fields of TensorBoard's HistogramProto. `bucket_limit` and `bucket` have one entry per
/// non-empty bucket and per run of empty ones (that run's last limit, count 0).
struct Histogram {
  double min = DBL_MAX;
  double max = -DBL_MAX;
  double num = 0.0;
  double sum = 0.0;
  double sum_squares = 0.0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

/// The histogram of `values`. Pure; any thread.
inline Histogram histogram_of(std::span<float const> values) {
  auto const& limits = default_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  Histogram h;
  for (float f : values) {
    double const v = f;
    auto b = static_cast<std::size_t>(std::upper_bound(limits.begin(), limits.end(), v) -
                                      limits.begin());
    counts[std::min(b, limits.size() - 1)] += 1.0;  // +inf and NaN land in the last bucket
    h.min = std::min(h.min, v);
    h.max = std::max(h.max, v);
    h.num += 1.0;
    h.sum += v;
    h.sum_squares += v * v;
  }
  for (std::size_t i = 0; i < counts.size();) {
    double end = limits[i];
    double count = counts[i];
    ++i;
    if (count <= 0.0) {  // one entry for a run of empty buckets, as TensorFlow encodes it
      while (i < counts.size() && counts[i] <= 0.0) end = limits[i++];
    }
    h.bucket_limit.push_back(end);
    h.bucket.push_back(count);
  }
  return h;
}

}  // namespace convoy::tensorboard
