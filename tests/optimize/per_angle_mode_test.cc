// Tests of the per-angle scaling maps (src/optimize/per_angle_mode.h; docs/model.md, Per-angle
// scaling) and of ReparametrizedProblem (src/optimize/reparametrized_problem.h), including
// fits on laminar-flow data simulated in memory.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <Eigen/Dense>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "optimize/initial_values.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"
#include "optimize/reparametrized_problem.h"

namespace homodyne {
namespace {

constexpr double kNoiseSigma = 0.01;
constexpr double kInf = std::numeric_limits<double>::infinity();
const std::vector<double> kPhysicalTruth = {3000.0, -0.5, 10.0, 2.0e-4, 0.3, 1.0e-5, 5.0};
const std::vector<double> kPhysicalStart = {3900.0, -0.4, 13.0, 2.6e-4, 0.24, 1.3e-5, 6.5};
const std::vector<double> kAngles = {-60.0, -20.0, 15.0, 50.0, 85.0};
const ParameterBound kContrastBound{"contrast", 0.0, 1.0};
const ParameterBound kOffsetBound{"offset", 0.5, 1.5};

const std::vector<std::string>& LaminarNames() {
  return PhysicalParameterNames(AnalysisMode::kLaminarFlow);
}

ResolvedScaling Resolve(const std::string& mode, int n_angles, int fourier_order = 2) {
  NlsqOptions nlsq;
  nlsq.per_angle_mode = ParsePerAngleModeRequest(mode).value();
  nlsq.fourier_order = fourier_order;
  return ResolvePerAngleMode(nlsq, n_angles);
}

std::vector<ScalingEstimate> Starts(const std::vector<double>& contrast,
                                    const std::vector<double>& offset) {
  std::vector<ScalingEstimate> starts;
  for (size_t k = 0; k < contrast.size(); ++k) starts.push_back({contrast[k], offset[k]});
  return starts;
}

// [physical, contrasts, offsets] (batched_objective.h layout).
Eigen::VectorXd FullVector(const std::vector<double>& physical,
                           const std::vector<ScalingEstimate>& scaling) {
  const int p = static_cast<int>(physical.size());
  const int n = static_cast<int>(scaling.size());
  Eigen::VectorXd theta(p + 2 * n);
  for (int a = 0; a < p; ++a) theta[a] = physical[static_cast<size_t>(a)];
  for (int k = 0; k < n; ++k) {
    theta[p + k] = scaling[static_cast<size_t>(k)].contrast;
    theta[p + n + k] = scaling[static_cast<size_t>(k)].offset;
  }
  return theta;
}

// Bounds of the fit tests (the default bounds, docs/model.md) in the full layout.
void FullBounds(int n_angles, Eigen::VectorXd& lower, Eigen::VectorXd& upper) {
  const std::vector<std::pair<double, double>> physical = {
      {1e2, 1e5}, {-2.0, 2.0}, {-1e5, 1e5}, {1e-6, 0.5}, {-2.0, 2.0}, {-0.1, 0.1}, {-10.0, 10.0}};
  const int p = static_cast<int>(physical.size());
  lower.resize(p + 2 * n_angles);
  upper.resize(p + 2 * n_angles);
  for (int a = 0; a < p; ++a) {
    lower[a] = physical[static_cast<size_t>(a)].first;
    upper[a] = physical[static_cast<size_t>(a)].second;
  }
  lower.segment(p, n_angles).setConstant(kContrastBound.min);
  upper.segment(p, n_angles).setConstant(kContrastBound.max);
  lower.tail(n_angles).setConstant(kOffsetBound.min);
  upper.tail(n_angles).setConstant(kOffsetBound.max);
}

// value(phi) = coefficients[0] + sum_m coefficients[m] cos(m phi) + coefficients[K + m] sin(m phi).
double FourierSeries(const std::vector<double>& coefficients, double phi_degrees) {
  const int order = static_cast<int>(coefficients.size() - 1) / 2;
  const double phi = phi_degrees * std::numbers::pi / 180.0;
  double value = coefficients[0];
  for (int m = 1; m <= order; ++m) {
    value += coefficients[static_cast<size_t>(m)] * std::cos(m * phi) +
             coefficients[static_cast<size_t>(order + m)] * std::sin(m * phi);
  }
  return value;
}

// The laminar-flow model on the CLI's fitted grid t_k = k dt, k = 1..n_times (dt = 0.1 s).
HomodyneModel LaminarModel(int n_times) {
  ScatteringGeometry geometry;
  geometry.q_inv_angstrom = 0.0054;
  geometry.gap_angstrom = 2.0e6;
  geometry.dt_seconds = 0.1;
  std::vector<double> times;
  for (int k = 1; k <= n_times; ++k) times.push_back(k * geometry.dt_seconds);
  return HomodyneModel(AnalysisMode::kLaminarFlow, geometry, times);
}

// The objective on packed upper triangles of c2 at kPhysicalTruth and the given per-angle scaling,
// plus Gaussian noise of kNoiseSigma (seeded).
std::unique_ptr<PackedDataObjective> SimulatedObjective(int n_times,
                                                        const std::vector<ScalingEstimate>& truth,
                                                        unsigned seed) {
  const HomodyneModel model = LaminarModel(n_times);
  const ModelEvaluation evaluation(model, kPhysicalTruth);
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> noise(0.0, kNoiseSigma);
  PackedDataObjective::PackedData data;
  std::vector<double> c2(static_cast<size_t>(UpperTriangleSize(n_times)));
  for (size_t k = 0; k < kAngles.size(); ++k) {
    evaluation.EvaluateUpperTriangleRows(kAngles[k], truth[k].contrast, truth[k].offset, 0, n_times,
                                         c2, {});
    std::vector<float> packed(c2.size());
    for (size_t i = 0; i < c2.size(); ++i) packed[i] = static_cast<float>(c2[i] + noise(generator));
    data.push_back(std::move(packed));
  }
  return std::make_unique<PackedDataObjective>(model, kAngles, kNoiseSigma, std::move(data));
}

// The reference's quantile estimates of each angle (docs/model.md, Bounds and start values), the
// fit's start.
std::vector<ScalingEstimate> QuantileStarts(const PackedDataObjective& objective) {
  std::vector<ScalingEstimate> starts;
  for (const std::vector<float>& angle : objective.data()) {
    starts.push_back(EstimateScalingFromData(angle, objective.model().num_times(), kContrastBound,
                                             kOffsetBound));
  }
  return starts;
}

// Fits the reduced parameters of `map` from the full-layout start with the test bounds.
LevenbergMarquardtSummary FitReduced(PackedDataObjective& objective, const ScalingMap& map,
                                     const Eigen::VectorXd& full_start) {
  Eigen::VectorXd full_lower;
  Eigen::VectorXd full_upper;
  FullBounds(objective.num_angles(), full_lower, full_upper);
  const BoundBox box = ReduceBounds(map, full_lower, full_upper);
  LevenbergMarquardtOptions options;
  options.lower_bounds = box.lower;
  options.upper_bounds = box.upper;
  options.parameter_names = map.reduced_names;
  ReparametrizedProblem problem(objective, map);
  const LevenbergMarquardtSummary summary =
      Minimize(options, problem, ReduceStartingPoint(map, full_start));
  std::printf("%s\n", summary.BriefReport().c_str());
  return summary;
}

// Every reduced parameter within 3 standard errors of the truth. The objective counts every
// upper-triangle point twice (batched_objective.h), as a fit of the full symmetric matrix, while
// the noise here is drawn once per upper-triangle point: the core's uncertainties are then sqrt(2)
// times the true standard errors, which this check uses.
void ExpectWithinThreeSigma(const LevenbergMarquardtSummary& summary, const ScalingMap& map,
                            const Eigen::VectorXd& truth) {
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_FALSE(summary.covariance_pseudo_inverse);
  EXPECT_NEAR(summary.reduced_chi2, 1.0, 0.05);
  ASSERT_EQ(summary.theta.size(), truth.size());
  for (int a = 0; a < truth.size(); ++a) {
    const std::string& name = map.reduced_names[static_cast<size_t>(a)];
    const double standard_error = std::numbers::sqrt2 * summary.uncertainties[a];
    std::printf("  %-22s = %.6g +- %.3g (truth %.6g, %.2f SE)\n", name.c_str(), summary.theta[a],
                standard_error, truth[a], (summary.theta[a] - truth[a]) / standard_error);
    EXPECT_GT(standard_error, 0.0) << name;
    EXPECT_LE(std::abs(summary.theta[a] - truth[a]), 3.0 * standard_error) << name;
  }
}

TEST(ScalingMapTest, IndividualIsTheIdentityWithTheFitsNames) {
  const int n = 3;
  const ResolvedScaling scaling = Resolve("individual", n);
  const ScalingMap map = BuildScalingMap(scaling, 7, LaminarNames(), {0.0, 45.0, 90.0},
                                         Starts({0.3, 0.2, 0.1}, {1.0, 1.1, 0.9}), 2);
  EXPECT_TRUE(IsIdentity(map));
  EXPECT_EQ(map.num_full(), 13);
  EXPECT_EQ(map.num_reduced(), 13);
  const std::vector<std::string> expected = {
      "D0",       "alpha",       "D_offset",    "gamma_dot_t0", "beta",      "gamma_dot_t_offset",
      "phi0",     "contrast[0]", "contrast[1]", "contrast[2]",  "offset[0]", "offset[1]",
      "offset[2]"};
  EXPECT_EQ(map.reduced_names, expected);
  const Eigen::VectorXd full = Eigen::VectorXd::LinSpaced(13, -1.0, 2.0);
  const Eigen::VectorXd reduced = ReduceStartingPoint(map, full);
  EXPECT_TRUE((reduced.array() == full.array()).all());
  EXPECT_EQ(EffectiveParameterCount(scaling.mode, 7, n, map.num_reduced()), 13);
}

TEST(ScalingMapTest, AutoAveragedReplicatesOneSharedPair) {
  const int n = 4;
  const ResolvedScaling scaling = Resolve("auto", n);
  ASSERT_EQ(scaling.mode, PerAngleMode::kAutoAveraged);
  const std::vector<ScalingEstimate> starts = Starts({0.1, 0.2, 0.3, 0.6}, {0.9, 1.0, 1.1, 1.2});
  const ScalingMap map =
      BuildScalingMap(scaling, 7, LaminarNames(), {0.0, 30.0, 60.0, 90.0}, starts, 2);
  ASSERT_EQ(map.num_full(), 15);
  ASSERT_EQ(map.num_reduced(), 9);
  EXPECT_EQ(map.reduced_names[7], "contrast");
  EXPECT_EQ(map.reduced_names[8], "offset");
  EXPECT_TRUE(map.matrix.topLeftCorner(7, 7).isIdentity(0.0));
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(map.matrix.row(7 + k), Eigen::RowVectorXd::Unit(9, 7)) << k;
    EXPECT_EQ(map.matrix.row(7 + n + k), Eigen::RowVectorXd::Unit(9, 8)) << k;
  }
  EXPECT_TRUE((map.shift.array() == 0.0).all());

