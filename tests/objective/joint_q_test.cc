// Matrices of several q in one objective (docs/design.md section 2d): the model's
// rings, and a two-ring objective's passes against the two one-ring objectives of the same
// matrices, on static, laminar_flow and two_component, on the CPU backend and the host emulation
// of the CUDA backend. The normal equations of the joint objective are the sum of the rings'
// physical blocks, with each matrix's scaling block at its own place; the per-angle Grams and
// the frame-block sums of a matrix are its ring's; a model whose matrices share one q is today's.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "objective/emulated_pass_backend.h"
#include "objective/pass_backend.h"
#include "support/thread_ranks.h"

namespace homodyne {
namespace {

constexpr int kTimes = 37;
constexpr double kDt = 0.05;
constexpr double kGap = 2e6;

std::vector<double> Times() {
  std::vector<double> times;
  for (int i = 0; i < kTimes; ++i) times.push_back(kDt * (i + 1));
  return times;
}

// A point near each mode's test truth (the fitted parameters of the passes, not the data's).
std::vector<double> PhysicalOf(AnalysisMode mode) {
  switch (mode) {
    case AnalysisMode::kStatic:
      return {800.0, -0.2, 5.0};
    case AnalysisMode::kLaminarFlow:
      return {800.0, -0.2, 5.0, 2e-3, 0.3, 1e-4, 5.0};
    case AnalysisMode::kTwoComponent:
      return {1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 20.0, 0.5, 1.0, 0.3, 0.01, 0.5, 0.2, 2.0};
  }
  return {};
}

// The matrices of the joint objective, in its angle order: the rings interleaved and the larger
// q first, so that neither the ring order nor a ring's angles follow the angle order; phi 0 is
// in both rings.
struct Matrix {
  double q;
  double phi;
  double contrast;
  double offset;
};
const std::vector<Matrix> kMatrices = {{0.025, 0.0, 0.21, 1.01},
                                       {0.015, 0.0, 0.30, 0.99},
                                       {0.015, 45.0, 0.28, 1.02},
                                       {0.025, 90.0, 0.19, 0.98},
                                       {0.025, 30.0, 0.22, 1.00}};

// Each matrix's packed strict upper triangle: its q's model at the physical point, slightly
// perturbed, plus noise and one non-finite point.
InMemoryPassData::PackedData MakeData(AnalysisMode mode) {
  std::vector<double> physical = PhysicalOf(mode);
  physical[0] *= 1.1;  // the data away from the evaluated point: residuals and gradients
  std::mt19937_64 random(11);
  std::normal_distribution<double> noise(0.0, 0.01);
  InMemoryPassData::PackedData packed;
  for (const Matrix& matrix : kMatrices) {
    const HomodyneModel model(mode, ScatteringGeometry{matrix.q, kGap, kDt}, Times());
    const ModelEvaluation evaluation(model, physical);
    std::vector<double> c2(static_cast<size_t>(UpperTriangleSize(kTimes)));
    evaluation.EvaluateUpperTriangleRows(matrix.phi, matrix.contrast, matrix.offset, 0, kTimes, c2,
                                         {});
    std::vector<float> values;
    for (double value : c2) values.push_back(static_cast<float>(value + noise(random)));
    values[7] = std::nanf("");
    packed.push_back(std::move(values));
  }
  return packed;
}

// The objective of the matrices `angles` (indices into kMatrices) of the data; one_q: a one-q
// model (the angles' common q), else the model of each matrix's q.
struct Objective {
  std::unique_ptr<PackedDataObjective> objective;
  std::vector<int> angles;
  Eigen::VectorXd theta;
};
Objective MakeObjective(AnalysisMode mode, const InMemoryPassData::PackedData& data,
                        const std::vector<int>& angles, bool one_q,
                        std::shared_ptr<PassBackend> backend,
                        std::shared_ptr<ProcessGroup> group = nullptr) {
  std::vector<double> phi, q;
  InMemoryPassData::PackedData kept;
  for (int k : angles) {
    phi.push_back(kMatrices[static_cast<size_t>(k)].phi);
    q.push_back(kMatrices[static_cast<size_t>(k)].q);
    kept.push_back(data[static_cast<size_t>(k)]);
  }
  HomodyneModel model = one_q
                            ? HomodyneModel(mode, ScatteringGeometry{q.front(), kGap, kDt}, Times())
                            : HomodyneModel(mode, ScatteringGeometry{0.0, kGap, kDt}, Times(), q);
  PassOptions options;
  options.batch_points = 60;  // several batches, and several chunks:
  options.chunk_batches = 4;
  options.group = std::move(group);
  Objective out;
  out.objective = std::make_unique<PackedDataObjective>(std::move(model), phi, 0.01,
                                                        std::move(kept), options, backend);
  out.angles = angles;
  const std::vector<double> physical = PhysicalOf(mode);
  const int p = static_cast<int>(physical.size());
  const int n = static_cast<int>(angles.size());
  out.theta.resize(p + 2 * n);
  for (int a = 0; a < p; ++a) out.theta[a] = physical[static_cast<size_t>(a)];
  for (int k = 0; k < n; ++k) {
    const Matrix& matrix = kMatrices[static_cast<size_t>(angles[static_cast<size_t>(k)])];
    out.theta[p + k] = matrix.contrast;
    out.theta[p + n + k] = matrix.offset;
  }
  return out;
}

// ring's index of each of its parameters in the joint layout (joint angle j = ring.angles[k]).
std::vector<int> JointIndices(const Objective& ring, const BatchedObjective& joint) {
  const int p = ring.objective->num_physical();
  std::vector<int> index;
  for (int a = 0; a < p; ++a) index.push_back(a);
  for (int k : ring.angles) index.push_back(joint.ContrastIndex(k));
  for (int k : ring.angles) index.push_back(joint.OffsetIndex(k));
  return index;
}

const std::vector<int> kRingSmall = {1, 2};     // q 0.015
const std::vector<int> kRingLarge = {0, 3, 4};  // q 0.025
const std::vector<int> kAll = {0, 1, 2, 3, 4};

TEST(JointQModelTest, RingsAreTheDistinctQAscendingAndOneQIsTodaysModel) {
  std::vector<double> q;
  for (const Matrix& matrix : kMatrices) q.push_back(matrix.q);
  const HomodyneModel joint(AnalysisMode::kStatic, ScatteringGeometry{}, Times(), q);
  ASSERT_EQ(joint.num_rings(), 2);
  EXPECT_EQ(joint.Ring(0).geometry().q_inv_angstrom, 0.015);
  EXPECT_EQ(joint.Ring(1).geometry().q_inv_angstrom, 0.025);
  EXPECT_EQ(joint.Ring(1).num_rings(), 1);
  EXPECT_EQ(joint.geometry().q_inv_angstrom, 0.025);  // the first matrix's
  const std::vector<int> expected_rings = {1, 0, 0, 1, 1};
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(joint.RingOfAngle(k), expected_rings[static_cast<size_t>(k)]) << k;
    EXPECT_EQ(joint.AngleQ(k), q[static_cast<size_t>(k)]) << k;
  }
  const ModelEvaluation evaluation(joint, PhysicalOf(AnalysisMode::kStatic));
  EXPECT_EQ(evaluation.num_rings(), 2);
  EXPECT_EQ(&evaluation.OfAngle(2), &evaluation.Ring(0));
  EXPECT_EQ(evaluation.OfAngle(2).model().geometry().q_inv_angstrom, 0.015);
  // A joint evaluation has no single model to evaluate an angle with: a logic error.
  std::vector<double> c2(kTimes);
  EXPECT_DEATH(evaluation.ComputeC2RowSegment(0.0, 0.3, 1.0, 0, 0, kTimes, c2),
               "point_ != nullptr");

