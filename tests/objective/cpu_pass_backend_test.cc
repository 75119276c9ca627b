// Tests of the CPU backend (src/objective/cpu_pass_backend.cc) through the PassBackend interface
// (include/homodyne/backend.h), and of BatchedObjective computing its passes on the backend it
// is given: the same per-batch sums as PassKernel called directly, whatever the grouping of the
// batches into calls or the thread count, and bitwise the same normal equations.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "model/pass_kernel.h"
#include "objective/batched_objective.h"
#include "objective/pass_backend.h"
#include "optimize/levenberg_marquardt.h"

namespace homodyne {
namespace {

// 3 angles of 300 times: 1.3e5 points, enough for the backend's parallel region.
constexpr int kTimes = 300;
const std::vector<double> kPhi = {0.0, 45.0, 95.0};
const std::vector<double> kContrast = {0.3, 0.25, 0.2};
const std::vector<double> kOffset = {1.0, 1.02, 0.98};
const std::vector<double> kPhysical = {3000.0, -0.5, 10.0, 2.0e-3, 0.3, 1.0e-4, 5.0};

HomodyneModel LaminarModel() {
  std::vector<double> times(kTimes);
  for (int i = 0; i < kTimes; ++i) times[static_cast<size_t>(i)] = (i + 1) * 0.1;
  return HomodyneModel(AnalysisMode::kLaminarFlow, ScatteringGeometry{0.0054, 2.0e6, 0.1},
                       std::move(times));
}

// Every angle's packed upper triangle: the model at kPhysical * 0.95 plus noise, with a NaN and
// an inf, so the residuals are not noise only and non-finite points are skipped.
InMemoryPassData::PackedData MakeData(const HomodyneModel& model) {
  std::vector<double> truth = kPhysical;
  for (double& value : truth) value *= 0.95;
  const ModelEvaluation evaluation(model, truth);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 0.01);
  InMemoryPassData::PackedData data;
  std::vector<double> c2(static_cast<size_t>(UpperTriangleSize(kTimes)));
  for (size_t k = 0; k < kPhi.size(); ++k) {
    evaluation.EvaluateUpperTriangleRows(kPhi[k], kContrast[k], kOffset[k], 0, kTimes, c2, {});
    std::vector<float> values(c2.size());
    for (size_t p = 0; p < c2.size(); ++p) values[p] = static_cast<float>(c2[p] + noise(rng));
    values[7 + k] = std::numeric_limits<float>::quiet_NaN();
    values[values.size() / 3] = std::numeric_limits<float>::infinity();
    data.push_back(std::move(values));
  }
  return data;
}

// The data pointers of batches (PassData::Fetch layout: batch-major, then angle).
std::vector<const float*> PointersOf(const InMemoryPassData::PackedData& data,
                                     std::span<const RowBatch> batches) {
  std::vector<const float*> pointers;
  for (const RowBatch& batch : batches) {
    for (const std::vector<float>& values : data) pointers.push_back(values.data() + batch.offset);
  }
  return pointers;
}

// Lower triangles and diagonals bitwise equal (the upper triangle is unspecified).
void ExpectSameLowerTriangle(const Eigen::MatrixXd& actual, const Eigen::MatrixXd& expected,
                             const char* what) {
  ASSERT_EQ(actual.rows(), expected.rows());
  for (int a = 0; a < expected.rows(); ++a) {
    for (int c = 0; c <= a; ++c) {
      EXPECT_EQ(actual(a, c), expected(a, c)) << what << " entry (" << a << ", " << c << ")";
    }
  }
}

class CpuPassBackendTest : public ::testing::Test {
 protected:
  CpuPassBackendTest()
      : model_(LaminarModel()),
        data_(MakeData(model_)),
        evaluation_(model_, kPhysical),
        batches_(SplitIntoBatches(kTimes, 1500)),
        pointers_(PointersOf(data_, batches_)) {}

  PassPoint Point() const { return {&evaluation_, kPhi, kContrast, kOffset, {}}; }
  int num_angles() const { return static_cast<int>(kPhi.size()); }

