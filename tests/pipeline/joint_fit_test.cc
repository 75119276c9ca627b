// A joint fit of several q rings (docs/design.md section 2d): a simulated data set of
// 3 rings x 2 angles with one physical truth, each ring's matrices made by the model at the ring's
// q, fitted as one data set from the default start. Every parameter is recovered within 4 of its
// uncertainties, every physical uncertainty is below the middle ring's alone, each matrix's q is
// in the result, and the result files name it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/model.h"
#include "io/hdf5_util.h"
#include "laminar_data.h"
#include "pipeline/fit_checkpoints.h"

namespace homodyne {
namespace {

const std::vector<double> kRingQ = {0.015, 0.02, 0.025};
const std::vector<double> kRingPhi = {0.0, 60.0};
const std::vector<double> kRingContrast = {0.32, 0.28, 0.24};  // the speckle contrast falls with q
const std::vector<double> kRingOffset = {1.0, 1.01, 0.99};

// The rings' matrices (ring after ring, angle after angle) of `mode` at `truth`, with seeded
// noise of sigma 0.01 (the config's), on test::kTimes frames; `rings`: indices into kRingQ.
struct Rings {
  std::vector<double> c2;
  std::vector<double> phi;
  std::vector<double> q;
  std::vector<double> contrast;
  std::vector<double> offset;
  InMemoryData Data() const {
    InMemoryData data;
    data.float64_values = c2;
    data.num_angles = static_cast<int>(phi.size());
    data.num_times = test::kTimes;
    data.phi_degrees = phi;
    data.q_inv_angstrom = q.front();
    if (q.size() > 1) data.q_per_angle = q;
    data.dt_seconds = test::kDt;
    return data;
  }
};
Rings Simulate(AnalysisMode mode, const std::vector<double>& truth, const std::vector<int>& rings,
               unsigned seed) {
  std::vector<double> times;
  for (int i = 0; i < test::kTimes; ++i) times.push_back(test::kDt * (i + 1));
  std::mt19937_64 random(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  const size_t n = test::kTimes;
  Rings out;
  for (int r : rings) {
    const size_t ring = static_cast<size_t>(r);
    const HomodyneModel model(mode, ScatteringGeometry{kRingQ[ring], test::kGap, test::kDt}, times);
    const ModelEvaluation evaluation(model, truth);
    for (double phi : kRingPhi) {
      const size_t start = out.c2.size();
      out.c2.resize(start + n * n);
      const std::span<double> matrix(out.c2.data() + start, n * n);
      evaluation.ComputeC2Matrix(phi, kRingContrast[ring], kRingOffset[ring], matrix);
      for (double& value : matrix) value += noise(random);
      // c2 is symmetric: the fitted upper triangle's mirror holds the same values.
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < i; ++j) matrix[i * n + j] = matrix[j * n + i];
      }
      out.phi.push_back(phi);
      out.q.push_back(kRingQ[ring]);
      out.contrast.push_back(kRingContrast[ring]);
      out.offset.push_back(kRingOffset[ring]);
    }
  }
  return out;
}

struct ModeCase {
  AnalysisMode mode;
  const char* config;
  std::vector<double> truth;
};
std::string Name(const ModeCase& c) { return std::string(ToString(c.mode)); }

class JointFitTest : public ::testing::TestWithParam<ModeCase> {};

TEST_P(JointFitTest, RecoversTheSharedTruthWithSmallerErrorsThanTheMiddleRing) {
  const ModeCase& c = GetParam();
  const Config config = ParseConfig(c.config, "joint_fit_test");
  const Rings all = Simulate(c.mode, c.truth, {0, 1, 2}, 5);
  const auto joint_source = MakeInMemoryBatchSource(all.Data());
  const FitOutcome joint = Fit(config, *joint_source);
  ASSERT_EQ(joint.exit_code, 0) << joint.final_fit_report;
  ASSERT_TRUE(joint.model.has_value());
  EXPECT_EQ(joint.model->num_rings(), 3);

  const Rings middle = Simulate(c.mode, c.truth, {1}, 5);
  const auto middle_source = MakeInMemoryBatchSource(middle.Data());
  const FitOutcome alone = Fit(config, *middle_source);
  ASSERT_EQ(alone.exit_code, 0) << alone.final_fit_report;
  EXPECT_EQ(alone.model->num_rings(), 1);

  ASSERT_EQ(joint.result.physical.size(), c.truth.size());
  for (size_t p = 0; p < c.truth.size(); ++p) {
    const ParameterEstimate& estimate = joint.result.physical[p];
    ASSERT_TRUE(std::isfinite(estimate.uncertainty) && estimate.uncertainty > 0.0)
        << Name(c) << " " << estimate.name;
    EXPECT_LE(std::abs(estimate.value - c.truth[p]), 4.0 * estimate.uncertainty)
        << Name(c) << " " << estimate.name << " = " << estimate.value << " +- "
        << estimate.uncertainty << ", truth " << c.truth[p];
    EXPECT_LT(estimate.uncertainty, alone.result.physical[p].uncertainty)
        << Name(c) << " " << estimate.name << ": joint " << estimate.uncertainty
        << ", middle ring alone " << alone.result.physical[p].uncertainty;
  }
  ASSERT_EQ(joint.result.per_angle.size(), all.phi.size());
  for (size_t k = 0; k < all.phi.size(); ++k) {
    const AngleScaling& angle = joint.result.per_angle[k];
    EXPECT_EQ(angle.q_inv_angstrom, all.q[k]) << k;
    EXPECT_EQ(angle.phi_degrees, all.phi[k]) << k;
    EXPECT_LE(std::abs(angle.contrast.value - all.contrast[k]), 4.0 * angle.contrast.uncertainty)
        << Name(c) << " contrast " << k;
    EXPECT_LE(std::abs(angle.offset.value - all.offset[k]), 4.0 * angle.offset.uncertainty)
        << Name(c) << " offset " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, JointFitTest,
    ::testing::Values(
        ModeCase{AnalysisMode::kStatic, test::kStaticConfig, {800.0, -0.2, 5.0}},
        // The pipeline tests' laminar truth: c2 decays within the 90 frames at every ring's q, so
        // D0, alpha and D_offset are determined (a slower decay leaves them a near-degenerate
        // valley, where the jackknife's error bars are not a measure of the data's information).
        ModeCase{AnalysisMode::kLaminarFlow,
                 test::kLaminarConfig,
                 {3000.0, -0.5, 10.0, 2e-4, 0.3, 1e-5, 5.0}}),
    [](const ::testing::TestParamInfo<ModeCase>& param_info) { return Name(param_info.param); });

// Every strategy's data path and the Ceres solver fit a joint set to the same values (each
// evaluates every matrix at its own q).
TEST(JointFitStrategiesTest, EveryStrategyAndTheCeresSolverAgree) {
  const Config config = ParseConfig(test::kStaticConfig, "joint_fit_test");
  const std::vector<double> truth = {3000.0, -0.5, 10.0};  // well determined at these q
  const Rings all = Simulate(AnalysisMode::kStatic, truth, {0, 1, 2}, 7);
  const auto source = MakeInMemoryBatchSource(all.Data());
  const FitOutcome reference = Fit(config, *source);
  ASSERT_EQ(reference.exit_code, 0) << reference.final_fit_report;
  for (StrategyKind kind : {StrategyKind::kStandard, StrategyKind::kLarge, StrategyKind::kChunked,
                            StrategyKind::kStreaming}) {
    for (LmSolver solver : {LmSolver::kLmCore, LmSolver::kCeres}) {
      if (solver == LmSolver::kCeres && kind != StrategyKind::kStandard) continue;
      Config other = config;
      other.performance.strategy_override = kind;
      other.nlsq.solver = solver;
      const FitOutcome outcome = Fit(other, *source);
      ASSERT_EQ(outcome.exit_code, 0) << outcome.final_fit_report;
      EXPECT_EQ(outcome.result.strategy, std::string(ToString(kind)));
      for (size_t p = 0; p < truth.size(); ++p) {
        const ParameterEstimate& expected = reference.result.physical[p];
        EXPECT_NEAR(outcome.result.physical[p].value, expected.value, 0.05 * expected.uncertainty)
            << ToString(kind) << " " << ToString(solver) << " " << expected.name;
      }
    }
  }
}

// The result files of a joint fit: each matrix's q in parameters.json's per-angle block and in
// fitted_data.h5 (/q_per_angle, each angle's q attribute), whose fit of each matrix is the model at
// that matrix's q.
TEST(JointFitResultsTest, ResultFilesNameEachMatrixsQAndFitEachAtIt) {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() /
                                       ("homodyne_joint_fit_results_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  const Config config = ParseConfig(test::kStaticConfig, "joint_fit_test");
  const Rings all = Simulate(AnalysisMode::kStatic, {800.0, -0.2, 5.0}, {0, 2}, 9);
  const auto source = MakeInMemoryBatchSource(all.Data());
  const FitOutcome outcome = Fit(config, *source);
  WriteFitResults(outcome, *source, folder.string(), false);
  std::ifstream in(folder / "nlsq" / "parameters.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json parameters = nlohmann::json::parse(in);
  const nlohmann::json& per_angle = parameters.at("per_angle");
  ASSERT_EQ(per_angle.size(), all.q.size());
  for (size_t k = 0; k < all.q.size(); ++k) {
    EXPECT_EQ(per_angle[k].at("q").get<double>(), all.q[k]) << k;
    EXPECT_EQ(per_angle[k].at("phi").get<double>(), all.phi[k]) << k;
  }
  const std::string h5 = (folder / "nlsq" / "fitted_data.h5").string();
  io_internal::InitializeHdf5();
  const io_internal::Hid file(
      io_internal::FileHid(H5Fopen(h5.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
  ASSERT_TRUE(file.valid()) << h5;
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/q_per_angle"), all.q);
  const size_t n = test::kTimes;
  std::vector<double> times;
  for (size_t i = 0; i < n; ++i) times.push_back(test::kDt * static_cast<double>(i + 1));
  for (size_t k = 0; k < all.q.size(); ++k) {
    char group[48];
    std::snprintf(group, sizeof(group), "/angles/phi_%03zu", k);
    const io_internal::Hid angle(io_internal::GroupHid(H5Gopen2(file.get(), group, H5P_DEFAULT)));
    ASSERT_TRUE(angle.valid()) << group;
    double q = 0.0;
    const io_internal::Hid attribute(
        io_internal::AttributeHid(H5Aopen(angle.get(), "q", H5P_DEFAULT)));
    ASSERT_TRUE(attribute.valid()) << group;
    ASSERT_GE(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &q), 0);
    EXPECT_EQ(q, all.q[k]) << group;
    const HomodyneModel model(AnalysisMode::kStatic,
                              ScatteringGeometry{all.q[k], test::kGap, test::kDt}, times);
    const ModelEvaluation evaluation(model, outcome.physical);
    const AngleScaling& scaling = outcome.result.per_angle[k];
    std::vector<double> expected(n * n);
    evaluation.ComputeC2Matrix(scaling.phi_degrees, scaling.contrast.value, scaling.offset.value,
                               expected);
    // The writer's model within 8 ulp of the scalar one (docs/design.md section 8, Output).
    const std::vector<double> fit =
        io_internal::ReadAllDoubles(file.get(), std::string(group) + "/fit");
    ASSERT_EQ(fit.size(), expected.size()) << group;
    for (size_t p = 0; p < fit.size(); ++p) {
      ASSERT_NEAR(fit[p], expected[p], 8.0 * std::numeric_limits<double>::epsilon() * expected[p])
          << group << " " << p;
    }
  }
  std::filesystem::remove_all(folder);
}

// Two rings' matrices at the same phi are two matrices; the same phi at the same q still is
// refused, naming both.
TEST(JointFitDataTest, SamePhiInTwoRingsIsTwoMatricesAndTwiceInOneRingIsRefused) {
  Rings rings = Simulate(AnalysisMode::kStatic, {800.0, -0.2, 5.0}, {0, 1}, 3);
  EXPECT_NO_THROW(MakeInMemoryBatchSource(rings.Data()));
  rings.q[2] = rings.q[0];  // ring 1's phi 0 now at ring 0's q
  try {
    MakeInMemoryBatchSource(rings.Data());
    ADD_FAILURE() << "the same phi and q twice was accepted";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("are both at phi = 0"), std::string::npos)
        << error.what();
  }
  rings.q.pop_back();  // 3 q values for 4 matrices
  EXPECT_THROW(MakeInMemoryBatchSource(rings.Data()), InputError);
}

// The checkpoint identity of a joint fit holds each matrix's q: the same values at other q are
// another fit; a one-q data set's fingerprint is what it was (no q_per_angle line).
TEST(JointFitDataTest, DataFingerprintHoldsEachMatrixsQWhenTheyDiffer) {
  Rings rings = Simulate(AnalysisMode::kStatic, {800.0, -0.2, 5.0}, {0, 2}, 3);
  const std::string joint = DataFingerprint(*MakeInMemoryBatchSource(rings.Data()));
  EXPECT_NE(
      joint.find("q_per_angle=0.014999999999999999 0.014999999999999999 0.025000000000000001"),
      std::string::npos)
      << joint;
  rings.q = {0.015, 0.015, 0.02, 0.02};
  EXPECT_NE(DataFingerprint(*MakeInMemoryBatchSource(rings.Data())), joint);
  rings.q = {0.02, 0.02, 0.02, 0.02};
  rings.phi = {0.0, 60.0, 10.0, 70.0};  // one ring: each phi once
  EXPECT_EQ(DataFingerprint(*MakeInMemoryBatchSource(rings.Data())).find("q_per_angle"),
            std::string::npos);
}

}  // namespace
}  // namespace homodyne
