// The strategies of docs/design.md section 3 (fit_strategy.h): in memory (standard with the LM
// core, large, chunked), standard with Ceres, and streaming.
#include "fit_strategy.h"

#include "interrupts.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <new>
#include <optional>
#include <span>
#include <string_view>

#include "base/fault_injection.h"
#include "objective/c2_rows.h"
#include "optimize/ceres_standard_fit.h"
#include "optimize/reparametrized_problem.h"

namespace homodyne {
namespace {

// The fault point of an allocation that can exhaust memory (src/base/fault_injection.h):
// throws std::bad_alloc when an installed injector asks for it, so the fallbacks can be tested
// without exhausting memory. `what`: a strategy's name, "ceres_jacobian", or "whole_data" (a
// rank's copy of all the data for the profile intervals, FitStrategy::WholeDataHere).
void MaybeInjectAllocationFailure(std::string_view what) {
  const FaultInjector* faults = InstalledFaultInjector();
  if (faults != nullptr && faults->FailAllocation(what)) throw std::bad_alloc();
}

// The next leaner strategy after an allocation failure (docs/design.md section 3): standard ->
// large; large and chunked hold the same data, so both fall back to streaming.
std::optional<StrategyKind> LeanerStrategy(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kStandard:
      return StrategyKind::kLarge;
    case StrategyKind::kLarge:
    case StrategyKind::kChunked:
      return StrategyKind::kStreaming;
    case StrategyKind::kStreaming:
      return std::nullopt;
  }
  return std::nullopt;
}

// The LM core's policy on data held in memory: a pass takes at most seconds, so checkpoints are
// written at iteration ends, except for chunked, whose passes are long enough to save inside.
CheckpointPolicy InMemoryPolicy(StrategyKind kind) {
  CheckpointPolicy policy;
  if (kind == StrategyKind::kChunked) {
    policy.save_inside_passes = true;
  } else {
    policy.save_at_iterations = true;
  }
  return policy;
}

// Pass options shared by every strategy: optimization.streaming.batch_size counts points of all
// angles, and a batch holds every angle.
PassOptions BasePassOptions(const StrategyInputs& inputs) {
  const int n_angles = inputs.source.info().num_angles();
  PassOptions options;
  options.batch_points = std::max<int64_t>(1, (inputs.size.batch_points + n_angles - 1) / n_angles);
  options.on_chunk = inputs.on_chunk;
  // A signal is seen between chunks of every pass of the fit's data, those outside the final
  // fit's on_chunk hook too (the projected local fit, the reported chi2 of a robust loss, the
  // profile points); collective on several ranks, which make these passes in lock step.
  options.stop_requested = [] { return InterruptSignal() != 0; };
  options.loss = inputs.config.nlsq.loss;
  options.group = inputs.group;
  return options;
}

// The quantile estimate per angle on data held in memory: the whole triangles, or (own_share_only:
// each rank of a job holds the rows of its batches) every rank's rows together, bitwise the same.
std::vector<ScalingEstimate> EstimateScalingInMemory(const Config& config,
                                                     const PackedDataObjective& objective,
                                                     bool own_share_only, ProcessGroup& group) {
  const int n_times = objective.model().num_times();
  std::vector<ScalingEstimate> estimates;
  if (own_share_only) {
    const std::vector<int> rows = objective.held_rows();
    for (const std::vector<float>& values : objective.data()) {
      estimates.push_back(EstimateScalingOverRanks(
          values, rows, n_times, config.BoundOf("contrast"), config.BoundOf("offset"), group));
    }
    return estimates;
  }
  for (const std::vector<float>& values : objective.data()) {
    estimates.push_back(EstimateScalingFromData(values, n_times, config.BoundOf("contrast"),
                                                config.BoundOf("offset")));
  }
  return estimates;
}

// The quantile estimate per angle for streamed data: on an evenly spread sample of whole rows
// holding about max_points points per angle, read from the file (memory stays bounded).
std::vector<ScalingEstimate> EstimateScalingFromFile(const Config& config, BatchSource& source,
                                                     int64_t max_points) {
  const int n = source.info().num_times();
  const int64_t total = UpperTriangleSize(n);
  const int stride = static_cast<int>(std::max<int64_t>(1, (total + max_points - 1) / max_points));
  std::vector<int> rows;
  for (int i = 0; i + 1 < n; i += stride) rows.push_back(i);
  // Runs of consecutive sampled rows (all of them at stride 1) are read in blocks of up to
  // kBlockPoints: a read per row decompresses the same chunks again for every row (seconds on a
  // gzip file). The values are the same, in the same order.
  constexpr int64_t kBlockPoints = int64_t{1} << 18;
  std::vector<ScalingEstimate> estimates;
  std::vector<float> values;
  for (int k = 0; k < source.info().num_angles(); ++k) {
    values.clear();
    for (size_t r = 0; r < rows.size();) {
      size_t end = r + 1;
      while (end < rows.size() && rows[end] == rows[end - 1] + 1 &&
             UpperTriangleRowsSize(n, rows[r], rows[end] + 1) <= kBlockPoints) {
        ++end;
      }
      const int row_begin = rows[r];
      const int row_end = rows[end - 1] + 1;
      const size_t start = values.size();
      values.resize(start + static_cast<size_t>(UpperTriangleRowsSize(n, row_begin, row_end)));
      ReadC2Rows(source, k, row_begin, row_end,
                 std::span<float>(values.data() + start, values.size() - start));
      r = end;
    }
    estimates.push_back(EstimateScalingFromRows(values, rows, n, config.BoundOf("contrast"),
                                                config.BoundOf("offset")));
  }
  return estimates;
}

// Standard (LM core), large and chunked: the packed upper triangles in memory as float32, J^T J
// accumulated pass by pass (chunked: in chunks of checkpoint_frequency batches, with checkpoints
// between them). On several ranks each rank reads and holds only the rows of its batches
// (docs/design.md section 5b), unless the strategy needs every row on every rank (Ceres).
class InMemoryStrategy : public FitStrategy {
 public:
  // own_share_only: the objective holds only this rank's rows (several ranks, read with
  // PackedDataObjective(source, ...)); false: every row.
  InMemoryStrategy(StrategyKind kind, const StrategyInputs& inputs,
                   std::unique_ptr<PackedDataObjective> objective, bool own_share_only)
      : FitStrategy(kind, EstimateScalingInMemory(inputs.config, *objective, own_share_only,
                                                  *inputs.group)),
        source_(inputs.source),
        model_(inputs.model),
        phi_degrees_(inputs.phi_degrees),
        sigma_(inputs.config.nlsq.sigma),
        backend_(inputs.backend),
        group_(inputs.group),
        pass_options_(InMemoryPassOptions(kind, inputs)),
        objective_(std::move(objective)) {}

