// The global phase (src/optimize/global_search.h).
#include "optimize/global_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "optimize/cmaes_search.h"
#include "homodyne/errors.h"
#include "model/mode_catalog.h"
#include "optimize/variable_projection.h"
#include "optimize/start_sampling.h"

namespace homodyne {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The staged grid (method auto): at most this many values along a decade-spanning parameter,
// and this many phi0 values spread over its bounds.
constexpr int kMaxDecades = 7;
// gamma_dot_t0 sets the flow phase, which the sinc^2 factor turns into oscillations of chi2: a
// factor 3 off can leave the true basin, so it gets half-decade steps (at most 2 kMaxDecades).
constexpr int kStepsPerDecadeGammaDot = 2;
constexpr int kPhi0Values = 5;
// method auto: Sobol points added to the grid, and local fits from the best screened
// candidates (the user's start is always fitted too). 12 fits reached the optimum's chi2 in
// 120/120 runs of bench/global_success.sh, 8 in 114/120, 5 in 109/120
// (docs/history/performance-notebook.md). The Sobol points vary the parameters the grid holds
// (alpha, beta, the offsets): with 16, a set whose alpha (-0.69) put every grid candidate's decay
// far off was found only by a 94-iteration fit on the search data, and not at all on the coarse
// level; with 64 it is found in 28 (docs/history/performance-notebook.md, Coarse to fine).
// Screening them costs little on the coarse level.
constexpr int kAutoSobolPoints = 64;
constexpr int kAutoLocalFits = 12;
constexpr int kAutoDimensionsPerUnit = 7;
// method auto with a coarse level (GlobalSearchInputs::coarse_data): the distinct coarse minima
// refined on the search data are those within this many units of the best one's reduced chi2
// (a minimum kRefineWindow above the best on the coarse rows can still be the better one on all
// of them: the chi2 difference of two models has a statistical spread of about twice its square
// root), the best first, at most kAutoRefinements per unit.
constexpr double kRefineWindow = 25.0;
constexpr int kAutoRefinements = 4;
// Screened candidates closer than this (max norm, unit coordinates) to one already chosen for a
// local fit are passed over: the fits start in different places.
constexpr double kMinStartSeparation = 0.1;
// Two local minima are the same when chi2 agrees to this relative tolerance and the physical
// parameters to this distance (max norm, unit coordinates).
constexpr double kSameMinimumChi2 = 1e-6;
constexpr double kSameMinimumDistance = 1e-2;
// A refinement stops once it has joined a minimum already refined (Search::JoinedMinimum): its
// point within this distance (max norm, unit coordinates; the separation of the local fits'
// starts) and its chi2 at most kDegenerateChi2 units of reduced chi2 above it. On the 1.2e7-point
// benchmark three of four refinements crawl 26 to 34 passes along the gamma_dot_t0 / beta /
// gamma_dot_t_offset valley into the first one's minimum, and cross into this reach 5 to 7 passes
// before they end (docs/history/performance-notebook.md, Refinements that join a refined minimum
// stop there).
constexpr double kJoinDistance = kMinStartSeparation;
constexpr const char* kJoinedStatus = "joined a refined minimum";
// Method auto's local fits from the screened candidates join the same way: one that joins a
// minimum found before it (on the level they run on) stops there and counts as that minimum.
constexpr const char* kJoinedFoundStatus = "joined a minimum found before";
// Method auto launches its ranked local fits (the best screened first) until the lowest minimum
// found so far has been reached from kAutoArrivals of their starts (converged there or joined
// it; the starts are at least kMinStartSeparation apart) with its decade-spanning parameters
// inside the box (more than kInteriorMargin from their bounds, unit coordinates). From then on
// it fits only the starts whose screened chi2 is within kRefineWindow reduced chi2 of that
// minimum's (a start already that good may still end lower). The user's start is always fitted.
// A false minimum where the flow vanished leaves phi0, beta and gamma_dot_t_offset free: fits
// from different starts end at different points of it (distinct minima of one chi2), so they
// do not add up; the true minimum pins every parameter. A lowest minimum with a decade-spanning
// parameter on a bound (no flow: gamma_dot_t0 on its lower bound) is the trap the phase exists
// for: while it is the lowest, kAutoReserveFits more ranked starts (per unit) are fitted after
// the kAutoLocalFits. Measured in docs/history/performance-notebook.md (Fewer local fits).
constexpr int kAutoArrivals = 3;
constexpr double kInteriorMargin = 1e-3;
constexpr int kAutoReserveFits = 12;
// Two distinct minima are reported degenerate when their chi2 differ by less than
// degeneracy_threshold (relative, the reference's key) and by less than this many units of the
// best minimum's reduced chi2 (the data cannot tell them apart).
constexpr double kDegenerateChi2 = 4.0;

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// A screened candidate: where it starts and its projected chi2.
struct Candidate {
  Eigen::VectorXd n;
  double chi2 = kInf;
  int index = 0;  // screening order
};

// The projected problem on the search data, the unit box and the counters shared by every
// method.
class Search {
 public:
  // coarse_data: the coarse level (method auto), or null.
  Search(const GlobalSearchInputs& inputs, BatchedObjective* coarse_data,
         GlobalSearchSummary& summary)
      : inputs_(inputs),
        coarse_data_(coarse_data),
        summary_(summary),
        projected_(*inputs.data, inputs.map, inputs.bounds, inputs.start),
        map_size_(inputs.map.num_reduced()) {
    if (coarse_data_ != nullptr) {
      coarse_.emplace(*coarse_data_, inputs.map, inputs.bounds, inputs.start);
      active_ = &*coarse_;
    }
    const BoundBox bounds = projected_.NonlinearBounds();
    names_ = projected_.NonlinearNames();
    try {
      space_ = SearchSpace::FromBounds(bounds.lower, bounds.upper);
    } catch (const std::invalid_argument& error) {
      throw ConfigError(std::string("global search: the bounds of the physical parameters (") +
                        error.what() +
                        ") must be finite with min <= max: set parameter_space.bounds, or "
                        "optimization.nlsq.global_search.method: off");
    }
    UseSymmetricLogForOffsets();
    start_ = ClipToBox(projected_.NonlinearPart(inputs.start));
    start_scaling_ = inputs.start(projected_.linear_indices());
    if (inputs.spread_group != nullptr && inputs.spread_group->size() > 1 &&
        !inputs.stop_requested_here) {
      throw std::invalid_argument("global search: spread over ranks without stop_requested_here");
    }
    // The trail starts as the whole replay: a checkpoint written while it is replayed must not
    // lose its later part.
    trail_ = inputs.replay;
  }

  const SearchSpace& space() const { return space_; }
  const std::vector<std::string>& names() const { return names_; }
  const Eigen::VectorXd& start() const { return start_; }
  int dimensions() const { return space_.dimensions(); }

  // chi2 of the projected problem at n: one pass (+inf where it is not finite), or the replayed
  // value.
  double Screen(const Eigen::VectorXd& n) {
    double chi2 = kInf;
    if (replayed_evaluations_ < inputs_.replay.evaluations.size()) {
      chi2 = inputs_.replay.evaluations[replayed_evaluations_++];
      ++replayed_passes_;
    } else {
      chi2 = Evaluate(n);
      AddToTrail(chi2);
    }
    best_seen_ = std::min(best_seen_, chi2);
    return chi2;
  }

