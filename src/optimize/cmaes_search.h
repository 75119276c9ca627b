// CMA-ES with restarts over the unit cube [0,1]^d, the global phase's evolution strategy
// (docs/design.md section 4b). One run is pagmo2's pagmo::cmaes (pagmo_bridge.h), driven one
// generation at a time; the restarts are made here:
//   IPOP  (A. Auger, N. Hansen, "A restart CMA evolution strategy with increasing population size",
//         CEC 2005): every restart doubles the population size.
//   BIPOP (N. Hansen, "Benchmarking a BI-population CMA-ES on the BBOB-2009 function testbed",
//         GECCO 2009): restarts alternate between a large-population regime (IPOP's doubling) and
//         a small-population regime with a random smaller population and step size, whichever has
//         used fewer evaluations so far.
// Pair with SearchSpace (start_sampling.h) to search a parameter box in unit coordinates.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"  // CmaesRestartStrategy

namespace homodyne {

// Defaults follow optimization.nlsq.cmaes (the reference's code defaults).
struct CmaesOptions {
  // optimization.nlsq.cmaes.popsize: lambda of the first run. 0 = automatic, 4 + floor(3 ln d)
  // but at least 5 (pagmo's minimum); else in [5, 2^20]. Restarts double it up to 2^20.
  int popsize = 0;
  // optimization.nlsq.cmaes.max_generations: per run. 0 = automatic, 100 + 50 (d + 3)^2 /
  // sqrt(lambda) (Hansen 2009) capped at 10000; else >= 1.
  int max_generations = 0;
  // Objective evaluations over all runs; a generation that would exceed it is not started.
  // 0 = unlimited; else >= 1.
  int64_t max_evaluations = 0;
  // optimization.nlsq.cmaes.sigma: initial step size in unit coordinates (the box has width 1),
  // in (0, 1].
  double sigma = 0.5;
  // optimization.nlsq.cmaes.tol_fun: a run ends when its population's best and worst values
  // differ by less than this (pagmo's ftol: absolute, in the objective's units), >= 0.
  double tol_fun = 1e-8;
  // optimization.nlsq.cmaes.tol_x: a run ends when a sampled step is shorter than this (pagmo's
  // xtol, unit coordinates), >= 0.
  double tol_x = 1e-8;
  // optimization.nlsq.cmaes.restart_strategy.
  CmaesRestartStrategy restart_strategy = CmaesRestartStrategy::kBipop;
  // optimization.nlsq.cmaes.max_restarts: IPOP: runs after the first; BIPOP: large-population
  // restarts (small ones run in between and are not counted, as Hansen 2009); ignored for kNone;
  // >= 0.
  int max_restarts = 9;
  uint64_t seed = 42;  // every random choice (the runs' generators, restart means, BIPOP draws)

  // True if every field obeys its rule; else false and *error (if not null) names the YAML path,
  // the value and the rule, e.g. "optimization.nlsq.cmaes.sigma = -1: must be > 0".
  bool IsValid(std::string* error) const;
};

// What on_generation sees after each generation.
struct CmaesProgress {
  int run = 0;              // 0 = the first run, then one per restart
  int generation = 0;       // generations made in this run (1 after its first)
  int64_t evaluations = 0;  // objective evaluations so far, all runs
  double best_value = std::numeric_limits<double>::infinity();  // best value so far, all runs
};

// One run: its best point is a distinct local minimum worth reporting.
struct CmaesRunResult {
  // The best point this run evaluated (unit coordinates) and its value; empty and +inf when
  // nothing beat +inf.
  Eigen::VectorXd best_unit;
  double best_value = std::numeric_limits<double>::infinity();
  int generations = 0;           // generations made
  int popsize = 0;               // lambda of the run
  double sigma = 0.0;            // initial step size of the run (unit coordinates)
  bool large_population = true;  // BIPOP regime: false for a small-population restart
  bool converged = false;        // ended on tol_fun / tol_x (not on a limit or a stop)
};

struct CmaesResult {
  Eigen::VectorXd best_unit;  // best point over all runs, unit coordinates; empty = not run
  // The value at best_unit; +inf = not run or nothing better than +inf found.
  double best_value = std::numeric_limits<double>::infinity();
  int64_t evaluations = 0;  // objective evaluations, all runs (the first run's start included)
  int generations = 0;      // generations, all runs
  int restarts = 0;         // runs after the first
  std::vector<CmaesRunResult> runs;  // one per run, in order
  bool stopped = false;              // on_generation returned false
  bool budget_exhausted = false;     // max_evaluations ended the search

  // One line for logs: runs, generations, evaluations, best value, why it ended.
  std::string BriefReport() const;
};

// Minimises f over [0,1]^d, d = dimensions >= 1.
//   f(u): the value at a unit-coordinate point u in [0,1]^d (candidates are clipped to the cube);
//     it may return +inf or NaN (= worst). Called sequentially in a fixed order, so the result is
//     bitwise the same for the same seed, f and build. Exceptions from f propagate.
//   start_unit: the first run's mean (length d, clipped to [0,1]); it is evaluated first, so the
//     result is never worse than the start. Later runs start at a random mean, uniform in
//     [0.1, 0.9]^d (Hansen 2009's [-4, 4]^d in [-5, 5]^d), drawn from the seed.
//   on_generation (optional): called after each generation; false stops the search (stopped).
// The first run has lambda_0 = options.popsize (or the automatic one) and options.sigma. Restarts:
//   kNone:  none.
//   kIpop:  restart k has lambda_0 2^k and options.sigma.
//   kBipop: after the first run (counted in neither budget), a restart is small when the small
//     runs have used fewer evaluations than the large restarts, else large. Large: lambda_0 2^k,
//     k = 1, 2, ... counting large restarts, options.sigma. Small: lambda_0 (lambda_l / (2
//     lambda_0))^(U1^2) rounded down (at least 5), lambda_l = lambda_0 2^(large restarts + 1), step
//     size options.sigma 10^(-2 U2), at most half the last large restart's evaluations; U1, U2
//     uniform in [0, 1).
// The search ends after max_restarts restarts (BIPOP: large ones), when max_evaluations does not
// allow another generation, or when on_generation returns false. Without a budget it makes all its
// restarts: there is no target value. Throws ConfigError (homodyne/errors.h) with the
// IsValid message for invalid options, std::invalid_argument for dimensions < 1 or a start_unit
// of the wrong length.
CmaesResult MinimizeWithCmaes(const std::function<double(const Eigen::VectorXd&)>& f,
                              int dimensions, const Eigen::VectorXd& start_unit,
                              const CmaesOptions& options,
                              const std::function<bool(const CmaesProgress&)>& on_generation = {});

}  // namespace homodyne
