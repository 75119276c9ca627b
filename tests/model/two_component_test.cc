// Tests of the two-component (heterodyne) model (src/model/two_component/; docs/model.md,
// Two-component mode): the successor package's own residual fixture to 1e-10, the analytic
// Jacobian against central finite differences on grids with t starting at 0 and at dt (alpha = 0
// and v_beta = 0: the 0^0 rule; fractions near 0 and 1: the soft clip), and the mode's catalog
// entry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/mode_catalog.h"

namespace homodyne {
namespace {

constexpr int kPhysical = 14;

std::vector<double> Linspace(double first, double last, int n) {
  std::vector<double> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + (last - first) * i / (n - 1);
  return t;
}

TEST(TwoComponentModelTest, NamesAliasesAndParameters) {
  EXPECT_EQ(ParseAnalysisMode("two_component"), AnalysisMode::kTwoComponent);
  EXPECT_EQ(ParseAnalysisMode("Heterodyne"), AnalysisMode::kTwoComponent);
  EXPECT_EQ(ToString(AnalysisMode::kTwoComponent), "two_component");
  EXPECT_EQ(NumPhysicalParameters(AnalysisMode::kTwoComponent), kPhysical);
  const std::vector<std::string> expected = {
      "D0_ref", "alpha_ref", "D_offset_ref", "D0_sample", "alpha_sample", "D_offset_sample",
      "v0",     "v_beta",    "v_offset",     "f0",        "f1",           "f2",
      "f3",     "phi0_het"};
  EXPECT_EQ(PhysicalParameterNames(AnalysisMode::kTwoComponent), expected);
  // The successor's registry bounds (docs/model.md, Bounds and start values).
  const ParameterDefinition* v0 = FindParameterDefinition("v0");
  ASSERT_NE(v0, nullptr);
  EXPECT_EQ(v0->default_min, 0.0);
  EXPECT_EQ(v0->default_max, 1e6);
  EXPECT_THROW(ParseAnalysisMode("three_component"), ConfigError);
}

// The successor's fixture (tests/data/two_component_residuals.json): c2_model - c2 at the cells
// i > 0, j > 0, i != j, row-major, angle after angle, to rtol 1e-10 (its own test's tolerance).
TEST(TwoComponentModelTest, MatchesTheSuccessorsResidualFixture) {
  std::ifstream file(HOMODYNE_TEST_DATA_DIR "/two_component_residuals.json");
  ASSERT_TRUE(file) << "tests/data/two_component_residuals.json";
  const nlohmann::json fixture = nlohmann::json::parse(file);
  const nlohmann::json& spec = fixture["spec"];
  const int n = spec["N"];
  ScatteringGeometry geometry;
  geometry.q_inv_angstrom = spec["q"];
  geometry.dt_seconds = spec["dt"];
  const HomodyneModel model(AnalysisMode::kTwoComponent, geometry,
                            Linspace(0.0, spec["t_max"].get<double>(), n));
  const std::vector<double> params = spec["params"];
  const ModelEvaluation evaluation(model, params);
  const std::vector<double> upstream = fixture["upstream_residuals"];
  const std::vector<std::vector<std::vector<double>>> c2_data = fixture["c2"];
  std::vector<double> c2(static_cast<size_t>(n * n));
  size_t next = 0;
  for (size_t k = 0; k < spec["phi_angles"].size(); ++k) {
    evaluation.ComputeC2Matrix(spec["phi_angles"][k], spec["contrasts"][k], spec["offsets"][k], c2);
    for (int i = 1; i < n; ++i) {
      for (int j = 1; j < n; ++j) {
        if (i == j) continue;
        ASSERT_LT(next, upstream.size());
        const double residual = c2[static_cast<size_t>(i * n + j)] - c2_data[k][i][j];
        EXPECT_NEAR(residual, upstream[next], 1e-12 + 1e-10 * std::abs(upstream[next]))
            << "angle " << k << " cell (" << i << ", " << j << ")";
        ++next;
      }
    }
  }
  EXPECT_EQ(next, upstream.size());
}

struct JacobianCase {
  std::string name;
  std::vector<double> times;
  std::vector<double> params;
  double dt = 0.1;
  double q = 0.0054;
};

// The analytic Jacobian of EvaluateUpperTriangleRows against central differences with a step
// relative to each parameter, on every upper-triangle point of two angles, relative to the
// column's largest entry.
void ExpectJacobianMatchesFiniteDifferences(const JacobianCase& c) {
  SCOPED_TRACE(c.name);
  ScatteringGeometry geometry;
  geometry.q_inv_angstrom = c.q;
  geometry.dt_seconds = c.dt;
  const int n = static_cast<int>(c.times.size());
  const HomodyneModel model(AnalysisMode::kTwoComponent, geometry, c.times);
  const int m = model.num_point_derivatives();
  ASSERT_EQ(m, kPhysical + 2);
  const size_t points = static_cast<size_t>(UpperTriangleSize(n));
  for (double phi : {3.0, 60.0}) {
    const double contrast = 0.4, offset = 1.0;
    const ModelEvaluation evaluation(model, c.params);
    std::vector<double> c2(points), jacobian(points * static_cast<size_t>(m));
    evaluation.EvaluateUpperTriangleRows(phi, contrast, offset, 0, n, c2, jacobian);
    for (int p = 0; p < kPhysical; ++p) {
      const double h = 1e-5 * std::max(std::abs(c.params[static_cast<size_t>(p)]), 0.1);
      std::vector<double> plus = c.params, minus = c.params;
      plus[static_cast<size_t>(p)] += h;
      minus[static_cast<size_t>(p)] -= h;
      std::vector<double> c2_plus(points), c2_minus(points);
      ModelEvaluation(model, plus)
          .EvaluateUpperTriangleRows(phi, contrast, offset, 0, n, c2_plus, {});
      ModelEvaluation(model, minus)
          .EvaluateUpperTriangleRows(phi, contrast, offset, 0, n, c2_minus, {});
      double scale = 0.0;
      for (size_t q = 0; q < points; ++q) {
        scale = std::max(scale, std::abs(jacobian[q * static_cast<size_t>(m) + p]));
      }
      for (size_t q = 0; q < points; ++q) {
        const double numeric = (c2_plus[q] - c2_minus[q]) / (2.0 * h);
        const double analytic = jacobian[q * static_cast<size_t>(m) + p];
        EXPECT_NEAR(analytic, numeric, 1e-6 * scale + 1e-9)
            << PhysicalParameterNames(AnalysisMode::kTwoComponent)[static_cast<size_t>(p)]
            << " at point " << q << ", phi " << phi;
      }
    }
    // contrast and offset enter linearly.
    for (size_t q = 0; q < points; ++q) {
      EXPECT_NEAR(jacobian[q * static_cast<size_t>(m) + kPhysical] * contrast + offset, c2[q],
                  1e-12);
      EXPECT_EQ(jacobian[q * static_cast<size_t>(m) + kPhysical + 1], 1.0);
    }
  }
}

std::vector<double> TimesFrom(double first, double dt, int n) {
  std::vector<double> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i * dt;
  return t;
}

// D0_ref, alpha_ref, D_offset_ref, D0_sample, alpha_sample, D_offset_sample, v0, v_beta, v_offset,
// f0, f1, f2, f3, phi0_het
const std::vector<double> kGeneric = {2.0e4, 0.3, 50.0, 8.0e4, -0.4, 20.0, 300.0,
                                      0.7,   5.0, 0.4,  0.2,   0.5,  0.1,  3.0};

TEST(TwoComponentModelTest, JacobianMatchesFiniteDifferencesOnAGridFromDt) {
  ExpectJacobianMatchesFiniteDifferences({"t = dt, 2 dt, ...", TimesFrom(0.1, 0.1, 24), kGeneric});
}

TEST(TwoComponentModelTest, JacobianMatchesFiniteDifferencesOnAGridFromZero) {
  ExpectJacobianMatchesFiniteDifferences({"t = 0, dt, ...", TimesFrom(0.0, 0.1, 24), kGeneric});
}

TEST(TwoComponentModelTest, JacobianWithZeroExponentsKeepsTheZeroToTheZeroRule) {
  std::vector<double> params = kGeneric;
  params[1] = 0.0;  // alpha_ref
  params[4] = 0.0;  // alpha_sample
  params[7] = 0.0;  // v_beta
  ExpectJacobianMatchesFiniteDifferences(
      {"alpha = v_beta = 0, t from 0", TimesFrom(0.0, 0.1, 20), params});
}

TEST(TwoComponentModelTest, JacobianNearTheFractionsSoftClip) {
  std::vector<double> low = kGeneric, high = kGeneric;
  low[9] = 0.02;  // f0: x_s near 0 (z = f0 e^(f1 (t - f2)) + f3 ~ 0.01)
  low[12] = -0.01;
  high[9] = 0.05;  // x_s near 1
  high[12] = 0.97;
  ExpectJacobianMatchesFiniteDifferences({"x_s near 0", TimesFrom(0.1, 0.1, 20), low});
  ExpectJacobianMatchesFiniteDifferences({"x_s near 1", TimesFrom(0.1, 0.1, 20), high});
}

// With x_s = 0 everywhere (f0 = 0, f3 = -1) c2 is the one-component form offset + contrast H_r^2,
// computed here from the formula, with pw(0, e) = 0 (so 0^0 is 0: alpha_ref = 0 on a grid from 0
// gives J_ref(0) = D_offset_ref, not D0_ref + D_offset_ref).
void ExpectPureReferenceComponent(double first_time, double alpha) {
  SCOPED_TRACE("t from " + std::to_string(first_time) + ", alpha_ref = " + std::to_string(alpha));
  std::vector<double> params = kGeneric;
  params[1] = alpha;
  params[9] = 0.0;
  params[12] = -1.0;
  ScatteringGeometry geometry;
  geometry.dt_seconds = 0.1;
  const std::vector<double> t = TimesFrom(first_time, 0.1, 10);
  const HomodyneModel model(AnalysisMode::kTwoComponent, geometry, t);
  std::vector<double> c2(10);
  ModelEvaluation(model, params).ComputeC2RowSegment(30.0, 0.5, 1.0, 2, 0, 10, c2);
  auto rate = [&](double time) {
    const double power = time > 0.0 ? std::pow(time, alpha) : 0.0;
    return std::max(params[0] * power + params[2], 0.0);
  };
  std::vector<double> cumulative(10, 0.0);
  for (size_t k = 1; k < 10; ++k) {
    cumulative[k] = cumulative[k - 1] + 0.5 * (rate(t[k - 1]) + rate(t[k])) * 0.1;
  }
  for (size_t j = 0; j < 10; ++j) {
    const double diff = cumulative[j] - cumulative[2];
    const double h = std::exp(-0.5 * 0.0054 * 0.0054 * std::sqrt(diff * diff + 1e-12));
    EXPECT_NEAR(c2[j], 1.0 + 0.5 * h * h, 1e-12) << "j = " << j;
  }
}

TEST(TwoComponentModelTest, PureReferenceComponentIsOneTransportFactor) {
  ExpectPureReferenceComponent(0.1, 0.3);
  ExpectPureReferenceComponent(0.0, 0.3);
  ExpectPureReferenceComponent(0.0, 0.0);
}

}  // namespace
}  // namespace homodyne
