// Distributed passes (batched_objective.h, PassOptions::group; docs/design.md section 5b) without
// MPI: K threads stand for K ranks, each with its own objective that keeps only its share of the
// data (KeepOwnShare), joined by an in-process ProcessGroup. Every rank's full pass, cost pass,
// per-angle pass (all columns and the scaling columns) and sum of squares must be bitwise those of
// one process, for K = 1 to 4, in laminar_flow and static, with chunks that split ranks' shares
// across chunk boundaries, and for a pass resumed at a batch that is not a chunk boundary. The MPI
// build's own group is tested end to end by tests/cli/mpi_test.sh.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "homodyne/process_group.h"
#include "objective/batched_objective.h"
#include "optimize/initial_values.h"
#include "support/simulated_data_fixture.h"
#include "support/thread_ranks.h"

namespace homodyne {
namespace {

// Everything one objective computes at one point.
struct PassResults {
  NormalEquations full;
  double cost = 0.0;
  AngleGrams angle_grams;
  AngleGrams scaling_grams;  // PassColumns::kScaling
  double sum_of_squares = 0.0;
  NormalEquations resumed;  // a full pass resumed from a state saved at batch resume_at
  int64_t finite_points = 0;
  FiniteValueRange range;
};

void ExpectBitwiseEqual(const PassResults& a, const PassResults& b, int ranks, int rank) {
  SCOPED_TRACE(::testing::Message() << ranks << " ranks, rank " << rank);
  EXPECT_TRUE((a.full.jtj.array() == b.full.jtj.array()).all());
  EXPECT_TRUE((a.full.jtr.array() == b.full.jtr.array()).all());
  EXPECT_EQ(a.full.chi2, b.full.chi2);
  EXPECT_EQ(a.full.num_points, b.full.num_points);
  EXPECT_EQ(a.cost, b.cost);
  ASSERT_EQ(a.angle_grams.grams.size(), b.angle_grams.grams.size());
  for (size_t k = 0; k < a.angle_grams.grams.size(); ++k) {
    EXPECT_TRUE((a.angle_grams.grams[k].array() == b.angle_grams.grams[k].array()).all());
  }
  ASSERT_EQ(a.scaling_grams.grams.size(), b.scaling_grams.grams.size());
  for (size_t k = 0; k < a.scaling_grams.grams.size(); ++k) {
    EXPECT_EQ(a.scaling_grams.grams[k].rows(), 3);
    EXPECT_TRUE((a.scaling_grams.grams[k].array() == b.scaling_grams.grams[k].array()).all());
  }
  EXPECT_EQ(a.scaling_grams.finite_points, b.scaling_grams.finite_points);
  EXPECT_EQ(a.sum_of_squares, b.sum_of_squares);
  EXPECT_TRUE((a.resumed.jtj.array() == b.resumed.jtj.array()).all());
  EXPECT_EQ(a.resumed.chi2, b.resumed.chi2);
  EXPECT_EQ(a.finite_points, b.finite_points);
  EXPECT_EQ(a.range.min, b.range.min);
  EXPECT_EQ(a.range.max, b.range.max);
  EXPECT_EQ(a.range.complete, b.range.complete);
}

std::string ModeName(const ::testing::TestParamInfo<AnalysisMode>& mode) {
  return std::string(ToString(mode.param));
}

class DistributedPassesTest : public SimulatedDataTest,
                              public ::testing::WithParamInterface<AnalysisMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, DistributedPassesTest,
                         ::testing::Values(AnalysisMode::kLaminarFlow, AnalysisMode::kStatic),
                         ModeName);

TEST_P(DistributedPassesTest, EveryRankCountGivesBitwiseTheSingleProcessPasses) {
  const Config config = SimulationConfig(GetParam(), 90);
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const HomodyneModel model = ModelOf(config, *source);
  const std::vector<double> phi = AnglesOf(*source);
  PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
  data[1][1234] = std::numeric_limits<float>::quiet_NaN();  // a skipped point in some rank's share
  Eigen::VectorXd theta = Truth(config);
  theta *= 1.1;
  constexpr int kChunk = 5;     // several chunks a pass; shares of 2 to 4 ranks within each
  constexpr int kResumeAt = 7;  // not a chunk boundary: the resumed pass first completes a chunk

  // kind 0: the in-memory objective; kind 1: the row subsample (the global phase's data), whose
  // range is observed by the passes.
  auto compute = [&](int kind, std::shared_ptr<ProcessGroup> group,
                     const PassState* resume) -> PassResults {
    omp_set_num_threads(1);
    std::unique_ptr<BatchedObjective> objective;
    if (kind == 0) {
      PassOptions options;
      options.batch_points = 200;
      options.chunk_batches = kChunk;
      options.group = group;
      objective = std::make_unique<PackedDataObjective>(model, phi, 0.01, data, options);
    } else {
      objective = MakeRowSubsampleObjective(data, model, phi, 0.01, 3, nullptr, group);
    }
    objective->KeepOwnShare();
    PassResults results;
    results.full = objective->Accumulate(theta);
    results.cost = objective->Cost(theta);
    results.angle_grams = objective->AccumulateAngleGrams(theta);
    results.scaling_grams =
        objective->AccumulateAngleGrams(theta, /*weighted=*/false, PassColumns::kScaling);
    results.sum_of_squares = objective->SumOfSquares(theta);
    if (resume != nullptr) {
      objective->ResumePass(*resume);
      results.resumed = objective->Accumulate(theta);
    }
    results.finite_points = objective->num_residuals();
    results.range = objective->finite_value_range();
    return results;
  };

  for (int kind : {0, 1}) {
    SCOPED_TRACE(kind == 0 ? "in memory" : "row subsample");
    // The single process's passes, and its partial sums at batch kResumeAt of a full pass.
    std::optional<PassState> saved;
    {
      PassOptions options;
      options.batch_points = 200;
      options.chunk_batches = 1;
      options.on_chunk = [&saved](const PassProgress& progress) {
        if (progress.batches_done == kResumeAt) saved = *progress.state;
      };
      PackedDataObjective one_by_one(model, phi, 0.01, data, options);
      one_by_one.Accumulate(theta);
    }
    ASSERT_TRUE(saved.has_value());
    const PassResults single = compute(kind, nullptr, kind == 0 ? &*saved : nullptr);
    EXPECT_TRUE((single.resumed.jtj.array() ==
                 (kind == 0 ? single.full.jtj.array() : single.resumed.jtj.array()))
                    .all());
    for (int size = 1; size <= 4; ++size) {
      SharedState state(size);
      std::vector<PassResults> results(static_cast<size_t>(size));
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < size; ++rank) {
        ranks.emplace_back([&, rank] {
          results[static_cast<size_t>(rank)] = compute(
              kind, std::make_shared<ThreadRank>(state, rank, size), kind == 0 ? &*saved : nullptr);
        });
      }
      for (std::thread& rank : ranks) rank.join();
      for (int rank = 0; rank < size; ++rank) {
        ExpectBitwiseEqual(single, results[static_cast<size_t>(rank)], size, rank);
      }
    }
  }
}