  const HomodyneModel one(AnalysisMode::kStatic, ScatteringGeometry{}, Times(), {0.02, 0.02});
  EXPECT_EQ(one.num_rings(), 1);
  EXPECT_EQ(&one.Ring(0), &one);
  EXPECT_EQ(one.geometry().q_inv_angstrom, 0.02);
  EXPECT_THROW(HomodyneModel(AnalysisMode::kStatic, ScatteringGeometry{}, Times(), {0.02, -1.0}),
               std::invalid_argument);
  EXPECT_THROW(HomodyneModel(AnalysisMode::kStatic, ScatteringGeometry{}, Times(), {}),
               std::invalid_argument);
}

struct Case {
  AnalysisMode mode;
  bool emulated;
};
std::string Name(const Case& c) {
  return std::string(ToString(c.mode)) + (c.emulated ? " (emulated CUDA)" : " (CPU)");
}

class JointQObjectiveTest : public ::testing::TestWithParam<Case> {
 protected:
  std::shared_ptr<PassBackend> Backend() const {
    return GetParam().emulated ? MakeEmulatedPassBackend() : MakeCpuPassBackend();
  }
};

TEST_P(JointQObjectiveTest, NormalEquationsAreTheSumOfTheRingsWithScalingPerMatrix) {
  const AnalysisMode mode = GetParam().mode;
  const InMemoryPassData::PackedData data = MakeData(mode);
  const Objective joint = MakeObjective(mode, data, kAll, false, Backend());
  const Objective small = MakeObjective(mode, data, kRingSmall, true, Backend());
  const Objective large = MakeObjective(mode, data, kRingLarge, true, Backend());
  ASSERT_EQ(joint.objective->model().num_rings(), 2);

  const NormalEquations total = joint.objective->Accumulate(joint.theta);
  const int p = joint.objective->num_parameters();
  Eigen::MatrixXd expected_jtj = Eigen::MatrixXd::Zero(p, p);
  Eigen::VectorXd expected_jtr = Eigen::VectorXd::Zero(p);
  double expected_chi2 = 0.0;
  int64_t expected_points = 0;
  for (const Objective* ring : {&small, &large}) {
    const NormalEquations part = ring->objective->Accumulate(ring->theta);
    const std::vector<int> index = JointIndices(*ring, *joint.objective);
    for (size_t a = 0; a < index.size(); ++a) {
      expected_jtr[index[a]] += part.jtr[static_cast<Eigen::Index>(a)];
      for (size_t b = 0; b < index.size(); ++b) {
        expected_jtj(index[a], index[b]) +=
            part.jtj(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b));
      }
    }
    expected_chi2 += part.chi2;
    expected_points += part.num_points;
  }
  EXPECT_GT(expected_chi2, 0.0);
  EXPECT_NEAR(total.chi2, expected_chi2, 1e-12 * expected_chi2) << Name(GetParam());
  EXPECT_EQ(total.num_points, expected_points);
  EXPECT_EQ(joint.objective->num_nonfinite_points(), 5);
  for (int a = 0; a < p; ++a) {
    const double scale_a = std::sqrt(std::abs(expected_jtj(a, a)));
    EXPECT_NEAR(total.jtr[a], expected_jtr[a], 1e-10 * scale_a * std::sqrt(expected_chi2) + 1e-300)
        << Name(GetParam()) << " jtr " << a;
    for (int b = 0; b < p; ++b) {
      const double scale = scale_a * std::sqrt(std::abs(expected_jtj(b, b)));
      EXPECT_NEAR(total.jtj(a, b), expected_jtj(a, b), 1e-10 * scale + 1e-300)
          << Name(GetParam()) << " jtj " << a << ", " << b;
    }
  }
  // Entries between two rings' scaling parameters are zero: no point holds both.
  EXPECT_EQ(total.jtj(joint.objective->ContrastIndex(0), joint.objective->ContrastIndex(1)), 0.0);
  EXPECT_EQ(total.jtj(joint.objective->OffsetIndex(2), joint.objective->ContrastIndex(3)), 0.0);
  EXPECT_NEAR(joint.objective->Cost(joint.theta), expected_chi2, 1e-12 * expected_chi2);
}