  // Screens candidates [first, last) (Screen each; spread over the ranks when spreading()).
  void ScreenRound(std::vector<Candidate>& candidates, int first, int last) {
    int next = first;
    // The replay is a prefix of the work: its items first, on every rank alike.
    const size_t replayed = inputs_.replay.evaluations.size();
    while (next < last && (!spreading() || replayed_evaluations_ < replayed)) {
      candidates[static_cast<size_t>(next)].chi2 = Screen(candidates[static_cast<size_t>(next)].n);
      ++next;
    }
    if (next == last) return;
    const int mine = next + inputs_.spread_group->rank();
    double chi2 = kNaN;  // this rank has no item in the round
    if (mine < last) chi2 = Evaluate(candidates[static_cast<size_t>(mine)].n);
    const std::vector<double> all = GatherRound(std::span<const double>(&chi2, 1));
    for (int item = next; item < last; ++item) {
      const double value = all[static_cast<size_t>(item - next)];
      if (item != mine) ++passes_elsewhere_;
      candidates[static_cast<size_t>(item)].chi2 = value;
      AddToTrail(value);
      best_seen_ = std::min(best_seen_, value);
    }
  }

  // A projected local fit from n with the given ftol (or the replayed one): its minimum.
  // max_iterations > 0 caps the fit's iterations below the search's own. scaling: where the
  // first evaluation takes the linear parameters from (a reduced point); null = the start's.
  // joined_status: non-null = the fit stops once it has joined a minimum found before it
  // (JoinedMinimum) and is recorded as that minimum with this status.
  GlobalMinimum LocalFit(const Eigen::VectorXd& n, int start_index, double ftol,
                         int max_iterations = 0, const Eigen::VectorXd* scaling = nullptr,
                         const char* joined_status = nullptr) {
    ++summary_.local_fits;
    if (std::optional<GlobalMinimum> replayed = ReplayedMinimum()) return *replayed;
    const FinishedFit fit =
        FitLocally(n, start_index, ftol, max_iterations, scaling, joined_status, nullptr);
    if (fit.stopped) {
      summary_.stopped = true;  // not a finished fit: not in the trail, a resume repeats it
    } else {
      AddToTrail(fit.minimum);
    }
    return fit.minimum;
  }

  // The local fits of one round from starts[first] on: LocalFit (with joined_status) from each
  // start that `launch` accepts, in order, each handed to `take` (and each start it declines to
  // `leave`) as soon as the starts before it have been. `launch` is asked of a start once the
  // fits before it have gone to `take`, as one process asks it, so a start's fate and a fit's
  // joining depend only on the fits before it, whatever the rank count. Returns the index after
  // the round's last start: one start, or spread over the ranks (spreading()), the starts up to
  // the round_size()-th one that `launch` accepts before the round. Those are fitted at once,
  // one per rank (without stopping on joining, but listing the iterates where a fit could
  // have); then the round is taken in order: a fitted start `launch` now declines is discarded,
  // a fit that would have joined a minimum taken before it is cut at that iterate (its passes
  // past it discarded, not counted), and a start it now accepts that was not fitted is fitted
  // on every rank alike. The trail gets the finished fits up to the first one a signal stopped.
  int LocalFitRound(const std::vector<Candidate>& starts, int first, double ftol,
                    int max_iterations, const char* joined_status,
                    const std::function<bool(const Candidate&, int item)>& launch,
                    const std::function<void(GlobalMinimum)>& take,
                    const std::function<void(const Candidate&, int item)>& leave) {
    const int total = static_cast<int>(starts.size());
    // The replay is a prefix of the work: its items one by one, on every rank alike.
    if (!spreading() || replayed_minima_ < inputs_.replay.minima.size()) {
      const Candidate& start = starts[static_cast<size_t>(first)];
      if (launch(start, first)) {
        take(LocalFit(start.n, start.index, ftol, max_iterations, nullptr, joined_status));
      } else {
        leave(start, first);
      }
      return first + 1;
    }
    std::vector<int> fitted;  // the round's starts fitted at once: fitted[r] on rank r
    int end = first;
    while (end < total && static_cast<int>(fitted.size()) < round_size()) {
      if (launch(starts[static_cast<size_t>(end)], end)) fitted.push_back(end);
      ++end;
    }
    // One record per rank: finished (1), stopped (0) or no item (-1); status, iterations,
    // passes, start, chi2, the number of listed iterates; the reduced point; each listed
    // iterate (iteration, passes, chi2, its point).
    constexpr int kHeader = 7;
    const int step_size = 3 + dimensions();
    std::vector<double> record(static_cast<size_t>(kHeader + map_size_), 0.0);
    record[0] = -1.0;
    const int my_slot = inputs_.spread_group->rank();
    if (my_slot < static_cast<int>(fitted.size())) {
      const Candidate& start = starts[static_cast<size_t>(fitted[static_cast<size_t>(my_slot)])];
      std::vector<FitStep> steps;
      const FinishedFit fit = FitLocally(start.n, start.index, ftol, max_iterations, nullptr,
                                         nullptr, joined_status != nullptr ? &steps : nullptr);
      record[0] = fit.stopped ? 0.0 : 1.0;
      record[1] = static_cast<double>(fit.status);
      record[2] = fit.minimum.iterations;
      record[3] = static_cast<double>(fit.minimum.passes);
      record[4] = fit.minimum.start;
      record[5] = fit.minimum.chi2;
      record[6] = static_cast<double>(steps.size());
      std::copy(fit.minimum.reduced.begin(), fit.minimum.reduced.end(), record.begin() + kHeader);
      for (const FitStep& step : steps) {
        record.push_back(step.iteration);
        record.push_back(static_cast<double>(step.passes));
        record.push_back(step.chi2);
        record.insert(record.end(), step.theta.begin(), step.theta.end());
      }
    }
    // The records differ in length: their lengths first.
    const double length = static_cast<double>(record.size());
    const std::vector<double> lengths = GatherRound(std::span<const double>(&length, 1));
    std::vector<int> counts;
    std::vector<size_t> offsets;
    size_t offset = 0;
    for (double value : lengths) {
      counts.push_back(static_cast<int>(value));
      offsets.push_back(offset);
      offset += static_cast<size_t>(counts.back());
    }
    std::vector<double> all(offset);
    inputs_.spread_group->AllGather(record, counts, all);
    bool stopped = false;
    for (int item = first; item < end; ++item) {
      const Candidate& start = starts[static_cast<size_t>(item)];
      const auto at = std::find(fitted.begin(), fitted.end(), item);
      const int slot = at == fitted.end() ? -1 : static_cast<int>(at - fitted.begin());
      const double* entry = slot < 0 ? nullptr : all.data() + offsets[static_cast<size_t>(slot)];
      const int64_t computed_passes = slot < 0 ? 0 : static_cast<int64_t>(entry[3]);
      if (!stopped && !launch(start, item)) {
        if (slot == my_slot) passes_discarded_ += computed_passes;
        leave(start, item);
        continue;
      }
      if (slot < 0) {
        if (stopped) continue;
        take(LocalFit(start.n, start.index, ftol, max_iterations, nullptr, joined_status));
        stopped = summary_.stopped;
        continue;
      }
      GlobalMinimum minimum;
      minimum.status = ToString(static_cast<LevenbergMarquardtStatus>(entry[1]));
      minimum.iterations = static_cast<int>(entry[2]);
      minimum.passes = computed_passes;
      minimum.start = static_cast<int>(entry[4]);
      minimum.chi2 = entry[5];
      minimum.reduced = Eigen::Map<const Eigen::VectorXd>(entry + kHeader, map_size_);
      const bool finished = entry[0] == 1.0;
      const double* step = entry + kHeader + map_size_;
      for (int i = 0; finished && i < static_cast<int>(entry[6]); ++i, step += step_size) {
        const Eigen::VectorXd theta = Eigen::Map<const Eigen::VectorXd>(step + 3, dimensions());
        if (std::optional<GlobalMinimum> joined = JoinedMinimum(theta, step[2])) {
          minimum = JoinedFit(*joined, minimum.start, static_cast<int>(step[0]),
                              static_cast<int64_t>(step[1]), joined_status);
          break;
        }
      }
      ++summary_.local_fits;
      if (slot == my_slot) {
        passes_discarded_ += computed_passes - minimum.passes;
      } else {
        passes_elsewhere_ += minimum.passes;
      }
      stopped = stopped || !finished;
      if (!stopped) AddToTrail(minimum);
      take(std::move(minimum));
    }
    if (stopped) summary_.stopped = true;
    return end;
  }