// One rank's view of a shared source: reads go to it one at a time (HDF5 is not thread-safe), and
// the rows each read asks for are counted per angle.
class CountingSource final : public BatchSource {
 public:
  CountingSource(BatchSource& source, std::mutex& lock)
      : source_(source),
        lock_(lock),
        reads_(static_cast<size_t>(source.info().num_angles()),
               std::vector<int>(static_cast<size_t>(source.info().num_times()), 0)) {}
  const DatasetInfo& info() const override { return source_.info(); }
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end,
                             std::span<double> out) override {
    Count(angle, row_begin, row_end);
    const std::lock_guard<std::mutex> hold(lock_);
    source_.ReadUpperTriangleRows(angle, row_begin, row_end, out);
  }
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end, std::span<float> out) override {
    Count(angle, row_begin, row_end);
    const std::lock_guard<std::mutex> hold(lock_);
    source_.ReadUpperTriangleRows(angle, row_begin, row_end, out);
  }
  void ReadCorrectedMatrix(int angle, std::span<double> out) override {
    const std::lock_guard<std::mutex> hold(lock_);
    source_.ReadCorrectedMatrix(angle, out);
  }
  void ReleaseReadBuffers() override {
    const std::lock_guard<std::mutex> hold(lock_);
    source_.ReleaseReadBuffers();
  }
  // reads()[k][i]: how often row i of angle k was read.
  const std::vector<std::vector<int>>& reads() const { return reads_; }

 private:
  void Count(int angle, int row_begin, int row_end) {
    for (int i = row_begin; i < row_end; ++i) {
      ++reads_[static_cast<size_t>(angle)][static_cast<size_t>(i)];
    }
  }
  BatchSource& source_;
  std::mutex& lock_;
  std::vector<std::vector<int>> reads_;
};

