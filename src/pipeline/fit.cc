// Fit (include/homodyne/fit.h): the whole fit, from a config and a data source to a result.
#include "homodyne/fit.h"

#include "fit_checkpoints.h"
#include "fit_plan.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "homodyne/backend.h"
#include "homodyne/checkpoint.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/global_search.h"
#include "homodyne/initial_values.h"
#include "homodyne/lm.h"
#include "homodyne/objective.h"
#include "homodyne/reparametrized_problem.h"
#include "homodyne/results.h"
#include "homodyne/scaling.h"
#include "homodyne/standard_fit.h"
#include "homodyne/variable_projection.h"

namespace homodyne {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void ReportPhase(const FitObserver& observer, const std::string& phase, double seconds) {
  if (observer.on_phase) observer.on_phase(FitPhaseReport{phase, seconds});
}

// Peak resident memory of this process (VmHWM), MB; 0 if unknown.
double PeakResidentMb() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kb = 0;
      status >> kb;
      return kb / 1024.0;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0.0;
}

// Per-angle starting contrast and offset: per_angle_scaling lists, else scalar contrast/offset of
// initial_parameters replicated, else the quantile estimate from the data (reference 2.3, 2.4).
std::vector<ScalingEstimate> InitialScaling(const Config& config,
                                            const std::vector<ScalingEstimate>& from_data) {
  std::optional<double> scalar_contrast, scalar_offset;
  if (config.initial.values) {
    for (size_t k = 0; k < config.initial.parameter_names.size(); ++k) {
      if (config.initial.parameter_names[k] == "contrast") {
        scalar_contrast = (*config.initial.values)[k];
      }
      if (config.initial.parameter_names[k] == "offset") {
        scalar_offset = (*config.initial.values)[k];
      }
    }
  }
  std::vector<ScalingEstimate> scaling = from_data;
  for (size_t k = 0; k < scaling.size(); ++k) {
    ScalingEstimate& start = scaling[k];
    if (config.initial.per_angle_contrast) {
      start.contrast = (*config.initial.per_angle_contrast)[k];
    } else if (scalar_contrast) {
      start.contrast = *scalar_contrast;
    }
    if (config.initial.per_angle_offset) {
      start.offset = (*config.initial.per_angle_offset)[k];
    } else if (scalar_offset) {
      start.offset = *scalar_offset;
    }
  }
  return scaling;
}

// The quantile estimate per angle on data held in memory.
std::vector<ScalingEstimate> EstimateScalingInMemory(const Config& config,
                                                     const PackedDataObjective::PackedData& data,
                                                     int n_times) {
  std::vector<ScalingEstimate> estimates;
  for (const std::vector<float>& values : data) {
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
      source.ReadUpperTriangleRows(k, row_begin, row_end,
                                   std::span<float>(values.data() + start, values.size() - start));
      r = end;
    }
    estimates.push_back(EstimateScalingFromRows(values, rows, n, config.BoundOf("contrast"),
                                                config.BoundOf("offset")));
  }
  return estimates;
}

// The next leaner strategy after an allocation failure (DESIGN section 3): standard -> large;
// large and chunked hold the same data, so both fall back to streaming.
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

// Test-only fault hook: HOMODYNE_TEST_FAIL_ALLOCATION lists names (comma-separated) of the
// allocations that throw std::bad_alloc, so the fallbacks can be tested without exhausting
// memory: a strategy's set-up (its name) or the Ceres Jacobian ("ceres_jacobian").
void MaybeInjectAllocationFailure(std::string_view what) {
  const char* names = std::getenv("HOMODYNE_TEST_FAIL_ALLOCATION");
  if (names == nullptr) return;
  std::stringstream list(names);
  std::string name;
  while (std::getline(list, name, ',')) {
    if (name == what) throw std::bad_alloc();
  }
}

// The objective of one strategy (DESIGN section 3) and the data-based start it needs.
struct StrategySetup {
  std::unique_ptr<BatchedObjective> objective;
  std::vector<ScalingEstimate> scaling_from_data;
};