  // Items per round of a stage: the ranks when spreading(), else 1.
  int round_size() const { return spreading() ? inputs_.spread_group->size() : 1; }

  // The distance of two physical points in the search's unit coordinates (max norm): what the
  // starts' separation, the same-minimum test and the joining of refinements measure.
  double UnitDistance(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const {
    return (space_.ToUnit(a) - space_.ToUnit(b)).cwiseAbs().maxCoeff();
  }
  // Whether the physical point n has every decade-spanning parameter (the search's log-scaled
  // axes: D0, gamma_dot_t0, ...) more than kInteriorMargin from its bounds in unit coordinates.
  // Such a parameter on a bound means the effect it scales has vanished (no flow, no decay);
  // the others (phi0, the offsets) reach their bounds wherever the data leave them loose.
  bool ScalesInsideBox(const Eigen::VectorXd& n) const {
    const Eigen::VectorXd unit = space_.ToUnit(n);
    for (int i = 0; i < dimensions(); ++i) {
      if (!space_.log_scale[static_cast<size_t>(i)] || !(space_.upper[i] > space_.lower[i])) {
        continue;
      }
      if (!(unit[i] > kInteriorMargin && unit[i] < 1.0 - kInteriorMargin)) return false;
    }
    return true;
  }
  // chi2 per degree of freedom of the data the search runs on now (dof() at least 1).
  double ReducedChi2(double chi2) const {
    return chi2 / static_cast<double>(std::max<int64_t>(dof(), 1));
  }

  // Whether two minima are the same one: chi2 within kSameMinimumChi2 (relative) and the
  // physical parameters within kSameMinimumDistance (unit coordinates, max norm).
  bool SameMinimum(const GlobalMinimum& a, const GlobalMinimum& b) const {
    const bool same_chi2 =
        std::abs(a.chi2 - b.chi2) <= kSameMinimumChi2 * std::max(a.chi2, b.chi2);
    if (!same_chi2) return false;
    return UnitDistance(Physical(a.reduced), Physical(b.reduced)) <= kSameMinimumDistance;
  }

  // Adds a minimum unless it is one already found (then keeps the lower chi2 of the two).
  void Record(GlobalMinimum minimum) {
    if (!std::isfinite(minimum.chi2)) return;
    for (GlobalMinimum& known : summary_.minima) {
      if (SameMinimum(known, minimum)) {
        const int reached_by = known.reached_by + minimum.reached_by;
        if (minimum.chi2 < known.chi2) known = std::move(minimum);
        known.reached_by = reached_by;
        return;
      }
    }
    summary_.minima.push_back(std::move(minimum));
  }

  // Progress, and whether to go on (false once stopped).
  bool Report(const char* stage, int index, int total) {
    GlobalSearchProgress progress;
    progress.stage = stage;
    progress.index = index;
    progress.total = total;
    progress.best_chi2 = std::min(best_seen_, BestChi2());
    progress.passes = passes();
    progress.batches = batches();
    progress.trail = &trail_;
    progress.seconds = std::chrono::duration<double>(Clock::now() - begin_).count();
    if (inputs_.on_progress && !inputs_.on_progress(progress)) summary_.stopped = true;
    return !summary_.stopped;
  }

  double BestChi2() const {
    double best = kInf;
    for (const GlobalMinimum& minimum : summary_.minima) best = std::min(best, minimum.chi2);
    return best;
  }

  // Passes computed in this run (on either level; spread work on every rank's), and replayed
  // from the trail.
  int64_t passes() const { return projected_.passes() + coarse_passes(); }
  int64_t replayed_passes() const { return replayed_passes_; }
  // Batches computed in this run: each level's passes times its batches.
  int64_t batches() const {
    return projected_.passes() * inputs_.data->num_batches() +
           (coarse_ ? coarse_passes() * coarse_data_->num_batches() : 0);
  }
  // The coarse level's passes of passes(): this rank's, the other ranks' spread work, less
  // the passes computed for nothing (0 without a coarse level).
  int64_t coarse_passes() const {
    return coarse_ ? coarse_->passes() + passes_elsewhere_ - passes_discarded_ : 0;
  }
  const GlobalSearchTrail& trail() const { return trail_; }
  // Of the data the search runs on now (the coarse level until RefineOnSearchData).
  int64_t residuals() const { return active_->num_residuals(); }
  int64_t dof() const { return active_->num_residuals() - map_size_; }
  // Whether the search runs on a coarse level (GlobalSearchInputs::coarse_data) now.
  bool on_coarse_level() const { return active_ != &projected_; }
  // From here on the search runs on the search data (after the coarse level's work).
  void RefineOnSearchData() {
    active_ = &projected_;
    best_seen_ = kInf;  // progress reports chi2 on the data evaluated now
  }
  AnalysisMode mode() const { return inputs_.data->model().mode(); }
  // The physical part of a reduced point.
  Eigen::VectorXd Physical(const Eigen::VectorXd& reduced) const {
    return active_->NonlinearPart(reduced);
  }
  // A minimum at n without a local fit (its best scaling from one pass), or the replayed one.
  GlobalMinimum Unrefined(const Eigen::VectorXd& n, double chi2) {
    if (std::optional<GlobalMinimum> replayed = ReplayedMinimum()) return *replayed;
    active_->set_linear_estimate(start_scaling_);
    const int64_t passes_before = active_->passes();
    GlobalMinimum minimum;
    minimum.reduced = active_->ReducedPoint(n);
    minimum.chi2 = chi2;
    minimum.status = "not refined";
    minimum.passes = active_->passes() - passes_before;
    AddToTrail(minimum);
    return minimum;
  }

  Eigen::VectorXd ClipToBox(const Eigen::VectorXd& n) const {
    return n.cwiseMax(space_.lower).cwiseMin(space_.upper);
  }

 private:
  // An iterate of a local fit where it could join a known minimum (JoinedMinimum): its start
  // (iteration 0) or an accepted step of a fit not yet ended, with the passes taken so far.
  struct FitStep {
    int iteration = 0;
    int64_t passes = 0;
    double chi2 = kInf;
    Eigen::VectorXd theta;
  };
  // A local fit's minimum, its LM status, and whether a signal stopped it (not finished).
  struct FinishedFit {
    GlobalMinimum minimum;
    LevenbergMarquardtStatus status = LevenbergMarquardtStatus::kNotRun;
    bool stopped = false;
  };

  // Whether the items of a stage are spread over ranks now: on the coarse level, with a
  // spread_group of several ranks (GlobalSearchInputs::spread_group).
  bool spreading() const {
    return inputs_.spread_group != nullptr && inputs_.spread_group->size() > 1 &&
           on_coarse_level();
  }
  // Every rank's `mine` (the same size on every rank), in rank order.
  std::vector<double> GatherRound(std::span<const double> mine) {
    ProcessGroup& group = *inputs_.spread_group;
    const std::vector<int> counts(static_cast<size_t>(group.size()), static_cast<int>(mine.size()));
    std::vector<double> all(mine.size() * counts.size());
    group.AllGather(mine, counts, all);
    return all;
  }

  // chi2 of the projected problem at n, one pass from the start's scaling: every evaluation is
  // independent of the ones before it, so they may run in any order or on any rank (+inf where
  // it is not finite).
  double Evaluate(const Eigen::VectorXd& n) {
    active_->set_linear_estimate(start_scaling_);
    const double chi2 = active_->Cost(n);
    return std::isfinite(chi2) ? chi2 : kInf;
  }

  // The projected local fit of LocalFit (not replayed, not recorded). Spread, its callback
  // watches this rank's signal only (the other ranks are at other points of their own fits).
  // joined_status: non-null = stop once joined (JoinedMinimum; recorded as JoinedFit says).
  // steps: non-null = run to the end, listing every iterate where it could join instead.
  FinishedFit FitLocally(const Eigen::VectorXd& n, int start_index, double ftol,
                         int max_iterations, const Eigen::VectorXd* scaling,
                         const char* joined_status, std::vector<FitStep>* steps) {
    active_->set_linear_estimate(scaling != nullptr ? (*scaling)(active_->linear_indices())
                                                    : start_scaling_);
    const int64_t passes_before = active_->passes();
    LevenbergMarquardtOptions options = active_->LocalFitOptions(inputs_.local);
    options.ftol = ftol;
    if (max_iterations > 0) {
      options.max_iterations = std::min(options.max_iterations, max_iterations);
    }
    if (spreading()) {
      options.callback = [this](const LevenbergMarquardtIteration&) {
        return !inputs_.stop_requested_here();
      };
    }
    // A fit that has joined a minimum found before it stops there (JoinedMinimum).
    std::optional<GlobalMinimum> joined;
    FitStep joined_at;
    if (joined_status != nullptr || steps != nullptr) {
      options.callback = [this, &joined, &joined_at, steps, passes_before,
                          watch_signal = spreading()](const LevenbergMarquardtIteration& step) {
        if (watch_signal && inputs_.stop_requested_here()) return false;
        if (step.ended_fit) return true;  // an ended fit is not stopped (its own minimum)
        if (step.iteration > 0 && !step.step_accepted) return true;  // the point did not move
        const FitStep here{step.iteration, active_->passes() - passes_before, step.chi2, {}};
        if (steps != nullptr) {
          steps->push_back(here);
          steps->back().theta = step.theta;
          return true;
        }
        joined = JoinedMinimum(step.theta, step.chi2);
        if (joined) joined_at = here;
        return !joined.has_value();
      };
    }
    // The statistical hold (levenberg_marquardt.h) only matters for the fit that is reported: in
    // a false minimum it would hold a search's local fit for dozens of iterations. The final fit
    // applies it.
    options.statistical_tolerance = 0.0;
    const LevenbergMarquardtSummary fit = Minimize(options, *active_, n);
    FinishedFit result;
    result.status = fit.status;
    if (fit.status == LevenbergMarquardtStatus::kStoppedByCallback && joined) {
      result.minimum = JoinedFit(*joined, start_index, joined_at.iteration, joined_at.passes,
                                 joined_status);
      return result;
    }
    result.stopped = fit.status == LevenbergMarquardtStatus::kStoppedByCallback;
    result.minimum.reduced = active_->ReducedPoint(fit.theta);
    result.minimum.chi2 = std::isfinite(fit.final_chi2) ? fit.final_chi2 : kInf;
    result.minimum.start = start_index;
    result.minimum.iterations = fit.iterations;
    result.minimum.status = std::string(ToString(fit.status));
    result.minimum.passes = active_->passes() - passes_before;
    return result;
  }

  // The minimum already found (summary_.minima) that a fit at n with chi2 has joined, if any:
  // n within kJoinDistance of it (max norm, unit coordinates) and chi2 above its chi2 by at
  // most kDegenerateChi2 units of its reduced chi2, the difference the data cannot tell from 0.
  // A fit still below it is not stopped: it may end in a better minimum.
  std::optional<GlobalMinimum> JoinedMinimum(const Eigen::VectorXd& n, double chi2) const {
    if (!std::isfinite(chi2)) return std::nullopt;
    for (const GlobalMinimum& known : summary_.minima) {
      const double gap = chi2 - known.chi2;
      if (!(gap >= 0.0 && gap <= kDegenerateChi2 * ReducedChi2(known.chi2))) continue;
      if (UnitDistance(n, Physical(known.reduced)) <= kJoinDistance) return known;
    }
    return std::nullopt;
  }

  // A fit that joined `known` at an iterate: finished, recorded as the minimum it joined, with
  // its own start, iterations and passes, and `status`.
  static GlobalMinimum JoinedFit(const GlobalMinimum& known, int start_index, int iterations,
                                 int64_t passes, const char* status) {
    GlobalMinimum minimum = known;
    minimum.start = start_index;
    minimum.iterations = iterations;
    minimum.status = status;
    minimum.passes = passes;
    minimum.reached_by = 1;
    return minimum;
  }

  // The next replayed minimum, if the replay has one left (its passes count as replayed).
  std::optional<GlobalMinimum> ReplayedMinimum() {
    if (replayed_minima_ >= inputs_.replay.minima.size()) return std::nullopt;
    const GlobalMinimum& minimum = inputs_.replay.minima[replayed_minima_++];
    replayed_passes_ += minimum.passes;
    return minimum;
  }
  // The trail's projection_state is the last evaluation's scaling, as checkpoints have always
  // held it; the search itself no longer reads it back (every evaluation starts from the
  // start's scaling, Evaluate).
  void AddToTrail(const GlobalMinimum& minimum) {
    trail_.minima.push_back(minimum);
    trail_.projection_state = active_->linear_estimate();
  }
  void AddToTrail(double evaluation) {
    trail_.evaluations.push_back(evaluation);
    trail_.projection_state = active_->linear_estimate();
  }

  // D_offset and gamma_dot_t_offset are searched in symmetric log coordinates: their bounds
  // straddle 0 and are wide ([-1e5, 1e5], [-0.1, 0.1]), but the values that matter are of the
  // order of D0 and gamma_dot_t0, which span decades; linearly, almost every sample would be a
  // huge offset (a negative shear rate is floored: the whole "no flow" plateau). The linear
  // width is the companion's lower bound (else 1e-6 of the bound).
  void UseSymmetricLogForOffsets() {
    const std::pair<const char*, const char*> offsets[] = {{"D_offset", "D0"},
                                                           {"gamma_dot_t_offset", "gamma_dot_t0"}};
    for (const auto& [offset, companion] : offsets) {
      const auto at = std::find(names_.begin(), names_.end(), offset);
      if (at == names_.end()) continue;
      const int i = static_cast<int>(at - names_.begin());
      if (!(space_.lower[i] < 0.0 && space_.upper[i] > 0.0)) continue;
      double width = 1e-6 * std::max(-space_.lower[i], space_.upper[i]);
      const auto partner = std::find(names_.begin(), names_.end(), companion);
      if (partner != names_.end()) {
        const double partner_lower = space_.lower[static_cast<int>(partner - names_.begin())];
        if (partner_lower > 0.0) width = partner_lower;
      }
      space_.UseSymmetricLog(i, width);
    }
    // The other modes' decade-spanning parameters, as their catalog entries say
    // (ParameterDefinition::search_width).
    for (size_t i = 0; i < names_.size(); ++i) {
      const ParameterDefinition* definition = FindParameterDefinition(names_[i]);
      if (definition == nullptr || !(definition->search_width > 0.0)) continue;
      const int index = static_cast<int>(i);
      if (!(space_.upper[index] > space_.lower[index])) continue;
      space_.UseSymmetricLog(index, definition->search_width);
    }
  }

  const GlobalSearchInputs& inputs_;
  BatchedObjective* coarse_data_;  // null: one level
  GlobalSearchSummary& summary_;
  VariableProjectionProblem projected_;         // on the search data (inputs.data)
  std::optional<VariableProjectionProblem> coarse_;  // on inputs.coarse_data, when given
  VariableProjectionProblem* active_ = &projected_;  // where evaluations run now
  int map_size_;  // reduced parameters (for the degrees of freedom)
  Clock::time_point begin_ = Clock::now();  // for GlobalSearchProgress::seconds only
  SearchSpace space_;
  std::vector<std::string> names_;
  Eigen::VectorXd start_;
  double best_seen_ = kInf;  // lowest chi2 screened (progress only)
  GlobalSearchTrail trail_;  // the replay, then what this run computed
  size_t replayed_evaluations_ = 0;
  size_t replayed_minima_ = 0;
  int64_t replayed_passes_ = 0;
  Eigen::VectorXd start_scaling_;  // the start's linear part: where every evaluation starts
  int64_t passes_elsewhere_ = 0;   // coarse-level passes of items other ranks computed (spread)
  // Coarse-level passes this rank computed for nothing (spread): a start declined after it was
  // fitted, a fit's passes past the iterate where it joined (LocalFitRound).
  int64_t passes_discarded_ = 0;
};

// Candidates ranked by chi2 (ties by screening order, so the ranking is deterministic).
void RankByChi2(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.chi2 < b.chi2; });
}

