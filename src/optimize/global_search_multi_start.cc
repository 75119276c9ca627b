// Method multi_start of the global phase (docs/design.md section 4b; global_search_internal.h
// lists the parts): the reference's multi-start (optimization.nlsq.multi_start). Contract:
// RunMultiStart takes the user's start, the custom starts (matched by name when the search holds
// fewer parameters) and n_starts sampled starts; screens them (use_screening) and fits the user's
// and custom starts and the best screen_keep_fraction of the sampled ones (without screening:
// every start, in order); then the best refine_top_k minima are fitted again with
// refinement_ftol. Its minima go to summary.minima through Search::Record; it returns early once
// Search::Report says stop. Deterministic for a seed.

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/model.h"
#include "optimize/global_search_internal.h"

namespace homodyne::global_search_internal {

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

}  // namespace homodyne::global_search_internal
