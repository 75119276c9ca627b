// Method auto of the global phase (docs/design.md section 4b; global_search_internal.h lists
// the parts). Contract: RunAuto screens the start, the staged grid and units x kAutoSobolPoints
// Sobol points (a unit per kAutoDimensionsPerUnit searched parameters), fits the user's start and
// the ranked starts while WorthFitting says so (each fit stopping once it joins a minimum found
// before it), then the mode's search moves (ModeDefinition::search_moves), and with a coarse level
// refines the best coarse minima on the search data. Its minima go to summary.minima through
// Search::Record; it returns early once Search::Report says stop. Deterministic for a seed.

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "model/mode_catalog.h"
#include "optimize/global_search_internal.h"

namespace homodyne::global_search_internal {
namespace {

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
// A refinement that joins a minimum refined before it stops there (Search::JoinedMinimum) with
// this status.
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
constexpr int kAutoReserveFits = 12;

// Whether method auto fits the ranked start at `rank` (0 = the best screened; kAutoArrivals,
// kAutoReserveFits): one of the first `ranked` while the lowest minimum found so far has been
// reached from fewer than kAutoArrivals starts or has a decade-spanning parameter on a bound,
// or while the start's screened chi2 is within kRefineWindow reduced chi2 of that minimum's; one
// of the reserve after them only while that minimum has a decade-spanning parameter on a bound.
bool WorthFitting(const Search& search, const GlobalSearchSummary& summary, const Candidate& start,
                  int rank, int ranked) {
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

}  // namespace

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
  if (!FitFrom(search,
               ChooseStarts(candidates, {0}, units * (kAutoLocalFits + kAutoReserveFits), search),
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

}  // namespace homodyne::global_search_internal
