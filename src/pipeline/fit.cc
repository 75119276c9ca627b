// Fit (include/homodyne/fit.h): the whole fit, from a config and a data source to a result, as a
// list of steps in the order the data flows (docs/design.md section 9): config -> plan -> source
// -> strategy -> global phase -> final fit -> result.
#include "homodyne/fit.h"

#include "fit_checkpoints.h"
#include "fit_data_check.h"
#include "fit_parameters.h"
#include "fit_plan.h"
#include "fit_preparation.h"
#include "fit_solution.h"
#include "fit_strategy.h"
#include "global_phase.h"
#include "interrupts.h"
#include "phi0_mirror.h"

#include <spdlog/spdlog.h>

#include <Eigen/Dense>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "base/fault_injection.h"
#include "checkpoint/checkpoint_store.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/process_group.h"
#include "homodyne/results.h"
#include "io/read_paths.h"
#include "model/mode_catalog.h"
#include "objective/batched_objective.h"
#include "optimize/global_search.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/number_text.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One fit, step by step: the steps before the first pass (PrepareFit, shared with the dry run),
// then those below. Each step reads what the steps before it resolved (the prepared fit and the
// members they filled) and only the config fields that no step resolved; Run calls them in order,
// once. Members are destroyed in reverse order: the global phase's data go before the prepared
// fit (its strategy, checkpoints, model and angles).
class FitRun {
 public:
  // pilot: sigma auto's first fit, whose minimum the second fit refines: no phi0 mirror check
  // (phi0_mirror.h) after the final fit and no profile intervals of undetermined parameters.
  FitRun(const Config& config, BatchSource& source, const FitObserver& observer, bool pilot = false)
      : config_(config), source_(source), observer_(observer), pilot_(pilot) {}

  FitOutcome Run() {
    fit_ = PrepareFit(config_, source_, observer_);
    SearchDataStep();
    FinalFitOptionsStep();
    ResumeStep();
    try {
      GlobalPhaseStep();
      FinalFitStep();
      Phi0MirrorStep();
      return ResultStep();
    } catch (const PassInterrupted&) {
      // A signal seen inside a pass that no on_chunk hook saves (PassOptions::stop_requested):
      // the state of the last completed step is saved, as if the signal had come before the
      // pass (the resumed run repeats it), and the fit stops with FitInterrupted.
      fit_->checkpoints->StopIfInterrupted();
      throw FitInterrupted("interrupted; no checkpoint saved", false);
    }
  }

 private:
  void ReportPhase(const std::string& phase, double seconds) const {
    if (observer_.on_phase) observer_.on_phase(FitPhaseReport{phase, seconds});
  }

  FitResult& result() { return fit_->result; }

  // With a global phase, its subsample of the data (and method auto's coarse level); the load
  // phase (the strategy set up with its data, and these subsamples) ends here.
  void SearchDataStep() {
    const Clock::time_point search_start = Clock::now();
    const DatasetInfo& info = source_.info();
    const int64_t points = UpperTriangleSize(info.num_times()) * info.num_angles();
    search_row_stride_ = SearchRowStride(points, config_.nlsq.global_search.max_points);
    if (config_.nlsq.global_search.method != GlobalSearchMethod::kOff) {
      search_data_ = fit_->strategy->SearchData(search_row_stride_);
    }
    if (config_.nlsq.global_search.method == GlobalSearchMethod::kAuto) {
      // On several ranks every rank holds the whole coarse level (at most about
      // kCoarseSearchPoints points): the phase spreads its candidates and local fits over the
      // ranks there, not each pass (global_search.h, GlobalSearchInputs::spread_group).
      coarse_row_stride_ = CoarseRowStride(info.num_times(), points, search_row_stride_);
      if (coarse_row_stride_ > 0) {
        coarse_data_ =
            fit_->strategy->SearchData(coarse_row_stride_, CurrentProcessGroup()->size() > 1);
      }
    }
    // On several ranks, each keeps only the data of its share of the batches from now on (the
    // in-memory strategies and the subsamples read only those rows already: nothing to free).
    fit_->strategy->KeepOwnShare();
    if (search_data_) search_data_->KeepOwnShare();
    if (coarse_data_) coarse_data_->KeepOwnShare();
    result().load_seconds += SecondsSince(search_start);
    ReportPhase("load", result().load_seconds);
  }

  // The final fit's options, whose callback logs, observes and checkpoints every iteration; the
  // start values outside their bounds, as warnings of the result.
  void FinalFitOptionsStep() {
    for (const std::string& warning : fit_->parameters->start_warnings) {
      spdlog::warn("{}", warning);
      result().warnings.push_back(warning);
    }
    lm_ = FinalFitOptions(config_, *fit_->parameters);
    lm_.callback = [this](const LevenbergMarquardtIteration& iteration) {
      spdlog::info("iteration {:3d}  chi2 {:.8e}  damping {:.2e}  step {:.3e}  {}  {:.2f} s",
                   iteration.iteration, iteration.chi2, iteration.damping, iteration.step_norm,
                   iteration.iteration == 0  ? "start"
                   : iteration.step_accepted ? "accepted"
                                             : "rejected",
                   iteration.seconds);
      if (observer_.on_iteration) observer_.on_iteration(iteration);
      return fit_->checkpoints->OnIteration(iteration);
    };
  }