  // The backend's Gram matrices of batches[first, last), in one call.
  void ComputeGrams(PreparedPass& pass, int first, int last, std::vector<Eigen::MatrixXd>& grams,
                    std::vector<int64_t>& finite) const {
    const size_t n = static_cast<size_t>(num_angles());
    const size_t entries = static_cast<size_t>(last - first) * n;
    grams.assign(entries, Eigen::MatrixXd(pass.gram_size(), pass.gram_size()));
    finite.assign(entries, -1);
    pass.ComputeGrams(std::span<const RowBatch>(batches_).subspan(
                          static_cast<size_t>(first), static_cast<size_t>(last - first)),
                      std::span<const float* const>(pointers_).subspan(first * n, entries), grams,
                      finite);
  }

  const HomodyneModel model_;
  const InMemoryPassData::PackedData data_;
  const ModelEvaluation evaluation_;
  const std::vector<RowBatch> batches_;
  const std::vector<const float*> pointers_;
};

TEST_F(CpuPassBackendTest, GramsAndSquaredResidualsEqualPassKernelBatchByBatch) {
  // Arrange: the kernel called directly, one batch at a time, into zeroed matrices.
  ASSERT_GT(batches_.size(), 8u);
  const PassKernel kernel(evaluation_, kPhi, kContrast, kOffset);
  const int g = kernel.gram_size();
  PassKernel::Workspace workspace(g);
  const size_t n = static_cast<size_t>(num_angles());
  std::vector<Eigen::MatrixXd> expected_grams(batches_.size() * n, Eigen::MatrixXd::Zero(g, g));
  std::vector<int64_t> expected_finite(batches_.size() * n, 0);
  std::vector<double> expected_squares(batches_.size());
  for (size_t b = 0; b < batches_.size(); ++b) {
    const std::span<const float* const> data = std::span(pointers_).subspan(b * n, n);
    kernel.AccumulateRows(batches_[b].row_begin, batches_[b].row_end, data,
                          std::span(expected_grams).subspan(b * n, n),
                          std::span(expected_finite).subspan(b * n, n), workspace);
    expected_squares[b] =
        kernel.SumSquaredResiduals(batches_[b].row_begin, batches_[b].row_end, data, workspace);
  }

  // Act: every batch in one call through the interface.
  const std::shared_ptr<PassBackend> backend = MakeCpuPassBackend();
  const std::unique_ptr<PreparedPass> pass = backend->Prepare(Point());
  std::vector<Eigen::MatrixXd> grams;
  std::vector<int64_t> finite;
  ComputeGrams(*pass, 0, static_cast<int>(batches_.size()), grams, finite);
  std::vector<double> squares(batches_.size(), -1.0);
  pass->ComputeSquaredResiduals(batches_, pointers_, squares);

  // Assert
  ASSERT_EQ(pass->gram_size(), g);
  int64_t finite_total = 0;
  for (size_t slot = 0; slot < grams.size(); ++slot) {
    SCOPED_TRACE(slot);
    ExpectSameLowerTriangle(grams[slot], expected_grams[slot], "gram");
    EXPECT_EQ(finite[slot], expected_finite[slot]);
    finite_total += finite[slot];
  }
  EXPECT_EQ(finite_total, static_cast<int64_t>(n) * UpperTriangleSize(kTimes) - 6);
  for (size_t b = 0; b < batches_.size(); ++b) EXPECT_EQ(squares[b], expected_squares[b]) << b;
}

TEST_F(CpuPassBackendTest, SumsOfABatchDoNotDependOnItsCallOrTheThreadCount) {
  const std::unique_ptr<PreparedPass> pass = MakeCpuPassBackend()->Prepare(Point());
  const int num_batches = static_cast<int>(batches_.size());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Eigen::MatrixXd> one_thread;
  std::vector<int64_t> one_thread_finite;
  ComputeGrams(*pass, 0, num_batches, one_thread, one_thread_finite);
  omp_set_num_threads(2);
  std::vector<Eigen::MatrixXd> two_threads;
  std::vector<int64_t> two_threads_finite;
  ComputeGrams(*pass, 0, num_batches, two_threads, two_threads_finite);
  omp_set_num_threads(threads);
  // Uneven groups, as the chunks of a pass or the slices of MPI ranks would be.
  const size_t n = static_cast<size_t>(num_angles());
  for (const auto& [first, last] : {std::pair{0, 1}, std::pair{1, 4}, std::pair{4, num_batches}}) {
    std::vector<Eigen::MatrixXd> grams;
    std::vector<int64_t> finite;
    ComputeGrams(*pass, first, last, grams, finite);
    for (size_t slot = 0; slot < grams.size(); ++slot) {
      const size_t whole = static_cast<size_t>(first) * n + slot;
      SCOPED_TRACE(whole);
      ExpectSameLowerTriangle(grams[slot], one_thread[whole], "group vs one call");
      EXPECT_EQ(finite[slot], one_thread_finite[whole]);
    }
  }
  for (size_t slot = 0; slot < one_thread.size(); ++slot) {
    SCOPED_TRACE(slot);
    ExpectSameLowerTriangle(two_threads[slot], one_thread[slot], "2 threads vs 1");
    EXPECT_EQ(two_threads_finite[slot], one_thread_finite[slot]);
  }
}

// A backend that forwards to the CPU backend and counts what the objective asks of it.
class CountingBackend : public PassBackend {
 public:
  struct Counts {
    int prepared = 0;
    int gram_calls = 0;
    int gram_batches = 0;
    int cost_calls = 0;
    int cost_batches = 0;
  };