StrategySetup SetUpStrategy(StrategyKind kind, const Config& config, BatchSource& source,
                            const HomodyneModel& model, const std::vector<double>& phi,
                            const ProblemSize& size,
                            std::function<void(const PassProgress&)> on_chunk,
                            const std::shared_ptr<PassBackend>& backend) {
  MaybeInjectAllocationFailure(ToString(kind));
  const int n_angles = source.info().num_angles();
  PassOptions options;
  // optimization.streaming.batch_size counts points of all angles; a batch holds every angle.
  options.batch_points = std::max<int64_t>(1, (size.batch_points + n_angles - 1) / n_angles);
  options.on_chunk = std::move(on_chunk);
  StrategySetup setup;
  if (kind == StrategyKind::kStreaming) {
    options.chunk_batches = 8 * std::max(size.threads, 1);
    setup.scaling_from_data = EstimateScalingFromFile(config, source, 1 << 20);
    StreamingReadOptions read_options;
    // enable_fault_tolerance: false: a failed read is not retried.
    read_options.max_retries =
        config.streaming.enable_fault_tolerance ? config.streaming.max_retries_per_batch : 0;
    setup.objective = std::make_unique<BatchedObjective>(
        model, phi, config.nlsq.sigma, MakeStreamingPassData(source, read_options),
        std::move(options), backend);
    return setup;
  }
  if (kind == StrategyKind::kChunked) {
    options.chunk_batches = config.streaming.checkpoint_frequency;  // hook between chunks
  }
  PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(source);
  setup.scaling_from_data = EstimateScalingInMemory(config, data, source.info().num_times());
  setup.objective = std::make_unique<PackedDataObjective>(
      model, phi, config.nlsq.sigma, std::move(data), std::move(options), backend);
  return setup;
}

// Full validation's bounds warnings (DESIGN section 7; fast mode skips them): a fitted parameter
// held on a bound with its gradient pointing out (summary.parameters_at_bound, from
// ComputeCovarianceAtSolution), where the optimum may lie beyond it. Parameters held by equal
// bounds are not reported. options: the reduced bounds and names the fit ran with.
std::vector<std::string> ResultBoundWarnings(const LevenbergMarquardtSummary& summary,
                                             const LevenbergMarquardtOptions& options) {
  std::vector<std::string> warnings;
  for (const int i : summary.parameters_at_bound) {
    const double lower = options.lower_bounds[i];
    const double upper = options.upper_bounds[i];
    if (lower == upper) continue;
    const double value = summary.theta[i];
    std::ostringstream text;
    text << options.parameter_names[static_cast<size_t>(i)] << " = " << value << " ended at its "
         << (value <= lower ? "lower" : "upper")
         << " bound: the optimum may lie beyond it (widen parameter_space.bounds)";
    warnings.push_back(text.str());
  }
  return warnings;
}

// The covariance's warning (always given: it says how to read the uncertainties): parameters
// along which J^T J is singular at the result (summary.undetermined_parameters), whose
// uncertainties are lower bounds. Empty when there are none. options: the names the fit ran with.
std::vector<std::string> UndeterminedWarnings(const LevenbergMarquardtSummary& summary,
                                              const LevenbergMarquardtOptions& options) {
  if (summary.undetermined_parameters.empty()) return {};
  std::string names;
  for (const int i : summary.undetermined_parameters) {
    if (!names.empty()) names += ", ";
    names += options.parameter_names[static_cast<size_t>(i)];
  }
  const bool one = summary.undetermined_parameters.size() == 1;
  return {"the data do not determine " + names + " (J^T J is singular along " +
          (one ? "it" : "a combination of them") + " at the result): " +
          (one ? "its uncertainty is a lower bound, not an estimate"
               : "their uncertainties are lower bounds, not estimates") +
          "; hold one fixed (initial_parameters.fixed_parameters) if the "
          "physics allows"};
}

// Rows of every angle's upper triangle the global phase reads: every stride-th, so that the
// search sees at most max_points points (1 = all of them).
int SearchRowStride(int64_t points, int64_t max_points) {
  return static_cast<int>(std::max<int64_t>(1, (points + max_points - 1) / max_points));
}