// Minima lowest chi2 first (ties keep their order, so the ranking is deterministic).
void SortByChi2(std::vector<GlobalMinimum>& minima) {
  std::stable_sort(minima.begin(), minima.end(),
                   [](const GlobalMinimum& a, const GlobalMinimum& b) { return a.chi2 < b.chi2; });
}

// Screens every candidate in order (one pass each; a round of them at a time when spread over
// ranks); false when stopped.
bool ScreenAll(Search& search, std::vector<Candidate>& candidates, GlobalSearchSummary& summary) {
  const int total = static_cast<int>(candidates.size());
  for (int first = 0; first < total;) {
    const int last = std::min(first + search.round_size(), total);
    search.ScreenRound(candidates, first, last);
    summary.candidates += last - first;
    if (!search.Report("screening", last, total)) return false;
    first = last;
  }
  return true;
}

// The staged grid of method auto: decades of every decade-spanning parameter (D0,
// gamma_dot_t0), kPhi0Values of phi0, every other parameter at 0 (or the start when 0 is out
// of its bounds).
std::vector<Eigen::VectorXd> StagedGrid(const Search& search) {
  const SearchSpace& space = search.space();
  std::vector<std::vector<double>> axes;
  for (int i = 0; i < space.dimensions(); ++i) {
    std::vector<double> values;
    const double lower = space.lower[i];
    const double upper = space.upper[i];
    if (space.log_scale[static_cast<size_t>(i)]) {
      const int steps =
          search.names()[static_cast<size_t>(i)] == "gamma_dot_t0" ? kStepsPerDecadeGammaDot : 1;
      const int first = static_cast<int>(std::ceil(steps * std::log10(lower) - 1e-9));
      const int last = static_cast<int>(std::floor(steps * std::log10(upper) + 1e-9));
      const int count = last - first + 1;
      const int kept = std::min(count, steps * kMaxDecades);
      for (int j = 0; j < kept; ++j) {
        const int exponent = kept == 1 ? first : first + (j * (count - 1)) / (kept - 1);
        values.push_back(std::pow(10.0, static_cast<double>(exponent) / steps));
      }
    } else if (search.names()[static_cast<size_t>(i)] == "phi0" && lower < upper) {
      for (int j = 0; j < kPhi0Values; ++j) {
        values.push_back(lower + (j + 0.5) / kPhi0Values * (upper - lower));
      }
    } else if (const ParameterDefinition* definition =
                   FindParameterDefinition(search.names()[static_cast<size_t>(i)]);
               definition != nullptr) {
      // Catalog hints of the other modes (ParameterDefinition): decades of an amplitude from
      // its search width up to the upper bound, or its staged values.
      if (definition->staged_decades && definition->search_width > 0.0) {
        const double first = std::max(definition->search_width, lower);
        for (double value = first; value <= upper * (1.0 + 1e-12) && static_cast<int>(values.size()) < kMaxDecades;
             value *= 10.0) {
          values.push_back(std::min(value, upper));
        }
      } else {
        for (double value : definition->staged_values) {
          if (lower <= value && value <= upper) values.push_back(value);
        }
      }
    }
    // The rest at a neutral value (the staged start: "the rest 0"), 0 where the bounds
    // allow: a start the user did not tune (a random one, D_offset -7e4) must not carry into
    // every candidate. The start itself is always fitted too.
    if (values.empty()) values.push_back(lower <= 0.0 && upper >= 0.0 ? 0.0 : search.start()[i]);
    axes.push_back(std::move(values));
  }
  std::vector<Eigen::VectorXd> grid(1, search.start());
  for (int i = 0; i < space.dimensions(); ++i) {
    std::vector<Eigen::VectorXd> extended;
    for (const Eigen::VectorXd& point : grid) {
      for (double value : axes[static_cast<size_t>(i)]) {
        Eigen::VectorXd next = point;
        next[i] = value;
        extended.push_back(std::move(next));
      }
    }
    grid = std::move(extended);
  }
  return grid;
}