// The passes of an objective at theta (no resume).
PassResults PassesAt(BatchedObjective& objective, const Eigen::VectorXd& theta) {
  PassResults results;
  results.full = objective.Accumulate(theta);
  results.cost = objective.Cost(theta);
  results.angle_grams = objective.AccumulateAngleGrams(theta);
  results.scaling_grams =
      objective.AccumulateAngleGrams(theta, /*weighted=*/false, PassColumns::kScaling);
  results.sum_of_squares = objective.SumOfSquares(theta);
  results.finite_points = objective.num_residuals();
  results.range = objective.finite_value_range();
  return results;
}

// Runs rank_body(rank, group) on `size` thread ranks of one in-process group.
void OnThreadRanks(int size, const std::function<void(int, std::shared_ptr<ProcessGroup>)>& body) {
  SharedState state(size);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      omp_set_num_threads(1);
      body(rank, std::make_shared<ThreadRank>(state, rank, size));
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

// The in-memory objective read on each rank from the file (PackedDataObjective(source, ...)) and
// the global phase's row subsample read from the file: each rank reads only the rows of its own
// batches, every row is read by exactly one rank, and every rank's passes, finite count, range
// and start estimate are bitwise those of one process on the whole data.
TEST_P(DistributedPassesTest, EachRankReadsOnlyItsOwnRowsWithTheSingleProcessResults) {
  const Config config = SimulationConfig(GetParam(), 90);
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const HomodyneModel model = ModelOf(config, *source);
  const std::vector<double> phi = AnglesOf(*source);
  const int n = model.num_times();
  const PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
  Eigen::VectorXd theta = Truth(config);
  theta *= 1.1;
  PassOptions options;
  options.batch_points = 200;
  options.chunk_batches = 5;  // several chunks a pass, shares within each
  const ParameterBound contrast{"contrast", 0.01, 1.0};
  const ParameterBound offset{"offset", 0.5, 1.5};

  PackedDataObjective whole(model, phi, 0.01, data, options);
  const PassResults single = PassesAt(whole, theta);
  std::unique_ptr<BatchedObjective> whole_subsample =
      MakeRowSubsampleObjective(data, model, phi, 0.01, 3);
  const PassResults single_subsample = PassesAt(*whole_subsample, theta);
  std::vector<ScalingEstimate> single_estimates;
  for (const std::vector<float>& values : data) {
    single_estimates.push_back(EstimateScalingFromData(values, n, contrast, offset));
  }

  std::mutex lock;
  for (int size = 1; size <= 4; ++size) {
    std::vector<std::unique_ptr<CountingSource>> sources;
    std::vector<std::unique_ptr<CountingSource>> subsample_sources;
    for (int rank = 0; rank < size; ++rank) {
      sources.push_back(std::make_unique<CountingSource>(*source, lock));
      subsample_sources.push_back(std::make_unique<CountingSource>(*source, lock));
    }
    std::vector<PassResults> results(static_cast<size_t>(size));
    std::vector<PassResults> subsample_results(static_cast<size_t>(size));
    std::vector<std::vector<ScalingEstimate>> estimates(static_cast<size_t>(size));
    std::vector<int64_t> held(static_cast<size_t>(size));
    OnThreadRanks(size, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      const size_t r = static_cast<size_t>(rank);
      PassOptions rank_options = options;
      rank_options.group = group;
      PackedDataObjective objective(*sources[r], model, phi, 0.01, rank_options);
      held[r] = static_cast<int64_t>(objective.data()[0].size());
      const std::vector<int> rows = objective.held_rows();
      for (const std::vector<float>& values : objective.data()) {
        estimates[r].push_back(
            size > 1 ? EstimateScalingOverRanks(values, rows, n, contrast, offset, *group)
                     : EstimateScalingFromData(values, n, contrast, offset));
      }
      objective.KeepOwnShare();  // holds its share already: nothing changes
      results[r] = PassesAt(objective, theta);
      std::unique_ptr<BatchedObjective> subsample =
          MakeRowSubsampleObjective(*subsample_sources[r], model, phi, 0.01, 3, nullptr, group);
      subsample->KeepOwnShare();
      subsample_results[r] = PassesAt(*subsample, theta);
    });
    int64_t held_total = 0;
    for (int rank = 0; rank < size; ++rank) {
      const size_t r = static_cast<size_t>(rank);
      ExpectBitwiseEqual(single, results[r], size, rank);
      ExpectBitwiseEqual(single_subsample, subsample_results[r], size, rank);
      for (size_t k = 0; k < single_estimates.size(); ++k) {
        EXPECT_EQ(estimates[r][k].contrast, single_estimates[k].contrast) << size << " ranks";
        EXPECT_EQ(estimates[r][k].offset, single_estimates[k].offset) << size << " ranks";
      }
      held_total += held[r];
      if (size > 1) {
        EXPECT_LT(held[r], UpperTriangleSize(n)) << "rank " << rank;
      }
    }
    EXPECT_EQ(held_total, UpperTriangleSize(n)) << size << " ranks";
    // Every row of every angle read by exactly one rank (the subsample: every third row).
    for (size_t k = 0; k < data.size(); ++k) {
      for (int i = 0; i + 1 < n; ++i) {
        int readers = 0;
        int subsample_readers = 0;
        for (int rank = 0; rank < size; ++rank) {
          readers += sources[static_cast<size_t>(rank)]->reads()[k][static_cast<size_t>(i)];
          subsample_readers +=
              subsample_sources[static_cast<size_t>(rank)]->reads()[k][static_cast<size_t>(i)];
        }
        ASSERT_EQ(readers, 1) << size << " ranks, angle " << k << ", row " << i;
        ASSERT_EQ(subsample_readers, i % 3 == 0 ? 1 : 0)
            << size << " ranks, angle " << k << ", row " << i;
      }
    }
  }
}