  BackendKind kind() const override { return cpu_->kind(); }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override {
    ++counts.prepared;
    return std::make_unique<CountingPass>(cpu_->Prepare(point), counts);
  }

  Counts counts;

 private:
  class CountingPass : public PreparedPass {
   public:
    CountingPass(std::unique_ptr<PreparedPass> inner, Counts& counts)
        : inner_(std::move(inner)), counts_(counts) {}
    int gram_size() const override { return inner_->gram_size(); }
    void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                      std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
      ++counts_.gram_calls;
      counts_.gram_batches += static_cast<int>(batches.size());
      inner_->ComputeGrams(batches, data, grams, finite_points);
    }
    void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                                 std::span<const float* const> data,
                                 std::span<double> squared_residuals) override {
      ++counts_.cost_calls;
      counts_.cost_batches += static_cast<int>(batches.size());
      inner_->ComputeSquaredResiduals(batches, data, squared_residuals);
    }

   private:
    std::unique_ptr<PreparedPass> inner_;
    Counts& counts_;
  };

  std::shared_ptr<PassBackend> cpu_ = MakeCpuPassBackend();
};

Eigen::VectorXd Theta() {
  Eigen::VectorXd theta(static_cast<Eigen::Index>(kPhysical.size() + 2 * kPhi.size()));
  for (size_t a = 0; a < kPhysical.size(); ++a) theta[static_cast<Eigen::Index>(a)] = kPhysical[a];
  for (size_t k = 0; k < kPhi.size(); ++k) {
    theta[static_cast<Eigen::Index>(kPhysical.size() + k)] = kContrast[k];
    theta[static_cast<Eigen::Index>(kPhysical.size() + kPhi.size() + k)] = kOffset[k];
  }
  return theta;
}

void ExpectBitwiseEqual(const NormalEquations& actual, const NormalEquations& expected) {
  EXPECT_EQ(actual.chi2, expected.chi2);
  EXPECT_EQ(actual.num_points, expected.num_points);
  EXPECT_TRUE((actual.jtj.array() == expected.jtj.array()).all());
  EXPECT_TRUE((actual.jtr.array() == expected.jtr.array()).all());
}