// The start (screening index 0), then the staged grid.
std::vector<Candidate> StagedCandidates(const Search& search) {
  std::vector<Candidate> candidates;
  candidates.push_back({search.start(), kInf, 0});
  for (Eigen::VectorXd& n : StagedGrid(search)) {
    candidates.push_back({std::move(n), kInf, static_cast<int>(candidates.size())});
  }
  return candidates;
}

// Sampled points in the box.
std::vector<Eigen::VectorXd> SampledPoints(const Search& search, SamplingStrategy strategy, int n,
                                           uint64_t seed) {
  std::vector<Eigen::VectorXd> points;
  for (const Eigen::VectorXd& unit : SampleUnitCube(strategy, n, search.dimensions(), seed)) {
    points.push_back(search.space().FromUnit(unit));
  }
  return points;
}

// The local fits of a screened list: the candidates at `fixed` screening indices first (the
// user's start, custom starts), then the best-ranked others, each at least kMinStartSeparation
// from those already chosen, until `count` more are chosen.
std::vector<Candidate> ChooseStarts(std::vector<Candidate> screened, const std::vector<int>& fixed,
                                    int count, const Search& search) {
  std::vector<Candidate> chosen;
  for (const Candidate& candidate : screened) {
    if (std::find(fixed.begin(), fixed.end(), candidate.index) != fixed.end()) {
      chosen.push_back(candidate);
    }
  }
  RankByChi2(screened);
  int added = 0;
  for (const Candidate& candidate : screened) {
    if (added >= count) break;
    if (!std::isfinite(candidate.chi2)) break;
    if (std::find(fixed.begin(), fixed.end(), candidate.index) != fixed.end()) continue;
    bool separate = true;
    for (const Candidate& other : chosen) {
      separate = separate && search.UnitDistance(candidate.n, other.n) >= kMinStartSeparation;
    }
    if (!separate) continue;
    chosen.push_back(candidate);
    ++added;
  }
  return chosen;
}