// The start estimate over ranks on values with ties, negative values, both zeros and NaN, split
// into contiguous runs of rows at random, is bitwise the single process's, also where the
// estimator falls back to all values (few far or near lags) or to the bound midpoints.
TEST(EstimateScalingOverRanksTest, BitwiseTheSingleProcessEstimateForAnySplit) {
  const ParameterBound contrast{"contrast", -5.0, 5.0};
  const ParameterBound offset{"offset", -5.0, 5.0};
  std::mt19937 random(11);
  for (const int n : {14, 15, 40, 200}) {
    for (const int variant : {0, 1, 2}) {
      const int64_t points = UpperTriangleSize(n);
      std::vector<float> values(static_cast<size_t>(points));
      std::uniform_int_distribution<int> level(-6, 6);
      size_t index = 0;
      for (int i = 0; i + 1 < n; ++i) {
        for (int j = i + 1; j < n; ++j, ++index) {
          // Few distinct values (ties), negative ones, +0 and -0, a NaN now and then.
          const int draw = level(random);
          float value = draw == 0 ? ((i + j) % 2 == 0 ? 0.0f : -0.0f) : 0.25f * draw;
          if (draw == 6 && variant != 2) value = std::numeric_limits<float>::quiet_NaN();
          // variant 1: the longest lags are NaN, so few far values remain (the fallback).
          if (variant == 1 && j - i > n / 2) value = std::numeric_limits<float>::quiet_NaN();
          values[index] = value;
        }
      }
      const ScalingEstimate single = EstimateScalingFromData(values, n, contrast, offset);
      for (int size = 1; size <= 4; ++size) {
        // Contiguous runs of rows: random cut points, one run per rank.
        std::vector<int> cuts = {0, n - 1};
        std::uniform_int_distribution<int> cut(0, n - 1);
        for (int r = 1; r < size; ++r) cuts.push_back(cut(random));
        std::sort(cuts.begin(), cuts.end());
        std::vector<ScalingEstimate> estimates(static_cast<size_t>(size));
        OnThreadRanks(size, [&](int rank, std::shared_ptr<ProcessGroup> group) {
          const int row_begin = cuts[static_cast<size_t>(rank)];
          const int row_end = cuts[static_cast<size_t>(rank) + 1];
          std::vector<int> rows;
          for (int i = row_begin; i < row_end; ++i) rows.push_back(i);
          const int64_t begin = UpperTriangleRowOffset(n, row_begin);
          const int64_t end = UpperTriangleRowOffset(n, row_end);
          estimates[static_cast<size_t>(rank)] = EstimateScalingOverRanks(
              std::span<const float>(values.data() + begin, static_cast<size_t>(end - begin)), rows,
              n, contrast, offset, *group);
        });
        for (int rank = 0; rank < size; ++rank) {
          SCOPED_TRACE(::testing::Message() << "n " << n << ", variant " << variant << ", " << size
                                            << " ranks, rank " << rank);
          EXPECT_EQ(std::bit_cast<uint64_t>(estimates[static_cast<size_t>(rank)].contrast),
                    std::bit_cast<uint64_t>(single.contrast));
          EXPECT_EQ(std::bit_cast<uint64_t>(estimates[static_cast<size_t>(rank)].offset),
                    std::bit_cast<uint64_t>(single.offset));
        }
      }
    }
  }
}

}  // namespace
}  // namespace homodyne