// The global phase (DESIGN section 4b) on `data`: progress lines, passes counted as batches,
// its trail in checkpoints and signals seen between candidates and local fits
// (checkpoints.OnGlobalSearchProgress throws FitInterrupted after saving). A resumed run replays
// the trail of its checkpoint first. Returns its summary.
GlobalSearchSummary RunGlobalPhase(const Config& config, GlobalSearchMethod method,
                                   BatchedObjective& data, int row_stride, const ScalingMap& map,
                                   const BoundBox& bounds, const Eigen::VectorXd& start,
                                   const LevenbergMarquardtOptions& lm,
                                   FitCheckpoints& checkpoints, const FitObserver& observer) {
  spdlog::info("global search {}: {} points{}", ToString(method), data.num_points(),
               row_stride > 1 ? " (every " + std::to_string(row_stride) + " rows)" : "");
  GlobalSearchInputs inputs;
  inputs.data = &data;
  inputs.map = map;
  inputs.bounds = bounds;
  inputs.start = start;
  inputs.local = lm;
  inputs.local.resume_state.reset();
  inputs.local.callback = [](const LevenbergMarquardtIteration&) { return InterruptSignal() == 0; };
  inputs.replay = checkpoints.global_search_trail();
  if (!inputs.replay.empty()) {
    spdlog::info("global search {}: replaying {} evaluations and {} local fits from the checkpoint",
                 ToString(method), inputs.replay.evaluations.size(), inputs.replay.minima.size());
  }
  int64_t passes_seen = 0;
  std::string last_stage;
  inputs.on_progress = [&](const GlobalSearchProgress& progress) {
    // A line when a stage starts, after every local fit, at the end of screening and every
    // 20th CMA-ES generation.
    const bool new_stage = progress.stage != last_stage;
    last_stage = progress.stage;
    const bool each = progress.stage == "local fit" || progress.stage == "refine";
    const bool last = progress.total > 0 && progress.index == progress.total;
    const bool periodic = progress.stage == "cmaes" && progress.index % 20 == 0;
    const bool computed = progress.passes > passes_seen;  // not replayed
    if (computed && (new_stage || each || last || periodic)) {
      const std::string of = progress.total > 0 ? "/" + std::to_string(progress.total) : "";
      spdlog::info("global search {} {}{}  best chi2 {:.8e}  {} passes", progress.stage,
                   progress.index, of, progress.best_chi2, progress.passes);
    }
    if (observer.on_global_search) observer.on_global_search(progress);
    checkpoints.OnGlobalSearchProgress(progress.passes - passes_seen, data.num_batches(),
                                       *progress.trail);
    passes_seen = progress.passes;
    return true;
  };
  GlobalSearchSummary summary = RunGlobalSearch(method, config.nlsq, inputs);
  summary.row_stride = row_stride;
  checkpoints.OnGlobalSearchFinished(summary.passes - summary.replayed_passes - passes_seen,
                                     data.num_batches(), summary.trail);
  spdlog::info("{}", summary.BriefReport());
  return summary;
}

// A projected local fit from start (global phase off, variable projection on): the reduced point
// the final fit starts from.
Eigen::VectorXd ProjectedLocalFit(BatchedObjective& objective, const ScalingMap& map,
                                  const BoundBox& bounds, const Eigen::VectorXd& start,
                                  const LevenbergMarquardtOptions& lm) {
  VariableProjectionProblem projected(objective, map, bounds, start);
  if (projected.linear_indices().empty()) return start;  // nothing to project
  LevenbergMarquardtOptions options = projected.LocalFitOptions(lm);
  options.callback = [](const LevenbergMarquardtIteration&) { return InterruptSignal() == 0; };
  const LevenbergMarquardtSummary fit =
      Minimize(options, projected, projected.NonlinearPart(start));
  spdlog::info("projected local fit: {}", fit.BriefReport());
  return projected.ReducedPoint(fit.theta);
}

// The global phase's summary for the result files, with the physical parameters by name.
GlobalSearchRecord RecordOf(const GlobalSearchSummary& summary, const std::string& reason,
                            const ScalingMap& map, const std::vector<std::string>& names) {
  GlobalSearchRecord record;
  record.method = ToString(summary.method);
  record.reason = reason;
  record.candidates = summary.candidates;
  record.local_fits = summary.local_fits;
  record.generations = summary.generations;
  record.cmaes_runs = summary.cmaes_runs;
  record.passes = summary.passes;
  record.replayed_passes = summary.replayed_passes;
  record.point_evaluations = summary.point_evaluations;
  record.search_points = summary.search_points;
  record.row_stride = summary.row_stride;
  record.seconds = summary.seconds;
  record.chosen = summary.chosen;
  for (const GlobalMinimum& minimum : summary.minima) {
    GlobalSearchRecord::Minimum entry;
    entry.chi2 = minimum.chi2;
    const Eigen::VectorXd full = map.Expand(minimum.reduced);
    for (size_t p = 0; p < names.size(); ++p) {
      entry.names.push_back(names[p]);
      entry.values.push_back(full[static_cast<Eigen::Index>(p)]);
    }
    entry.start = minimum.start;
    entry.status = minimum.status;
    record.minima.push_back(std::move(entry));
  }
  return record;
}