// How FitFrom runs its fits: max_iterations as LocalFit; joined_status non-null = a fit stops
// once it joins a minimum found before it (counted in joined_counter); launch(start, position
// in the starts) = whether to fit a start, asked in order once the fits before it are recorded
// (null: every start; it must not change anything: it is asked again), and left_out(position)
// for each start it declined.
struct FitRules {
  int max_iterations = 0;
  const char* stage = "local fit";
  int* fits_counter = nullptr;
  const char* joined_status = nullptr;
  int* joined_counter = nullptr;
  std::function<bool(const Candidate&, int position)> launch;
  std::function<void(int position)> left_out;
};

// Local fits from the starts, in order, reported as `rules.stage`; false when stopped.
bool FitFrom(Search& search, const std::vector<Candidate>& starts, double ftol,
             const FitRules& rules = {}) {
  const int total = static_cast<int>(starts.size());
  const auto launch = [&rules](const Candidate& start, int item) {
    return !rules.launch || rules.launch(start, item);
  };
  const auto take = [&search, &rules](GlobalMinimum minimum) {
    if (rules.fits_counter != nullptr) ++*rules.fits_counter;
    if (rules.joined_counter != nullptr && rules.joined_status != nullptr &&
        minimum.status == rules.joined_status) {
      ++*rules.joined_counter;
    }
    search.Record(std::move(minimum));
  };
  const auto leave = [&rules](const Candidate&, int item) {
    if (rules.left_out) rules.left_out(item);
  };
  for (int first = 0; first < total;) {
    const int next = search.LocalFitRound(starts, first, ftol, rules.max_iterations,
                                          rules.joined_status, launch, take, leave);
    if (!search.Report(rules.stage, next, total)) return false;
    first = next;
  }
  return true;
}

// Whether method auto fits the ranked start at `rank` (0 = the best screened; kAutoArrivals,
// kAutoReserveFits): one of the first `ranked` while the lowest minimum found so far has been
// reached from fewer than kAutoArrivals starts or has a decade-spanning parameter on a bound,
// or while the start's screened chi2 is within kRefineWindow reduced chi2 of that minimum's; one
// of the reserve after them only while that minimum has a decade-spanning parameter on a bound.
bool WorthFitting(const Search& search, const GlobalSearchSummary& summary,
                  const Candidate& start, int rank, int ranked) {
  const GlobalMinimum* best = nullptr;
  for (const GlobalMinimum& minimum : summary.minima) {
    if (best == nullptr || minimum.chi2 < best->chi2) best = &minimum;
  }
  if (best == nullptr) return rank < ranked;
  const bool trapped = !search.ScalesInsideBox(search.Physical(best->reduced));
  if (rank >= ranked) return trapped;
  if (best->reached_by < kAutoArrivals || trapped) return true;
  return start.chi2 <= best->chi2 + kRefineWindow * search.ReducedChi2(best->chi2);
}

// The best stage.from_minima distinct minima found so far, each moved by each of the stage's
// moves (a parameter the search does not hold, being fixed, is left as it is), in a fixed order:
// best minimum first, moves in catalog order; a start equal to an earlier one is left out.
std::vector<Candidate> MovedStarts(const Search& search, const GlobalSearchSummary& summary,
                                   const SearchMoveStage& stage) {
  std::vector<GlobalMinimum> best = summary.minima;
  SortByChi2(best);
  best.resize(std::min(best.size(), static_cast<size_t>(std::max(stage.from_minima, 0))));
  const auto index_of = [&search](std::string_view name) -> int {
    const auto at = std::find(search.names().begin(), search.names().end(), name);
    return at == search.names().end() ? -1 : static_cast<int>(at - search.names().begin());
  };
  std::vector<Candidate> starts;
  for (const GlobalMinimum& minimum : best) {
    for (const SearchMove& move : stage.moves) {
      Eigen::VectorXd n = search.Physical(minimum.reduced);
      for (const auto& [first, second] : move.swapped) {
        const int i = index_of(first);
        const int j = index_of(second);
        if (i >= 0 && j >= 0) std::swap(n[i], n[j]);
      }
      for (const auto& [name, value] : move.reset) {
        if (const int i = index_of(name); i >= 0) n[i] = value;
      }
      n = search.ClipToBox(n);
      const bool repeated = std::any_of(starts.begin(), starts.end(),
                                        [&n](const Candidate& start) { return start.n == n; });
      if (!repeated) starts.push_back({n, kInf, minimum.start});
    }
  }
  return starts;
}

// With a coarse level: the distinct coarse minima within kRefineWindow reduced chi2 of the best
// (at most `count`, the best first), each refined by a local fit on the search data from its
// reduced point (its scaling too). They replace the coarse minima in summary.minima. A
// refinement that joins a minimum refined before it stops there and counts as that minimum
// (Search::JoinedMinimum).
void RefineCoarseMinima(Search& search, const NlsqOptions& nlsq, int count,
                        GlobalSearchSummary& summary) {
  std::vector<GlobalMinimum> coarse = summary.minima;
  SortByChi2(coarse);
  if (coarse.empty()) return;
  const double reduced = search.ReducedChi2(coarse.front().chi2);
  const double limit = coarse.front().chi2 + kRefineWindow * reduced;
  std::vector<GlobalMinimum> chosen;
  for (const GlobalMinimum& minimum : coarse) {
    if (static_cast<int>(chosen.size()) >= count || !(minimum.chi2 <= limit)) break;
    chosen.push_back(minimum);
  }
  search.RefineOnSearchData();
  summary.minima.clear();
  for (size_t i = 0; i < chosen.size(); ++i) {
    ++summary.refined_fits;
    GlobalMinimum refined = search.LocalFit(search.Physical(chosen[i].reduced), chosen[i].start,
                                            nlsq.tolerance, 0, &chosen[i].reduced, kJoinedStatus);
    if (refined.status == kJoinedStatus) ++summary.joined_refinements;
    refined.reached_by = chosen[i].reached_by;
    search.Record(std::move(refined));
    if (!search.Report("refine", static_cast<int>(i) + 1, static_cast<int>(chosen.size()))) {
      return;
    }
  }
}

void RunAuto(Search& search, const NlsqOptions& nlsq, GlobalSearchSummary& summary) {
  // Per kAutoDimensionsPerUnit dimensions (rounded up) of the search, one unit of Sobol points and
  // local fits: the homodyne modes (3 or 7 dimensions) get one, two_component's 14 two.
  const int units = (search.dimensions() + kAutoDimensionsPerUnit - 1) / kAutoDimensionsPerUnit;
  std::vector<Candidate> candidates = StagedCandidates(search);
  for (Eigen::VectorXd& n : SampledPoints(search, SamplingStrategy::kSobol,
                                          units * kAutoSobolPoints, nlsq.multi_start.seed)) {
    candidates.push_back({std::move(n), kInf, static_cast<int>(candidates.size())});
  }
  if (!ScreenAll(search, candidates, summary)) return;
  // The user's start (screening index 0) first, then the ranked ones while they are worth it.
  FitRules rules;
  rules.joined_status = kJoinedFoundStatus;
  rules.joined_counter = &summary.joined_local_fits;
  // position - 1: the rank after the user's start.
  rules.launch = [&search, &summary, units](const Candidate& start, int position) {
    return start.index == 0 ||
           WorthFitting(search, summary, start, position - 1, units * kAutoLocalFits);
  };
  rules.left_out = [&summary, units](int position) {
    if (position - 1 < units * kAutoLocalFits) ++summary.skipped_starts;  // not the reserve
  };
  if (!FitFrom(search, ChooseStarts(candidates, {0}, units * (kAutoLocalFits + kAutoReserveFits), search),
               nlsq.tolerance, rules)) {
    return;
  }
  for (const SearchMoveStage& stage : DefinitionOf(search.mode()).search_moves) {
    FitRules moved;
    moved.max_iterations = stage.max_iterations;
    moved.stage = "moved fit";
    moved.fits_counter = &summary.moved_fits;
    if (!FitFrom(search, MovedStarts(search, summary, stage), nlsq.tolerance, moved)) return;
  }
  if (search.on_coarse_level()) {
    RefineCoarseMinima(search, nlsq, units * kAutoRefinements, summary);
  }
}