  CheckpointPolicy checkpoint_policy() const override { return InMemoryPolicy(kind()); }
  BatchedObjective& objective() override { return *objective_; }
  // One process holds every row (several ranks: their shares).
  const std::vector<std::vector<float>>* WholeDataInMemory() const override {
    return group_->size() > 1 ? nullptr : &objective_->data();
  }

  // The single process's objective: its pass options without the group, the chunk callback and
  // the agreed signal check.
  std::unique_ptr<BatchedObjective> WholeDataHere() const override {
    MaybeInjectAllocationFailure("whole_data");
    PassOptions options = pass_options_;
    options.group = nullptr;
    options.on_chunk = nullptr;
    options.stop_requested = [] { return InterruptSignalHere() != 0; };
    return std::make_unique<PackedDataObjective>(source_, model_, phi_degrees_, sigma_,
                                                 std::move(options), backend_);
  }

  // One process copies the rows from the data in memory (a compressed file would decompress a
  // chunk for each row read); the ranks of a job, which hold only their own rows, read the rows
  // of their share of the subsample from the file. The same floats either way.
  std::unique_ptr<BatchedObjective> SearchData(int row_stride,
                                               bool whole_on_every_rank) const override {
    if (group_->size() > 1) {
      return MakeRowSubsampleObjective(source_, model_, phi_degrees_, sigma_, row_stride, backend_,
                                       whole_on_every_rank ? nullptr : group_, objective_->loss());
    }
    return MakeRowSubsampleObjective(objective_->data(), model_, phi_degrees_, sigma_, row_stride,
                                     backend_, group_, objective_->loss());
  }

