// Tests of the vectorised pass kernel (src/model/pass_kernel.h) and its math
// (src/model/vector_math.h) against the libm reference model (ModelEvaluation), including the
// guarded branches: NaN/inf data, the log g1 clip, the g1 floor, the sinc Taylor branch and phases
// beyond the vector sin/cos range. The kernel is checked at every instruction-set level of the
// build that this CPU supports (src/model/isa_level.h); the levels it lacks are named in the
// output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "model/isa_level.h"
#include "model/pass_kernel.h"
#include "model/pass_variants.h"
#include "model/tile.h"
#include "model/two_component/two_component_pass_variant.h"
#include "model/two_component/two_component_point.h"
#include "model/vector_math.h"

namespace homodyne {
namespace {

TEST(VectorMathTest, ExpMatchesLibmToTwoUlp) {
  double worst = 0.0;
  for (int k = 0; k <= 200000; ++k) {
    const double x = -708.0 + 716.0 * k / 200000.0 + 1e-7 * std::sin(k);
    const double expected = std::exp(x);
    worst = std::max(worst, std::abs(vector_math::Exp(x) - expected) / expected);
  }
  EXPECT_LT(worst, 4.5e-16);
  EXPECT_EQ(vector_math::Exp(0.0), 1.0);
}

TEST(VectorMathTest, SinCosMatchLibmOverTheVectorRange) {
  double worst = 0.0;
  for (double scale : {1e-6, 1.0, 10.0, 1e3, vector_math::kSinCosMaxArgument}) {
    for (int k = -50000; k <= 50000; ++k) {
      const double x = scale * k / 50000.0 + 1e-9 * std::cos(k);
      double s = 0.0, c = 0.0;
      vector_math::SinCos(x, &s, &c);
      worst = std::max({worst, std::abs(s - std::sin(x)), std::abs(c - std::cos(x))});
    }
  }
  EXPECT_LT(worst, 1e-15);
}

struct KernelCase {
  AnalysisMode mode = AnalysisMode::kLaminarFlow;
  int n = 300;
  ScatteringGeometry geometry{0.0054, 2.0e6, 0.1};
  std::vector<double> physical;
  // With phi0 = 5, the third angle is perpendicular to the flow: phases ~ 0, the sinc Taylor
  // branch.
  std::vector<double> phi = {0.0, 45.0, 95.0};
  std::vector<double> contrast = {0.3, 0.25, 0.2};
  std::vector<double> offset = {1.0, 1.02, 0.98};
  // When set, whether the kernel must take the per-frame Gram (PassKernel::per_frame_gram).
  std::optional<bool> per_frame_gram;
  // Rows per batch of ExpectKernelMatchesReference (0: two batches, a third and the rest).
  int batch_rows = 0;
};

std::vector<double> Times(int n, double dt) {
  std::vector<double> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i + 1) * dt;
  return t;
}

// Data = model at `truth` plus noise, with a few NaN and inf points.
std::vector<std::vector<float>> MakeData(const HomodyneModel& model, const KernelCase& c,
                                         const std::vector<double>& truth) {
  const ModelEvaluation evaluation(model, truth);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<std::vector<float>> data;
  std::vector<double> c2(static_cast<size_t>(UpperTriangleSize(c.n)));
  for (size_t k = 0; k < c.phi.size(); ++k) {
    evaluation.EvaluateUpperTriangleRows(c.phi[k], c.contrast[k], c.offset[k], 0, c.n, c2, {});
    std::vector<float> values(c2.size());
    for (size_t p = 0; p < c2.size(); ++p) values[p] = static_cast<float>(c2[p] + noise(rng));
    values[5] = std::numeric_limits<float>::quiet_NaN();
    values[values.size() / 2] = std::numeric_limits<float>::infinity();
    values[values.size() - 3] = -std::numeric_limits<float>::infinity();
    data.push_back(std::move(values));
  }
  return data;
}

// scipy.optimize.least_squares' losses (its soft_l1, huber, cauchy, arctan) written out again
// here, independently of src/model/robust_loss_tile.h: rho(z), rho'(z), rho''(z).
void ScipyLoss(LossFunction function, long double z, long double* rho, long double* d1,
               long double* d2) {
  switch (function) {
    case LossFunction::kSoftL1:
      *rho = 2 * (std::sqrt(1 + z) - 1);
      *d1 = 1 / std::sqrt(1 + z);
      *d2 = -0.5L * std::pow(1 + z, -1.5L);
      return;
    case LossFunction::kHuber:
      *rho = z <= 1 ? z : 2 * std::sqrt(z) - 1;
      *d1 = z <= 1 ? 1 : 1 / std::sqrt(z);
      *d2 = z <= 1 ? 0 : -0.5L * std::pow(z, -1.5L);
      return;
    case LossFunction::kCauchy:
      *rho = std::log1p(z);
      *d1 = 1 / (1 + z);
      *d2 = -1 / ((1 + z) * (1 + z));
      return;
    case LossFunction::kArctan:
      *rho = std::atan(z);
      *d1 = 1 / (1 + z * z);
      *d2 = -2 * z / ((1 + z * z) * (1 + z * z));
      return;
    case LossFunction::kLinear:
      break;
  }
  *rho = z;
  *d1 = 1;
  *d2 = 0;
}

// Reference Gram of [J | e] per angle, from ModelEvaluation point by point (long double sums).
// Under a robust loss, each row is rescaled as scipy's scale_for_robust_loss_function does
// (J by sqrt(J_scale), e by rho' / sqrt(J_scale), J_scale = max(rho' + 2 z rho'', eps),
// z = (e / s)^2) and the (e, e) entry holds s^2 sum rho(z) (src/model/robust_loss_tile.h).
std::vector<Eigen::MatrixXd> ReferenceGrams(const ModelEvaluation& evaluation, const KernelCase& c,
                                            const std::vector<std::vector<float>>& data,
                                            std::vector<int64_t>* finite,
                                            const PassLoss& loss = PassLoss()) {
  const int m = evaluation.model().num_point_derivatives();
  const size_t points = static_cast<size_t>(UpperTriangleSize(c.n));
  std::vector<double> c2(points), jac(points * static_cast<size_t>(m));
  std::vector<Eigen::MatrixXd> grams;
  finite->assign(c.phi.size(), 0);
  for (size_t k = 0; k < c.phi.size(); ++k) {
    evaluation.EvaluateUpperTriangleRows(c.phi[k], c.contrast[k], c.offset[k], 0, c.n, c2, jac);
    Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic> sum =
        Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>::Zero(m + 1, m + 1);
    for (size_t p = 0; p < points; ++p) {
      const double d = data[k][p];
      if (!std::isfinite(d)) continue;
      ++(*finite)[k];
      Eigen::Matrix<long double, Eigen::Dynamic, 1> row(m + 1);
      for (int a = 0; a < m; ++a) row[a] = jac[p * static_cast<size_t>(m) + static_cast<size_t>(a)];
      row[m] = d - c2[p];
      if (loss.function == LossFunction::kLinear) {
        sum += row * row.transpose();
        continue;
      }
      const long double s = loss.residual_scale;
      const long double z = (row[m] / s) * (row[m] / s);
      long double rho, d1, d2;
      ScipyLoss(loss.function, z, &rho, &d1, &d2);
      const long double j_scale =
          std::sqrt(std::max<long double>(d1 + 2 * z * d2, std::numeric_limits<double>::epsilon()));
      for (int a = 0; a < m; ++a) row[a] *= j_scale;
      row[m] *= d1 / j_scale;
      const long double loss_sum = sum(m, m);
      sum += row * row.transpose();
      sum(m, m) = loss_sum + s * s * rho;
    }
    grams.push_back(sum.cast<double>());
  }
  return grams;
}

// The levels of this build that this CPU runs (never empty: the lowest always runs); the others
// are printed, so that a run on an older CPU says what it did not check.
std::vector<IsaLevel> LevelsToTest() {
  std::vector<IsaLevel> levels;
  for (IsaLevel level : BuiltIsaLevels()) {
    if (CpuSupportsIsaLevel(level)) {
      levels.push_back(level);
    } else {
      std::cout << "not checked: pass kernel level " << ToString(level) << " (this CPU lacks it)\n";
    }
  }
  return levels;
}

// Runs the kernel at `level` over all rows in two batches and compares with the reference, entry
// by entry, relative to the diagonal scales (|G_ac| <= sqrt(G_aa G_cc)).
void ExpectKernelMatchesReference(const KernelCase& c, IsaLevel level, double tolerance,
                                  const PassLoss& loss = PassLoss()) {
  SCOPED_TRACE("instruction-set level " + std::string(ToString(level)));
  const HomodyneModel model(c.mode, c.geometry, Times(c.n, c.geometry.dt_seconds));
  const std::vector<std::vector<float>> data = MakeData(model, c, c.physical);
  std::vector<double> start = c.physical;
  for (double& value : start) value *= 1.05;  // away from the truth: residuals are not noise only
  const ModelEvaluation evaluation(model, start);
  std::vector<int64_t> reference_finite;
  const std::vector<Eigen::MatrixXd> reference =
      ReferenceGrams(evaluation, c, data, &reference_finite, loss);

  const PassKernel kernel(evaluation, c.phi, c.contrast, c.offset, level, loss);
  ASSERT_EQ(kernel.isa_level(), level);
  if (c.per_frame_gram) {
    EXPECT_EQ(kernel.per_frame_gram(), *c.per_frame_gram);
  }
  const int g = kernel.gram_size();
  ASSERT_EQ(g, model.num_point_derivatives() + 1);
  std::vector<Eigen::MatrixXd> grams(c.phi.size(), Eigen::MatrixXd::Zero(g, g));
  std::vector<int64_t> finite(c.phi.size(), 0);
  PassKernel::Workspace workspace(g);
  double sum_squares = 0.0;
  std::vector<std::pair<int, int>> batches = {{0, c.n / 3}, {c.n / 3, c.n}};
  if (c.batch_rows > 0) {
    batches.clear();
    for (int row = 0; row < c.n; row += c.batch_rows) {
      batches.emplace_back(row, std::min(row + c.batch_rows, c.n));
    }
  }
  for (auto [row_begin, row_end] : batches) {
    std::vector<const float*> pointers;
    for (const auto& values : data) {
      pointers.push_back(values.data() + UpperTriangleRowOffset(c.n, row_begin));
    }
    kernel.AccumulateRows(row_begin, row_end, pointers, grams, finite, workspace);
    sum_squares += kernel.SumSquaredResiduals(row_begin, row_end, pointers, workspace);
  }
  double reference_sum_squares = 0.0;
  for (size_t k = 0; k < c.phi.size(); ++k) {
    EXPECT_EQ(finite[k], reference_finite[k]) << "angle " << k;
    reference_sum_squares += reference[k](g - 1, g - 1);
    for (int a = 0; a < g; ++a) {
      for (int col = 0; col <= a; ++col) {
        const double scale = std::sqrt(reference[k](a, a) * reference[k](col, col)) + 1e-300;
        EXPECT_NEAR(grams[k](a, col) / scale, reference[k](a, col) / scale, tolerance)
            << "angle " << k << " entry (" << a << ", " << col << ")";
      }
    }
  }
  EXPECT_NEAR(sum_squares / reference_sum_squares, 1.0, tolerance);
}

void ExpectKernelMatchesReferenceAtEveryLevel(const KernelCase& c, double tolerance) {
  for (IsaLevel level : LevelsToTest()) ExpectKernelMatchesReference(c, level, tolerance);
}

TEST(PassKernelTest, LaminarMatchesReferenceModel) {
  KernelCase c;
  c.physical = {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
  ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-12);
}

TEST(PassKernelTest, StaticMatchesReferenceModel) {
  KernelCase c;
  c.mode = AnalysisMode::kStatic;
  c.physical = {3000.0, -0.5, 10.0};
  c.per_frame_gram = true;
  ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-12);
}

