// Hand-checkable numbers of the reference's model (docs/model.md, Test numbers).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numbers>
#include <tuple>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/model.h"

namespace homodyne {
namespace {

constexpr double kTolerance = 1e-12;

ScatteringGeometry Geometry(double q, double gap, double dt) {
  ScatteringGeometry geometry;
  geometry.q_inv_angstrom = q;
  geometry.gap_angstrom = gap;
  geometry.dt_seconds = dt;
  return geometry;
}

std::vector<double> Matrix(const ModelEvaluation& evaluation, double phi, double contrast,
                           double offset) {
  const int n = evaluation.model().num_times();
  std::vector<double> c2(static_cast<std::size_t>(n * n));
  evaluation.ComputeC2Matrix(phi, contrast, offset, c2);
  return c2;
}

TEST(ReferenceNumbersTest, Prefactors) {
  const ScatteringGeometry a = Geometry(0.01, 2e6, 0.1);
  EXPECT_NEAR(a.DiffusionPrefactor(), 5e-6, 5e-6 * kTolerance);
  EXPECT_NEAR(a.SincPrefactor(), 318.3098861837907, 318.3 * kTolerance);
  const ScatteringGeometry b = Geometry(0.0054, 2e6, 0.001);
  EXPECT_NEAR(b.DiffusionPrefactor(), 1.458e-8, 1.458e-8 * kTolerance);
  EXPECT_NEAR(b.SincPrefactor(), 1.7188733853924698, 1.72 * kTolerance);
}

TEST(ReferenceNumbersTest, CaseAStatic) {
  const HomodyneModel model(AnalysisMode::kStatic, Geometry(0.01, 2e6, 0.1),
                            {0.1, 0.2, 0.3, 0.4, 0.5});
  const std::array<double, 3> params = {1000.0, 0.0, 0.0};
  const ModelEvaluation evaluation(model, params);

  const std::vector<double> c2 = Matrix(evaluation, 0.0, 0.5, 1.0);

  const double by_lag[5] = {1.499999999995, 1.49502491687458, 1.49009933665338, 1.48522276677425,
                            1.48039471957616};
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) {
      EXPECT_NEAR(c2[static_cast<std::size_t>(i * 5 + j)], by_lag[std::abs(i - j)], kTolerance)
          << i << "," << j;
    }
  }
}

TEST(ReferenceNumbersTest, CaseBTimeGuard) {
  const HomodyneModel model(AnalysisMode::kStatic, Geometry(0.01, 2e6, 0.1),
                            {0.0, 0.1, 0.2, 0.3, 0.4});
  const std::array<double, 3> params = {1000.0, -0.5, 10.0};
  const ModelEvaluation evaluation(model, params);

  const std::vector<double> c2 = Matrix(evaluation, 0.0, 0.3, 1.0);

  const double row0[5] = {1.299999999997, 1.28873531591832, 1.28101798712104, 1.27534080718186,
                          1.27066319519324};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(c2[static_cast<std::size_t>(j)], row0[j], kTolerance);
  EXPECT_NEAR(c2[1 * 5 + 2], 1.29198158828677, kTolerance);
  EXPECT_NEAR(c2[3 * 5 + 4], 1.29490346668571, kTolerance);
}