// Full validation's correlation warnings (DESIGN section 7): a pair of fitted physical parameters
// whose correlation exceeds 0.99 in magnitude is not separated by the data.
std::vector<std::string> CorrelationWarnings(const FitResult& result, int n_physical) {
  std::vector<std::string> warnings;
  const size_t n = result.covariance_names.size();
  const std::vector<double> correlation = CorrelationMatrix(result.covariance, n);
  for (int i = 0; i < n_physical; ++i) {
    for (int j = i + 1; j < n_physical; ++j) {
      const double r = correlation[static_cast<size_t>(i) * n + static_cast<size_t>(j)];
      if (std::abs(r) <= 0.99) continue;
      char value[32];
      std::snprintf(value, sizeof(value), "%.4f", r);
      warnings.push_back(
          "the data do not separate " + result.covariance_names[static_cast<size_t>(i)] + " and " +
          result.covariance_names[static_cast<size_t>(j)] + " (correlation " + value +
          "): their uncertainties are large and the fit may stop along "
          "the valley between them");
    }
  }
  return warnings;
}

// SelectBackend (backend.h) for the config's performance.backend; its ConfigError names the
// config, as the fit's other config errors do.
BackendChoice SelectBackendFor(const Config& config) {
  try {
    return SelectBackend(config.performance.backend);
  } catch (const ConfigError& error) {
    throw ConfigError(config.source_path + ": " + error.what());
  }
}

}  // namespace

