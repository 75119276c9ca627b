#include "optimize/initial_values.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "homodyne/dataset.h"

namespace homodyne {

std::vector<double> InitialPhysicalParameters(const Config& config) {
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  std::vector<double> values;
  values.reserve(names.size());
  for (const std::string& name : names) {
    const ParameterBound& bound = config.BoundOf(name);
    double value = 0.5 * (bound.min + bound.max);
    if (config.initial.values) {
      const std::vector<std::string>& given = config.initial.parameter_names;
      for (size_t k = 0; k < given.size() && k < config.initial.values->size(); ++k) {
        if (given[k] == name) value = (*config.initial.values)[k];
      }
    }
    values.push_back(value);
  }
  return values;
}

double Percentile(std::vector<double>& values, double q) {
  if (values.empty()) return std::nan("");
  const double position = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(below),
                   values.end());
  const double low = values[below];
  if (above == below) return low;
  // The next order statistic is the minimum of the part after `below`.
  const double high =
      *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(above), values.end());
  return low + (position - static_cast<double>(below)) * (high - low);
}

namespace {

// The lag (in frames) at percentile q of all upper-triangle lags: lag d occurs n - d times.
double LagPercentile(int n_times, double q) {
  const int64_t total = UpperTriangleSize(n_times);
  const double position = q / 100.0 * static_cast<double>(total - 1);
  // Lags sorted ascending: d = 1 (n-1 times), d = 2 (n-2 times), ...
  auto lag_at = [n_times](int64_t index) {
    int64_t seen = 0;
    for (int d = 1; d < n_times; ++d) {
      seen += n_times - d;
      if (index < seen) return static_cast<double>(d);
    }
    return static_cast<double>(n_times - 1);
  };
  const int64_t below = static_cast<int64_t>(std::floor(position));
  const double low = lag_at(below);
  const double high = lag_at(std::min(below + 1, total - 1));
  return low + (position - static_cast<double>(below)) * (high - low);
}

}  // namespace

ScalingEstimate EstimateScalingFromData(std::span<const float> packed_upper, int n_times,
                                        const ParameterBound& contrast_bound,
                                        const ParameterBound& offset_bound) {
  std::vector<int> rows(static_cast<size_t>(std::max(n_times, 0)));
  for (int i = 0; i < n_times; ++i) rows[static_cast<size_t>(i)] = i;
  return EstimateScalingFromRows(packed_upper, rows, n_times, contrast_bound, offset_bound);
}

ScalingEstimate EstimateScalingFromRows(std::span<const float> values, std::span<const int> rows,
                                        int n_times, const ParameterBound& contrast_bound,
                                        const ParameterBound& offset_bound) {
  const ScalingEstimate midpoints{0.5 * (contrast_bound.min + contrast_bound.max),
                                  0.5 * (offset_bound.min + offset_bound.max)};
  if (n_times < 2) return midpoints;
  const double lag_high = LagPercentile(n_times, 80.0);
  const double lag_low = LagPercentile(n_times, 20.0);
  // The far and near lags' values; every finite value (a copy of the data as doubles, twice) only
  // when one of them has fewer than 10, which short rows give. The same values in the same order
  // either way.
  std::vector<double> far, near;
  size_t finite = 0;
  size_t index = 0;
  for (int i : rows) {
    for (int j = i + 1; j < n_times && index < values.size(); ++j, ++index) {
      const double value = values[index];
      if (!std::isfinite(value)) continue;
      ++finite;
      if (j - i >= lag_high) far.push_back(value);
      if (j - i <= lag_low) near.push_back(value);
    }
  }
  if (finite < 100) return midpoints;
  std::vector<double> all, all_copy;
  if (far.size() < 10 || near.size() < 10) {
    all.reserve(finite);
    index = 0;
    for (int i : rows) {
      for (int j = i + 1; j < n_times && index < values.size(); ++j, ++index) {
        const double value = values[index];
        if (std::isfinite(value)) all.push_back(value);
      }
    }
    all_copy = all;
  }
  const double offset = far.size() >= 10 ? Percentile(far, 10.0) : Percentile(all, 10.0);
  const double ceiling = near.size() >= 10 ? Percentile(near, 90.0) : Percentile(all_copy, 90.0);
  ScalingEstimate estimate;
  estimate.offset = std::clamp(offset, offset_bound.min, offset_bound.max);
  estimate.contrast = std::clamp(ceiling - estimate.offset, contrast_bound.min, contrast_bound.max);
  return estimate;
}