TEST(ReferenceNumbersTest, CaseCLaminar) {
  const HomodyneModel model(AnalysisMode::kLaminarFlow, Geometry(0.01, 2e6, 0.1),
                            {0.1, 0.2, 0.3, 0.4, 0.5});
  const std::array<double, 7> params = {1000.0, 0.0, 0.0, 0.001, 0.0, 0.0, 0.0};
  const ModelEvaluation evaluation(model, params);

  const std::vector<double> at0 = Matrix(evaluation, 0.0, 0.5, 1.0);
  const std::vector<double> at45 = Matrix(evaluation, 45.0, 0.5, 1.0);
  const std::vector<double> at90 = Matrix(evaluation, 90.0, 0.5, 1.0);

  const double row0_at0[5] = {1.49999996622127, 1.46258529560065, 1.37266176077513,
                              1.25905833361089, 1.15271806765762};
  const double row0_at45[5] = {1.49999998310814, 1.47855785815534, 1.42777129645764,
                               1.35634035844145, 1.27556612136444};
  const double case_a_by_lag[5] = {1.499999999995, 1.49502491687458, 1.49009933665338,
                                   1.48522276677425, 1.48039471957616};
  for (int j = 0; j < 5; ++j) {
    const auto idx = static_cast<std::size_t>(j);
    EXPECT_NEAR(at0[idx], row0_at0[j], kTolerance);
    EXPECT_NEAR(at45[idx], row0_at45[j], kTolerance);
  }
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) {
      EXPECT_NEAR(at90[static_cast<std::size_t>(i * 5 + j)], case_a_by_lag[std::abs(i - j)],
                  kTolerance);
    }
  }

  std::vector<double> corrected = at0;
  ApplyDiagonalCorrection(5, corrected);
  EXPECT_NEAR(corrected[0], 1.46258529560065, kTolerance);
}

TEST(ReferenceNumbersTest, DiagonalCorrectionExample) {
  std::vector<double> matrix = {5, 1.2, 1.1, 1.2, 5, 1.3, 1.1, 1.3, 5};
  ApplyDiagonalCorrection(3, matrix);
  EXPECT_DOUBLE_EQ(matrix[0], 1.2);
  EXPECT_DOUBLE_EQ(matrix[4], 1.25);
  EXPECT_DOUBLE_EQ(matrix[8], 1.3);
  EXPECT_EQ(matrix[1], 1.2);  // off-diagonal untouched
  EXPECT_EQ(matrix[5], 1.3);
}

// The other methods (docs/model.md, Diagonal correction) on the reference's example matrix and a
// 5 x 5 one: statistical from `window` neighbours on each side, interpolation as basic on a
// symmetric matrix, apply = false unchanged.
TEST(ReferenceNumbersTest, DiagonalCorrectionMethods) {
  const std::vector<double> example = {5, 1.2, 1.1, 1.2, 5, 1.3, 1.1, 1.3, 5};
  DiagonalCorrectionOptions options;
  options.method = "statistical";
  options.window = 2;
  std::vector<double> matrix = example;
  ApplyDiagonalCorrection(options, 3, matrix);
  EXPECT_DOUBLE_EQ(matrix[0], 1.15);  // median of C[0,1] 1.2, C[0,2] 1.1
  EXPECT_DOUBLE_EQ(matrix[4], 1.25);  // C[1,2] 1.3, C[0,1] 1.2
  EXPECT_DOUBLE_EQ(matrix[8], 1.2);   // C[1,2] 1.3, C[0,2] 1.1
  EXPECT_EQ(matrix[1], 1.2);
  options.method = "interpolation";
  matrix = example;
  ApplyDiagonalCorrection(options, 3, matrix);
  EXPECT_DOUBLE_EQ(matrix[0], 1.2);
  EXPECT_DOUBLE_EQ(matrix[4], 1.25);
  options.apply = false;
  matrix = example;
  ApplyDiagonalCorrection(options, 3, matrix);
  EXPECT_EQ(matrix, example);

  // Row 2 of a 5 x 5 matrix, window 2: neighbours C[2,3] 4, C[1,2] 1, C[2,4] 10, C[0,2] 2.
  std::vector<double> five(25, 0.0);
  const auto set = [&](int i, int j, double v) { five[i * 5 + j] = five[j * 5 + i] = v; };
  set(2, 3, 4.0);
  set(1, 2, 1.0);
  set(2, 4, 10.0);
  set(0, 2, 2.0);
  DiagonalCorrectionOptions statistical;
  statistical.method = "statistical";
  statistical.window = 2;
  for (const auto& [estimator, trim, expected] :
       {std::tuple{"median", 0.2, 3.0}, std::tuple{"mean", 0.2, 4.25},
        std::tuple{"trimmed_mean", 0.25, 3.0}, std::tuple{"trimmed_mean", 0.2, 4.25}}) {
    statistical.estimator = estimator;
    statistical.trim_fraction = trim;
    std::vector<double> m = five;
    ApplyDiagonalCorrection(statistical, 5, m);
    EXPECT_DOUBLE_EQ(m[2 * 5 + 2], expected) << estimator << " " << trim;
  }
}