  static PassOptions InMemoryPassOptions(StrategyKind kind, const StrategyInputs& inputs) {
    PassOptions options = BasePassOptions(inputs);
    if (kind == StrategyKind::kChunked) {
      options.chunk_batches = inputs.config.streaming.checkpoint_frequency;  // hook between chunks
    }
    return options;
  }

 protected:
  const PackedDataObjective& packed_objective() const { return *objective_; }
  const HomodyneModel& model() const { return model_; }
  const std::vector<double>& phi_degrees() const { return phi_degrees_; }
  double sigma() const { return sigma_; }

 private:
  BatchSource& source_;
  const HomodyneModel& model_;
  const std::vector<double>& phi_degrees_;
  double sigma_;
  std::shared_ptr<PassBackend> backend_;
  std::shared_ptr<ProcessGroup> group_;
  PassOptions pass_options_;  // the objective's (InMemoryPassOptions)
  std::unique_ptr<PackedDataObjective> objective_;
};

// Standard with optimization.nlsq.solver ceres: the same data in memory, the full Jacobian solved
// by Ceres (DENSE_QR). Ceres calls no chunk callback, so its checkpoints count passes from its
// iterations. If its Jacobian does not fit in memory, the LM core fits the same data as large.
class CeresStandardStrategy : public InMemoryStrategy {
 public:
  // Every rank holds every row (FitStandardWithCeres reads every angle's whole triangle).
  explicit CeresStandardStrategy(const StrategyInputs& inputs)
      : InMemoryStrategy(StrategyKind::kStandard, inputs,
                         std::make_unique<PackedDataObjective>(
                             inputs.model, inputs.phi_degrees, inputs.config.nlsq.sigma,
                             PackedDataObjective::LoadPackedData(inputs.source),
                             InMemoryPassOptions(StrategyKind::kStandard, inputs), inputs.backend),
                         /*own_share_only=*/false) {}

  StateSolver solver() const override { return StateSolver::kCeres; }
  void KeepOwnShare() override {}  // FitStandardWithCeres reads every angle's whole triangle
  CheckpointPolicy checkpoint_policy() const override {
    CheckpointPolicy policy;
    policy.save_at_iterations = true;
    policy.passes_from_iterations = true;
    return policy;
  }

  LevenbergMarquardtSummary MinimizeFinal(
      const LevenbergMarquardtOptions& lm, const ScalingMap& map, const Eigen::VectorXd& start,
      const std::function<void(const StrategyFallback&)>& on_fallback) override {
    try {
      MaybeInjectAllocationFailure("ceres_jacobian");
      return FitStandardWithCeres(lm, model(), phi_degrees(), sigma(), packed_objective().data(),
                                  map, start);
    } catch (const std::bad_alloc&) {
      StrategyFallback fallback;
      fallback.kind = StrategyKind::kLarge;
      fallback.checkpoint_policy = InMemoryPolicy(StrategyKind::kLarge);
      fallback.action = "strategy standard ran out of memory for its Jacobian; fell back to large";
      if (on_fallback) on_fallback(fallback);
      LevenbergMarquardtOptions core = lm;
      core.resume_state.reset();  // a Ceres state: the LM core starts afresh
      return InMemoryStrategy::MinimizeFinal(core, map, start, on_fallback);
    }
  }
};

// Streaming: the data stay on disk and every pass reads them batch by batch (constant memory);
// checkpoints inside passes. The start is estimated on a sample of rows read from the file.
class StreamingStrategy : public FitStrategy {
 public:
  explicit StreamingStrategy(const StrategyInputs& inputs)
      : FitStrategy(StrategyKind::kStreaming,
                    EstimateScalingFromFile(inputs.config, inputs.source, 1 << 20)),
        source_(inputs.source),
        model_(inputs.model),
        phi_degrees_(inputs.phi_degrees),
        sigma_(inputs.config.nlsq.sigma),
        backend_(inputs.backend),
        group_(inputs.group),
        objective_(std::make_unique<BatchedObjective>(
            model_, phi_degrees_, sigma_, MakeStreamingPassData(source_, ReadOptions(inputs)),
            StreamingPassOptions(inputs), backend_)) {}

