// Starting values: bound midpoints, configured values, the quantile estimator of contrast/offset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "homodyne/dataset.h"
#include "optimize/initial_values.h"

namespace homodyne {
namespace {

Config StaticConfig() {
  Config config;
  config.analysis_mode = AnalysisMode::kStatic;
  config.bounds = {{"D0", 100.0, 1e5},
                   {"alpha", -2.0, 2.0},
                   {"D_offset", -1e5, 1e5},
                   {"contrast", 0.0, 1.0},
                   {"offset", 0.5, 1.5}};
  return config;
}

TEST(PercentileTest, MatchesNumpyLinearInterpolation) {
  std::vector<double> values = {4, 1, 3, 2, 5};
  EXPECT_DOUBLE_EQ(Percentile(values, 50.0), 3.0);
  values = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(values, 10.0), 1.3);  // numpy.percentile([1,2,3,4], 10) = 1.3
  values = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(values, 90.0), 3.7);
  values.clear();
  EXPECT_TRUE(std::isnan(Percentile(values, 50.0)));
}

TEST(InitialPhysicalParametersTest, MidpointsUnlessGivenByName) {
  Config config = StaticConfig();
  EXPECT_EQ(InitialPhysicalParameters(config), (std::vector<double>{50050.0, 0.0, 0.0}));
  config.initial.parameter_names = {"alpha", "D0"};
  config.initial.values = std::vector<double>{-0.7, 1200.0};
  EXPECT_EQ(InitialPhysicalParameters(config), (std::vector<double>{1200.0, -0.7, 0.0}));
}

TEST(EstimateScalingFromDataTest, RecoversContrastAndOffsetOfADecay) {
  // c2 = 1.02 + 0.3 exp(-lag / 5): far lags sit at the offset, short lags near offset + contrast.
  const int n = 200;
  std::vector<float> packed;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      packed.push_back(static_cast<float>(1.02 + 0.3 * std::exp(-(j - i) / 5.0)));
    }
  }
  const ScalingEstimate estimate =
      EstimateScalingFromData(packed, n, {"contrast", 0.0, 1.0}, {"offset", 0.5, 1.5});
  EXPECT_NEAR(estimate.offset, 1.02, 1e-6);
  // The ceiling is the 90th percentile of c2 over the shortest 20% of lags (lags 1..22 here,
  // 200 - d points each), computed independently by sorting.
  std::vector<double> near;
  for (int d = 1; d <= 22; ++d) {
    for (int k = 0; k < n - d; ++k) {
      near.push_back(static_cast<float>(1.02 + 0.3 * std::exp(-d / 5.0)));
    }
  }
  std::sort(near.begin(), near.end());
  const double position = 0.9 * static_cast<double>(near.size() - 1);
  const size_t below = static_cast<size_t>(position);
  const double ceiling =
      near[below] + (position - static_cast<double>(below)) * (near[below + 1] - near[below]);
  EXPECT_NEAR(estimate.contrast, ceiling - estimate.offset, 1e-9);
  EXPECT_GT(estimate.contrast, 0.1);
}

TEST(EstimateScalingFromDataTest, ClipsToBoundsAndFallsBackToMidpoints) {
  const int n = 60;
  std::vector<float> packed(static_cast<size_t>(UpperTriangleSize(n)), 3.0f);
  const ScalingEstimate clipped =
      EstimateScalingFromData(packed, n, {"contrast", 0.0, 1.0}, {"offset", 0.5, 1.5});
  EXPECT_DOUBLE_EQ(clipped.offset, 1.5);
  EXPECT_DOUBLE_EQ(clipped.contrast, 1.0);
  std::vector<float> few(static_cast<size_t>(UpperTriangleSize(10)), 1.0f);  // 45 < 100 points
  const ScalingEstimate midpoints =
      EstimateScalingFromData(few, 10, {"contrast", 0.0, 1.0}, {"offset", 0.5, 1.5});
  EXPECT_DOUBLE_EQ(midpoints.contrast, 0.5);
  EXPECT_DOUBLE_EQ(midpoints.offset, 1.0);
}

// EstimateScalingFromRows as it was written before it stopped copying every value (the values of
// all lags only where the far or near lags have fewer than 10), for the test below.
ScalingEstimate EstimateScalingCopyingEveryValue(std::span<const float> values,
                                                 std::span<const int> rows, int n_times,
                                                 const ParameterBound& contrast_bound,
                                                 const ParameterBound& offset_bound) {
  const ScalingEstimate midpoints{0.5 * (contrast_bound.min + contrast_bound.max),
                                  0.5 * (offset_bound.min + offset_bound.max)};
  // LagPercentile(n, q): lag d occurs n - d times.
  auto lag_percentile = [n_times](double q) {
    std::vector<double> lags;
    for (int d = 1; d < n_times; ++d) lags.insert(lags.end(), static_cast<size_t>(n_times - d), d);
    return Percentile(lags, q);
  };
  const double lag_high = lag_percentile(80.0);
  const double lag_low = lag_percentile(20.0);
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

TEST(EstimateScalingFromRowsTest, SameEstimateAsCopyingEveryValue) {
  // Noisy decays with non-finite points, on every row, on every third row, and on short rows at
  // the end only (no far lag among them: the offset from every value), bitwise.
  const int n = 200;
  std::mt19937 generator(5);
  std::normal_distribution<double> noise(0.0, 0.02);
  const std::vector<std::vector<int>> row_sets = {[] {
                                                    std::vector<int> r;
                                                    for (int i = 0; i < 200; ++i) r.push_back(i);
                                                    return r;
                                                  }(),
                                                  [] {
                                                    std::vector<int> r;
                                                    for (int i = 0; i < 199; i += 3) r.push_back(i);
                                                    return r;
                                                  }(),
                                                  [] {
                                                    std::vector<int> r;
                                                    for (int i = 150; i < 199; ++i) r.push_back(i);
                                                    return r;
                                                  }()};
  for (const std::vector<int>& rows : row_sets) {
    std::vector<float> values;
    for (int i : rows) {
      for (int j = i + 1; j < n; ++j) {
        const double c2 = 1.02 + 0.3 * std::exp(-(j - i) / 20.0) + noise(generator);
        values.push_back((i * 7 + j) % 97 == 0 ? std::nanf("") : static_cast<float>(c2));
      }
    }
    const ParameterBound contrast{"contrast", 0.0, 1.0}, offset{"offset", 0.5, 1.5};
    const ScalingEstimate got = EstimateScalingFromRows(values, rows, n, contrast, offset);
    const ScalingEstimate expected =
        EstimateScalingCopyingEveryValue(values, rows, n, contrast, offset);
    EXPECT_EQ(got.offset, expected.offset) << rows.size() << " rows";
    EXPECT_EQ(got.contrast, expected.contrast) << rows.size() << " rows";
    EXPECT_GT(got.contrast, 0.1);
  }
}

}  // namespace
}  // namespace homodyne