  // Resume from the checkpoint PrepareFit found and checked (docs/design.md section 6); with
  // --no-resume, the folder's earlier checkpoints are removed instead.
  void ResumeStep() {
    FitCheckpoints& checkpoints = *fit_->checkpoints;
    if (!config_.streaming.resume_from_checkpoint) {
      checkpoints.LoadForResume();  // removes them, returns nothing
      return;
    }
    if (!fit_->resume_point) return;
    const Checkpoint& checkpoint = fit_->resume_point->checkpoint;
    checkpoints.ContinueFrom(checkpoint);
    if (checkpoint.lm.theta.size() > 0) lm_.resume_state = checkpoint.lm;
    if (checkpoint.pass) fit_->strategy->objective().ResumePass(*checkpoint.pass);
    const std::string action = "resumed from the checkpoint at batch " +
                               std::to_string(checkpoint.global_batch) + " (iteration " +
                               std::to_string(checkpoint.lm.iterations) + ", written " +
                               checkpoint.timestamp_utc + ")";
    spdlog::info("{}", action);
    result().recovery_actions.push_back(action);
  }

  // The global phase (docs/design.md section 4b), or a projected local fit when it is off; the
  // final fit starts from the minimum chosen. A resumed run replays the phase's trail from its
  // checkpoint and computes only what the interrupted run had not (a SLURM job whose time slot is
  // shorter than the phase still progresses); after a final-fit checkpoint the whole phase is
  // replayed (no passes) and the fit continues from its state.
  void GlobalPhaseStep() {
    const GlobalSearchOptions& global_search = config_.nlsq.global_search;
    const FitParameters& parameters = *fit_->parameters;
    fit_start_ = parameters.reduced_start;
    result().global_search.reason = global_search.method_reason;
    const Clock::time_point phase_start = Clock::now();
    if (global_search.method != GlobalSearchMethod::kOff) {
      const GlobalSearchSummary global =
          RunGlobalPhase({config_.nlsq, *search_data_, search_row_stride_, coarse_data_.get(),
                          coarse_row_stride_, parameters, lm_, *fit_->checkpoints, observer_});
      result().global_search =
          GlobalSearchRecordOf(global, global_search.method_reason, parameters.map,
                               PhysicalParameterNames(config_.analysis_mode));
      for (const std::string& warning : global.warnings) {
        spdlog::warn("{}", warning);
        result().warnings.push_back(warning);
      }
      if (global.chosen >= 0)
        fit_start_ = global.minima[static_cast<size_t>(global.chosen)].reduced;
      // The phase's minimum is of a row subsample: a projected local fit on all the data takes
      // it the rest of the way in a few passes, where the final fit alone would crawl along
      // the valleys of correlated parameters (docs/design.md section 4b).
      if (search_row_stride_ > 1 && config_.nlsq.variable_projection && !lm_.resume_state) {
        fit_start_ = ProjectedLocalFit(fit_->strategy->objective(), parameters.map,
                                       parameters.reduced_bounds, fit_start_, lm_);
        fit_->checkpoints->StopIfInterrupted();
      }
      ReportPhase("global search", SecondsSince(phase_start));
    } else if (config_.nlsq.variable_projection && !lm_.resume_state) {
      fit_start_ = ProjectedLocalFit(fit_->strategy->objective(), parameters.map,
                                     parameters.reduced_bounds, parameters.reduced_start, lm_);
      fit_->checkpoints->StopIfInterrupted();
      ReportPhase("projected local fit", SecondsSince(phase_start));
    }
    search_data_.reset();
    coarse_data_.reset();
  }

  // The final fit from the global phase's minimum. A strategy that gives way mid-fit (Ceres'
  // Jacobian did not fit: the LM core goes on as large) is recorded, and its checkpoints follow
  // the new strategy. A signal stops it with a checkpoint (FitInterrupted); a batch that cannot
  // be read even after retries keeps what was computed (docs/design.md section 7).
  void FinalFitStep() {
    auto on_fallback = [this](const StrategyFallback& fallback) {
      spdlog::warn("{}", fallback.action);
      result().recovery_actions.push_back(fallback.action);
      result().strategy = std::string(ToString(fallback.kind));
      fit_->checkpoints->FollowPolicy(fallback.checkpoint_policy);
    };
    try {
      summary_ = fit_->strategy->MinimizeFinal(lm_, fit_->parameters->map, fit_start_, on_fallback);
      // Stopped by a signal (FitCheckpoints::OnIteration): save and exit 3.
      if (summary_.status == LevenbergMarquardtStatus::kStoppedByCallback) {
        fit_->checkpoints->StopIfInterrupted();
      } else {
        fit_->checkpoints->OnFinalFitEnded(summary_.iterations);
      }
    } catch (const DataError& error) {
      const bool saved = fit_->checkpoints->SaveAfterFailure();
      throw DataError(std::string(error.what()) +
                      (saved ? "; progress saved in " + config_.streaming.checkpoint_dir +
                                   ": run the same command again to resume once the file is "
                                   "readable"
                             : ""));
    }
    ReportPhase("final fit", summary_.seconds);
  }

  // The phi0 mirror check (phi0_mirror.h): one more local fit when the angles cannot tell phi0
  // from its mirror. A signal during it stops the fit as one during the final fit does.
  void Phi0MirrorStep() {
    if (pilot_ || summary_.status == LevenbergMarquardtStatus::kStoppedByCallback) return;
    bool stopped = false;
    phi0_mirror_ = CheckPhi0Mirror(fit_->strategy->objective(), fit_->parameters->map, lm_,
                                   summary_, fit_->phi_degrees, &stopped);
    if (stopped) fit_->checkpoints->StopIfInterrupted();
  }