namespace {

// The float's place in the order of floats, as an unsigned integer (-0 just below +0; no NaN
// here), and back.
uint32_t OrderedKey(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}
float FromOrderedKey(uint32_t key) {
  return std::bit_cast<float>((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

// The k-th smallest (0-based) of the values of every rank together: the key's bytes are chosen
// from the most significant down, each from the ranks' summed counts of the values that share the
// bytes chosen so far (counts are exact in doubles). Collective.
double KthSmallestOverRanks(std::span<const float> values, int64_t k, ProcessGroup& group) {
  constexpr int kBins = 256;
  std::vector<double> mine(kBins);
  std::vector<double> all(static_cast<size_t>(kBins) * static_cast<size_t>(group.size()));
  const std::vector<int> counts(static_cast<size_t>(group.size()), kBins);
  uint64_t prefix = 0;  // the key's bytes chosen so far
  for (int shift = 24; shift >= 0; shift -= 8) {
    std::fill(mine.begin(), mine.end(), 0.0);
    for (float value : values) {
      const uint32_t key = OrderedKey(value);
      if ((static_cast<uint64_t>(key) >> (shift + 8)) == prefix) mine[(key >> shift) & 0xffu] += 1;
    }
    group.AllGather(mine, counts, all);
    int64_t before = 0;
    int chosen = kBins - 1;
    for (int bin = 0; bin < kBins; ++bin) {
      int64_t count = 0;
      for (int r = 0; r < group.size(); ++r) {
        count += static_cast<int64_t>(all[static_cast<size_t>(r * kBins + bin)]);
      }
      if (k < before + count) {
        chosen = bin;
        break;
      }
      before += count;
    }
    k -= before;
    prefix = (prefix << 8) | static_cast<uint64_t>(chosen);
  }
  return static_cast<double>(FromOrderedKey(static_cast<uint32_t>(prefix)));
}

// Percentile's value on the values of every rank together (total of them, >= 1): the same
// order statistics and the same interpolation, so the same double. The sign of a zero order
// statistic (std::nth_element may return either zero) cannot change it: below the last
// position, low + t (high - low) is +0 whenever low is a zero and the term is zero.
double PercentileOverRanks(std::span<const float> values, int64_t total, double q,
                           ProcessGroup& group) {
  const double position = q / 100.0 * static_cast<double>(total - 1);
  const int64_t below = static_cast<int64_t>(std::floor(position));
  const int64_t above = std::min(below + 1, total - 1);
  const double low = KthSmallestOverRanks(values, below, group);
  if (above == below) return low;
  const double high = KthSmallestOverRanks(values, above, group);
  return low + (position - static_cast<double>(below)) * (high - low);
}

}  // namespace

ScalingEstimate EstimateScalingOverRanks(std::span<const float> values, std::span<const int> rows,
                                         int n_times, const ParameterBound& contrast_bound,
                                         const ParameterBound& offset_bound, ProcessGroup& group) {
  const ScalingEstimate midpoints{0.5 * (contrast_bound.min + contrast_bound.max),
                                  0.5 * (offset_bound.min + offset_bound.max)};
  if (n_times < 2) return midpoints;
  const double lag_high = LagPercentile(n_times, 80.0);
  const double lag_low = LagPercentile(n_times, 20.0);
  // As EstimateScalingFromRows, this rank's part (floats: the values are floats).
  std::vector<float> far, near;
  int64_t finite = 0;
  size_t index = 0;
  for (int i : rows) {
    for (int j = i + 1; j < n_times && index < values.size(); ++j, ++index) {
      const float value = values[index];
      if (!std::isfinite(value)) continue;
      ++finite;
      if (j - i >= lag_high) far.push_back(value);
      if (j - i <= lag_low) near.push_back(value);
    }
  }
  const std::vector<double> mine = {static_cast<double>(finite), static_cast<double>(far.size()),
                                    static_cast<double>(near.size())};
  const std::vector<int> counts(static_cast<size_t>(group.size()), 3);
  std::vector<double> gathered(static_cast<size_t>(3 * group.size()));
  group.AllGather(mine, counts, gathered);
  int64_t total_all = 0, total_far = 0, total_near = 0;
  for (int r = 0; r < group.size(); ++r) {
    total_all += static_cast<int64_t>(gathered[static_cast<size_t>(3 * r)]);
    total_far += static_cast<int64_t>(gathered[static_cast<size_t>(3 * r + 1)]);
    total_near += static_cast<int64_t>(gathered[static_cast<size_t>(3 * r + 2)]);
  }
  if (total_all < 100) return midpoints;
  std::vector<float> all;  // only for the fallbacks of tiny data
  if (total_far < 10 || total_near < 10) {
    for (float value : values) {
      if (std::isfinite(value)) all.push_back(value);
    }
  }
  const double offset = total_far >= 10 ? PercentileOverRanks(far, total_far, 10.0, group)
                                        : PercentileOverRanks(all, total_all, 10.0, group);
  const double ceiling = total_near >= 10 ? PercentileOverRanks(near, total_near, 90.0, group)
                                          : PercentileOverRanks(all, total_all, 90.0, group);
  ScalingEstimate estimate;
  estimate.offset = std::clamp(offset, offset_bound.min, offset_bound.max);
  estimate.contrast = std::clamp(ceiling - estimate.offset, contrast_bound.min, contrast_bound.max);
  return estimate;
}

}  // namespace homodyne