TEST(ReferenceNumbersTest, DiagonalCorrectionSymmetrisesAndLeavesTinyMatricesAlone) {
  std::vector<double> matrix = {9, 1.0, 3.0, 9};
  ApplyDiagonalCorrection(2, matrix);
  EXPECT_DOUBLE_EQ(matrix[0], 2.0);
  EXPECT_DOUBLE_EQ(matrix[3], 2.0);
  std::vector<double> single = {7.0};
  ApplyDiagonalCorrection(1, single);
  EXPECT_EQ(single[0], 7.0);
}

TEST(ReferenceNumbersTest, ShearFloorsGiveTheG1Floor) {
  // gamma_dot = max(1e-6 - 0.1, 1e-10) = 1e-10 everywhere, so M_G ~ 1e-6 (the smooth abs
  // dominates) for every pair. The gap makes the phase of (0, 4) pi: sinc(pi)^2 ~ 1e-33, and the
  // other pairs sit within 1e-7 of pi, so g1 is floored at 1e-10 on the whole row.
  const double q = 0.01;
  const double dt = 0.1;
  const double m_g_04 = std::sqrt(4e-10 * 4e-10 + 1e-12);
  const double sinc_prefactor = std::numbers::pi / m_g_04;
  const ScatteringGeometry geometry =
      Geometry(q, sinc_prefactor * 2.0 * std::numbers::pi / (q * dt), dt);
  const HomodyneModel model(AnalysisMode::kLaminarFlow, geometry, {0.1, 0.2, 0.3, 0.4, 0.5});
  const std::array<double, 7> params = {1000.0, 0.0, 0.0, 1e-6, 0.0, -0.1, 0.0};
  const ModelEvaluation evaluation(model, params);

  std::vector<double> c2(4);
  std::vector<double> jacobian(4 * 9);
  evaluation.EvaluateUpperTriangleRows(0.0, 0.5, 1.0, 0, 1, c2, jacobian);

  for (std::size_t point = 0; point < 4; ++point) {
    EXPECT_EQ(c2[point], 1.0 + 0.5 * 1e-20) << point;
    for (std::size_t p = 0; p < 7; ++p)
      EXPECT_EQ(jacobian[point * 9 + p], 0.0) << point << "," << p;
    EXPECT_DOUBLE_EQ(jacobian[point * 9 + 7], 1e-20);
    EXPECT_EQ(jacobian[point * 9 + 8], 1.0);
  }
}

TEST(ReferenceNumbersTest, SincTaylorBranch) {
  // sinc(1e-5) = 0.9999999999833333: a constant shear rate of 1 per step (M_G = 1 + 5e-13) and a
  // gap that makes the sinc prefactor 1e-5, so the phase of the one-step lag is 1e-5.
  const double q = 0.01;
  const double dt = 0.1;
  const ScatteringGeometry geometry = Geometry(q, 1e-5 * 2.0 * std::numbers::pi / (q * dt), dt);
  ASSERT_NEAR(geometry.SincPrefactor(), 1e-5, 1e-20);
  const HomodyneModel model(AnalysisMode::kLaminarFlow, geometry, {0.1, 0.2});
  const std::array<double, 7> params = {0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0};
  const ModelEvaluation evaluation(model, params);

  std::vector<double> c2(1);
  evaluation.ComputeC2RowSegment(0.0, 1.0, 0.0, 0, 1, 2, c2);

  // c2 = g1d^2 sinc^4; D is floored at 1e-10, so M_D = sqrt(1e-20 + 1e-12).
  const double g1d = std::exp(-geometry.DiffusionPrefactor() * std::sqrt(1e-20 + 1e-12));
  const double sinc = 0.9999999999833333;
  EXPECT_NEAR(c2[0], g1d * g1d * std::pow(sinc, 4), 1e-15);
}

}  // namespace
}  // namespace homodyne
