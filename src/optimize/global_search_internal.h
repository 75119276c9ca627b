// What the methods of the global phase share (docs/design.md section 4b): the projected problem in
// the unit box of the physical bounds with its counters, replay and trail (Search), the screened
// candidates, the staged grid, sampled points, the choice of the local fits' starts and the rounds
// that fit them. Private to src/optimize. global_search.cc holds this and the driver
// (RunGlobalSearch, global_search.h); each method is a file of its own:
//   global_search_auto.cc         RunAuto         method auto
//   global_search_multi_start.cc  RunMultiStart   method multi_start
//   global_search_cmaes.cc        RunCmaes        method cmaes
// Every method runs on one Search, adds its distinct minima to summary.minima through
// Search::Record and returns early once Search::Report says stop (summary.stopped); the driver
// then ranks the minima, chooses the best and fills the summary's counters from the trail.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"
#include "optimize/global_search.h"
#include "optimize/start_sampling.h"
#include "optimize/variable_projection.h"

namespace homodyne::global_search_internal {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Screened candidates closer than this (max norm, unit coordinates) to one already chosen for a
// local fit are passed over: the fits start in different places.
inline constexpr double kMinStartSeparation = 0.1;

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
  // coarse_data: the coarse level (method auto), or null. Throws ConfigError for a physical bound
  // that is not finite or inverted.
  Search(const GlobalSearchInputs& inputs, BatchedObjective* coarse_data,
         GlobalSearchSummary& summary);

  const SearchSpace& space() const { return space_; }
  const std::vector<std::string>& names() const { return names_; }
  const Eigen::VectorXd& start() const { return start_; }
  int dimensions() const { return space_.dimensions(); }

  // chi2 of the projected problem at n: one pass (+inf where it is not finite), or the replayed
  // value.
  double Screen(const Eigen::VectorXd& n);

  // Screens candidates [first, last) (Screen each; spread over the ranks when spreading()).
  void ScreenRound(std::vector<Candidate>& candidates, int first, int last);