  // The result: warnings, the solution (fit_solution.h) and the totals; what a caller needs
  // beside it.
  FitOutcome ResultStep() {
    const BatchedObjective& objective = fit_->strategy->objective();
    // Streamed data are counted by the passes: the check before the fit could not see them.
    CheckDataCanBeFitted(objective, source_.info().file_path, fit_->plan.scaling.mode,
                         fit_->parameters->map.num_reduced());
    const FitCheckpoints& checkpoints = *fit_->checkpoints;
    FitResult& recorded = fit_->result;
    for (const std::string& warning : checkpoints.warnings()) recorded.warnings.push_back(warning);
    if (objective.num_nonfinite_points() > 0) {
      const std::string warning =
          std::to_string(objective.num_nonfinite_points()) +
          " non-finite data points excluded from the fit (NaN, +-inf, or beyond "
          "+-3.4e38, the float32 range the fit reads)";
      spdlog::warn("{}", warning);
      recorded.warnings.push_back(warning);
    }
    // Under a robust loss the LM core minimised the robust cost: one more pass gives the plain
    // chi2 that the results report (docs/model.md, Robust loss).
    std::optional<double> sum_of_squares;
    if (!config_.nlsq.loss.is_linear() && summary_.theta.size() > 0) {
      sum_of_squares =
          fit_->strategy->objective().SumOfSquares(fit_->parameters->map.Expand(summary_.theta));
    }
    // The profile points of the checkpoint this run resumed from (empty when none): the profile
    // check's and the profile intervals' probes take from them (CheckpointedCheckProbe,
    // CheckpointedProbe).
    profile_trail_ = fit_->checkpoints->profile_trail();
    profile_point_resumed_.assign(profile_trail_.points.size(), true);
    const Clock::time_point uncertainty_start = Clock::now();
    const ReportedUncertainty uncertainty = UncertaintyOfTheSolution(recorded);
    const double uncertainty_seconds = SecondsSince(uncertainty_start);
    ReportPhase("uncertainties", uncertainty_seconds);
    const ProfileProbe profile_check = CheckpointedCheckProbe(ProfileProbeOfTheSolution());
    outcome_.physical = RecordSolution(summary_, lm_, *fit_->parameters, fit_->plan.scaling,
                                       objective, fit_->phi_degrees, !config_.performance.fast_mode,
                                       recorded, sum_of_squares, profile_check, uncertainty);
    if (!profile_trail_.empty()) {
      spdlog::info(
          "profile points: {} (the profile check's and intervals'), {} of them from the "
          "checkpoint",
          profile_trail_.points.size(), profile_points_replayed_);
    }
    RecordTotals(
        {summary_, source_.info(), objective, checkpoints.statistics(), checkpoints.saves(),
         *fit_->backend.backend, fit_->plan.size.threads, SecondsSince(start_)},
        recorded);
    recorded.uncertainty_seconds = uncertainty_seconds;
    AnnotateParameters(config_.initial.fixed_parameters, recorded);
    if (phi0_mirror_) RecordPhi0Mirror(*phi0_mirror_, recorded);
    if (uncertainty.sums_pass) {  // the frame-block sums' pass over the data
      recorded.passes += 1;
      recorded.point_evaluations += objective.num_points();
    }
    RecordBackendSelfCheck(fit_->backend, recorded);
    // The file the config named, when that is what the source read (not the Python module's
    // arrays, whose source is named after them).
    if (const std::string& read = source_.info().file_path;
        !read.empty() && read == config_.data.file_path) {
      std::error_code error;
      const std::filesystem::path absolute = std::filesystem::absolute(read, error);
      recorded.data_file = error ? read : absolute.lexically_normal().string();
    }
    recorded.sigma = config_.nlsq.sigma;
    outcome_.final_fit_report = summary_.BriefReport();
    if (const ProcessGroup& group = *CurrentProcessGroup(); group.size() > 1) {
      spdlog::info("{} ranks shared the passes: rank 0 received {} bytes from the others",
                   group.size(), group.bytes_received());
    }
    outcome_.model = *fit_->model;
    outcome_.checkpoints = checkpoints.store_options();
    outcome_.checkpoints_enabled = checkpoints.enabled();
    outcome_.checkpoint_lock = checkpoints.folder_lock();
    outcome_.exit_code = FitExitCode(recorded.convergence_status);
    // The data in memory go on to the result files' writer (FitOutcome::held_data), with the
    // strategy that holds them.
    if (const std::vector<std::vector<float>>* held = fit_->strategy->WholeDataInMemory()) {
      const std::shared_ptr<const FitStrategy> strategy(std::move(fit_->strategy));
      outcome_.held_data = std::shared_ptr<const std::vector<std::vector<float>>>(strategy, held);
    }
    outcome_.result = std::move(recorded);
    return std::move(outcome_);
  }