TEST_P(JointQObjectiveTest, EachMatrixsAngleGramsAndFrameBlockSumsAreItsRings) {
  const AnalysisMode mode = GetParam().mode;
  const InMemoryPassData::PackedData data = MakeData(mode);
  const Objective joint = MakeObjective(mode, data, kAll, false, Backend());
  for (const std::vector<int>& angles : {kRingSmall, kRingLarge}) {
    const Objective ring = MakeObjective(mode, data, angles, true, Backend());
    for (PassColumns columns : {PassColumns::kAll, PassColumns::kScaling}) {
      const AngleGrams all = joint.objective->AccumulateAngleGrams(joint.theta, false, columns);
      const AngleGrams own = ring.objective->AccumulateAngleGrams(ring.theta, false, columns);
      for (size_t k = 0; k < angles.size(); ++k) {
        const Eigen::MatrixXd& expected = own.grams[k];
        const Eigen::MatrixXd& actual = all.grams[static_cast<size_t>(angles[k])];
        ASSERT_EQ(actual.rows(), expected.rows());
        // The same batches' sums in the same order: bitwise.
        EXPECT_TRUE(actual == expected) << Name(GetParam()) << " angle " << angles[k];
      }
    }
    if (GetParam().emulated) continue;  // the frame-block sums are the host's scalar model
    const FrameBlockSums all = joint.objective->AccumulateFrameBlockSums(joint.theta, 4);
    const FrameBlockSums own = ring.objective->AccumulateFrameBlockSums(ring.theta, 4);
    const size_t local = static_cast<size_t>(all.num_local);
    for (int a = 0; a < all.num_blocks(); ++a) {
      for (int b = a; b < all.num_blocks(); ++b) {
        for (size_t k = 0; k < angles.size(); ++k) {
          const int j = angles[k];
          for (size_t v = 0; v < local; ++v) {
            EXPECT_EQ(all.gradient[all.GradientOffset(a, b, j) + v],
                      own.gradient[own.GradientOffset(a, b, static_cast<int>(k)) + v])
                << Name(GetParam()) << " cell " << a << ", " << b << " angle " << j;
          }
          for (size_t v = 0; v < local * local; ++v) {
            EXPECT_EQ(all.gram[all.GramOffset(a, b, j) + v],
                      own.gram[own.GramOffset(a, b, static_cast<int>(k)) + v]);
          }
        }
      }
    }
  }
}