  const Eigen::VectorXd full = FullVector(kPhysicalStart, starts);
  const Eigen::VectorXd reduced = ReduceStartingPoint(map, full);
  for (int a = 0; a < 7; ++a) EXPECT_EQ(reduced[a], kPhysicalStart[static_cast<size_t>(a)]);
  EXPECT_NEAR(reduced[7], 0.3, 1e-15);
  EXPECT_NEAR(reduced[8], 1.05, 1e-15);

  Eigen::VectorXd lower;
  Eigen::VectorXd upper;
  FullBounds(n, lower, upper);
  const BoundBox box = ReduceBounds(map, lower, upper);
  EXPECT_TRUE((box.lower.head(7).array() == lower.head(7).array()).all());
  EXPECT_TRUE((box.upper.head(7).array() == upper.head(7).array()).all());
  EXPECT_EQ(box.lower[7], kContrastBound.min);
  EXPECT_EQ(box.upper[7], kContrastBound.max);
  EXPECT_EQ(box.lower[8], kOffsetBound.min);
  EXPECT_EQ(box.upper[8], kOffsetBound.max);
  // As the reference: n_eff = 2 n_phi + n_phys although 9 are optimised (docs/results.md, Degrees
  // of freedom).
  EXPECT_EQ(EffectiveParameterCount(scaling.mode, 7, n, map.num_reduced()), 15);
}

TEST(ScalingMapTest, ConstantFreezesThePerAngleStarts) {
  const int n = 3;
  const ResolvedScaling scaling = Resolve("fixed_constant", n);
  ASSERT_EQ(scaling.mode, PerAngleMode::kConstant);
  const std::vector<ScalingEstimate> starts = Starts({0.3, 0.25, 0.2}, {1.0, 1.02, 0.98});
  const ScalingMap map = BuildScalingMap(scaling, 7, LaminarNames(), {0.0, 45.0, 90.0}, starts, 2);
  ASSERT_EQ(map.num_full(), 13);
  ASSERT_EQ(map.num_reduced(), 7);
  EXPECT_EQ(map.reduced_names, LaminarNames());
  EXPECT_TRUE(map.matrix.topRows(7).isIdentity(0.0));
  EXPECT_TRUE((map.matrix.bottomRows(6).array() == 0.0).all());
  const Eigen::VectorXd expected_shift =
      (Eigen::VectorXd(13) << 0, 0, 0, 0, 0, 0, 0, 0.3, 0.25, 0.2, 1.0, 1.02, 0.98).finished();
  EXPECT_EQ(map.shift, expected_shift);

  const Eigen::VectorXd full = FullVector(kPhysicalStart, starts);
  const Eigen::VectorXd reduced = ReduceStartingPoint(map, full);
  EXPECT_TRUE((reduced.array() == full.head(7).array()).all());
  EXPECT_EQ(map.Expand(reduced), full);

  // Frozen values carry zero covariance.
  const Eigen::MatrixXd random = Eigen::MatrixXd::Random(7, 7);
  const Eigen::MatrixXd covariance = random * random.transpose();
  const ExpandedSolution solution = ExpandSolution(map, reduced, covariance);
  EXPECT_EQ(solution.theta, full);
  EXPECT_TRUE(solution.covariance.topLeftCorner(7, 7).isApprox(covariance, 1e-15));
  EXPECT_TRUE((solution.covariance.bottomRows(6).array() == 0.0).all());
  EXPECT_TRUE((solution.covariance.rightCols(6).array() == 0.0).all());
  EXPECT_TRUE((solution.uncertainties.tail(6).array() == 0.0).all());
  EXPECT_EQ(EffectiveParameterCount(scaling.mode, 7, n, map.num_reduced()), 7);
}

TEST(ScalingMapTest, FourierEvaluatesTheSeriesInRadiansAtEachAngle) {
  const std::vector<double> phi = {0.0, 90.0, 180.0, -90.0, 45.0};
  const ResolvedScaling scaling = Resolve("fourier", 5, 1);
  ASSERT_EQ(scaling.mode, PerAngleMode::kFourier);
  const ScalingMap map =
      BuildScalingMap(scaling, 3, PhysicalParameterNames(AnalysisMode::kStatic), phi,
                      Starts({0.2, 0.2, 0.2, 0.2, 0.2}, {1.0, 1.0, 1.0, 1.0, 1.0}), 1);
  ASSERT_EQ(map.num_full(), 13);
  ASSERT_EQ(map.num_reduced(), 9);
  const std::vector<std::string> expected = {"D0",
                                             "alpha",
                                             "D_offset",
                                             "contrast_fourier_c0",
                                             "contrast_fourier_c1",
                                             "contrast_fourier_s1",
                                             "offset_fourier_c0",
                                             "offset_fourier_c1",
                                             "offset_fourier_s1"};
  EXPECT_EQ(map.reduced_names, expected);
  const double r = std::sqrt(0.5);
  const Eigen::MatrixXd basis = (Eigen::MatrixXd(5, 3) << 1, 1, 0,  // 0 deg
                                 1, 0, 1,                           // 90 deg
                                 1, -1, 0,                          // 180 deg
                                 1, 0, -1,                          // -90 deg
                                 1, r, r)                           // 45 deg
                                    .finished();
  EXPECT_TRUE(map.matrix.block(3, 3, 5, 3).isApprox(basis, 1e-15)) << map.matrix;
  EXPECT_TRUE(map.matrix.block(8, 6, 5, 3).isApprox(basis, 1e-15));
  EXPECT_TRUE((map.matrix.block(3, 6, 5, 3).array() == 0.0).all());
  EXPECT_TRUE((map.matrix.block(8, 3, 5, 3).array() == 0.0).all());
  EXPECT_TRUE((map.shift.array() == 0.0).all());

  Eigen::VectorXd lower(13);
  Eigen::VectorXd upper(13);
  lower << 1e2, -2.0, -1e5, 0, 0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5, 0.5;
  upper << 1e5, 2.0, 1e5, 1, 1, 1, 1, 1, 1.5, 1.5, 1.5, 1.5, 1.5;
  const BoundBox box = ReduceBounds(map, lower, upper);
  const Eigen::VectorXd expected_lower =
      (Eigen::VectorXd(9) << 1e2, -2.0, -1e5, 0.0, -kInf, -kInf, 0.5, -kInf, -kInf).finished();
  const Eigen::VectorXd expected_upper =
      (Eigen::VectorXd(9) << 1e5, 2.0, 1e5, 1.0, kInf, kInf, 1.5, kInf, kInf).finished();
  EXPECT_EQ(box.lower, expected_lower);
  EXPECT_EQ(box.upper, expected_upper);
  EXPECT_TRUE(ReduceBounds(map, Eigen::VectorXd(), Eigen::VectorXd()).lower.size() == 0);
  EXPECT_EQ(EffectiveParameterCount(scaling.mode, 3, 5, map.num_reduced()), 9);
}

TEST(ScalingMapTest, FourierStartReproducesStartsOnASeries) {
  // Unevenly spread angles, order 2: the least-squares start recovers the series exactly.
  const std::vector<double> phi = {-75.0, -40.0, -5.0, 20.0, 33.0, 70.0, 120.0};
  const std::vector<double> contrast_series = {0.25, 0.03, -0.02, 0.01, 0.015};
  const std::vector<double> offset_series = {1.01, -0.01, 0.005, 0.02, -0.004};
  std::vector<ScalingEstimate> starts;
  for (double angle : phi) {
    starts.push_back({FourierSeries(contrast_series, angle), FourierSeries(offset_series, angle)});
  }
  const ScalingMap map =
      BuildScalingMap(Resolve("fourier", 7, 2), 7, LaminarNames(), phi, starts, 2);
  ASSERT_EQ(map.num_reduced(), 17);
  const Eigen::VectorXd full = FullVector(kPhysicalStart, starts);
  const Eigen::VectorXd reduced = ReduceStartingPoint(map, full);
  for (int a = 0; a < 7; ++a) EXPECT_EQ(reduced[a], kPhysicalStart[static_cast<size_t>(a)]);
  for (int m = 0; m < 5; ++m) {
    EXPECT_NEAR(reduced[7 + m], contrast_series[static_cast<size_t>(m)], 1e-13) << m;
    EXPECT_NEAR(reduced[12 + m], offset_series[static_cast<size_t>(m)], 1e-13) << m;
  }
  EXPECT_TRUE(map.Expand(reduced).isApprox(full, 1e-14));

  // Evenly spread angles: c0 is the mean of the starts, whatever they are.
  const std::vector<double> even = {0.0, 72.0, 144.0, 216.0, 288.0};
  const std::vector<ScalingEstimate> scattered =
      Starts({0.1, 0.4, 0.2, 0.35, 0.3}, {0.9, 1.2, 1.0, 1.1, 0.95});
  const ScalingMap even_map =
      BuildScalingMap(Resolve("fourier", 5, 1), 7, LaminarNames(), even, scattered, 1);
  const Eigen::VectorXd even_reduced =
      ReduceStartingPoint(even_map, FullVector(kPhysicalStart, scattered));
  EXPECT_NEAR(even_reduced[7], 0.27, 1e-14);
  EXPECT_NEAR(even_reduced[10], 1.03, 1e-14);
}

// initial_parameters.fixed_parameters: fixed full parameters leave the reduced layout and keep
// their start values; an averaged pair is removed only when all its rows are fixed.
TEST(ScalingMapTest, FixParametersRemovesFixedColumnsAndKeepsTheirValues) {
  const ScalingMap individual =
      BuildScalingMap(Resolve("individual", 3), 7, LaminarNames(), {0.0, 45.0, 90.0},
                      Starts({0.3, 0.2, 0.1}, {1.0, 1.1, 0.9}), 2);
  const Eigen::VectorXd start = Eigen::VectorXd::LinSpaced(13, 1.0, 13.0);
  std::vector<bool> fixed(13, false);
  fixed[1] = true;                        // alpha
  fixed[7] = fixed[8] = fixed[9] = true;  // every contrast
  const ScalingMap map = FixParameters(individual, fixed, start);
  ASSERT_EQ(map.num_reduced(), 9);
  EXPECT_EQ(map.reduced_names[1], "D_offset");
  EXPECT_EQ(map.reduced_names[6], "offset[0]");
  const Eigen::VectorXd reduced = ReduceStartingPoint(map, start);
  const Eigen::VectorXd expanded = map.Expand(reduced);
  for (int i = 0; i < 13; ++i) EXPECT_DOUBLE_EQ(expanded[i], start[i]) << i;
  Eigen::VectorXd moved = reduced;
  moved.setConstant(-5.0);
  const Eigen::VectorXd expanded_moved = map.Expand(moved);
  for (int i : {1, 7, 8, 9}) EXPECT_DOUBLE_EQ(expanded_moved[i], start[i]) << i;

  const ScalingMap all_fixed = FixParameters(individual, std::vector<bool>(13, true), start);
  EXPECT_EQ(all_fixed.num_reduced(), 0);
}

TEST(ScalingMapTest, ExpandSolutionIsTCTransposeT) {
  const std::vector<double> phi = {-60.0, -20.0, 15.0, 50.0, 85.0};
  const ScalingMap map = BuildScalingMap(Resolve("fourier", 5, 1), 7, LaminarNames(), phi,
                                         Starts({0.2, 0.2, 0.2, 0.2, 0.2}, {1, 1, 1, 1, 1}), 1);
  const Eigen::MatrixXd random = Eigen::MatrixXd::Random(13, 13);
  const Eigen::MatrixXd covariance = random * random.transpose();
  const Eigen::VectorXd theta = Eigen::VectorXd::Random(13);
  const ExpandedSolution solution = ExpandSolution(map, theta, covariance, 2.0);
  const Eigen::MatrixXd expected = 2.0 * map.matrix * covariance * map.matrix.transpose();
  EXPECT_TRUE(solution.covariance.isApprox(expected, 1e-14));
  EXPECT_EQ(solution.covariance, solution.covariance.transpose());
  EXPECT_TRUE(solution.uncertainties.isApprox(expected.diagonal().cwiseSqrt(), 1e-14));
  EXPECT_EQ(solution.theta, map.Expand(theta));
  // No covariance (e.g. not computed): only theta.
  const ExpandedSolution bare = ExpandSolution(map, theta, Eigen::MatrixXd());
  EXPECT_EQ(bare.theta.size(), 17);
  EXPECT_EQ(bare.covariance.size(), 0);
  EXPECT_EQ(bare.uncertainties.size(), 0);
}

TEST(ScalingMapTest, RejectsInconsistentInput) {
  const std::vector<double> phi = {0.0, 45.0, 90.0};
  const std::vector<ScalingEstimate> starts = Starts({0.2, 0.2, 0.2}, {1.0, 1.0, 1.0});
  // Fewer physical names than parameters.
  EXPECT_THROW(BuildScalingMap(Resolve("individual", 3), 7, {"D0"}, phi, starts, 2),
               std::invalid_argument);
  // One start missing.
  EXPECT_THROW(BuildScalingMap(Resolve("constant", 3), 7, LaminarNames(), phi,
                               Starts({0.2, 0.2}, {1.0, 1.0}), 2),
               std::invalid_argument);
  // The scaling was resolved for another order.
  EXPECT_THROW(BuildScalingMap(Resolve("fourier", 3, 1), 7, LaminarNames(), phi, starts, 2),
               std::invalid_argument);
  // ... or for another angle count.
  EXPECT_THROW(BuildScalingMap(Resolve("individual", 4), 7, LaminarNames(), phi, starts, 2),
               std::invalid_argument);
}

TEST(ReparametrizedProblemTest, AccumulateIsTheTransformedBase) {
  const std::vector<ScalingEstimate> truth =
      Starts({0.3, 0.25, 0.2, 0.22, 0.28}, {1.0, 1.02, 0.98, 0.99, 1.01});
  std::unique_ptr<PackedDataObjective> objective = SimulatedObjective(40, truth, 7);
  const ScalingMap map =
      BuildScalingMap(Resolve("fourier", 5, 1), 7, LaminarNames(), kAngles, truth, 1);
  ReparametrizedProblem problem(*objective, map);
  ASSERT_EQ(problem.num_parameters(), 13);
  EXPECT_EQ(problem.num_residuals(), objective->num_residuals());

  Eigen::VectorXd theta = ReduceStartingPoint(map, FullVector(kPhysicalStart, truth));
  theta.tail(6) += (Eigen::VectorXd(6) << 0.01, -0.02, 0.015, 0.005, 0.01, -0.01).finished();
  const NormalEquations reduced = problem.Accumulate(theta);
  const NormalEquations full = objective->Accumulate(map.Expand(theta));
  const Eigen::MatrixXd& t = map.matrix;
  EXPECT_TRUE(reduced.jtj.isApprox(t.transpose() * full.jtj * t, 1e-14));
  EXPECT_EQ(reduced.jtj, reduced.jtj.transpose());
  EXPECT_TRUE(reduced.jtr.isApprox(t.transpose() * full.jtr, 1e-14));
  EXPECT_EQ(reduced.chi2, full.chi2);
  EXPECT_EQ(reduced.num_points, full.num_points);
  EXPECT_EQ(problem.Cost(theta), objective->Cost(map.Expand(theta)));
  EXPECT_DOUBLE_EQ(problem.Cost(theta), reduced.chi2);

  // J^T r is half the gradient of chi2 in the reduced parameters (central differences with
  // Richardson extrapolation), for the shared scaling coefficients.
  for (int j = 7; j < problem.num_parameters(); ++j) {
    auto half_cost_difference = [&](double step) {
      Eigen::VectorXd plus = theta;
      Eigen::VectorXd minus = theta;
      plus[j] += step;
      minus[j] -= step;
      return (problem.Cost(plus) - problem.Cost(minus)) / (4.0 * step);
    };
    const double h = 1e-4;
    const double numeric = (4.0 * half_cost_difference(h / 2) - half_cost_difference(h)) / 3.0;
    EXPECT_NEAR(reduced.jtr[j], numeric, 1e-6 * std::abs(numeric) + 1e-6) << map.reduced_names[j];
  }
}

TEST(ReparametrizedProblemTest, IdentityMapIsBitwiseTheBase) {
  const std::vector<ScalingEstimate> truth =
      Starts({0.3, 0.25, 0.2, 0.22, 0.28}, {1.0, 1.02, 0.98, 0.99, 1.01});
  std::unique_ptr<PackedDataObjective> objective = SimulatedObjective(40, truth, 8);
  const ScalingMap map =
      BuildScalingMap(Resolve("individual", 5), 7, LaminarNames(), kAngles, truth, 2);
  ReparametrizedProblem problem(*objective, map);
  Eigen::VectorXd theta = FullVector(kPhysicalStart, truth);
  theta.tail(10).array() += 0.01;
  const NormalEquations wrapped = problem.Accumulate(theta);
  const NormalEquations base = objective->Accumulate(theta);
  EXPECT_TRUE((wrapped.jtj.array() == base.jtj.array()).all());
  EXPECT_TRUE((wrapped.jtr.array() == base.jtr.array()).all());
  EXPECT_EQ(wrapped.chi2, base.chi2);
  EXPECT_EQ(wrapped.num_points, base.num_points);
  EXPECT_EQ(problem.Cost(theta), objective->Cost(theta));
  const Eigen::MatrixXd covariance = base.jtj.inverse();
  const ExpandedSolution solution = ExpandSolution(map, theta, covariance);
  EXPECT_TRUE((solution.theta.array() == theta.array()).all());
  EXPECT_TRUE((solution.covariance.array() == covariance.array()).all());
}

TEST(ScalingFitTest, AutoAveragedRecoversTheSharedPair) {
  const std::vector<ScalingEstimate> truth =
      Starts({0.25, 0.25, 0.25, 0.25, 0.25}, {1.0, 1.0, 1.0, 1.0, 1.0});
  std::unique_ptr<PackedDataObjective> objective = SimulatedObjective(200, truth, 11);
  const std::vector<ScalingEstimate> starts = QuantileStarts(*objective);
  const ScalingMap map = BuildScalingMap(Resolve("auto", 5), 7, LaminarNames(), kAngles, starts, 2);
  ASSERT_EQ(map.num_reduced(), 9);

  const LevenbergMarquardtSummary summary =
      FitReduced(*objective, map, FullVector(kPhysicalStart, starts));

  Eigen::VectorXd expected(9);
  for (int a = 0; a < 7; ++a) expected[a] = kPhysicalTruth[static_cast<size_t>(a)];
  expected[7] = 0.25;
  expected[8] = 1.0;
  ExpectWithinThreeSigma(summary, map, expected);
  const ExpandedSolution full = ExpandSolution(map, summary.theta, summary.covariance);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(full.theta[objective->ContrastIndex(k)], summary.theta[7]);
    EXPECT_EQ(full.theta[objective->OffsetIndex(k)], summary.theta[8]);
    EXPECT_NEAR(full.uncertainties[objective->ContrastIndex(k)], summary.uncertainties[7], 1e-15);
  }
}