  // The uncertainties the result reports (docs/results.md, What the uncertainties mean): the
  // config's method; the jackknife (and auto, which measures the residuals' correlation from the
  // same sums) costs one more pass over the data (FrameBlockSums) and is replaced by the
  // standard error in fast mode, under a robust loss (its sums are those of the plain residuals)
  // and without a covariance; auto reports the standard error where ResidualsUncorrelated. A
  // warning (in `recorded`) when the noise is correlated over more frames than the jackknife's
  // blocks can hold.
  ReportedUncertainty UncertaintyOfTheSolution(FitResult& recorded) {
    ReportedUncertainty reported;
    reported.method = config_.nlsq.uncertainty;
    // Profile intervals when asked for (docs/results.md, Profile intervals), not in fast mode.
    if (config_.nlsq.profile_intervals && !config_.performance.fast_mode) {
      reported.intervals = CheckpointedProbe(ProbeOfTheSolution());
      if (reported.intervals) reported.interval_ends = SpreadIntervalEnds();
      if (!reported.intervals) {
        spdlog::warn(
            "optimization.nlsq.profile_intervals: not computed (they need the plain "
            "loss and variable projection)");
      }
    }
    // Else profiles for the parameters the data do not determine, where profile points are
    // affordable, not in fast mode.
    if (!reported.intervals && !config_.performance.fast_mode && !pilot_ &&
        ProfilePointsAffordable()) {
      reported.undetermined_intervals = CheckpointedProbe(ProbeOfTheSolution());
    }
    if (reported.method != UncertaintyMethod::kJackknife &&
        reported.method != UncertaintyMethod::kAuto) {
      return reported;
    }
    std::string standard_because;
    if (config_.performance.fast_mode) {
      standard_because = "fast mode";
    } else if (!config_.nlsq.loss.is_linear()) {
      standard_because = "a robust loss";
    } else if (summary_.theta.size() == 0 || summary_.covariance.size() == 0 ||
               !summary_.covariance.allFinite()) {
      standard_because = "no covariance at the result";
    }
    std::vector<int> support;
    for (int i = 0; i < summary_.covariance.rows(); ++i) {
      if (summary_.covariance(i, i) > 0.0) support.push_back(i);
    }
    if (standard_because.empty() && support.empty()) standard_because = "no free parameter";
    if (!standard_because.empty()) {
      spdlog::info(
          "uncertainties: the standard error ({}; the frame-block jackknife needs a "
          "covariance, the plain loss and full validation)",
          standard_because);
      reported.method = UncertaintyMethod::kStandard;
      return reported;
    }
    const Clock::time_point start = Clock::now();
    BatchedObjective& objective = fit_->strategy->objective();
    const ScalingMap& map = fit_->parameters->map;
    const int n_physical = objective.num_physical();
    const FrameBlockSums sums = objective.AccumulateFrameBlockSums(
        map.Expand(summary_.theta),
        FineFrameBlocks(objective.model().num_times(), objective.num_angles(), n_physical + 2));
    reported.sums_pass = true;
    reported.residual_lag1_correlation = RowCorrelationAtLag1(sums);
    if (reported.method == UncertaintyMethod::kAuto && ResidualsUncorrelated(sums)) {
      spdlog::info(
          "uncertainties: standard errors of independent noise (the residuals are "
          "uncorrelated along frames: lag-1 correlation {:.3f}), {:.2f} s",
          reported.residual_lag1_correlation, SecondsSince(start));
      reported.method = UncertaintyMethod::kStandard;
      return reported;
    }
    reported.method = UncertaintyMethod::kJackknife;
    reported.jackknife = ComputeFrameBlockJackknife(sums, map, support, n_physical);
    if (!reported.jackknife) {
      const std::string warning =
          "the frame-block jackknife of the uncertainties failed (a sum is not finite): the "
          "uncertainties are the standard errors of independent noise";
      spdlog::warn("{}", warning);
      recorded.warnings.push_back(warning);
      reported.method = UncertaintyMethod::kStandard;
      return reported;
    }
    const FrameBlockJackknife& jackknife = *reported.jackknife;
    spdlog::info(
        "uncertainties: frame-block jackknife over {} blocks of about {} frames (the "
        "residuals are correlated over about {} frame{}), {:.2f} s",
        jackknife.blocks, sums.num_frames() / jackknife.blocks, jackknife.correlation_frames,
        jackknife.correlation_frames == 1 ? "" : "s", SecondsSince(start));
    if (jackknife.blocks_too_short) {
      const std::string warning =
          "the residuals are correlated over about " +
          std::to_string(jackknife.correlation_frames) + " frames, more than the " +
          std::to_string(jackknife.blocks) + " blocks of the jackknife (about " +
          std::to_string(sums.num_frames() / jackknife.blocks) +
          " frames each) can hold: the uncertainties may be too small (a longer frame window "
          "holds more independent stretches of the noise)";
      spdlog::warn("{}", warning);
      recorded.warnings.push_back(warning);
    }
    return reported;
  }

  // The profile points of the uncertainty check (fit_solution.h ProfileWarnings): ProfilePoint
  // (global_phase.h) on all the data, at most kProfileIterations iterations (a point still above
  // `enough` then counts as not flagged). None (no check) when optimization.nlsq.profile_check,
  // else the mode's catalog entry (profile_check), does not ask for it, under a robust loss,
  // whose projected chi2 is not the reported one, without variable projection, without a
  // solution, and where profile points are not affordable (ProfilePointsAffordable).
  ProfileProbe ProfileProbeOfTheSolution() {
    const bool asked =
        config_.nlsq.profile_check.value_or(DefinitionOf(config_.analysis_mode).profile_check);
    if (!asked || !ProfilePointsAffordable()) return nullptr;
    return ProbeOfTheSolution();
  }

  // Whether the checks' profile points (the profile check's, the undetermined parameters'
  // intervals) are run: at most global_search.max_points points, above which each profile point
  // would cost the passes of a local fit over all the data.
  bool ProfilePointsAffordable() const {
    return fit_->strategy->objective().num_points() <= config_.nlsq.global_search.max_points;
  }

