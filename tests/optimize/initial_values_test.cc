// Starting values: bound midpoints, configured values, the quantile estimator of contrast/offset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

}  // namespace
}  // namespace homodyne