  // A projected local fit from n with the given ftol (or the replayed one): its minimum.
  // max_iterations > 0 caps the fit's iterations below the search's own. scaling: where the
  // first evaluation takes the linear parameters from (a reduced point); null = the start's.
  // joined_status: non-null = the fit stops once it has joined a minimum found before it
  // (JoinedMinimum) and is recorded as that minimum with this status.
  GlobalMinimum LocalFit(const Eigen::VectorXd& n, int start_index, double ftol,
                         int max_iterations = 0, const Eigen::VectorXd* scaling = nullptr,
                         const char* joined_status = nullptr);

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
                    const std::function<void(const Candidate&, int item)>& leave);

  // Items per round of a stage: the ranks when spreading(), else 1.
  int round_size() const;

  // The distance of two physical points in the search's unit coordinates (max norm): what the
  // starts' separation, the same-minimum test and the joining of refinements measure.
  double UnitDistance(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const;
  // Whether the physical point n has every decade-spanning parameter (the search's log-scaled
  // axes) more than kInteriorMargin from its bounds in unit coordinates. Such a parameter on a
  // bound means the effect it scales has vanished (no flow, no decay); the others (angles,
  // offsets) reach their bounds wherever the data leave them loose.
  bool ScalesInsideBox(const Eigen::VectorXd& n) const;
  // chi2 per degree of freedom of the data the search runs on now (dof() at least 1).
  double ReducedChi2(double chi2) const;

  // Whether two minima are the same one: chi2 within kSameMinimumChi2 (relative) and the
  // physical parameters within kSameMinimumDistance (unit coordinates, max norm).
  bool SameMinimum(const GlobalMinimum& a, const GlobalMinimum& b) const;

  // Adds a minimum unless it is one already found (then keeps the lower chi2 of the two).
  void Record(GlobalMinimum minimum);

  // Progress, and whether to go on (false once stopped).
  bool Report(const char* stage, int index, int total);

  double BestChi2() const;

  // Passes computed in this run (on either level; spread work on every rank's), and replayed
  // from the trail.
  int64_t passes() const;
  int64_t replayed_passes() const { return replayed_passes_; }
  // Batches computed in this run: each level's passes times its batches.
  int64_t batches() const;
  // The coarse level's passes of passes(): this rank's, the other ranks' spread work, less
  // the passes computed for nothing (0 without a coarse level).
  int64_t coarse_passes() const;
  const GlobalSearchTrail& trail() const { return trail_; }
  // Of the data the search runs on now (the coarse level until RefineOnSearchData).
  int64_t residuals() const;
  int64_t dof() const;
  // Whether the search runs on a coarse level (GlobalSearchInputs::coarse_data) now.
  bool on_coarse_level() const { return active_ != &projected_; }
  // From here on the search runs on the search data (after the coarse level's work).
  void RefineOnSearchData();
  AnalysisMode mode() const;
  // The physical part of a reduced point.
  Eigen::VectorXd Physical(const Eigen::VectorXd& reduced) const;
  // A minimum at n without a local fit (its best scaling from one pass), or the replayed one.
  GlobalMinimum Unrefined(const Eigen::VectorXd& n, double chi2);

  Eigen::VectorXd ClipToBox(const Eigen::VectorXd& n) const;

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
  bool spreading() const;
  // Every rank's `mine` (the same size on every rank), in rank order.
  std::vector<double> GatherRound(std::span<const double> mine);

  // chi2 of the projected problem at n, one pass from the start's scaling: every evaluation is
  // independent of the ones before it, so they may run in any order or on any rank (+inf where
  // it is not finite).
  double Evaluate(const Eigen::VectorXd& n);

  // The projected local fit of LocalFit (not replayed, not recorded). Spread, its callback
  // watches this rank's signal only (the other ranks are at other points of their own fits).
  // joined_status: non-null = stop once joined (JoinedMinimum; recorded as JoinedFit says).
  // steps: non-null = run to the end, listing every iterate where it could join instead.
  FinishedFit FitLocally(const Eigen::VectorXd& n, int start_index, double ftol, int max_iterations,
                         const Eigen::VectorXd* scaling, const char* joined_status,
                         std::vector<FitStep>* steps);

  // The minimum already found (summary_.minima) that a fit at n with chi2 has joined, if any:
  // n within kJoinDistance of it (max norm, unit coordinates) and chi2 above its chi2 by at
  // most kDegenerateChi2 units of its reduced chi2, the difference the data cannot tell from 0.
  // A fit still below it is not stopped: it may end in a better minimum.
  std::optional<GlobalMinimum> JoinedMinimum(const Eigen::VectorXd& n, double chi2) const;

  // A fit that joined `known` at an iterate: finished, recorded as the minimum it joined, with
  // its own start, iterations and passes, and `status`.
  static GlobalMinimum JoinedFit(const GlobalMinimum& known, int start_index, int iterations,
                                 int64_t passes, const char* status);

  // The next replayed minimum, if the replay has one left (its passes count as replayed).
  std::optional<GlobalMinimum> ReplayedMinimum();
  // The trail's projection_state is the last evaluation's scaling, as checkpoints have always
  // held it; the search itself no longer reads it back (every evaluation starts from the
  // start's scaling, Evaluate).
  void AddToTrail(const GlobalMinimum& minimum);
  void AddToTrail(double evaluation);

  // The symmetric-logarithmic axes of the search space, as the parameters' catalog hints say
  // (ParameterSearchHints in src/model/mode_catalog.h: a fixed width, or the lower bound of a
  // companion parameter).
  void UseSymmetricLogAxes();

  const GlobalSearchInputs& inputs_;
  BatchedObjective* coarse_data_;  // null: one level
  GlobalSearchSummary& summary_;
  VariableProjectionProblem projected_;              // on the search data (inputs.data)
  std::optional<VariableProjectionProblem> coarse_;  // on inputs.coarse_data, when given
  VariableProjectionProblem* active_ = &projected_;  // where evaluations run now
  int map_size_;  // reduced parameters (for the degrees of freedom)
  std::chrono::steady_clock::time_point begin_ =
      std::chrono::steady_clock::now();  // for GlobalSearchProgress::seconds only
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
void RankByChi2(std::vector<Candidate>& candidates);

// Minima lowest chi2 first (ties keep their order, so the ranking is deterministic).
void SortByChi2(std::vector<GlobalMinimum>& minima);

// Screens every candidate in order (one pass each; a round of them at a time when spread over
// ranks); false when stopped.
bool ScreenAll(Search& search, std::vector<Candidate>& candidates, GlobalSearchSummary& summary);

// The start (screening index 0), then the staged grid: per parameter the values its catalog
// hints stage (ParameterSearchHints in src/model/mode_catalog.h: the decades of a logarithmic
// axis, values spread over an angle's bounds, an amplitude's decades, listed values), every other
// parameter at 0 (or the start when 0 is out of its bounds). Methods auto and cmaes.
std::vector<Candidate> StagedCandidates(const Search& search);

// n points sampled in the box (SampleUnitCube mapped by the search space).
std::vector<Eigen::VectorXd> SampledPoints(const Search& search, SamplingStrategy strategy, int n,
                                           uint64_t seed);

// The local fits of a screened list: the candidates at `fixed` screening indices first (the
// user's start, custom starts), then the best-ranked others, each at least kMinStartSeparation
// from those already chosen, until `count` more are chosen.
std::vector<Candidate> ChooseStarts(std::vector<Candidate> screened, const std::vector<int>& fixed,
                                    int count, const Search& search);

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
             const FitRules& rules = {});

// The methods (docs/design.md section 4b), each in its own file. Each leaves its minima in
// summary.minima (through search.Record) and its own counters in the summary; stopped early when
// search.Report says so.
// auto (global_search_auto.cc): the staged grid and Sobol points screened, ranked local fits with
// early stops, the mode's search moves, then with a coarse level the refinements on the search
// data.
void RunAuto(Search& search, const NlsqOptions& nlsq, GlobalSearchSummary& summary);
// multi_start (global_search_multi_start.cc): the reference's multi-start: the user's start,
// custom starts and sampled starts, screened or not, local fits, the best refined with
// refinement_ftol.
void RunMultiStart(Search& search, const NlsqOptions& nlsq, GlobalSearchSummary& summary);
// cmaes (global_search_cmaes.cc): a warm CMA-ES run from the staged grid's best candidate, the
// configured runs from the start, local fits from the best run points (or their points
// unrefined). Throws ConfigError for invalid CMA-ES options.
void RunCmaes(Search& search, const NlsqOptions& nlsq, GlobalSearchSummary& summary);

}  // namespace homodyne::global_search_internal