  // ProfilePoint at the solution (the profile check's and the profile intervals' probe); null
  // under a robust loss (its projected chi2 is not the reported one), without variable
  // projection, and without a solution.
  // objective: the data it refits (null: the fit's own); here_only: its passes run on this rank
  // alone (FitStrategy::WholeDataHere).
  ProfileProbe ProbeOfTheSolution(BatchedObjective* data = nullptr, bool here_only = false) {
    static constexpr int kProfileIterations = 50;
    BatchedObjective& objective = data != nullptr ? *data : fit_->strategy->objective();
    if (!config_.nlsq.loss.is_linear() || !config_.nlsq.variable_projection ||
        summary_.theta.size() == 0) {
      return nullptr;
    }
    return [this, &objective, here_only](const std::string& name, double value, double enough) {
      // The fault point of a profile fit's allocations (src/base/fault_injection.h).
      if (const FaultInjector* faults = InstalledFaultInjector();
          faults != nullptr && faults->FailAllocation("profile_fit")) {
        throw std::bad_alloc();
      }
      const FitParameters& parameters = *fit_->parameters;
      const ScalingMap& map = parameters.map;
      const auto at = std::find(parameters.full_names.begin(), parameters.full_names.end(), name);
      if (at == parameters.full_names.end()) return kNaN;
      const int full = static_cast<int>(at - parameters.full_names.begin());
      int reduced = -1;  // its column: a unit row of the map (a fitted physical parameter)
      for (int r = 0; r < map.num_reduced(); ++r) {
        if (map.matrix(full, r) == 1.0 && map.matrix.row(full).cwiseAbs().sum() == 1.0) reduced = r;
      }
      return ProfilePoint(objective, map, parameters.reduced_bounds, summary_.theta,
                          summary_.covariance, reduced, value, enough, lm_, kProfileIterations,
                          here_only);
    };
  }

  // The ranks of a job spread the profile intervals' ends (docs/design.md section 5b): end i is
  // found by rank i mod K, in rounds of K ends, on every row of the data held by that rank
  // (FitStrategy::WholeDataHere: bitwise the single process's objective), alone; one AllGather
  // after each round brings every rank every end of the round (its value, note and profile
  // points, each with the passes it took), whose points then go into the checkpoints' trail in
  // end order as one process records them (a point the trail holds already, from the checkpoint
  // or an earlier end, is not recorded again, and its passes are not counted: every rank counts
  // the same batches, the single process's; FitCheckpoints::OnProfilePoint, where the ranks also
  // agree on a signal). After each profile point of an end the ranks agree on a signal too
  // (AgreedSignalBetweenPoints; a rank whose end is done, or that has none, makes the same
  // agreements until every rank's end is done), so a signal waits for at most one refit on each
  // rank, not a whole end; an end stopped by a signal keeps no point, the round
  // ends and the fit stops with the ends before it saved. Null (each refit's passes shared in
  // lock step instead) on one process, for a strategy that cannot hold the data (streaming), and
  // above optimization.nlsq.global_search.max_points points, where K copies of the data would
  // cost more memory than the gathers they save.
  ProfileEndsRunner SpreadIntervalEnds() {
    ProcessGroup& group = *CurrentProcessGroup();
    if (group.size() <= 1 ||
        fit_->strategy->objective().num_points() > config_.nlsq.global_search.max_points) {
      return nullptr;
    }
    // Every rank takes the same path: the ends are spread only when every rank holds the data
    // (a rank whose copy failed would otherwise leave the others waiting in a gather).
    std::string failure;
    try {
      profile_data_ = fit_->strategy->WholeDataHere();
    } catch (const std::exception& error) {
      failure = error.what();
      profile_data_.reset();
    }
    // The highest rank that failed, plus one (0: none); rank 0 logs it, that rank its reason.
    if (const int64_t failed_rank = group.MaxOverRanks(profile_data_ ? 0 : group.rank() + 1);
        failed_rank != 0) {
      if (!failure.empty()) {
        spdlog::warn("profile intervals: this rank could not hold all the data: {}", failure);
      }
      spdlog::warn(
          "profile intervals: MPI rank {} could not hold all the data: the interval ends are "
          "computed by all the ranks together",
          failed_rank - 1);
      profile_data_.reset();
      return nullptr;
    }
    spread_probe_ = ProbeOfTheSolution(profile_data_.get(), /*here_only=*/true);
    return [this, &group](size_t count, const std::function<ProfileEndFound(size_t)>& find) {
      std::vector<ProfileEndFound> ends(count);
      spdlog::info(
          "profile intervals: {} interval ends spread over {} ranks, each holding all "
          "the data",
          count, group.size());
      const int ranks = group.size();
      // One end as doubles: value, note (0 none, 1 bound, 2 failed, 3 an error every rank
      // raises after the gather), parameter, points, then
      // (value held, chi2 less the minimum, chi2, passes) per point; an end not found here: 0
      // points.
      constexpr int kBlock = 4 + 4 * kProfileEndEvaluations;
      const std::vector<int> counts(static_cast<size_t>(ranks), kBlock);
      std::vector<double> mine(kBlock), all(static_cast<size_t>(kBlock) * ranks);
      std::exception_ptr failed;  // this rank's failure of a profile fit (note 3)
      for (size_t round = 0; round < count; round += static_cast<size_t>(ranks)) {
        const size_t item = round + static_cast<size_t>(group.rank());
        std::fill(mine.begin(), mine.end(), kNaN);
        mine[3] = 0.0;
        spread_round_stopped_ = false;
        if (item < count) {
          spread_points_.clear();
          spread_passes_.clear();
          spreading_ = true;
          ProfileEndFound found;
          bool stopped = false;
          try {
            found = find(item);
            HOMODYNE_CHECK(found.points.size() == spread_points_.size() &&
                           found.points.size() <= static_cast<size_t>(kProfileEndEvaluations));
          } catch (const PassInterrupted&) {  // a signal here or agreed: the round ends first
            stopped = true;
          } catch (...) {  // raised on every rank after the gather, not here alone
            failed = std::current_exception();
            stopped = true;
            mine[1] = 3.0;
          }
          spreading_ = false;
          if (!stopped && InterruptSignalHere() == 0) {
            mine[0] = found.end.value;
            mine[1] = found.end.note == "bound" ? 1.0 : found.end.note == "failed" ? 2.0 : 0.0;
            mine[2] = spread_points_.empty() ? -1.0 : spread_points_.front().parameter;
            mine[3] = static_cast<double>(found.points.size());
            for (size_t k = 0; k < found.points.size(); ++k) {
              mine[4 + 4 * k] = found.points[k].first;
              mine[5 + 4 * k] = found.points[k].second;
              mine[6 + 4 * k] = spread_points_[k].chi2;
              mine[7 + 4 * k] = static_cast<double>(spread_passes_[k]);
            }
          }
        }
        // The agreements of the ends still going on other ranks (this rank's end is done,
        // stopped or failed, or there was none), until none is or a signal stopped the round:
        // every rank makes the same agreements, in the same order.
        if (!spread_round_stopped_) {
          while (!AgreedSignalBetweenPoints(/*working=*/false) && spread_anyone_working_) {
          }
        }
        group.AllGather(mine, counts, all);
        for (int r = 0; r < ranks; ++r) {
          if (all[static_cast<size_t>(kBlock) * r + 1] != 3.0) continue;
          if (failed) std::rethrow_exception(failed);
          throw std::runtime_error("profile intervals: a profile fit failed on MPI rank " +
                                   std::to_string(r) + " (its message is in that rank's log)");
        }
        int64_t passes = 0;  // of the points new to the trail
        for (int r = 0; r < ranks && round + static_cast<size_t>(r) < count; ++r) {
          const double* block = all.data() + static_cast<size_t>(kBlock) * r;
          ProfileEndFound& found = ends[round + static_cast<size_t>(r)];
          found.end.value = block[0];
          found.end.note = block[1] == 1.0 ? "bound" : block[1] == 2.0 ? "failed" : "";
          for (int k = 0; k < static_cast<int>(block[3]); ++k) {
            const ProfilePointRecord point{static_cast<int>(block[2]), block[4 + 4 * k],
                                           block[6 + 4 * k]};
            found.points.emplace_back(point.value, block[5 + 4 * k]);
            if (KnownProfilePoint(point.parameter, point.value, check_points_)) continue;
            profile_trail_.points.push_back(point);
            profile_point_resumed_.push_back(false);
            passes += static_cast<int64_t>(block[7 + 4 * k]);
          }
        }
        // The ranks agree on a signal here (an end it stopped has no points: not recorded).
        fit_->checkpoints->OnProfilePoint(passes, profile_trail_);
      }
      return ends;
    };
  }