void RunMultiStart(Search& search, const NlsqOptions& nlsq, GlobalSearchSummary& summary) {
  const MultiStartOptions& options = nlsq.multi_start;
  std::vector<Candidate> candidates;
  std::vector<int> always;  // the user's start and the custom starts are always fitted
  candidates.push_back({search.start(), kInf, 0});
  always.push_back(0);
  for (const std::vector<double>& custom : options.custom_starts) {
    // custom starts are physical vectors in the mode's order; the search may hold fewer
    // parameters (fixed_parameters), matched by name.
    Eigen::VectorXd n = search.start();
    const std::vector<std::string>& names = PhysicalParameterNames(search.mode());
    for (size_t i = 0; i < search.names().size(); ++i) {
      const auto at = std::find(names.begin(), names.end(), search.names()[i]);
      if (at != names.end() && static_cast<size_t>(at - names.begin()) < custom.size()) {
        n[static_cast<Eigen::Index>(i)] = custom[static_cast<size_t>(at - names.begin())];
      }
    }
    always.push_back(static_cast<int>(candidates.size()));
    candidates.push_back({search.ClipToBox(n), kInf, static_cast<int>(candidates.size())});
  }
  for (Eigen::VectorXd& n :
       SampledPoints(search, options.sampling_strategy, options.n_starts, options.seed)) {
    candidates.push_back({std::move(n), kInf, static_cast<int>(candidates.size())});
  }
  int sampled_kept = options.n_starts;
  if (options.use_screening) {
    if (!ScreenAll(search, candidates, summary)) return;
    sampled_kept =
        std::max(1, static_cast<int>(std::ceil(options.screen_keep_fraction * options.n_starts)));
  } else {
    summary.candidates = static_cast<int>(candidates.size());
  }
  std::vector<Candidate> starts = ChooseStarts(candidates, always, sampled_kept, search);
  if (!options.use_screening) starts = candidates;  // every start, in order
  if (!FitFrom(search, starts, nlsq.tolerance)) return;
  // The best refine_top_k minima continue with refinement_ftol.
  std::vector<GlobalMinimum> best = summary.minima;
  SortByChi2(best);
  best.resize(std::min(best.size(), static_cast<size_t>(options.refine_top_k)));
  for (size_t i = 0; i < best.size(); ++i) {
    GlobalMinimum refined = search.LocalFit(search.ClipToBox(search.Physical(best[i].reduced)),
                                            best[i].start, options.refinement_ftol);
    search.Record(std::move(refined));
    if (!search.Report("refine", static_cast<int>(i) + 1, static_cast<int>(best.size()))) return;
  }
}

// The preset's budget (ours; the reference's presets tune its JAX batching instead).
CmaesOptions CmaesPresetOptions(const CmaesSearchOptions& config, int dimensions, uint64_t seed) {
  CmaesOptions options;
  const int default_popsize = std::max(
      5, 4 + static_cast<int>(std::floor(3.0 * std::log(static_cast<double>(dimensions)))));
  switch (config.preset) {
    case CmaesPreset::kCmaesFast:
      options.max_restarts = 0;
      options.max_evaluations = 600;
      break;
    case CmaesPreset::kCmaes:
      options.max_restarts = 2;
      options.max_evaluations = 2000;
      break;
    case CmaesPreset::kCmaesGlobal:
      options.max_restarts = 9;
      options.max_evaluations = 5000;
      break;
    case CmaesPreset::kCmaesHpc:
      options.max_restarts = 9;
      options.popsize = 2 * default_popsize;
      options.max_evaluations = 20000;
      break;
  }
  if (config.popsize) options.popsize = std::max(*config.popsize, 5);
  if (config.max_generations) options.max_generations = *config.max_generations;
  if (config.max_restarts) options.max_restarts = *config.max_restarts;
  options.sigma = std::min(config.sigma, 1.0);
  options.tol_fun = config.tol_fun;
  options.tol_x = config.tol_x;
  options.restart_strategy = config.restart_strategy;
  options.seed = seed;
  return options;
}

void RunCmaes(Search& search, const NlsqOptions& nlsq, GlobalSearchSummary& summary) {
  const CmaesOptions options =
      CmaesPresetOptions(nlsq.cmaes, search.dimensions(), nlsq.multi_start.seed);
  std::string error;
  if (!options.IsValid(&error)) throw ConfigError(error);
  // The warm start (the reference's sigma_warmstart): the staged grid's best candidate. The
  // true laminar basin is narrow in gamma_dot_t0 (the sinc^2 factor oscillates with the flow
  // phase), so a blind CMA-ES run seldom lands in it; from a screened start it does.
  std::vector<Candidate> candidates = StagedCandidates(search);
  if (!ScreenAll(search, candidates, summary)) return;
  RankByChi2(candidates);

  // CMA-ES sees chi2 per residual (about the reduced chi2: 1 at a good optimum), so that its
  // absolute tol_fun means the same whatever the data size.
  const double per_residual = 1.0 / static_cast<double>(std::max<int64_t>(search.residuals(), 1));
  const auto chi2 = [&search, per_residual](const Eigen::VectorXd& unit) {
    return search.Screen(search.space().FromUnit(unit)) * per_residual;
  };
  const auto on_generation = [&search](const CmaesProgress& progress) {
    return search.Report("cmaes", progress.generation, 0);
  };
  // One warm run (a fifth of the budget, no restarts), then the configured runs from the start.
  CmaesOptions warm = options;
  warm.restart_strategy = CmaesRestartStrategy::kNone;
  warm.sigma = nlsq.cmaes.sigma_warmstart;
  if (options.max_evaluations > 0)
    warm.max_evaluations = std::max<int64_t>(options.max_evaluations / 5, 1);
  const CmaesResult warm_result = MinimizeWithCmaes(
      chi2, search.dimensions(), search.space().ToUnit(candidates.front().n), warm, on_generation);
  CmaesResult global_result;
  if (!summary.stopped) {
    CmaesOptions rest = options;
    if (options.max_evaluations > 0) {
      rest.max_evaluations =
          std::max<int64_t>(options.max_evaluations - warm_result.evaluations, 1);
    }
    global_result = MinimizeWithCmaes(chi2, search.dimensions(),
                                      search.space().ToUnit(search.start()), rest, on_generation);
  }
  summary.generations = warm_result.generations + global_result.generations;
  summary.cmaes_runs = static_cast<int>(warm_result.runs.size() + global_result.runs.size());
  if (summary.stopped) return;
  // Each run's best point, best first; a local fit from the best refine_top_k.
  std::vector<CmaesRunResult> runs = warm_result.runs;
  runs.insert(runs.end(), global_result.runs.begin(), global_result.runs.end());
  std::stable_sort(runs.begin(), runs.end(), [](const CmaesRunResult& a, const CmaesRunResult& b) {
    return a.best_value < b.best_value;
  });
  std::vector<Candidate> starts;
  for (const CmaesRunResult& run : runs) {
    if (run.best_unit.size() == 0 || !std::isfinite(run.best_value)) continue;
    starts.push_back({search.space().FromUnit(run.best_unit), run.best_value / per_residual, -1});
  }
  const size_t fits =
      nlsq.cmaes.refine_with_nlsq
          ? std::min(starts.size(), static_cast<size_t>(nlsq.multi_start.refine_top_k))
          : 0;
  for (size_t i = 0; i < fits; ++i) {
    search.Record(search.LocalFit(starts[i].n, -1, nlsq.tolerance));
    if (!search.Report("local fit", static_cast<int>(i) + 1, static_cast<int>(fits))) return;
  }
  if (fits == 0) {
    // Not refined here: the final fit starts at each run's best point with its best scaling.
    for (const Candidate& start : starts) search.Record(search.Unrefined(start.n, start.chi2));
  }
}