// The static per-frame Gram (docs/design.md section 2, The static full pass through per-frame
// sums) on the benchmark grid (bench/objective_benchmark.cc: q 0.0054, dt 0.1; 1000 of its 2000
// frames) and parameters, in batches of 7
// rows (partial rows of a factor block, NaN and inf points subtracted), slow decay (D0 30: the
// sums run over hundreds of frames) and fast decay (D0 3e6: floored and clipped points).
TEST(PassKernelTest, StaticPerFrameGramMatchesTheReferenceOnTheBenchmarkGrid) {
  for (double d0 : {3000.0, 30.0, 3.0e6}) {
    SCOPED_TRACE("D0 " + std::to_string(d0));
    KernelCase c;
    c.mode = AnalysisMode::kStatic;
    c.n = 1000;
    c.geometry = ScatteringGeometry{0.0054, 2.0e6, 0.1};
    c.physical = {d0, -0.5, 10.0};
    c.per_frame_gram = true;
    c.batch_rows = 7;
    ExpectKernelMatchesReference(c, ActiveIsaLevel(), 1e-12);
  }
}

// The static per-frame data terms (J^T e from column and row sums rebased at the batch's first
// row, docs/design.md section 2, The static full pass through per-frame sums) with all 600 rows
// in one batch, the rebase spanning the whole grid, at every level (rows ending inside a vector,
// the inf point in a row's last vector): slow and fast decay (measured: within 3e-17 of the
// scales, as in batches of 7 rows).
TEST(PassKernelTest, StaticPerFrameGramOfOneBatchOfAllRowsMatchesTheReference) {
  for (double d0 : {30.0, 3.0e6}) {
    SCOPED_TRACE("D0 " + std::to_string(d0));
    KernelCase c;
    c.mode = AnalysisMode::kStatic;
    c.n = 600;
    c.geometry = ScatteringGeometry{0.0054, 2.0e6, 0.1};
    c.physical = {d0, -0.5, 10.0};
    c.per_frame_gram = true;
    c.batch_rows = c.n;
    ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-12);
  }
}