  // Inside SpreadIntervalEnds' rounds, a collective: each rank tells whether it has a signal
  // (its own flag, InterruptSignalHere) and whether it is still in its end (`working`: after
  // each of its points; false once its end is done). True when a rank has a signal: every rank
  // then stops its end and makes no more agreements in the round (spread_round_stopped_); else
  // spread_anyone_working_ says whether a rank is still in its end (then the others agree again).
  bool AgreedSignalBetweenPoints(bool working) {
    const int64_t agreed = CurrentProcessGroup()->MaxOverRanks(
        (InterruptSignalHere() != 0 ? 2 : 0) + (working ? 1 : 0));
    spread_round_stopped_ = agreed >= 2;
    spread_anyone_working_ = agreed == 1;
    return spread_round_stopped_;
  }

  // The chi2 of the trail's point of this parameter and these bits of its value at index `from`
  // or later (a point the trail holds is the same refit: taken, not computed again); nullopt
  // when it holds none. With count_replayed, a point of the checkpoint this run resumed from
  // counts as replayed (profile_points_replayed_, the log's).
  std::optional<double> KnownProfilePoint(int parameter, double value, size_t from,
                                          bool count_replayed = true) {
    const std::vector<ProfilePointRecord>& points = profile_trail_.points;
    for (size_t k = from; k < points.size(); ++k) {
      if (points[k].parameter == parameter &&
          std::bit_cast<uint64_t>(points[k].value) == std::bit_cast<uint64_t>(value)) {
        if (count_replayed && profile_point_resumed_[k]) ++profile_points_replayed_;
        return points[k].chi2;
      }
    }
    return std::nullopt;
  }

  // The index of a physical parameter in the full layout (ProfilePointRecord::parameter).
  int ParameterIndexOf(const std::string& name) const {
    const std::vector<std::string>& names = fit_->parameters->full_names;
    return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
  }

  // A profile point computed by `probe` on the fit's data (every rank together) and recorded:
  // a signal during it stops the fit with the points before it saved (FitInterrupted), so the
  // resumed run computes it again; else it goes into the trail at index `at` (at most its size:
  // the end), its passes are counted and the checkpoints may save (FitCheckpoints::
  // OnProfilePoint).
  double ComputeProfilePoint(const ProfileProbe& probe, int parameter, const std::string& name,
                             double value, double enough, size_t at) {
    const BatchedObjective& objective = fit_->strategy->objective();
    const int64_t passes_before = objective.passes();
    const double chi2 = probe(name, value, enough);
    FitCheckpoints& checkpoints = *fit_->checkpoints;
    checkpoints.StopIfInterrupted();  // a signal during the point: saved without it
    const auto offset = static_cast<std::ptrdiff_t>(std::min(at, profile_trail_.points.size()));
    profile_trail_.points.insert(profile_trail_.points.begin() + offset, {parameter, value, chi2});
    profile_point_resumed_.insert(profile_point_resumed_.begin() + offset, false);
    checkpoints.OnProfilePoint(objective.passes() - passes_before, profile_trail_);
    return chi2;
  }

