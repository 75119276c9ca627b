// Every Jacobian column of EvaluateUpperTriangleRows against central finite differences
// (docs/model.md, Jacobian; docs/conventions.md habit 10), and the zero derivatives where floors
// are active.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "homodyne/model.h"

namespace homodyne {
namespace {

// One parameter point: physical parameters, then contrast and offset; the angles to test.
struct JacobianCase {
  std::string name;
  AnalysisMode mode;
  std::vector<double> parameters;  // num_physical() + 2 values
  std::vector<double> phi_degrees;
  bool time_grid_starts_at_zero;  // exercises the t = 0 guard
};

// Natural scale of each extended parameter where its value is near zero: the finite-difference
// step is 1e-4 times max(|value|, scale).
double ParameterScale(AnalysisMode mode, int p) {
  const int np = NumPhysicalParameters(mode);
  if (p == np || p == np + 1) return 0.1;  // contrast, offset
  switch (p) {
    case kD0:
      return 1.0;
    case kAlpha:
      return 0.1;
    case kDOffset:
      return 1.0;
    case kGammaDot0:
      return 1e-4;
    case kBeta:
      return 0.1;
    case kGammaDotOffset:
      return 1e-4;
    case kPhi0:
      return 1.0;  // degrees
    default:
      return 1.0;
  }
}

ScatteringGeometry TestGeometry() {
  ScatteringGeometry geometry;  // sinc prefactor 171.9, wq_dt 1.458e-6
  geometry.q_inv_angstrom = 0.0054;
  geometry.gap_angstrom = 2e6;
  geometry.dt_seconds = 0.1;
  return geometry;
}

HomodyneModel TestModel(AnalysisMode mode, bool starts_at_zero) {
  const ScatteringGeometry geometry = TestGeometry();
  std::vector<double> t;
  for (int k = starts_at_zero ? 0 : 1; k <= 40; ++k) t.push_back(k * geometry.dt_seconds);
  return HomodyneModel(mode, geometry, t);
}

// c2 on the packed upper triangle of one angle at the extended parameter vector.
std::vector<double> PackedC2(const HomodyneModel& model, const std::vector<double>& extended,
                             double phi, std::vector<double>* jacobian = nullptr) {
  const int np = model.num_physical();
  const int n = model.num_times();
  const std::size_t points = static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1) / 2;
  const ModelEvaluation evaluation(
      model, std::span<const double>(extended.data(), static_cast<std::size_t>(np)));
  std::vector<double> c2(points);
  if (jacobian != nullptr) {
    jacobian->assign(points * static_cast<std::size_t>(np + 2), 0.0);
  }
  evaluation.EvaluateUpperTriangleRows(
      phi, extended[static_cast<std::size_t>(np)], extended[static_cast<std::size_t>(np + 1)], 0, n,
      c2, jacobian != nullptr ? std::span<double>(*jacobian) : std::span<double>());
  return c2;
}

class JacobianTest : public ::testing::TestWithParam<JacobianCase> {};

TEST_P(JacobianTest, EveryColumnMatchesCentralDifferences) {
  const JacobianCase& test_case = GetParam();
  const HomodyneModel model = TestModel(test_case.mode, test_case.time_grid_starts_at_zero);
  const int np = model.num_physical();
  const std::size_t stride = static_cast<std::size_t>(np + 2);
  ASSERT_EQ(test_case.parameters.size(), stride);
  const double contrast = test_case.parameters[static_cast<std::size_t>(np)];

  for (double phi : test_case.phi_degrees) {
    std::vector<double> jacobian;
    const std::vector<double> c2 = PackedC2(model, test_case.parameters, phi, &jacobian);
    std::size_t checked = 0;
    for (int p = 0; p < np + 2; ++p) {
      // Five-point central difference: truncation O(h^4), negligible at h = 1e-4 scale.
      const double value = test_case.parameters[static_cast<std::size_t>(p)];
      const double h = 1e-4 * std::max(std::abs(value), ParameterScale(test_case.mode, p));
      std::vector<std::vector<double>> shifted;
      for (double multiple : {-2.0, -1.0, 1.0, 2.0}) {
        std::vector<double> extended = test_case.parameters;
        extended[static_cast<std::size_t>(p)] = value + multiple * h;
        shifted.push_back(PackedC2(model, extended, phi));
      }
      // Round-off of the stencil is ~5e-16 |c2| / h; the absolute floor is ~200 times that.
      const double absolute_floor = 1e-13 / h;
      for (std::size_t point = 0; point < c2.size(); ++point) {
        // Skip points on or next to the g1 floor (g1 <= 1e-9), where c2 is not smooth.
        const double offset = test_case.parameters[static_cast<std::size_t>(np + 1)];
        if ((c2[point] - offset) / contrast <= 1e-18) continue;
        const double finite_difference = (8.0 * (shifted[2][point] - shifted[1][point]) -
                                          (shifted[3][point] - shifted[0][point])) /
                                         (12.0 * h);
        const double analytic = jacobian[point * stride + static_cast<std::size_t>(p)];
        ASSERT_NEAR(analytic, finite_difference,
                    1e-6 * std::abs(finite_difference) + absolute_floor)
            << test_case.name << " phi=" << phi << " parameter " << p << " point " << point;
        ++checked;
      }
    }
    EXPECT_GT(checked, c2.size() * stride / 2) << "too many points skipped";
  }
}

const double kPi = 3.14159265358979323846;
// The sinc prefactor of TestGeometry() is 171.9; the shear rates below give phases up to ~15 at
// phi = phi0, so Phi crosses pi, 2 pi, ... along each row (points next to zeros of sin). The angle
// phi0 + 90 - 0.0057 deg puts cos(psi) ~ 1e-4, i.e. phases of order 1e-4 on short lags: both
// sides of the Taylor branch boundary |Phi| = 1e-4.
INSTANTIATE_TEST_SUITE_P(
    ParameterSets, JacobianTest,
    ::testing::Values(JacobianCase{"laminar_negative_alpha",
                                   AnalysisMode::kLaminarFlow,
                                   {2e4, -0.4, 50.0, 3e-3, 0.3, 2e-4, 12.5, 0.4, 1.02},
                                   {0.0, 12.5, 57.5, 12.5 + 90.0 - 0.0057, -100.0},
                                   true},
                      JacobianCase{"laminar_negative_beta",
                                   AnalysisMode::kLaminarFlow,
                                   {8e3, 0.6, -30.0, 2e-3, -0.3, 5e-4, -30.0, 0.25, 0.97},
                                   {-30.0, 0.0, 60.0, -30.0 + 90.0 - 0.0057, 150.0},
                                   false},
                      JacobianCase{
                          "laminar_fast_shear",
                          AnalysisMode::kLaminarFlow,
                          {1e3, 0.0, 0.0, 0.5 / 171.9 * kPi / 40.0 * 4.0, 0.0, 0.0, 3.0, 0.5, 1.0},
                          {3.0, 40.0, 3.0 + 90.0 - 0.0057},
                          true},
                      JacobianCase{"static_negative_alpha",
                                   AnalysisMode::kStatic,
                                   {1e3, -1.2, -20.0, 0.3, 1.05},
                                   {0.0},
                                   true},
                      JacobianCase{"static_positive_alpha",
                                   AnalysisMode::kStatic,
                                   {2e4, 0.5, 3.0, 0.6, 0.99},
                                   {45.0},
                                   false}),
    [](const ::testing::TestParamInfo<JacobianCase>& param_info) { return param_info.param.name; });

TEST(JacobianFloorsTest, ClipAndG1FloorGiveZeroPhysicalDerivatives) {
  // wq_dt * M_D ~ 1.458e-6 * 1e9 per step: log g1d is clipped at -700 for every lag, and
  // g1 = exp(-700) is floored at 1e-10.
  const HomodyneModel model = TestModel(AnalysisMode::kStatic, true);
  std::vector<double> jacobian;
  const std::vector<double> c2 = PackedC2(model, {1e9, 0.2, 5.0, 0.5, 1.0}, 0.0, &jacobian);
  for (std::size_t point = 0; point < c2.size(); ++point) {
    EXPECT_EQ(c2[point], 1.0 + 0.5 * 1e-20);
    for (std::size_t p = 0; p < 3; ++p) EXPECT_EQ(jacobian[point * 5 + p], 0.0);
    EXPECT_DOUBLE_EQ(jacobian[point * 5 + 3], 1e-20);
    EXPECT_EQ(jacobian[point * 5 + 4], 1.0);
  }
}

TEST(JacobianFloorsTest, RateFloorGivesZeroRateDerivatives) {
  // D(t) = max(1 * ts^0 - 100, 1e-10) = 1e-10: c2 still depends on nothing physical.
  const HomodyneModel model = TestModel(AnalysisMode::kLaminarFlow, true);
  std::vector<double> jacobian;
  const std::vector<double> c2 =
      PackedC2(model, {1.0, 0.0, -100.0, 1e-3, 0.0, 0.0, 0.0, 0.5, 1.0}, 10.0, &jacobian);
  bool some_shear_derivative = false;
  for (std::size_t point = 0; point < c2.size(); ++point) {
    for (std::size_t p = 0; p < 3; ++p) EXPECT_EQ(jacobian[point * 9 + p], 0.0);
    some_shear_derivative = some_shear_derivative || jacobian[point * 9 + kGammaDot0] != 0.0;
  }
  EXPECT_TRUE(some_shear_derivative);
}

}  // namespace
}  // namespace homodyne