FitOutcome Fit(const Config& config, BatchSource& source, const FitOptions& options,
               const FitObserver& observer) {
  const Clock::time_point start = Clock::now();
  FitOutcome outcome;
  FitResult& result = outcome.result;
  result.analysis_mode = config.analysis_mode;
  // DESIGN section 5: a backend this build or machine lacks is an error, not a silent CPU run.
  const BackendChoice backend = SelectBackendFor(config);
  if (config.performance.backend == BackendKind::kAuto) spdlog::info("{}", backend.reason);

  const DatasetInfo& info = source.info();
  for (const std::string& warning : info.warnings) spdlog::warn("{}", warning);
  const int n_angles = info.num_angles();
  const int n_times = info.num_times();
  // initial_parameters.per_angle_scaling lists must have one value per kept angle.
  const std::pair<const std::optional<std::vector<double>>*, const char*> per_angle_lists[] = {
      {&config.initial.per_angle_contrast, "contrast"},
      {&config.initial.per_angle_offset, "offset"}};
  for (const auto& [list, name] : per_angle_lists) {
    if (*list && static_cast<int>((*list)->size()) != n_angles) {
      throw ConfigError(config.source_path + ": initial_parameters.per_angle_scaling." + name +
                        " has " + std::to_string((*list)->size()) + " values but the data has " +
                        std::to_string(n_angles) + " angles");
    }
  }

  const FitPlan plan = PlanFit(config, info, options.memory_limit_gb);
  if (!plan.scaling_warning.empty()) {
    spdlog::warn("{}", plan.scaling_warning);
    result.warnings.push_back(plan.scaling_warning);
  }
  const int n_physical = plan.num_physical;
  const ProblemSize& size = plan.size;
  omp_set_num_threads(size.threads);
  const StrategyChoice& choice = plan.strategy;
  result.strategy_reason = choice.reason;
  std::string global_reason;
  const GlobalSearchMethod global_method =
      ResolveGlobalSearchMethod(config.nlsq, options.global_search, &global_reason);
  if (config.nlsq.solver == LmSolver::kCeres && choice.kind != StrategyKind::kStandard) {
    throw ConfigError(config.source_path +
                      ": optimization.nlsq.solver = ceres needs the standard "
                      "strategy (this fit uses " +
                      std::string(ToString(choice.kind)) +
                      "): use --strategy standard, or solver lm");
  }
  spdlog::info("strategy {} ({})", ToString(choice.kind), choice.reason);

  const HomodyneModel model(
      config.analysis_mode,
      ScatteringGeometry{info.q_inv_angstrom, config.geometry.gap_angstrom, info.dt_seconds},
      info.FittedTimes());
  std::vector<double> phi;
  for (const AngleInfo& angle : info.angles) phi.push_back(angle.phi_degrees);

  // Set up the chosen strategy; on an allocation failure, the next leaner one (DESIGN section 3).
  std::unique_ptr<FitCheckpoints> checkpoints;  // created once the strategy is set up
  auto on_chunk = [&observer, &checkpoints](const PassProgress& progress) {
    if (observer.on_pass_chunk) observer.on_pass_chunk(progress);
    if (checkpoints) checkpoints->OnChunk(progress);
  };
  StrategyKind kind = choice.kind;
  StrategySetup setup;
  while (true) {
    try {
      setup = SetUpStrategy(kind, config, source, model, phi, size, on_chunk, backend.backend);
      break;
    } catch (const std::bad_alloc&) {
      const std::optional<StrategyKind> leaner = LeanerStrategy(kind);
      if (!leaner) throw;
      const std::string action = "strategy " + std::string(ToString(kind)) +
                                 " ran out of memory while setting up; fell back to " +
                                 std::string(ToString(*leaner));
      spdlog::warn("{}", action);
      result.recovery_actions.push_back(action);
      kind = *leaner;
    }
  }
  BatchedObjective& objective = *setup.objective;
  // The global phase's data: every s-th row (all rows up to max_points), the same rows and
  // floats for every strategy, so large, chunked and streaming search alike and stay bitwise
  // identical. Copied from the data in memory, else read from the file (no pass has used the
  // source yet: a streaming objective reads it from its first pass on).
  const int search_row_stride =
      SearchRowStride(UpperTriangleSize(n_times) * n_angles, config.nlsq.global_search.max_points);
  std::unique_ptr<BatchedObjective> search_data;
  if (global_method != GlobalSearchMethod::kOff) {
    const auto* in_memory = dynamic_cast<const PackedDataObjective*>(&objective);
    search_data =
        in_memory != nullptr
            ? MakeRowSubsampleObjective(in_memory->data(), model, phi, config.nlsq.sigma,
                                        search_row_stride, backend.backend)
            : MakeRowSubsampleObjective(source, model, phi, config.nlsq.sigma, search_row_stride,
                                        backend.backend);
  }
  const std::vector<ScalingEstimate> initial_scaling =
      InitialScaling(config, setup.scaling_from_data);
  result.strategy = std::string(ToString(kind));
  result.load_seconds = SecondsSince(start);
  ReportPhase(observer, "load", result.load_seconds);

  // Starting point and bounds in the objective's (full) parameter layout.
  const int n_full = objective.num_parameters();
  Eigen::VectorXd theta0(n_full);
  LevenbergMarquardtOptions lm;
  lm.lower_bounds.resize(n_full);
  lm.upper_bounds.resize(n_full);
  const std::vector<double> physical0 = InitialPhysicalParameters(config);
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  for (int p = 0; p < n_physical; ++p) {
    theta0[p] = physical0[static_cast<size_t>(p)];
    lm.parameter_names.push_back(names[static_cast<size_t>(p)]);
    lm.lower_bounds[p] = config.BoundOf(names[static_cast<size_t>(p)]).min;
    lm.upper_bounds[p] = config.BoundOf(names[static_cast<size_t>(p)]).max;
  }
  lm.parameter_names.resize(static_cast<size_t>(n_full));
  for (int k = 0; k < n_angles; ++k) {
    const int c = objective.ContrastIndex(k);
    const int o = objective.OffsetIndex(k);
    theta0[c] = initial_scaling[static_cast<size_t>(k)].contrast;
    theta0[o] = initial_scaling[static_cast<size_t>(k)].offset;
    lm.parameter_names[static_cast<size_t>(c)] = "contrast[" + std::to_string(k) + "]";
    lm.parameter_names[static_cast<size_t>(o)] = "offset[" + std::to_string(k) + "]";
    lm.lower_bounds[c] = config.BoundOf("contrast").min;
    lm.upper_bounds[c] = config.BoundOf("contrast").max;
    lm.lower_bounds[o] = config.BoundOf("offset").min;
    lm.upper_bounds[o] = config.BoundOf("offset").max;
  }
  // The parameters the fit optimises: the per-angle mode's map (reference section 2.4), with
  // initial_parameters.fixed_parameters held at their start values.
  const ScalingMap full_map = BuildScalingMap(plan.scaling, n_physical, names, phi, initial_scaling,
                                              config.nlsq.fourier_order);
  std::vector<bool> fixed(static_cast<size_t>(n_full), false);
  for (const std::string& name : config.initial.fixed_parameters) {
    for (int i = 0; i < n_full; ++i) {
      const std::string& full_name = lm.parameter_names[static_cast<size_t>(i)];
      if (full_name == name || full_name.rfind(name + "[", 0) == 0) {
        fixed[static_cast<size_t>(i)] = true;
      }
    }
  }
  const ScalingMap map = FixParameters(full_map, fixed, theta0);
  if (map.num_reduced() == 0) {
    throw ConfigError(config.source_path +
                      ": initial_parameters.fixed_parameters fixes every parameter: nothing to "
                      "fit");
  }
  spdlog::info("per-angle scaling {} ({}); {} parameters fitted", ToString(plan.scaling.mode),
               plan.scaling.reason, map.num_reduced());
  const std::vector<std::string> full_names = lm.parameter_names;
  const Eigen::VectorXd reduced0 = ReduceStartingPoint(map, theta0);
  const BoundBox reduced_bounds = ReduceBounds(map, lm.lower_bounds, lm.upper_bounds);
  lm.lower_bounds = reduced_bounds.lower;
  lm.upper_bounds = reduced_bounds.upper;
  lm.parameter_names = map.reduced_names;
  ReparametrizedProblem problem(objective, map);

  lm.max_iterations = config.nlsq.max_iterations;
  lm.ftol = config.nlsq.tolerance;
  lm.xtol = config.nlsq.xtol;
  lm.gtol = config.nlsq.gtol;
  lm.statistical_tolerance = config.nlsq.statistical_tolerance;
  lm.validate_numerics = !config.performance.fast_mode;
  lm.callback = [&checkpoints, &observer](const LevenbergMarquardtIteration& iteration) {
    spdlog::info("iteration {:3d}  chi2 {:.8e}  damping {:.2e}  step {:.3e}  {}  {:.2f} s",
                 iteration.iteration, iteration.chi2, iteration.damping, iteration.step_norm,
                 iteration.iteration == 0  ? "start"
                 : iteration.step_accepted ? "accepted"
                                           : "rejected",
                 iteration.seconds);
    if (observer.on_iteration) observer.on_iteration(iteration);
    return checkpoints->OnIteration(iteration);
  };

  // Checkpoints of this config and data set; resume from the newest valid one (DESIGN section 6).
  const int64_t batch_points_per_angle = setup.objective->batch_points();
  // The LM core on the standard strategy's data saves as large does (at iteration ends); the
  // standard policy is Ceres' (its passes counted from the iterations).
  const bool ceres = kind == StrategyKind::kStandard && config.nlsq.solver == LmSolver::kCeres;
  const StrategyKind checkpoint_policy =
      kind == StrategyKind::kStandard && !ceres ? StrategyKind::kLarge : kind;
  checkpoints = std::make_unique<FitCheckpoints>(
      config, checkpoint_policy,
      Sha256Hex(FitIdentityText(config, batch_points_per_angle, global_method)),
      DataFingerprint(source), objective.num_batches(), observer.on_checkpoint_saved);
  if (const std::optional<Checkpoint> checkpoint = checkpoints->LoadForResume()) {
    CheckCheckpointFits(*checkpoint, {map.num_reduced(), n_full, objective.num_batches()},
                        config.streaming.checkpoint_dir);
    // Ceres (standard) and the LM core (the other strategies) keep different states.
    const bool has_state = checkpoint->lm.theta.size() > 0;
    const bool ceres_state = has_state && checkpoint->lm.solver == LmSolver::kCeres;
    const bool core_state = has_state && checkpoint->lm.solver == LmSolver::kLmCore;
    if ((ceres && core_state) || (!ceres && ceres_state)) {
      throw InputError("the checkpoint at batch " + std::to_string(checkpoint->global_batch) +
                       " in " + config.streaming.checkpoint_dir + " was written by the " +
                       (ceres_state ? "Ceres solver" : "LM core") + " and this run uses the " +
                       (ceres ? "Ceres solver" : "LM core") + ": resume it with " +
                       (ceres_state ? "--strategy standard --solver ceres" : "--solver lm") +
                       ", or start afresh with --no-resume");
    }
    checkpoints->ContinueFrom(*checkpoint);
    if (checkpoint->lm.theta.size() > 0) lm.resume_state = checkpoint->lm;
    if (checkpoint->pass) objective.ResumePass(*checkpoint->pass);
    const std::string action = "resumed from the checkpoint at batch " +
                               std::to_string(checkpoint->global_batch) + " (iteration " +
                               std::to_string(checkpoint->lm.iterations) + ", written " +
                               checkpoint->timestamp_utc + ")";
    spdlog::info("{}", action);
    result.recovery_actions.push_back(action);
  }

  // The global phase (DESIGN section 4b), or a projected local fit when it is off; the final fit
  // starts from the minimum chosen. A resumed run replays the phase's trail from its checkpoint
  // and computes only what the interrupted run had not (a SLURM job whose time slot is shorter
  // than the phase still progresses); after a final-fit checkpoint the whole phase is replayed
  // (no passes) and the fit continues from its state.
  Eigen::VectorXd fit_start = reduced0;
  result.global_search.reason = global_reason;
  const Clock::time_point global_start = Clock::now();
  if (global_method != GlobalSearchMethod::kOff) {
    const GlobalSearchSummary global =
        RunGlobalPhase(config, global_method, *search_data, search_row_stride, map, reduced_bounds,
                       reduced0, lm, *checkpoints, observer);
    result.global_search = RecordOf(global, global_reason, map, names);
    for (const std::string& warning : global.warnings) {
      spdlog::warn("{}", warning);
      result.warnings.push_back(warning);
    }
    if (global.chosen >= 0) fit_start = global.minima[static_cast<size_t>(global.chosen)].reduced;
    ReportPhase(observer, "global search", SecondsSince(global_start));
  } else if (config.nlsq.variable_projection && !lm.resume_state) {
    fit_start = ProjectedLocalFit(objective, map, reduced_bounds, reduced0, lm);
    checkpoints->StopIfInterrupted();
    ReportPhase(observer, "projected local fit", SecondsSince(global_start));
  }
  search_data.reset();

  LevenbergMarquardtSummary summary;
  try {
    if (ceres) {
      // Full Jacobian in memory, solved by Ceres (DENSE_QR); on allocation failure the same data
      // go through the large pass instead (DESIGN section 3).
      try {
        MaybeInjectAllocationFailure("ceres_jacobian");
        const auto& in_memory = static_cast<const PackedDataObjective&>(objective);
        summary = FitStandardWithCeres(lm, model, phi, config.nlsq.sigma, in_memory.data(), map,
                                       fit_start);
      } catch (const std::bad_alloc&) {
        const std::string action =
            "strategy standard ran out of memory for its Jacobian; fell back to large";
        spdlog::warn("{}", action);
        result.recovery_actions.push_back(action);
        result.strategy = "large";
        checkpoints->FollowStrategy(StrategyKind::kLarge);  // saves and counts as large from now
        lm.resume_state.reset();  // a Ceres state; the LM core starts afresh
        summary = Minimize(lm, problem, fit_start);
      }
      // Stopped by a signal (FitCheckpoints::OnIteration): save and exit 3.
      if (summary.status == LevenbergMarquardtStatus::kStoppedByCallback) {
        checkpoints->StopIfInterrupted();
      }
    } else {
      summary = Minimize(lm, problem, fit_start);
    }
  } catch (const DataError& error) {
    // A batch that could not be read even after retries: keep what was computed (DESIGN 7).
    const bool saved = checkpoints->SaveAfterFailure();
    throw DataError(std::string(error.what()) +
                    (saved ? "; progress saved in " + config.streaming.checkpoint_dir +
                                 ": run the same command again to resume once the file is readable"
                           : ""));
  }
  ReportPhase(observer, "final fit", summary.seconds);
  for (const std::string& warning : checkpoints->warnings()) result.warnings.push_back(warning);
  const BatchStatistics& statistics = checkpoints->statistics();
  result.batch_statistics = {statistics.batches, statistics.retries + objective.read_retries(),
                             statistics.read_failures, statistics.checkpoint_failures,
                             checkpoints->saves()};
  if (objective.num_nonfinite_points() > 0) {
    const std::string warning = std::to_string(objective.num_nonfinite_points()) +
                                " non-finite data points excluded from the fit";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  std::vector<std::string> warnings = summary.warnings;
  const std::vector<std::string> undetermined = UndeterminedWarnings(summary, lm);
  warnings.insert(warnings.end(), undetermined.begin(), undetermined.end());
  if (!config.performance.fast_mode) {
    const std::vector<std::string> at_bounds = ResultBoundWarnings(summary, lm);
    warnings.insert(warnings.end(), at_bounds.begin(), at_bounds.end());
  }
  for (const std::string& warning : warnings) {
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  result.optimization_seconds = summary.seconds;

  // Results in the full layout: one contrast and one offset per angle (reference section 2.4),
  // dof with the reference's effective parameter count (section 4.3).
  const int n_effective =
      EffectiveParameterCount(plan.scaling.mode, n_physical, n_angles, map.num_reduced());
  const int64_t dof = problem.num_residuals() - n_effective;
  const double covariance_scale = static_cast<double>(std::max<int64_t>(summary.dof, 1)) /
                                  static_cast<double>(std::max<int64_t>(dof, 1));
  const ExpandedSolution full =
      ExpandSolution(map, summary.theta, summary.covariance, covariance_scale);
  const bool has_uncertainties = full.uncertainties.size() > 0;
  for (int p = 0; p < n_physical; ++p) {
    result.physical.push_back({names[static_cast<size_t>(p)], full.theta[p],
                               has_uncertainties ? full.uncertainties[p] : 0.0});
  }
  for (int k = 0; k < n_angles; ++k) {
    const int c = objective.ContrastIndex(k);
    const int o = objective.OffsetIndex(k);
    result.per_angle.push_back(
        {phi[static_cast<size_t>(k)],
         {"contrast", full.theta[c], has_uncertainties ? full.uncertainties[c] : 0.0},
         {"offset", full.theta[o], has_uncertainties ? full.uncertainties[o] : 0.0}});
  }
  result.covariance_names = full_names;
  for (int i = 0; i < full.covariance.rows(); ++i) {
    for (int j = 0; j < full.covariance.cols(); ++j) {
      result.covariance.push_back(full.covariance(i, j));
    }
  }
  if (!config.performance.fast_mode) {
    for (const std::string& warning : CorrelationWarnings(result, n_physical)) {
      spdlog::warn("{}", warning);
      result.warnings.push_back(warning);
    }
  }
  result.per_angle_mode = std::string(ToString(plan.scaling.mode));
  result.chi_squared = summary.final_chi2;
  result.reduced_chi_squared = summary.final_chi2 / static_cast<double>(std::max<int64_t>(dof, 1));
  result.degrees_of_freedom = dof;
  result.convergence_status = summary.IsConverged() ? "converged"
                              : summary.status == LevenbergMarquardtStatus::kMaxIterations
                                  ? "max_iterations"
                                  : "failed";
  result.termination_reason = summary.reason;
  result.n_points = info.num_fit_points();
  result.n_angles = n_angles;
  result.n_times = n_times;
  result.q_inv_angstrom = info.q_inv_angstrom;
  result.iterations = summary.iterations;
  result.passes = summary.passes + summary.cost_passes;
  result.point_evaluations = result.passes * objective.num_points();
  result.backend = std::string(ToString(backend.backend->kind()));
  result.threads = size.threads;
  result.total_seconds = SecondsSince(start);
  result.memory_peak_mb = PeakResidentMb();

  outcome.final_fit_report = summary.BriefReport();
  outcome.physical.assign(full.theta.data(), full.theta.data() + n_physical);
  outcome.model = model;
  outcome.checkpoints = checkpoints->store_options();
  outcome.checkpoints_enabled = checkpoints->enabled();
  outcome.exit_code = result.convergence_status == "failed" ? kExitFailure : kExitSuccess;
  return outcome;  // the objective goes first: a streaming one gives the source back
}

void WriteFitResults(const FitOutcome& outcome, BatchSource& source, const std::string& output_dir) {
  WriteResultFiles(outcome.result, output_dir);
  const ModelEvaluation evaluation(*outcome.model, outcome.physical);
  WriteFittedData(source, evaluation, outcome.result.per_angle, output_dir);
}

void RemoveCheckpoints(const FitOutcome& outcome) {
  if (!outcome.checkpoints_enabled) return;
  for (const std::string& path : CheckpointStore(outcome.checkpoints).List()) {
    std::error_code error;
    std::filesystem::remove(path, error);
  }
}

}  // namespace homodyne