  // The profile check's probe (ProfileProbeOfTheSolution, fit_solution.h ProfileWarnings) with
  // its points in the checkpoints' trail, as the profile intervals' (CheckpointedProbe): a signal
  // among them saves a checkpoint and stops the fit (exit 3), and the resumed run takes them from
  // the trail. The check runs before any interval, so its points are the trail's first ones, in
  // the order it asks for them; the k-th point it asks for is the trail's k-th when that holds the
  // same parameter and bits of the value (its chi2 is that of the check's early stop at `enough`,
  // not a full refit's: the intervals never take it, CheckpointedProbe), else it is computed and
  // inserted there, before the points that were: a checkpoint of a run without the check (the
  // trail holds the intervals' points only; optimization.nlsq.profile_check is not in the
  // checkpoint's identity), or one written at another instruction-set level (the last bits may
  // differ). The intervals may still take the points after it, found by value. Null when `probe`
  // is.
  ProfileProbe CheckpointedCheckProbe(ProfileProbe probe) {
    if (!probe) return nullptr;
    return [this, probe = std::move(probe)](const std::string& name, double value, double enough) {
      const int parameter = ParameterIndexOf(name);
      const size_t k = check_points_++;
      std::vector<ProfilePointRecord>& points = profile_trail_.points;
      if (k < points.size() && points[k].parameter == parameter &&
          std::bit_cast<uint64_t>(points[k].value) == std::bit_cast<uint64_t>(value)) {
        if (profile_point_resumed_[k]) ++profile_points_replayed_;
        return points[k].chi2;
      }
      return ComputeProfilePoint(probe, parameter, name, value, enough, k);
    };
  }

  // The profile intervals' probe with its points in the checkpoints (FitCheckpoints::
  // OnProfilePoint): a point that the trail holds after the profile check's points (the same
  // parameter, the same bits of its value: from the checkpoint this run resumed from, or asked
  // for again, as the 95 % search can pass where the 68 % one went) is taken from it, every
  // other is computed with `probe` and added to the trail (ComputeProfilePoint). The points'
  // order and values are those of an uninterrupted run, so the intervals are bitwise its own.
  // Within SpreadIntervalEnds' ends the point is computed on this rank alone and recorded after
  // the round. Null when `probe` is.
  ProfileProbe CheckpointedProbe(ProfileProbe probe) {
    if (!probe) return nullptr;
    return [this, probe = std::move(probe)](const std::string& name, double value, double enough) {
      const int parameter = ParameterIndexOf(name);
      if (spreading_) {  // an end found on this rank alone (SpreadIntervalEnds)
        // Not counted as replayed here: every rank counts the round's points after the gather.
        const std::optional<double> known =
            KnownProfilePoint(parameter, value, check_points_, /*count_replayed=*/false);
        const int64_t passes_before = profile_data_->passes();
        const double chi2 = known ? *known : spread_probe_(name, value, enough);
        spread_points_.push_back({parameter, value, chi2});
        spread_passes_.push_back(profile_data_->passes() - passes_before);
        fit_->checkpoints->OnLocalProfilePoint(spread_passes_.back());
        if (AgreedSignalBetweenPoints(/*working=*/true)) {
          throw PassInterrupted("a profile end stopped between two points: a rank has a signal");
        }
        return chi2;
      }
      if (const std::optional<double> known = KnownProfilePoint(parameter, value, check_points_)) {
        return *known;
      }
      return ComputeProfilePoint(probe, parameter, name, value, enough,
                                 profile_trail_.points.size());
    };
  }

  const Config& config_;
  BatchSource& source_;
  const FitObserver& observer_;
  const Clock::time_point start_ = Clock::now();
  FitOutcome outcome_;
  std::unique_ptr<PreparedFit> fit_;               // PrepareFit
  int search_row_stride_ = 1;                      // the global phase's rows
  std::unique_ptr<BatchedObjective> search_data_;  // until GlobalPhaseStep ends
  std::unique_ptr<BatchedObjective> coarse_data_;  // method auto's coarse level, or null
  int coarse_row_stride_ = 0;
  LevenbergMarquardtOptions lm_;       // the final fit's options
  Eigen::VectorXd fit_start_;          // GlobalPhaseStep
  LevenbergMarquardtSummary summary_;  // FinalFitStep
  bool pilot_ = false;
  std::optional<Phi0MirrorFinding> phi0_mirror_;    // Phi0MirrorStep
  ProfileTrail profile_trail_;                      // CheckpointedProbe's points
  std::unique_ptr<BatchedObjective> profile_data_;  // SpreadIntervalEnds' whole data, or null
  ProfileProbe spread_probe_;                       // its probe, on profile_data_ alone
  bool spreading_ = false;                          // inside an end found on this rank alone
  std::vector<ProfilePointRecord> spread_points_;   // that end's points
  std::vector<int64_t> spread_passes_;              // and the passes each took
  bool spread_round_stopped_ = false;   // AgreedSignalBetweenPoints: a signal, this round
  bool spread_anyone_working_ = false;  // and a rank still in its end
  size_t check_points_ = 0;  // the profile check's points asked for: the trail's first ones
  std::vector<bool> profile_point_resumed_;  // per point of the trail: the resumed checkpoint's
  int profile_points_replayed_ = 0;          // resumed points the check and intervals asked for
};

}  // namespace

