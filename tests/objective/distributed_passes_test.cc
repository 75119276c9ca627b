// Distributed passes (batched_objective.h, PassOptions::group; docs/design.md section 5b) without
// MPI: K threads stand for K ranks, each with its own objective that keeps only its share of the
// data (KeepOwnShare), joined by an in-process ProcessGroup. Every rank's full pass, cost pass,
// per-angle pass and sum of squares must be bitwise those of one process, for K = 1 to 4, in
// laminar_flow and static, with chunks that split ranks' shares across chunk boundaries, and for
// a pass resumed at a batch that is not a chunk boundary. The MPI build's own group is tested
// end to end by tests/cli/mpi_test.sh.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <barrier>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "homodyne/process_group.h"
#include "objective/batched_objective.h"
#include "support/simulated_data_fixture.h"

namespace homodyne {
namespace {

// What the ranks of one in-process group share: a barrier and a slot per rank.
struct SharedState {
  explicit SharedState(int size) : barrier(size), blocks(static_cast<size_t>(size)),
                                   values(static_cast<size_t>(size)) {}
  std::barrier<> barrier;
  std::vector<std::vector<double>> blocks;
  std::vector<int64_t> values;
};

// One rank of the in-process group: each collective publishes this rank's part, waits for all,
// reads, and waits again before the slots are reused.
class ThreadRank final : public ProcessGroup {
 public:
  ThreadRank(SharedState& state, int rank, int size) : state_(state), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllGather(std::span<const double> mine, std::span<const int> counts,
                 std::span<double> all) override {
    EXPECT_EQ(static_cast<int>(mine.size()), counts[static_cast<size_t>(rank_)]);
    state_.blocks[static_cast<size_t>(rank_)].assign(mine.begin(), mine.end());
    state_.barrier.arrive_and_wait();
    size_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const std::vector<double>& block = state_.blocks[static_cast<size_t>(r)];
      EXPECT_EQ(static_cast<int>(block.size()), counts[static_cast<size_t>(r)]);
      std::copy(block.begin(), block.end(), all.begin() + static_cast<std::ptrdiff_t>(at));
      at += block.size();
    }
    state_.barrier.arrive_and_wait();
  }
  int64_t MaxOverRanks(int64_t value) override {
    state_.values[static_cast<size_t>(rank_)] = value;
    state_.barrier.arrive_and_wait();
    const int64_t result = *std::max_element(state_.values.begin(), state_.values.end());
    state_.barrier.arrive_and_wait();
    return result;
  }
  int64_t BroadcastFromRoot(int64_t value) override {
    state_.values[static_cast<size_t>(rank_)] = value;
    state_.barrier.arrive_and_wait();
    const int64_t result = state_.values[0];
    state_.barrier.arrive_and_wait();
    return result;
  }
  [[noreturn]] void Abort(int /*exit_code*/) override { std::abort(); }
  int64_t bytes_received() const override { return 0; }

 private:
  SharedState& state_;
  int rank_;
  int size_;
};

// Everything one objective computes at one point.
struct PassResults {
  NormalEquations full;
  double cost = 0.0;
  AngleGrams angle_grams;
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
  constexpr int kChunk = 5;  // several chunks a pass; shares of 2 to 4 ranks within each
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
    EXPECT_TRUE((single.resumed.jtj.array() == (kind == 0 ? single.full.jtj.array()
                                                          : single.resumed.jtj.array()))
                    .all());
    for (int size = 1; size <= 4; ++size) {
      SharedState state(size);
      std::vector<PassResults> results(static_cast<size_t>(size));
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < size; ++rank) {
        ranks.emplace_back([&, rank] {
          results[static_cast<size_t>(rank)] =
              compute(kind, std::make_shared<ThreadRank>(state, rank, size),
                      kind == 0 ? &*saved : nullptr);
        });
      }
      for (std::thread& rank : ranks) rank.join();
      for (int rank = 0; rank < size; ++rank) {
        ExpectBitwiseEqual(single, results[static_cast<size_t>(rank)], size, rank);
      }
    }
  }
}

}  // namespace
}  // namespace homodyne