// Degeneracy warnings (reference: solutions within degeneracy_threshold relative chi2).
void WarnAboutDegenerateMinima(const Search& search, double threshold,
                               GlobalSearchSummary& summary) {
  if (summary.minima.size() < 2) return;
  const GlobalMinimum& best = summary.minima.front();
  const int d = search.dimensions();
  for (size_t i = 1; i < summary.minima.size(); ++i) {
    const GlobalMinimum& other = summary.minima[i];
    const double relative = (other.chi2 - best.chi2) / std::max(best.chi2, 1e-300);
    if (relative > threshold) continue;
    // And statistically alike: with 1e7 points every local minimum is within 10% of the best,
    // so the difference must also be within kDegenerateChi2 in units of the best reduced chi2.
    const double reduced = search.ReducedChi2(best.chi2);
    if (other.chi2 - best.chi2 > kDegenerateChi2 * reduced) continue;
    std::string differ;
    const Eigen::VectorXd best_physical = search.Physical(best.reduced);
    const Eigen::VectorXd other_physical = search.Physical(other.reduced);
    const Eigen::VectorXd a = search.space().ToUnit(best_physical);
    const Eigen::VectorXd b = search.space().ToUnit(other_physical);
    for (int j = 0; j < d; ++j) {
      if (std::abs(a[j] - b[j]) <= kSameMinimumDistance) continue;
      differ += (differ.empty() ? "" : ", ") + search.names()[static_cast<size_t>(j)] + " " +
                Format("%.4g", best_physical[j]) + " vs " + Format("%.4g", other_physical[j]);
    }
    summary.warnings.push_back(
        "degenerate minima: chi2 " + Format("%.8g", best.chi2) + " (chosen) and " +
        Format("%.8g", other.chi2) + " differ by " + Format("%.3g", 100.0 * relative) +
        "% (optimization.nlsq.multi_start.degeneracy_threshold " + Format("%g", threshold) +
        ", delta chi2 " + Format("%.3g", other.chi2 - best.chi2) + ") with different parameters (" +
        differ + "): the data may not separate them");
  }
}

}  // namespace

std::string GlobalSearchSummary::BriefReport() const {
  std::string line = "global search " + std::string(ToString(method)) + ": ";
  if (method == GlobalSearchMethod::kCmaes) {
    line += std::to_string(cmaes_runs) + " runs, " + std::to_string(generations) + " generations, ";
  } else {
    line += std::to_string(candidates) + " candidates screened, ";
  }
  line += std::to_string(local_fits) + " local fits, " + std::to_string(minima.size()) +
          " distinct minima";
  if (chosen >= 0) {
    line += ", chose chi2 " + Format("%.8g", minima[static_cast<size_t>(chosen)].chi2);
  }
  const auto points_text = [](int64_t points, int stride) {
    return std::to_string(points) + " points" +
           (stride > 1 ? " (every " + std::to_string(stride) + " rows)" : "");
  };
  line += ", " + std::to_string(passes) + " passes" +
          (replayed_passes > 0 ? " (" + std::to_string(replayed_passes) + " replayed)" : "");
  const std::string first_level =
      "screening " + std::to_string(screening_passes) + ", local fits " +
      std::to_string(local_fit_passes) +
      (joined_local_fits > 0 || skipped_starts > 0
           ? " (" + std::to_string(joined_local_fits) + " joined, " +
                 std::to_string(skipped_starts) + " starts left out)"
           : "") +
      (moved_fits > 0
           ? ", " + std::to_string(moved_fits) + " moved fits " + std::to_string(moved_fit_passes)
           : "");
  if (coarse_points > 0) {
    line += ": " + first_level + " over " + points_text(coarse_points, coarse_row_stride) + ", " +
            std::to_string(refined_fits) + " refinements " + std::to_string(refine_passes) +
            (joined_refinements > 0 ? " (" + std::to_string(joined_refinements) + " joined)" : "") +
            " over " + points_text(search_points, row_stride);
  } else {
    line += " over " + points_text(search_points, row_stride) + ": " + first_level;
  }
  line += ", " + Format("%.2f", seconds) + " s" + (stopped ? ", stopped" : "");
  return line;
}

GlobalSearchSummary RunGlobalSearch(GlobalSearchMethod method, const NlsqOptions& nlsq,
                                    const GlobalSearchInputs& inputs) {
  const Clock::time_point begin = Clock::now();
  GlobalSearchSummary summary;
  summary.method = method;
  summary.search_points = inputs.data->num_points();
  BatchedObjective* coarse_data = method == GlobalSearchMethod::kAuto ? inputs.coarse_data : nullptr;
  Search search(inputs, coarse_data, summary);
  switch (method) {
    case GlobalSearchMethod::kAuto:
      RunAuto(search, nlsq, summary);
      break;
    case GlobalSearchMethod::kMultiStart:
      RunMultiStart(search, nlsq, summary);
      break;
    case GlobalSearchMethod::kCmaes:
      RunCmaes(search, nlsq, summary);
      break;
    case GlobalSearchMethod::kOff:
      throw std::invalid_argument("RunGlobalSearch: method " + std::string(ToString(method)));
  }
  SortByChi2(summary.minima);
  summary.chosen = summary.minima.empty() ? -1 : 0;
  WarnAboutDegenerateMinima(search, nlsq.multi_start.degeneracy_threshold, summary);
  summary.replayed_passes = search.replayed_passes();
  summary.trail = search.trail();
  // The trail holds every evaluation and every finished fit in order: the local fits, the moved
  // fits, the refinements (every one but the refinements on the coarse level, when there is one).
  summary.screening_passes = static_cast<int64_t>(summary.trail.evaluations.size());
  const size_t fits = summary.trail.minima.size();
  const size_t refined_from = fits - std::min(fits, static_cast<size_t>(summary.refined_fits));
  const size_t moved_from =
      refined_from - std::min(refined_from, static_cast<size_t>(summary.moved_fits));
  for (size_t i = 0; i < fits; ++i) {
    (i < moved_from     ? summary.local_fit_passes
     : i < refined_from ? summary.moved_fit_passes
                        : summary.refine_passes) += summary.trail.minima[i].passes;
  }
  summary.passes = search.passes() + summary.replayed_passes;
  summary.batches = search.batches();
  if (coarse_data != nullptr) {
    summary.coarse_points = coarse_data->num_points();
    const int64_t fine_passes = summary.refine_passes;
    summary.point_evaluations = (summary.passes - fine_passes) * summary.coarse_points +
                                fine_passes * inputs.data->num_points();
  } else {
    summary.point_evaluations = summary.passes * inputs.data->num_points();
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  return summary;
}

}  // namespace homodyne