TEST_F(CpuPassBackendTest, ObjectiveComputesEveryPassOnTheBackendItIsGiven) {
  // Arrange: 4 batches per chunk, so a pass calls the backend once per chunk.
  auto backend = std::make_shared<CountingBackend>();
  PassOptions options;
  options.batch_points = 1500;
  options.chunk_batches = 4;
  BatchedObjective objective(model_, kPhi, 0.01, std::make_unique<InMemoryPassData>(data_), options,
                             backend);
  const int chunks = (objective.num_batches() + 3) / 4;

  // Act
  const NormalEquations full = objective.Accumulate(Theta());
  const double cost = objective.Cost(Theta());
  const AngleGrams angle_grams = objective.AccumulateAngleGrams(Theta());

  // Assert: one preparation per pass; every batch once per pass, chunk by chunk.
  EXPECT_EQ(backend->counts.prepared, 3);
  EXPECT_EQ(backend->counts.gram_calls, 2 * chunks);
  EXPECT_EQ(backend->counts.gram_batches, 2 * objective.num_batches());
  EXPECT_EQ(backend->counts.cost_calls, chunks);
  EXPECT_EQ(backend->counts.cost_batches, objective.num_batches());
  EXPECT_DOUBLE_EQ(cost, full.chi2);  // the same sum in another order
  EXPECT_EQ(angle_grams.finite_points, full.num_points / 2);
}

TEST_F(CpuPassBackendTest, ExplicitCpuBackendGivesBitwiseTheDefaultsNormalEquationsOnAnyThreads) {
  // Arrange: the default (null: CPU) and an explicit CPU backend, with different chunk sizes.
  PassOptions default_options;
  default_options.batch_points = 1500;
  PassOptions explicit_options = default_options;
  explicit_options.chunk_batches = 3;
  BatchedObjective by_default(model_, kPhi, 0.01, std::make_unique<InMemoryPassData>(data_),
                              default_options);
  BatchedObjective on_cpu(model_, kPhi, 0.01, std::make_unique<InMemoryPassData>(data_),
                          explicit_options, MakeCpuPassBackend());
  const int threads = omp_get_max_threads();

  // Act
  omp_set_num_threads(1);
  const NormalEquations default_one = by_default.Accumulate(Theta());
  const NormalEquations cpu_one = on_cpu.Accumulate(Theta());
  const double cost_one = on_cpu.Cost(Theta());
  omp_set_num_threads(2);
  const NormalEquations default_two = by_default.Accumulate(Theta());
  const NormalEquations cpu_two = on_cpu.Accumulate(Theta());
  const double cost_two = on_cpu.Cost(Theta());
  omp_set_num_threads(threads);

  // Assert
  ExpectBitwiseEqual(cpu_one, default_one);
  ExpectBitwiseEqual(cpu_two, default_one);
  ExpectBitwiseEqual(default_two, default_one);
  EXPECT_EQ(cost_two, cost_one);
  EXPECT_DOUBLE_EQ(cost_one, default_one.chi2);  // the same sum in another order
}

// Relative difference of two values, at most 1 where both are 0.
double RelativeDifference(double actual, double expected) {
  const double scale = std::max(std::abs(expected), std::abs(actual));
  return scale == 0.0 ? 0.0 : std::abs(actual - expected) / scale;
}

