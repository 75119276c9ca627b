#include "optimize/initial_values.h"

#include <algorithm>
#include <cmath>

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
  std::vector<double> all, far, near;
  size_t index = 0;
  for (int i : rows) {
    for (int j = i + 1; j < n_times && index < values.size(); ++j, ++index) {
      const double value = values[index];
      if (!std::isfinite(value)) continue;
      all.push_back(value);
      if (j - i >= lag_high) far.push_back(value);
      if (j - i <= lag_low) near.push_back(value);
    }
  }
  if (all.size() < 100) return midpoints;
  std::vector<double> all_copy = all;
  const double offset = far.size() >= 10 ? Percentile(far, 10.0) : Percentile(all, 10.0);
  const double ceiling = near.size() >= 10 ? Percentile(near, 90.0) : Percentile(all_copy, 90.0);
  ScalingEstimate estimate;
  estimate.offset = std::clamp(offset, offset_bound.min, offset_bound.max);
  estimate.contrast = std::clamp(ceiling - estimate.offset, contrast_bound.min, contrast_bound.max);
  return estimate;
}

}  // namespace homodyne