// Strided rows (the global phase's subsamples: rows 0, 3, 6, ... one after the other), a batch of
// 40 of them at a time: the per-frame Gram equals the reference's over those rows.
TEST(PassKernelTest, StaticPerFrameGramOfStridedRowsMatchesTheReference) {
  KernelCase c;
  c.mode = AnalysisMode::kStatic;
  c.n = 600;
  c.geometry = ScatteringGeometry{0.0054, 2.0e6, 0.1};
  c.physical = {3000.0, -0.5, 10.0};
  constexpr int kStride = 3;
  const HomodyneModel model(c.mode, c.geometry, Times(c.n, c.geometry.dt_seconds));
  const std::vector<std::vector<float>> full = MakeData(model, c, c.physical);
  // The strided rows' values, packed; the other rows NaN in the reference's copy (not counted).
  std::vector<std::vector<float>> strided(full.size()), reference_data = full;
  for (size_t k = 0; k < full.size(); ++k) {
    for (int i = 0; i < c.n; ++i) {
      const int64_t begin = UpperTriangleRowOffset(c.n, i);
      const int64_t end = UpperTriangleRowOffset(c.n, i + 1);
      for (int64_t p = begin; p < end; ++p) {
        if (i % kStride == 0) {
          strided[k].push_back(full[k][static_cast<size_t>(p)]);
        } else {
          reference_data[k][static_cast<size_t>(p)] = std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
  }
  std::vector<double> start = c.physical;
  for (double& value : start) value *= 1.05;
  const ModelEvaluation evaluation(model, start);
  std::vector<int64_t> reference_finite;
  const std::vector<Eigen::MatrixXd> reference =
      ReferenceGrams(evaluation, c, reference_data, &reference_finite);
  const PassKernel kernel(evaluation, c.phi, c.contrast, c.offset);
  ASSERT_TRUE(kernel.per_frame_gram());
  const int g = kernel.gram_size();
  std::vector<Eigen::MatrixXd> grams(c.phi.size(), Eigen::MatrixXd::Zero(g, g));
  std::vector<int64_t> finite(c.phi.size(), 0);
  PassKernel::Workspace workspace(g);
  int64_t offset = 0;
  for (int row = 0; row < c.n; row += 40 * kStride) {
    const int row_end = std::min(row + 40 * kStride, c.n);
    std::vector<const float*> pointers;
    for (const auto& values : strided) pointers.push_back(values.data() + offset);
    kernel.AccumulateRows(row, row_end, pointers, grams, finite, workspace, kStride);
    for (int i = row; i < row_end; i += kStride) offset += c.n - 1 - i;
  }
  for (size_t k = 0; k < c.phi.size(); ++k) {
    EXPECT_EQ(finite[k], reference_finite[k]) << "angle " << k;
    for (int a = 0; a < g; ++a) {
      for (int col = 0; col <= a; ++col) {
        const double scale = std::sqrt(reference[k](a, a) * reference[k](col, col)) + 1e-300;
        EXPECT_NEAR(grams[k](a, col) / scale, reference[k](a, col) / scale, 1e-12)
            << "angle " << k << " entry (" << a << ", " << col << ")";
      }
    }
  }
}

// Where C_D grows by too little from one frame to the next for the smoothing of M_D to be
// negligible (D 1e-4 per second, dt 1 ms), the full pass keeps the point-by-point Gram.
TEST(PassKernelTest, StaticKeepsThePointByPointGramWhereTheSmoothingMatters) {
  KernelCase c;
  c.mode = AnalysisMode::kStatic;
  c.geometry = ScatteringGeometry{0.0054, 2.0e6, 0.001};
  c.physical = {1.0e-4, 0.0, 0.0};
  c.per_frame_gram = false;
  ExpectKernelMatchesReference(c, ActiveIsaLevel(), 1e-12);
}

// Under each robust loss, the rescaled Gram matrices and the loss sums of both passes match the
// reference's rescaling of the scalar model's rows (a residual scale of twice the noise, from a
// start 5% off: most points lie beyond it). Both modes' bodies share the rescaling.
TEST(PassKernelTest, RobustLossesMatchTheRescaledReference) {
  for (LossFunction function : {LossFunction::kSoftL1, LossFunction::kHuber, LossFunction::kCauchy,
                                LossFunction::kArctan}) {
    SCOPED_TRACE("loss " + std::to_string(static_cast<int>(function)));
    const PassLoss loss{function, 0.02};
    KernelCase laminar;
    laminar.physical = {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
    KernelCase two_component;
    two_component.mode = AnalysisMode::kTwoComponent;
    two_component.n = 120;
    two_component.physical = {1000, -0.3, 10, 20000, -0.5, 0, 20, 0.5, 1, 0.3, 0.01, 0.5, 0.2, 2};
    for (const KernelCase& c : {laminar, two_component}) {
      for (IsaLevel level : LevelsToTest()) ExpectKernelMatchesReference(c, level, 1e-11, loss);
    }
  }
}

TEST(PassKernelTest, LaminarWithPhasesBeyondTheVectorRangeMatches) {
  // A wide gap makes phases exceed 1e5 rad away from the diagonal: those tiles use libm.
  KernelCase c;
  c.geometry.gap_angstrom = 2.0e11;
  c.physical = {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
  ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-10);
}

TEST(PassKernelTest, ClippedAndFlooredPointsMatch) {
  // Fast diffusion (4.4 per step in log g1): g1 is floored beyond ~5 steps from the diagonal and
  // log g1 clipped at -700 beyond ~160 steps; both branches and the unguarded one occur.
  KernelCase c;
  c.physical = {3.0e6, 0.0, 0.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
  // 1e-10: for the perpendicular angle the shear columns come from sinc' = (x cos x - sin x) / x^2
  // just above the Taylor radius, where the reference formula itself cancels digits and so
  // magnifies the last-ulp differences between libm and the vector sin/cos.
  ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-10);
}

// The separable diffusion factor (homodyne_pass_variant.cc, DiffusionTile) applies where the
// smoothing of |C_D[j] - C_D[i]| is negligible: with 20 per step, not in the tile next to the
// diagonal (the direct form), but in the row's later tiles, which straddle two factor blocks.
// Likewise the series for M_G (ShearTile) with a shear rate of about 1e-5 per step, and the
// product form of sin and cos where the phases exceed 0.5.
TEST(PassKernelTest, SlowDiffusionAndShearMixTheDirectAndSeparableForms) {
  for (AnalysisMode mode : {AnalysisMode::kStatic, AnalysisMode::kLaminarFlow}) {
    SCOPED_TRACE(std::string(ToString(mode)));
    KernelCase c;
    c.mode = mode;
    c.n = 560;
    c.physical = {20.0, 0.0, 0.0};
    if (mode == AnalysisMode::kLaminarFlow) {
      c.physical.insert(c.physical.end(), {2.0e-5, 0.3, 1.0e-6, 5.0});
    }
    ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-12);
  }
}

// The two-component body (src/model/two_component/two_component_pass_variant.cc) against its
// scalar model: 14 physical parameters, both transports, the velocity phase and the fractions.
KernelCase TwoComponentCase() {
  KernelCase c;
  c.mode = AnalysisMode::kTwoComponent;
  c.n = 200;
  c.geometry = {0.0054, 2.0e6, 0.1};
  c.physical = {2.0e4, 0.3, 50.0, 8.0e4, -0.4, 20.0, 300.0, 0.7, 5.0, 0.4, 0.2, 0.5, 0.1, 3.0};
  return c;
}

TEST(PassKernelTest, TwoComponentMatchesReferenceModel) {
  ExpectKernelMatchesReferenceAtEveryLevel(TwoComponentCase(), 1e-12);
}

// The two-component case with phases beyond the vector sin and cos's range (v0 3e8, as
// TwoComponentWithPhasesBeyondTheVectorRangeMatches).
std::vector<double> FastFlowTwoComponent() {
  std::vector<double> physical = TwoComponentCase().physical;
  physical[6] = 3.0e8;
  return physical;
}

// PassKernel::EvaluateUpperSegment (the fitted_data.h5 writer's model) against the scalar model,
// value by value, at every level, for every mode: segments of 1 to N - i - 1 columns from each
// row's first column right of the diagonal and from inside the row, across factor blocks (N > 2
// blocks), in every form of the laminar sin and cos (the perpendicular angle's series, the product
// form of slow shear, libm beyond the vector range), with floored and clipped points (D0 3e6), and
// the two-component model (at (i, j) and, as the writer's mirror tiles use it, at (j, i); slow
// and fast flow). Within 8 ulp of the value (measured: at most 2.4), but where the phases exceed
// the vector sin and cos's range.
TEST(PassKernelTest, UpperSegmentsMatchTheScalarModel) {
  struct Case {
    AnalysisMode mode;
    std::vector<double> physical;
    double max_ulps = 8.0;
  };
  const std::vector<Case> cases = {
      {AnalysisMode::kStatic, {3000.0, -0.5, 10.0}},
      {AnalysisMode::kStatic, {20.0, 0.0, 0.0}},
      {AnalysisMode::kStatic, {3.0e6, 0.0, 0.0}},
      {AnalysisMode::kLaminarFlow, {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0}},
      {AnalysisMode::kLaminarFlow, {20.0, 0.0, 0.0, 2.0e-5, 0.3, 1.0e-6, 5.0}},
      {AnalysisMode::kLaminarFlow, {3.0e6, 0.0, 0.0, 2.0e-3, 0.3, 1.0e-4, 5.0}},
      {AnalysisMode::kLaminarFlow, {3000.0, -0.5, 10.0, 3.0e3, 0.0, 0.0, 5.0}},
      {AnalysisMode::kTwoComponent, TwoComponentCase().physical},
      // Phases of 1e5 rad and more carry an ulp of the phase (1e-11) in either form: 1e-10
      // relative, as TwoComponentWithPhasesBeyondTheVectorRangeMatches (measured 3.2e-12).
      {AnalysisMode::kTwoComponent, FastFlowTwoComponent(),
       1e-10 / std::numeric_limits<double>::epsilon()}};
  const int n = 2 * pass_kernel::kCostTilePoints + 48;
  const ScatteringGeometry geometry{0.0054, 2.0e6, 0.1};
  const std::vector<double> phi = {0.0, 45.0, 95.0};
  const std::vector<double> contrast = {0.3, 0.25, 0.2};
  const std::vector<double> offset = {1.0, 1.02, 0.98};
  for (const auto& [mode, physical, max_ulps] : cases) {
    SCOPED_TRACE(std::string(ToString(mode)) + " D0 " + std::to_string(physical[0]));
    const HomodyneModel model(mode, geometry, Times(n, geometry.dt_seconds));
    const ModelEvaluation evaluation(model, physical);
    std::vector<double> expected(static_cast<size_t>(n));
    std::vector<double> values(static_cast<size_t>(n));
    for (IsaLevel level : LevelsToTest()) {
      SCOPED_TRACE("instruction-set level " + std::string(ToString(level)));
      const PassKernel kernel(evaluation, phi, contrast, offset, level);
      PassKernel::Workspace workspace(kernel.gram_size());
      for (int k = 0; k < 3; ++k) {
        for (int i : {0, 1, 37, pass_kernel::kCostTilePoints - 1, n - 3, n - 2}) {
          evaluation.ComputeC2RowSegment(phi[static_cast<size_t>(k)],
                                         contrast[static_cast<size_t>(k)],
                                         offset[static_cast<size_t>(k)], i, 0, n, expected);
          std::vector<double> column(static_cast<size_t>(n));  // the model at (j, i)
          for (int j = 0; j < n; ++j) {
            evaluation.ComputeC2RowSegment(phi[static_cast<size_t>(k)],
                                           contrast[static_cast<size_t>(k)],
                                           offset[static_cast<size_t>(k)], j, i, i + 1,
                                           std::span<double>(column.data() + j, 1));
          }
          for (int j_begin : {i + 1, (i + n) / 2 + 1}) {
            for (int j_end : {j_begin + 1, j_begin + 37, j_begin + 300, n}) {
              if (j_begin >= n || j_end > n) continue;
              std::fill(values.begin(), values.end(), -1.0);
              kernel.EvaluateUpperSegment(k, i, j_begin, j_end, values, workspace);
              for (int j = j_begin; j < j_end; ++j) {
                const double want = expected[static_cast<size_t>(j)];
                const double got = values[static_cast<size_t>(j - j_begin)];
                for (double scalar : {want, column[static_cast<size_t>(j)]}) {
                  const double ulps =
                      std::abs(got - scalar) / (std::numeric_limits<double>::epsilon() * scalar);
                  ASSERT_LE(ulps, max_ulps)
                      << k << " " << i << " " << j << ": " << got << " " << scalar;
                }
              }
              EXPECT_EQ(values[static_cast<size_t>(j_end - j_begin)], -1.0);  // nothing past
            }
          }
        }
      }
    }
  }
}

// Rows longer than the cost pass's row segments (kCostTilePoints, tile.h): the segments of both
// passes straddle two blocks of the separable transport factors (separable_exp.h), and the cost
// pass's segments hold two or more of the full pass's tiles.
TEST(PassKernelTest, TwoComponentRowsAcrossFactorBlocksMatch) {
  KernelCase c = TwoComponentCase();
  c.n = 2 * pass_kernel::kCostTilePoints + 48;
  ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-12);
}

TEST(PassKernelTest, TwoComponentWithPhasesBeyondTheVectorRangeMatches) {
  // A fast flow makes q cos(psi) (C[v]_j - C[v]_i) exceed 1e5 rad away from the diagonal: those
  // tiles use libm.
  KernelCase c = TwoComponentCase();
  c.physical[6] = 3.0e8;  // v0
  ExpectKernelMatchesReferenceAtEveryLevel(c, 1e-10);
}

// The full pass with the physical block summed over the angles (PassKernel::
// AccumulateSummedPhysicalRows; docs/design.md section 2, The two-component physical block summed
// over the angles) against the long-double point-by-point reference: the physical block of angle
// 0 holds the sum over the angles' blocks, the other angles' stay 0, every other entry is the
// angle's own; relative to the diagonal scales, as ExpectKernelMatchesReference. Rows in batches
// of 7 (the tile walk restarts per batch), with the NaN and inf points of MakeData.
void ExpectSummedPhysicalBlockMatchesReference(const KernelCase& c, IsaLevel level,
                                               double tolerance) {
  SCOPED_TRACE("instruction-set level " + std::string(ToString(level)));
  const HomodyneModel model(c.mode, c.geometry, Times(c.n, c.geometry.dt_seconds));
  const std::vector<std::vector<float>> data = MakeData(model, c, c.physical);
  std::vector<double> start = c.physical;
  for (double& value : start) value *= 1.05;
  const ModelEvaluation evaluation(model, start);
  std::vector<int64_t> reference_finite;
  const std::vector<Eigen::MatrixXd> reference =
      ReferenceGrams(evaluation, c, data, &reference_finite);
  const PassKernel kernel(evaluation, c.phi, c.contrast, c.offset, level);
  const int g = kernel.gram_size();
  const int p = g - 3;
  std::vector<Eigen::MatrixXd> grams(c.phi.size(), Eigen::MatrixXd::Zero(g, g));
  std::vector<int64_t> finite(c.phi.size(), 0);
  PassKernel::Workspace workspace(g);
  for (int row = 0; row < c.n; row += 7) {
    const int row_end = std::min(row + 7, c.n);
    std::vector<const float*> pointers;
    for (const auto& values : data) {
      pointers.push_back(values.data() + UpperTriangleRowOffset(c.n, row));
    }
    kernel.AccumulateSummedPhysicalRows(row, row_end, pointers, grams, finite, workspace);
  }
  Eigen::MatrixXd summed_reference = Eigen::MatrixXd::Zero(p, p);
  for (size_t k = 0; k < c.phi.size(); ++k) summed_reference += reference[k].topLeftCorner(p, p);
  for (size_t k = 0; k < c.phi.size(); ++k) {
    EXPECT_EQ(finite[k], reference_finite[k]) << "angle " << k;
    for (int a = 0; a < g; ++a) {
      for (int col = 0; col <= a; ++col) {
        const bool physical = a < p;  // then col < p too
        if (physical && k > 0) {
          EXPECT_EQ(grams[k](a, col), 0.0)
              << "angle " << k << " entry (" << a << ", " << col << ")";
          continue;
        }
        const Eigen::MatrixXd& expected = physical ? summed_reference : reference[k];
        const double scale = std::sqrt(expected(a, a) * expected(col, col)) + 1e-300;
        EXPECT_NEAR(grams[k](a, col) / scale, expected(a, col) / scale, tolerance)
            << "angle " << k << " entry (" << a << ", " << col << ")";
      }
    }
  }
}

TEST(PassKernelTest, TwoComponentSummedPhysicalBlockMatchesTheReference) {
  std::vector<std::pair<std::string, KernelCase>> cases;
  cases.emplace_back("3 angles", TwoComponentCase());
  KernelCase many = TwoComponentCase();
  many.n = 120;
  many.phi.clear();
  many.contrast.clear();
  many.offset.clear();
  for (int k = 0; k < 23; ++k) {
    many.phi.push_back(8.0 * k);
    many.contrast.push_back(0.2 + 0.01 * k);
    many.offset.push_back(1.0 + 0.001 * k);
  }
  cases.emplace_back("23 angles", many);
  KernelCase one = TwoComponentCase();
  one.phi = {30.0};
  one.contrast = {0.3};
  one.offset = {1.0};
  cases.emplace_back("1 angle (W of rank 1)", one);
  KernelCase long_rows = TwoComponentCase();
  long_rows.n = 2 * pass_kernel::kCostTilePoints + 48;
  cases.emplace_back("rows across factor blocks", long_rows);
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    for (IsaLevel level : LevelsToTest())
      ExpectSummedPhysicalBlockMatchesReference(c, level, 1e-12);
  }
  KernelCase fast = TwoComponentCase();
  fast.physical[6] = 3.0e8;  // phases beyond the vector range, as the per-angle test's 1e-10
  SCOPED_TRACE("large phases");
  for (IsaLevel level : LevelsToTest())
    ExpectSummedPhysicalBlockMatchesReference(fast, level, 1e-10);
}

// The velocity phase tables (FillVelocityPhaseTables, two_component_point.h) of every level's
// vector loop against libm's sin and cos of s C[v]_j with the same first-order correction: within
// 4e-16 absolute over phases of both signs up to 1e5 rad (C[v] changes sign, as v may); phases
// beyond vector_math::kSinCosMaxArgument, an infinite and a NaN value are refused (the caller
// takes libm, and FillVelocityPhaseTables then gives libm's values exactly).
TEST(PassKernelTest, TwoComponentVelocityTablesMatchLibmAtEveryLevel) {
  const int n = 1001;
  std::vector<double> velocity(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    velocity[static_cast<size_t>(j)] = 1.9e7 * std::sin(0.01 * j) * (j % 7 == 0 ? 1e-9 : 1.0);
  }
  const double s = 0.0054 * std::cos(0.3);  // phases up to about 9.8e4 rad
  auto libm_tables = [&](double scale, const std::vector<double>& v, std::vector<double>& sin_out,
                         std::vector<double>& cos_out) {
    for (size_t j = 0; j < v.size(); ++j) {
      const double hi = scale * v[j];
      const double lo = std::fma(scale, v[j], -hi);
      sin_out[j] = std::sin(hi) + lo * std::cos(hi);
      cos_out[j] = std::cos(hi) - lo * std::sin(hi);
    }
  };
  std::vector<double> expected_sin(static_cast<size_t>(n)), expected_cos(static_cast<size_t>(n));
  libm_tables(s, velocity, expected_sin, expected_cos);
  for (IsaLevel level : LevelsToTest()) {
    SCOPED_TRACE("instruction-set level " + std::string(ToString(level)));
    const pass_kernel::TwoComponentFunctions* functions =
        HOMODYNE_PASS_VARIANT(pass_kernel::TwoComponentFunctions, kTwoComponentFunctions, level);
    ASSERT_NE(functions, nullptr);
    std::vector<double> sin_table(static_cast<size_t>(n)), cos_table(static_cast<size_t>(n));
    ASSERT_TRUE(
        functions->fill_velocity_tables(s, velocity.data(), n, sin_table.data(), cos_table.data()));
    double worst = 0.0;
    for (size_t j = 0; j < static_cast<size_t>(n); ++j) {
      worst = std::max({worst, std::fabs(sin_table[j] - expected_sin[j]),
                        std::fabs(cos_table[j] - expected_cos[j])});
    }
    EXPECT_LE(worst, 4e-16);
    // Out of the vector loop's domain: nothing written, false.
    for (double bad : {1.0e8, std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      std::vector<double> with_bad = velocity;
      with_bad[500] = bad;
      std::vector<double> untouched(static_cast<size_t>(n), 7.0);
      EXPECT_FALSE(functions->fill_velocity_tables(s, with_bad.data(), n, untouched.data(),
                                                   untouched.data()))
          << bad;
      EXPECT_EQ(untouched[0], 7.0);
    }
  }
  // The public function beyond the domain: libm's values, bitwise.
  std::vector<double> fast = velocity;
  fast[500] = 1.0e8;
  libm_tables(s, fast, expected_sin, expected_cos);
  std::vector<double> sin_table(static_cast<size_t>(n)), cos_table(static_cast<size_t>(n));
  FillVelocityPhaseTables(s, fast, sin_table.data(), cos_table.data());
  EXPECT_EQ(sin_table, expected_sin);
  EXPECT_EQ(cos_table, expected_cos);
}

// The scaling pass (PassKernel::AccumulateScalingRows): its 3 x 3 sums equal the full pass's
// Gram entries of the contrast, offset and e columns (relative to the diagonal scales, as the
// reference comparison) and its finite counts the full pass's, at every level, over rows split
// into two batches, with the NaN and inf points of MakeData.
void ExpectScalingSumsMatchFullGram(const KernelCase& c, IsaLevel level) {
  SCOPED_TRACE("instruction-set level " + std::string(ToString(level)));
  const HomodyneModel model(c.mode, c.geometry, Times(c.n, c.geometry.dt_seconds));
  const std::vector<std::vector<float>> data = MakeData(model, c, c.physical);
  std::vector<double> start = c.physical;
  for (double& value : start) value *= 1.05;
  const ModelEvaluation evaluation(model, start);
  const PassKernel kernel(evaluation, c.phi, c.contrast, c.offset, level);
  const int g = kernel.gram_size();
  std::vector<Eigen::MatrixXd> full(c.phi.size(), Eigen::MatrixXd::Zero(g, g));
  std::vector<Eigen::MatrixXd> scaling(c.phi.size(), Eigen::MatrixXd::Zero(3, 3));
  std::vector<int64_t> full_finite(c.phi.size(), 0), scaling_finite(c.phi.size(), 0);
  // Fresh workspaces each: the scaling pass sizes its own per-thread sums.
  PassKernel::Workspace workspace(g);
  PassKernel::Workspace scaling_workspace(g);
  const int split = c.n / 3;
  for (auto [row_begin, row_end] : {std::pair{0, split}, std::pair{split, c.n}}) {
    std::vector<const float*> pointers;
    for (const auto& values : data) {
      pointers.push_back(values.data() + UpperTriangleRowOffset(c.n, row_begin));
    }
    kernel.AccumulateScalingRows(row_begin, row_end, pointers, scaling, scaling_finite,
                                 scaling_workspace);
    kernel.AccumulateRows(row_begin, row_end, pointers, full, full_finite, workspace);
  }
  for (size_t k = 0; k < c.phi.size(); ++k) {
    EXPECT_EQ(scaling_finite[k], full_finite[k]) << "angle " << k;
    EXPECT_LT(scaling_finite[k], UpperTriangleSize(c.n));  // the non-finite points are left out
    const Eigen::MatrixXd expected = full[k].bottomRightCorner(3, 3);
    EXPECT_EQ(scaling[k](1, 1), static_cast<double>(full_finite[k]));  // sum of 1, exact
    for (int a = 0; a < 3; ++a) {
      for (int col = 0; col <= a; ++col) {
        const double scale = std::sqrt(expected(a, a) * expected(col, col));
        EXPECT_GT(scale, 0.0);
        EXPECT_NEAR(scaling[k](a, col) / scale, expected(a, col) / scale, 1e-12)
            << "angle " << k << " entry (" << a << ", " << col << ")";
      }
    }
  }
}

// Every form of a laminar tile's sin and cos (homodyne_pass_variant.cc, SinCosForm) is taken by
// one of the laminar cases: the default case's perpendicular angle (kSeries) and other angles
// (kSeriesThenProduct where a tile's phases cross 0.5 rad), the wide gap (kLibm, and kVector where
// a tile's first smoothing is too large for the product form), the slow shear (kProduct, the
// separable diffusion, and tiles whose first points take the direct form of M_G and the others
// its series).
TEST(PassKernelTest, ScalingSumsMatchTheFullGramInEveryMode) {
  std::vector<std::pair<std::string, KernelCase>> cases;
  KernelCase laminar;
  laminar.physical = {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
  cases.emplace_back("laminar_flow", laminar);
  KernelCase wide_gap = laminar;
  wide_gap.geometry.gap_angstrom = 2.0e11;
  cases.emplace_back("laminar_flow, phases beyond the vector range", wide_gap);
  KernelCase slow = laminar;
  slow.n = 560;
  slow.physical = {20.0, 0.0, 0.0, 2.0e-5, 0.3, 1.0e-6, 5.0};
  cases.emplace_back("laminar_flow, slow diffusion and shear", slow);
  KernelCase floored = laminar;
  floored.physical = {3.0e6, 0.0, 0.0, 2.0e-3, 0.3, 1.0e-4, 5.0};
  cases.emplace_back("laminar_flow, clipped and floored", floored);
  KernelCase static_case;
  static_case.mode = AnalysisMode::kStatic;
  static_case.physical = {3000.0, -0.5, 10.0};
  cases.emplace_back("static", static_case);
  KernelCase static_slow = static_case;
  static_slow.n = 560;
  static_slow.physical = {20.0, 0.0, 0.0};
  cases.emplace_back("static, slow diffusion", static_slow);
  cases.emplace_back("two_component", TwoComponentCase());
  KernelCase two_component_long = TwoComponentCase();
  two_component_long.n = 2 * pass_kernel::kCostTilePoints + 48;
  cases.emplace_back("two_component, rows across factor blocks", two_component_long);
  KernelCase two_component_fast = TwoComponentCase();
  two_component_fast.physical[6] = 3.0e8;
  cases.emplace_back("two_component, large phases", two_component_fast);
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    for (IsaLevel level : LevelsToTest()) ExpectScalingSumsMatchFullGram(c, level);
  }
}

// The scaling pass is the linear loss's only.
TEST(PassKernelDeathTest, ScalingSumsRefuseARobustLoss) {
  KernelCase c;
  c.mode = AnalysisMode::kStatic;
  c.physical = {3000.0, -0.5, 10.0};
  const HomodyneModel model(c.mode, c.geometry, Times(c.n, c.geometry.dt_seconds));
  const std::vector<std::vector<float>> data = MakeData(model, c, c.physical);
  const ModelEvaluation evaluation(model, c.physical);
  const PassKernel kernel(evaluation, c.phi, c.contrast, c.offset, ActiveIsaLevel(),
                          PassLoss{LossFunction::kCauchy, 0.02});
  std::vector<Eigen::MatrixXd> scaling(c.phi.size(), Eigen::MatrixXd::Zero(3, 3));
  std::vector<int64_t> finite(c.phi.size(), 0);
  PassKernel::Workspace workspace(kernel.gram_size());
  std::vector<const float*> pointers;
  for (const auto& values : data) pointers.push_back(values.data());
  EXPECT_DEATH(kernel.AccumulateScalingRows(0, c.n, pointers, scaling, finite, workspace), "");
}

}  // namespace
}  // namespace homodyne