// A row subsample (every 3rd row) of data for model at theta: on the CPU backend in batches of
// several rows (RowBatch::row_stride 3), on a backend without strided rows (CountingBackend) one
// row per batch. The same rows and points in fewer batches, the same sums up to their order, and
// the strided sums bitwise the same on 1 and 2 threads.
void ExpectStridedBatchesGiveTheRowByRowSums(const HomodyneModel& model,
                                             const InMemoryPassData::PackedData& data,
                                             const std::vector<double>& phi,
                                             const Eigen::VectorXd& theta) {
  // Arrange
  const int n = model.num_times();
  const std::unique_ptr<BatchedObjective> strided =
      MakeRowSubsampleObjective(data, model, phi, 0.01, 3);
  const std::unique_ptr<BatchedObjective> row_by_row =
      MakeRowSubsampleObjective(data, model, phi, 0.01, 3, std::make_shared<CountingBackend>());
  const int threads = omp_get_max_threads();

  // Act
  omp_set_num_threads(1);
  const NormalEquations strided_one = strided->Accumulate(theta);
  const double strided_cost = strided->Cost(theta);
  const AngleGrams strided_grams =
      strided->AccumulateAngleGrams(theta, false, PassColumns::kScaling);
  omp_set_num_threads(2);
  const NormalEquations strided_two = strided->Accumulate(theta);
  omp_set_num_threads(threads);
  const NormalEquations expected = row_by_row->Accumulate(theta);
  const double expected_cost = row_by_row->Cost(theta);
  const AngleGrams expected_grams =
      row_by_row->AccumulateAngleGrams(theta, false, PassColumns::kScaling);

  // Assert
  EXPECT_EQ(row_by_row->num_batches(), (n - 1 + 2) / 3);
  EXPECT_LT(strided->num_batches(), row_by_row->num_batches() / 4);
  EXPECT_GT(strided->num_batches(), 1);
  EXPECT_EQ(strided->num_points(), row_by_row->num_points());
  EXPECT_EQ(strided_one.num_points, expected.num_points);
  EXPECT_LT(RelativeDifference(strided_one.chi2, expected.chi2), 1e-12);
  EXPECT_LT(RelativeDifference(strided_cost, expected_cost), 1e-12);
  ASSERT_EQ(strided_one.jtj.rows(), expected.jtj.rows());
  const double jtj_scale = expected.jtj.cwiseAbs().maxCoeff();
  const double jtr_scale = expected.jtr.cwiseAbs().maxCoeff();
  EXPECT_LT((strided_one.jtj - expected.jtj).cwiseAbs().maxCoeff(), 1e-12 * jtj_scale);
  EXPECT_LT((strided_one.jtr - expected.jtr).cwiseAbs().maxCoeff(), 1e-12 * jtr_scale);
  EXPECT_EQ(strided_grams.finite_points, expected_grams.finite_points);
  for (size_t k = 0; k < phi.size(); ++k) {
    const Eigen::MatrixXd& actual = strided_grams.grams[k];
    const Eigen::MatrixXd& wanted = expected_grams.grams[k];
    EXPECT_LT((actual - wanted).cwiseAbs().maxCoeff(), 1e-12 * wanted.cwiseAbs().maxCoeff())
        << "angle " << k;
  }
  ExpectBitwiseEqual(strided_two, strided_one);
}

TEST_F(CpuPassBackendTest, RowSubsampleInStridedBatchesGivesTheSumsOfOneRowPerBatch) {
  ExpectStridedBatchesGiveTheRowByRowSums(model_, data_, kPhi, Theta());
}

TEST(CpuPassBackendTwoComponentTest, RowSubsampleInStridedBatchesGivesTheSumsOfOneRowPerBatch) {
  // configs/simulate_two_component.yaml's truth, on 240 times; the fit's parameters 5 % off.
  const std::vector<double> truth = {1000.0, 0.0, 0.0, 20000.0, -0.3, 0.0, 20.0,
                                     0.5,    1.0, 0.3, 0.01,    0.5,  0.2, 2.0};
  const int n = 240;
  std::vector<double> times(n);
  for (int i = 0; i < n; ++i) times[static_cast<size_t>(i)] = (i + 1) * 0.1;
  const HomodyneModel model(AnalysisMode::kTwoComponent, ScatteringGeometry{0.0054, 2.0e6, 0.1},
                            std::move(times));
  const ModelEvaluation evaluation(model, truth);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 0.01);
  InMemoryPassData::PackedData data;
  std::vector<double> c2(static_cast<size_t>(UpperTriangleSize(n)));
  for (double angle : kPhi) {
    evaluation.EvaluateUpperTriangleRows(angle, 0.3, 1.0, 0, n, c2, {});
    std::vector<float> values(c2.size());
    for (size_t p = 0; p < c2.size(); ++p) values[p] = static_cast<float>(c2[p] + noise(rng));
    data.push_back(std::move(values));
  }
  Eigen::VectorXd theta(static_cast<Eigen::Index>(truth.size() + 2 * kPhi.size()));
  for (size_t a = 0; a < truth.size(); ++a) theta[static_cast<Eigen::Index>(a)] = 1.05 * truth[a];
  theta.tail(6) << 0.3, 0.3, 0.3, 1.0, 1.0, 1.0;
  ExpectStridedBatchesGiveTheRowByRowSums(model, data, kPhi, theta);
}

}  // namespace
}  // namespace homodyne
