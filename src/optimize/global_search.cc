// The global phase's shared machinery and its driver (src/optimize/global_search.h; the parts
// are listed in src/optimize/global_search_internal.h): Search, the staged grid, the choice and
// the rounds of local fits, the degeneracy warnings and RunGlobalSearch, which runs one method
// and fills the summary.
#include "optimize/global_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "model/mode_catalog.h"
#include "optimize/global_search_internal.h"
#include "optimize/start_sampling.h"
#include "optimize/variable_projection.h"

namespace homodyne {
namespace global_search_internal {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The staged grid: at most this many decades along a decade-spanning parameter (times its
// steps per decade, ParameterSearchHints::steps_per_decade).
constexpr int kMaxDecades = 7;
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
// Search::ScalesInsideBox: a decade-spanning parameter more than this from its bounds (unit
// coordinates) is inside the box (method auto's guard, global_search_auto.cc kAutoArrivals).
constexpr double kInteriorMargin = 1e-3;
// Two distinct minima are reported degenerate when their chi2 differ by less than
// degeneracy_threshold (relative, the reference's key) and by less than this many units of the
// best minimum's reduced chi2 (the data cannot tell them apart).
constexpr double kDegenerateChi2 = 4.0;

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// The staged grid of methods auto and cmaes (StagedCandidates), axis by axis as the parameters'
// catalog hints say (ParameterSearchHints, src/model/mode_catalog.h): the decades of every
// decade-spanning parameter (a logarithmic axis of the search space; steps_per_decade values per
// decade), spread_values values over an angle's bounds, the decades of an amplitude
// (staged_decades) or its staged_values; every other parameter at 0 (or the start when 0 is out
// of its bounds).
std::vector<Eigen::VectorXd> StagedGrid(const Search& search) {
  const SearchSpace& space = search.space();
  std::vector<std::vector<double>> axes;
  for (int i = 0; i < space.dimensions(); ++i) {
    std::vector<double> values;
    const double lower = space.lower[i];
    const double upper = space.upper[i];
    const ParameterDefinition* definition =
        FindParameterDefinition(search.names()[static_cast<size_t>(i)]);
    if (space.log_scale[static_cast<size_t>(i)]) {
      const int steps = definition != nullptr ? definition->search.steps_per_decade : 1;
      const int first = static_cast<int>(std::ceil(steps * std::log10(lower) - 1e-9));
      const int last = static_cast<int>(std::floor(steps * std::log10(upper) + 1e-9));
      const int count = last - first + 1;
      const int kept = std::min(count, steps * kMaxDecades);
      for (int j = 0; j < kept; ++j) {
        const int exponent = kept == 1 ? first : first + (j * (count - 1)) / (kept - 1);
        values.push_back(std::pow(10.0, static_cast<double>(exponent) / steps));
      }
    } else if (definition != nullptr && definition->search.spread_values > 0 && lower < upper) {
      const int spread = definition->search.spread_values;
      for (int j = 0; j < spread; ++j) {
        values.push_back(lower + (j + 0.5) / spread * (upper - lower));
      }
    } else if (definition != nullptr) {
      // Decades of an amplitude from its search width up to the upper bound, or its staged
      // values.
      const ParameterSearchHints& hints = definition->search;
      if (hints.staged_decades && hints.width > 0.0) {
        const double first = std::max(hints.width, lower);
        for (double value = first;
             value <= upper * (1.0 + 1e-12) && static_cast<int>(values.size()) < kMaxDecades;
             value *= 10.0) {
          values.push_back(std::min(value, upper));
        }
      } else {
        for (double value : hints.staged_values) {
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

Search::Search(const GlobalSearchInputs& inputs, BatchedObjective* coarse_data,
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
  UseSymmetricLogAxes();
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

double Search::Screen(const Eigen::VectorXd& n) {
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

void Search::ScreenRound(std::vector<Candidate>& candidates, int first, int last) {
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

GlobalMinimum Search::LocalFit(const Eigen::VectorXd& n, int start_index, double ftol,
                               int max_iterations, const Eigen::VectorXd* scaling,
                               const char* joined_status) {
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

int Search::LocalFitRound(const std::vector<Candidate>& starts, int first, double ftol,
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
    const FinishedFit fit = FitLocally(start.n, start.index, ftol, max_iterations, nullptr, nullptr,
                                       joined_status != nullptr ? &steps : nullptr);
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

int Search::round_size() const { return spreading() ? inputs_.spread_group->size() : 1; }

double Search::UnitDistance(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const {
  return (space_.ToUnit(a) - space_.ToUnit(b)).cwiseAbs().maxCoeff();
}

bool Search::ScalesInsideBox(const Eigen::VectorXd& n) const {
  const Eigen::VectorXd unit = space_.ToUnit(n);
  for (int i = 0; i < dimensions(); ++i) {
    if (!space_.log_scale[static_cast<size_t>(i)] || !(space_.upper[i] > space_.lower[i])) {
      continue;
    }
    if (!(unit[i] > kInteriorMargin && unit[i] < 1.0 - kInteriorMargin)) return false;
  }
  return true;
}

double Search::ReducedChi2(double chi2) const {
  return chi2 / static_cast<double>(std::max<int64_t>(dof(), 1));
}

bool Search::SameMinimum(const GlobalMinimum& a, const GlobalMinimum& b) const {
  const bool same_chi2 = std::abs(a.chi2 - b.chi2) <= kSameMinimumChi2 * std::max(a.chi2, b.chi2);
  if (!same_chi2) return false;
  return UnitDistance(Physical(a.reduced), Physical(b.reduced)) <= kSameMinimumDistance;
}

void Search::Record(GlobalMinimum minimum) {
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

bool Search::Report(const char* stage, int index, int total) {
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

double Search::BestChi2() const {
  double best = kInf;
  for (const GlobalMinimum& minimum : summary_.minima) best = std::min(best, minimum.chi2);
  return best;
}

int64_t Search::passes() const { return projected_.passes() + coarse_passes(); }

int64_t Search::batches() const {
  return projected_.passes() * inputs_.data->num_batches() +
         (coarse_ ? coarse_passes() * coarse_data_->num_batches() : 0);
}

int64_t Search::coarse_passes() const {
  return coarse_ ? coarse_->passes() + passes_elsewhere_ - passes_discarded_ : 0;
}

int64_t Search::residuals() const { return active_->num_residuals(); }

int64_t Search::dof() const { return active_->num_residuals() - map_size_; }

void Search::RefineOnSearchData() {
  active_ = &projected_;
  best_seen_ = kInf;  // progress reports chi2 on the data evaluated now
}

AnalysisMode Search::mode() const { return inputs_.data->model().mode(); }

Eigen::VectorXd Search::Physical(const Eigen::VectorXd& reduced) const {
  return active_->NonlinearPart(reduced);
}

GlobalMinimum Search::Unrefined(const Eigen::VectorXd& n, double chi2) {
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

Eigen::VectorXd Search::ClipToBox(const Eigen::VectorXd& n) const {
  return n.cwiseMax(space_.lower).cwiseMin(space_.upper);
}

bool Search::spreading() const {
  return inputs_.spread_group != nullptr && inputs_.spread_group->size() > 1 && on_coarse_level();
}

std::vector<double> Search::GatherRound(std::span<const double> mine) {
  ProcessGroup& group = *inputs_.spread_group;
  const std::vector<int> counts(static_cast<size_t>(group.size()), static_cast<int>(mine.size()));
  std::vector<double> all(mine.size() * counts.size());
  group.AllGather(mine, counts, all);
  return all;
}

double Search::Evaluate(const Eigen::VectorXd& n) {
  active_->set_linear_estimate(start_scaling_);
  const double chi2 = active_->Cost(n);
  return std::isfinite(chi2) ? chi2 : kInf;
}

Search::FinishedFit Search::FitLocally(const Eigen::VectorXd& n, int start_index, double ftol,
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
    result.minimum =
        JoinedFit(*joined, start_index, joined_at.iteration, joined_at.passes, joined_status);
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

std::optional<GlobalMinimum> Search::JoinedMinimum(const Eigen::VectorXd& n, double chi2) const {
  if (!std::isfinite(chi2)) return std::nullopt;
  for (const GlobalMinimum& known : summary_.minima) {
    const double gap = chi2 - known.chi2;
    if (!(gap >= 0.0 && gap <= kDegenerateChi2 * ReducedChi2(known.chi2))) continue;
    if (UnitDistance(n, Physical(known.reduced)) <= kJoinDistance) return known;
  }
  return std::nullopt;
}

GlobalMinimum Search::JoinedFit(const GlobalMinimum& known, int start_index, int iterations,
                                int64_t passes, const char* status) {
  GlobalMinimum minimum = known;
  minimum.start = start_index;
  minimum.iterations = iterations;
  minimum.status = status;
  minimum.passes = passes;
  minimum.reached_by = 1;
  return minimum;
}

std::optional<GlobalMinimum> Search::ReplayedMinimum() {
  if (replayed_minima_ >= inputs_.replay.minima.size()) return std::nullopt;
  const GlobalMinimum& minimum = inputs_.replay.minima[replayed_minima_++];
  replayed_passes_ += minimum.passes;
  return minimum;
}

void Search::AddToTrail(const GlobalMinimum& minimum) {
  trail_.minima.push_back(minimum);
  trail_.projection_state = active_->linear_estimate();
}

void Search::AddToTrail(double evaluation) {
  trail_.evaluations.push_back(evaluation);
  trail_.projection_state = active_->linear_estimate();
}

void Search::UseSymmetricLogAxes() {
  for (size_t i = 0; i < names_.size(); ++i) {
    const ParameterDefinition* definition = FindParameterDefinition(names_[i]);
    if (definition == nullptr) continue;
    const ParameterSearchHints& hints = definition->search;
    const int index = static_cast<int>(i);
    if (!hints.width_from.empty()) {
      if (!(space_.lower[index] < 0.0 && space_.upper[index] > 0.0)) continue;
      double width = 1e-6 * std::max(-space_.lower[index], space_.upper[index]);
      const auto companion = std::find(names_.begin(), names_.end(), hints.width_from);
      if (companion != names_.end()) {
        const double companion_lower = space_.lower[static_cast<int>(companion - names_.begin())];
        if (companion_lower > 0.0) width = companion_lower;
      }
      space_.UseSymmetricLog(index, width);
    } else if (hints.width > 0.0 && space_.upper[index] > space_.lower[index]) {
      space_.UseSymmetricLog(index, hints.width);
    }
  }
}

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

bool FitFrom(Search& search, const std::vector<Candidate>& starts, double ftol,
             const FitRules& rules) {
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

}  // namespace global_search_internal

using global_search_internal::Clock;
using global_search_internal::Format;
using global_search_internal::RunAuto;
using global_search_internal::RunCmaes;
using global_search_internal::RunMultiStart;
using global_search_internal::Search;
using global_search_internal::SortByChi2;
using global_search_internal::WarnAboutDegenerateMinima;

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
  BatchedObjective* coarse_data =
      method == GlobalSearchMethod::kAuto ? inputs.coarse_data : nullptr;
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