TEST_P(JointQObjectiveTest, MatricesOfOneQGiveTodaysPassesBitwise) {
  const AnalysisMode mode = GetParam().mode;
  const InMemoryPassData::PackedData data = MakeData(mode);
  // kRingLarge's matrices share q 0.025: the model of each matrix's q is the one-q model.
  const Objective given = MakeObjective(mode, data, kRingLarge, false, Backend());
  const Objective today = MakeObjective(mode, data, kRingLarge, true, Backend());
  EXPECT_EQ(given.objective->model().num_rings(), 1);
  const NormalEquations a = given.objective->Accumulate(given.theta);
  const NormalEquations b = today.objective->Accumulate(today.theta);
  EXPECT_TRUE(a.jtj == b.jtj);
  EXPECT_TRUE(a.jtr == b.jtr);
  EXPECT_EQ(a.chi2, b.chi2);
  EXPECT_EQ(given.objective->Cost(given.theta), today.objective->Cost(today.theta));
}

// The ranks of a distributed pass (docs/design.md section 5b) share batches, whatever the
// matrices' q: each rank's passes of a joint objective are bitwise one process's.
TEST(JointQDistributedTest, RanksGiveTheSingleProcessPassesBitwise) {
  for (AnalysisMode mode : {AnalysisMode::kStatic, AnalysisMode::kLaminarFlow}) {
    const InMemoryPassData::PackedData data = MakeData(mode);
    const Objective single = MakeObjective(mode, data, kAll, false, MakeCpuPassBackend());
    const NormalEquations expected = single.objective->Accumulate(single.theta);
    const double expected_cost = single.objective->Cost(single.theta);
    for (int size : {2, 3}) {
      SharedState state(size);
      std::vector<NormalEquations> results(static_cast<size_t>(size));
      std::vector<double> costs(static_cast<size_t>(size));
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < size; ++rank) {
        ranks.emplace_back([&, rank] {
          omp_set_num_threads(1);
          const Objective mine = MakeObjective(mode, data, kAll, false, MakeCpuPassBackend(),
                                               std::make_shared<ThreadRank>(state, rank, size));
          mine.objective->KeepOwnShare();
          results[static_cast<size_t>(rank)] = mine.objective->Accumulate(mine.theta);
          costs[static_cast<size_t>(rank)] = mine.objective->Cost(mine.theta);
        });
      }
      for (std::thread& rank : ranks) rank.join();
      for (int rank = 0; rank < size; ++rank) {
        const NormalEquations& got = results[static_cast<size_t>(rank)];
        EXPECT_TRUE(got.jtj == expected.jtj) << ToString(mode) << " rank " << rank << "/" << size;
        EXPECT_TRUE(got.jtr == expected.jtr) << ToString(mode) << " rank " << rank;
        EXPECT_EQ(got.chi2, expected.chi2);
        EXPECT_EQ(costs[static_cast<size_t>(rank)], expected_cost);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ModesAndBackends, JointQObjectiveTest,
                         ::testing::Values(Case{AnalysisMode::kStatic, false},
                                           Case{AnalysisMode::kLaminarFlow, false},
                                           Case{AnalysisMode::kTwoComponent, false},
                                           Case{AnalysisMode::kStatic, true},
                                           Case{AnalysisMode::kLaminarFlow, true},
                                           Case{AnalysisMode::kTwoComponent, true}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return std::string(ToString(param_info.param.mode)) +
                                  (param_info.param.emulated ? "_emulated" : "_cpu");
                         });

}  // namespace
}  // namespace homodyne