namespace {

// optimization.nlsq.sigma: auto (NlsqOptions::sigma_auto): a first fit at config.nlsq.sigma
// without checkpoints and without the final fit's iteration events, the noise estimated from its
// residuals, sigma = sqrt(chi2 / dof) at sigma 1, then the fit at that sigma from the first fit's
// minimum (global phase off: the first found the basin). When no estimate can be made (a failed
// first fit, no degrees of freedom, chi2 0 or not finite, an estimate outside the loader's range)
// the first fit is the result, with a warning.
FitOutcome FitWithSigmaAuto(const Config& config, BatchSource& source,
                            const FitObserver& observer) {
  Config first_config = config;
  first_config.nlsq.sigma_auto = false;
  first_config.streaming.enable_checkpoints = false;
  FitObserver first_observer = observer;
  first_observer.on_iteration = nullptr;  // the convergence history is the final fit's
  spdlog::info("sigma auto: a first fit at sigma {} to estimate the noise",
               FormatNumber(config.nlsq.sigma));
  FitOutcome first = FitRun(first_config, source, first_observer, /*pilot=*/true).Run();
  const FitResult& pilot = first.result;
  const double chi2_at_unit_sigma =
      pilot.chi_squared * config.nlsq.sigma * config.nlsq.sigma;  // sum of (data - c2)^2
  const double estimate =
      pilot.degrees_of_freedom > 0
          ? std::sqrt(chi2_at_unit_sigma / static_cast<double>(pilot.degrees_of_freedom))
          : std::numeric_limits<double>::quiet_NaN();
  if (first.exit_code != 0 || !std::isfinite(estimate) || estimate < 1e-12 || estimate > 1e3) {
    const std::string warning =
        "optimization.nlsq.sigma auto: no noise estimate (first fit " + pilot.convergence_status +
        ", chi2 " + FormatNumber(pilot.chi_squared) + ", dof " +
        std::to_string(pilot.degrees_of_freedom) + "); the result is the fit at sigma " +
        FormatNumber(config.nlsq.sigma);
    spdlog::warn("{}", warning);
    first.result.warnings.insert(first.result.warnings.begin(), warning);
    first.result.sigma_source = "optimization.nlsq.sigma auto: no estimate; the first fit's sigma";
    return first;
  }
  first.held_data.reset();  // the second fit reads the data again: not two copies at once
  Config final_config = config;
  final_config.nlsq.sigma_auto = false;
  final_config.nlsq.sigma = estimate;
  final_config.initial.parameter_names = PhysicalParameterNames(config.analysis_mode);
  final_config.initial.values = first.physical;
  final_config.nlsq.global_search.method = GlobalSearchMethod::kOff;
  final_config.nlsq.global_search.method_reason =
      "sigma auto: the fit at the estimated sigma starts at the first fit's minimum (its global "
      "phase: " +
      config.nlsq.global_search.method_reason + ")";
  const std::string source_text = "sqrt(chi2 / dof) of a first fit at sigma " +
                                  FormatNumber(config.nlsq.sigma) + " (reduced chi2 " +
                                  FormatNumber(pilot.reduced_chi_squared) + ", dof " +
                                  std::to_string(pilot.degrees_of_freedom) + ")";
  const std::string warning =
      "sigma adjusted: optimization.nlsq.sigma auto = " + FormatNumber(estimate) + ", " +
      source_text + "; the fit was repeated at that sigma from the first fit's minimum";
  spdlog::warn("{}", warning);
  FitOutcome final_outcome = FitRun(final_config, source, observer).Run();
  FitResult& result = final_outcome.result;
  result.sigma_source = "auto: " + source_text;
  result.warnings.insert(result.warnings.begin(), warning);
  result.passes += pilot.passes;  // the work of both fits
  result.point_evaluations += pilot.point_evaluations;
  result.total_seconds += pilot.total_seconds;
  return final_outcome;
}

}  // namespace

FitOutcome Fit(const Config& config, BatchSource& source, const FitObserver& observer) {
  if (config.nlsq.sigma_auto) return FitWithSigmaAuto(config, source, observer);
  return FitRun(config, source, observer).Run();
}

void WriteFitResults(const FitOutcome& outcome, BatchSource& source, const std::string& output_dir,
                     bool npz) {
  if (!CurrentProcessGroup()->is_root()) return;  // rank 0 of a job writes
  const ModelEvaluation evaluation(*outcome.model, outcome.physical);
  // fitted_data.h5's data from the fit's data in memory where the source takes them, not from
  // the file read again (io/read_paths.h); lent for the writing only.
  struct Lent {
    BatchSource& source;
    ~Lent() { io_internal::LendHeldUpperTriangles(source, nullptr); }
  };
  const Lent lent{source};
  io_internal::LendHeldUpperTriangles(source, outcome.held_data);
  WriteAllResultFiles(outcome.result, source, evaluation, output_dir, npz);
}

void RemoveCheckpoints(const FitOutcome& outcome) {
  if (!outcome.checkpoints_enabled || !CurrentProcessGroup()->is_root()) return;
  for (const std::string& path : CheckpointStore(outcome.checkpoints).List()) {
    std::error_code error;
    std::filesystem::remove(path, error);
  }
}

}  // namespace homodyne
