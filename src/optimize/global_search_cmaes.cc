// Method cmaes of the global phase (docs/design.md section 4b; global_search_internal.h lists
// the parts): CMA-ES with restarts through pagmo2 (optimization.nlsq.cmaes; cmaes_search.h).
// Contract: RunCmaes screens the staged grid, runs one warm CMA-ES run (a fifth of the budget,
// sigma_warmstart) from its best candidate and the configured runs from the start, on chi2 per
// residual; then local fits from the best refine_top_k run points (refine_with_nlsq), or each
// run's best point unrefined. Throws ConfigError for invalid CMA-ES options. Its minima go to
// summary.minima through Search::Record; it returns early once Search::Report says stop.
// Deterministic for a seed.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "homodyne/errors.h"
#include "optimize/cmaes_search.h"
#include "optimize/global_search_internal.h"

namespace homodyne::global_search_internal {
namespace {

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

}  // namespace

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

}  // namespace homodyne::global_search_internal