  CheckpointPolicy checkpoint_policy() const override {
    CheckpointPolicy policy;
    policy.save_inside_passes = true;
    return policy;
  }
  BatchedObjective& objective() override { return *objective_; }

  // Read from the file (the streaming objective reads the source only during its passes).
  std::unique_ptr<BatchedObjective> SearchData(int row_stride,
                                               bool whole_on_every_rank) const override {
    return MakeRowSubsampleObjective(source_, model_, phi_degrees_, sigma_, row_stride, backend_,
                                     whole_on_every_rank ? nullptr : group_, objective_->loss());
  }

 private:
  static StreamingReadOptions ReadOptions(const StrategyInputs& inputs) {
    const StreamingOptions& streaming = inputs.config.streaming;
    StreamingReadOptions options;
    // enable_fault_tolerance: false: a failed read is not retried.
    options.max_retries = streaming.enable_fault_tolerance ? streaming.max_retries_per_batch : 0;
    return options;
  }
  static PassOptions StreamingPassOptions(const StrategyInputs& inputs) {
    PassOptions options = BasePassOptions(inputs);
    options.chunk_batches = 8 * std::max(inputs.size.threads, 1);
    return options;
  }

  BatchSource& source_;
  const HomodyneModel& model_;
  const std::vector<double>& phi_degrees_;
  double sigma_;
  std::shared_ptr<PassBackend> backend_;
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<BatchedObjective> objective_;
};

// Sets up `kind`, or throws std::bad_alloc (also when a test injects one,
// src/base/fault_injection.h).
std::unique_ptr<FitStrategy> MakeStrategy(StrategyKind kind, const StrategyInputs& inputs) {
  MaybeInjectAllocationFailure(ToString(kind));
  if (kind == StrategyKind::kStreaming) return std::make_unique<StreamingStrategy>(inputs);
  if (kind == StrategyKind::kStandard && inputs.config.nlsq.solver == LmSolver::kCeres) {
    return std::make_unique<CeresStandardStrategy>(inputs);
  }
  // One process reads every row; each rank of a job only the rows of its batches.
  return std::make_unique<InMemoryStrategy>(
      kind, inputs,
      std::make_unique<PackedDataObjective>(
          inputs.source, inputs.model, inputs.phi_degrees, inputs.config.nlsq.sigma,
          InMemoryStrategy::InMemoryPassOptions(kind, inputs), inputs.backend),
      /*own_share_only=*/inputs.group->size() > 1);
}

}  // namespace

LevenbergMarquardtSummary FitStrategy::MinimizeFinal(
    const LevenbergMarquardtOptions& lm, const ScalingMap& map, const Eigen::VectorXd& start,
    const std::function<void(const StrategyFallback&)>& /*on_fallback*/) {
  ReparametrizedProblem problem(objective(), map);
  return Minimize(lm, problem, start);
}

std::unique_ptr<FitStrategy> SetUpStrategy(StrategyKind kind, const StrategyInputs& inputs,
                                           std::vector<std::string>& recovery_actions) {
  while (true) {
    try {
      return MakeStrategy(kind, inputs);
    } catch (const std::bad_alloc&) {
      const std::optional<StrategyKind> leaner = LeanerStrategy(kind);
      if (!leaner) throw;
      const std::string action = "strategy " + std::string(ToString(kind)) +
                                 " ran out of memory while setting up; fell back to " +
                                 std::string(ToString(*leaner));
      spdlog::warn("{}", action);
      recovery_actions.push_back(action);
      kind = *leaner;
    }
  }
}

}  // namespace homodyne