TEST(ScalingFitTest, FourierOrderOneRecoversTheCoefficients) {
  const std::vector<double> contrast_series = {0.25, 0.04, 0.03};
  const std::vector<double> offset_series = {1.0, 0.01, -0.02};
  std::vector<ScalingEstimate> truth;
  for (double phi : kAngles) {
    truth.push_back({FourierSeries(contrast_series, phi), FourierSeries(offset_series, phi)});
  }
  std::unique_ptr<PackedDataObjective> objective = SimulatedObjective(200, truth, 12);
  const std::vector<ScalingEstimate> starts = QuantileStarts(*objective);
  const ScalingMap map =
      BuildScalingMap(Resolve("fourier", 5, 1), 7, LaminarNames(), kAngles, starts, 1);
  ASSERT_EQ(map.num_reduced(), 13);

  const LevenbergMarquardtSummary summary =
      FitReduced(*objective, map, FullVector(kPhysicalStart, starts));

  Eigen::VectorXd expected(13);
  for (int a = 0; a < 7; ++a) expected[a] = kPhysicalTruth[static_cast<size_t>(a)];
  for (int m = 0; m < 3; ++m) {
    expected[7 + m] = contrast_series[static_cast<size_t>(m)];
    expected[10 + m] = offset_series[static_cast<size_t>(m)];
  }
  ExpectWithinThreeSigma(summary, map, expected);
}

TEST(ScalingFitTest, ConstantWithTrueScalingRecoversThePhysics) {
  const std::vector<ScalingEstimate> truth =
      Starts({0.30, 0.25, 0.20, 0.22, 0.28}, {1.00, 1.02, 0.98, 0.99, 1.01});
  std::unique_ptr<PackedDataObjective> objective = SimulatedObjective(200, truth, 13);
  const ScalingMap map =
      BuildScalingMap(Resolve("constant", 5), 7, LaminarNames(), kAngles, truth, 2);
  ASSERT_EQ(map.num_reduced(), 7);

  const LevenbergMarquardtSummary summary =
      FitReduced(*objective, map, FullVector(kPhysicalStart, truth));

  Eigen::VectorXd expected(7);
  for (int a = 0; a < 7; ++a) expected[a] = kPhysicalTruth[static_cast<size_t>(a)];
  ExpectWithinThreeSigma(summary, map, expected);
  const ExpandedSolution full = ExpandSolution(map, summary.theta, summary.covariance);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(full.theta[objective->ContrastIndex(k)], truth[static_cast<size_t>(k)].contrast);
    EXPECT_EQ(full.uncertainties[objective->OffsetIndex(k)], 0.0);
  }
}

}  // namespace
}  // namespace homodyne
