#include "optimize/cmaes_search.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "homodyne/errors.h"
#include "optimize/number_text.h"
#include "optimize/pagmo_bridge.h"

namespace homodyne {
namespace {

constexpr int kMinPopsize = 5;                    // pagmo::cmaes needs at least 5 individuals
constexpr int kMaxPopsize = 1 << 20;              // restarts double lambda up to this
constexpr double kMaxAutomaticGenerations = 1e4;  // cap of the automatic max_generations

// Uniform in [0,1) from the top 53 bits of one output (portable, unlike std::uniform_*).
double UnitUniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// 4 + floor(3 ln d) (Hansen's default lambda), at least pagmo's minimum.
int DefaultPopsize(int dimensions) {
  return std::max(kMinPopsize, 4 + static_cast<int>(std::floor(3.0 * std::log(dimensions))));
}

// 100 + 50 (d + 3)^2 / sqrt(lambda) (Hansen 2009's MaxIter), capped.
int DefaultMaxGenerations(int dimensions, int popsize) {
  const double generations = 100.0 + 50.0 * (dimensions + 3.0) * (dimensions + 3.0) /
                                         std::sqrt(static_cast<double>(popsize));
  return static_cast<int>(std::min(generations, kMaxAutomaticGenerations));
}

// Everything one run starts from.
struct RunPlan {
  Eigen::VectorXd mean;  // unit coordinates
  int popsize = 0;
  double sigma = 0.0;
  int max_generations = 0;
  bool large_population = true;  // BIPOP regime (IPOP and the first run: large)
  unsigned pagmo_seed = 0;
};

// The restart loop around pagmo_bridge::RunCmaes. Owns the result while it is being built.
class CmaesSearch {
 public:
  CmaesSearch(const std::function<double(const Eigen::VectorXd&)>& f, int dimensions,
              const CmaesOptions& options,
              const std::function<bool(const CmaesProgress&)>& on_generation)
      : f_(f),
        dimensions_(dimensions),
        options_(options),
        on_generation_(on_generation),
        rng_(options.seed),
        first_popsize_(options.popsize > 0 ? options.popsize : DefaultPopsize(dimensions)) {}

  CmaesResult Run(const Eigen::VectorXd& start_unit) {
    RunPlan plan = FirstRunPlan(start_unit);
    StartRun(plan);
    Evaluate(plan.mean);  // the start (max_evaluations >= 1): the result is never worse than it
    if (!BudgetAllows(plan.popsize)) {
      result_.budget_exhausted = true;
      return std::move(result_);
    }
    RunOnce(plan);
    while (!result_.stopped && !result_.budget_exhausted && RestartsLeft()) {
      plan = RestartPlan();
      if (!BudgetAllows(plan.popsize)) {
        result_.budget_exhausted = true;
        break;
      }
      StartRun(plan);
      ++result_.restarts;
      RunOnce(plan);
    }
    return std::move(result_);
  }

 private:
  bool BudgetAllows(int64_t evaluations) const {
    return options_.max_evaluations == 0 ||
           result_.evaluations + evaluations <= options_.max_evaluations;
  }

  // BIPOP limits its large-population restarts only (Hansen 2009): small ones run in between
  // while they have used fewer evaluations, so the search ends after a large restart.
  bool RestartsLeft() const {
    switch (options_.restart_strategy) {
      case CmaesRestartStrategy::kNone:
        return false;
      case CmaesRestartStrategy::kIpop:
        return result_.restarts < options_.max_restarts;
      case CmaesRestartStrategy::kBipop:
        return large_restarts_ < options_.max_restarts;
    }
    return false;
  }

  int MaxGenerations(int popsize) const {
    return options_.max_generations > 0 ? options_.max_generations
                                        : DefaultMaxGenerations(dimensions_, popsize);
  }

  unsigned NextPagmoSeed() { return static_cast<unsigned>(rng_() >> 32); }

  RunPlan FirstRunPlan(const Eigen::VectorXd& start_unit) {
    RunPlan plan;
    plan.mean = start_unit.unaryExpr([](double u) { return u >= 0.0 ? std::min(u, 1.0) : 0.0; });
    plan.popsize = first_popsize_;
    plan.sigma = options_.sigma;
    plan.max_generations = MaxGenerations(plan.popsize);
    plan.pagmo_seed = NextPagmoSeed();
    return plan;
  }

  // IPOP, or BIPOP's choice between its two regimes (Hansen 2009, section 2).
  RunPlan RestartPlan() {
    RunPlan plan;
    const bool small =
        options_.restart_strategy == CmaesRestartStrategy::kBipop && small_budget_ < large_budget_;
    if (small) {
      const double large_popsize = first_popsize_ * std::ldexp(1.0, large_restarts_ + 1);
      const double u1 = UnitUniform(rng_);
      const double u2 = UnitUniform(rng_);
      plan.popsize =
          std::max(kMinPopsize,
                   static_cast<int>(std::floor(
                       first_popsize_ * std::pow(0.5 * large_popsize / first_popsize_, u1 * u1))));
      plan.sigma = options_.sigma * std::pow(10.0, -2.0 * u2);
      const auto budget_generations =
          static_cast<int>(0.5 * last_large_evaluations_ / plan.popsize);
      plan.max_generations = std::clamp(budget_generations, 1, MaxGenerations(plan.popsize));
      plan.large_population = false;
    } else {
      ++large_restarts_;
      plan.popsize = static_cast<int>(
          std::min<int64_t>(int64_t{first_popsize_} << std::min(large_restarts_, 30), kMaxPopsize));
      plan.sigma = options_.sigma;
      plan.max_generations = MaxGenerations(plan.popsize);
    }
    plan.mean.resize(dimensions_);
    for (int j = 0; j < dimensions_; ++j) plan.mean(j) = 0.1 + 0.8 * UnitUniform(rng_);
    plan.pagmo_seed = NextPagmoSeed();
    return plan;
  }

  void StartRun(const RunPlan& plan) {
    CmaesRunResult& run = result_.runs.emplace_back();
    run.popsize = plan.popsize;
    run.sigma = plan.sigma;
    run.large_population = plan.large_population;
  }

  // f at unit (in [0,1]^d), recorded as the current run's and the search's best when it is.
  double Evaluate(const Eigen::VectorXd& unit) {
    const double value = f_(unit);
    ++result_.evaluations;
    CmaesRunResult& run = result_.runs.back();
    if (value < run.best_value) {  // false for NaN
      run.best_value = value;
      run.best_unit = unit;
    }
    if (value < result_.best_value) {
      result_.best_value = value;
      result_.best_unit = unit;
    }
    return value;
  }

  // After each generation: progress, the caller's stop, and the budget for one more generation.
  bool AfterGeneration(int generation, int popsize) {
    CmaesProgress progress;
    progress.run = static_cast<int>(result_.runs.size()) - 1;
    progress.generation = generation;
    progress.evaluations = result_.evaluations;
    progress.best_value = result_.best_value;
    if (on_generation_ && !on_generation_(progress)) {
      result_.stopped = true;
      return false;
    }
    if (!BudgetAllows(popsize)) {
      result_.budget_exhausted = true;
      return false;
    }
    return true;
  }

  void RunOnce(const RunPlan& plan) {
    pagmo_bridge::CmaesRunSettings settings;
    settings.mean.assign(plan.mean.data(), plan.mean.data() + plan.mean.size());
    settings.popsize = plan.popsize;
    settings.max_generations = plan.max_generations;
    settings.sigma = plan.sigma;
    settings.tol_fun = options_.tol_fun;
    settings.tol_x = options_.tol_x;
    settings.seed = plan.pagmo_seed;
    const int64_t evaluations_before = result_.evaluations;
    const pagmo_bridge::CmaesRunOutcome outcome = pagmo_bridge::RunCmaes(
        settings,
        [this](const std::vector<double>& x) {
          return Evaluate(
              Eigen::Map<const Eigen::VectorXd>(x.data(), static_cast<Eigen::Index>(x.size())));
        },
        [this, &plan](int generation) { return AfterGeneration(generation, plan.popsize); });

    CmaesRunResult& finished = result_.runs.back();
    finished.generations = outcome.generations;
    finished.converged = outcome.end == pagmo_bridge::CmaesRunEnd::kTolerance;
    result_.generations += outcome.generations;
    const int64_t run_evaluations = result_.evaluations - evaluations_before;
    if (result_.runs.size() > 1) {  // the first run counts in neither BIPOP budget
      if (plan.large_population) {
        large_budget_ += run_evaluations;
        last_large_evaluations_ = run_evaluations;
      } else {
        // At least lambda even if a tolerance ended the run before its first generation, so
        // that the small regime cannot restart forever without spending anything.
        small_budget_ += std::max(run_evaluations, int64_t{plan.popsize});
      }
    }
  }

  const std::function<double(const Eigen::VectorXd&)>& f_;
  const int dimensions_;
  const CmaesOptions& options_;
  const std::function<bool(const CmaesProgress&)>& on_generation_;
  std::mt19937_64 rng_;                 // restart means, BIPOP draws, pagmo seeds
  const int first_popsize_;             // lambda_0
  int large_restarts_ = 0;              // BIPOP large-regime (IPOP: all) restarts so far
  int64_t large_budget_ = 0;            // evaluations of large restarts (first run excluded)
  int64_t small_budget_ = 0;            // evaluations of small restarts
  int64_t last_large_evaluations_ = 0;  // of the last large restart
  CmaesResult result_;
};

}  // namespace

bool CmaesOptions::IsValid(std::string* error) const {
  auto fail = [error](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  const std::string prefix = "optimization.nlsq.cmaes.";
  if (popsize != 0 && (popsize < kMinPopsize || popsize > kMaxPopsize)) {
    return fail(prefix + "popsize = " + std::to_string(popsize) +
                ": must be 0 (automatic) or in [" + std::to_string(kMinPopsize) + ", " +
                std::to_string(kMaxPopsize) + "]");
  }
  if (max_generations < 0) {
    return fail(prefix + "max_generations = " + std::to_string(max_generations) +
                ": must be 0 (automatic) or >= 1");
  }
  if (max_evaluations < 0) {
    return fail(prefix + "max_evaluations = " + std::to_string(max_evaluations) +
                ": must be 0 (unlimited) or >= 1");
  }
  if (!(sigma > 0.0)) return fail(prefix + "sigma = " + FormatNumber(sigma) + ": must be > 0");
  if (!(sigma <= 1.0)) {
    return fail(prefix + "sigma = " + FormatNumber(sigma) +
                ": must be <= 1 (unit coordinates: the box has width 1)");
  }
  if (!(tol_fun >= 0.0) || !std::isfinite(tol_fun)) {
    return fail(prefix + "tol_fun = " + FormatNumber(tol_fun) + ": must be finite and >= 0");
  }
  if (!(tol_x >= 0.0) || !std::isfinite(tol_x)) {
    return fail(prefix + "tol_x = " + FormatNumber(tol_x) + ": must be finite and >= 0");
  }
  if (restart_strategy != CmaesRestartStrategy::kNone &&
      restart_strategy != CmaesRestartStrategy::kIpop &&
      restart_strategy != CmaesRestartStrategy::kBipop) {
    return fail(prefix +
                "restart_strategy = " + std::to_string(static_cast<int>(restart_strategy)) +
                ": must be none, ipop or bipop");
  }
  if (max_restarts < 0) {
    return fail(prefix + "max_restarts = " + std::to_string(max_restarts) + ": must be >= 0");
  }
  return true;
}

std::string CmaesResult::BriefReport() const {
  if (runs.empty() && evaluations == 0) return "CMA-ES: not run";
  std::ostringstream out;
  out << "CMA-ES: " << runs.size() << (runs.size() == 1 ? " run" : " runs") << " (" << restarts
      << " restarts), " << generations << " generations, " << evaluations << " evaluations, best "
      << best_value << "; ended: ";
  if (stopped) {
    out << "stopped by the caller";
  } else if (budget_exhausted) {
    out << "evaluation budget";
  } else {
    out << "restarts done";
  }
  return out.str();
}

CmaesResult MinimizeWithCmaes(const std::function<double(const Eigen::VectorXd&)>& f,
                              int dimensions, const Eigen::VectorXd& start_unit,
                              const CmaesOptions& options,
                              const std::function<bool(const CmaesProgress&)>& on_generation) {
  std::string error;
  if (!options.IsValid(&error)) throw ConfigError(error);
  if (dimensions < 1) {
    throw std::invalid_argument("MinimizeWithCmaes: dimensions = " + std::to_string(dimensions) +
                                ": must be >= 1");
  }
  if (start_unit.size() != dimensions) {
    throw std::invalid_argument("MinimizeWithCmaes: start_unit has " +
                                std::to_string(start_unit.size()) + " coordinates for " +
                                std::to_string(dimensions) + " dimensions");
  }
  if (!f) throw std::invalid_argument("MinimizeWithCmaes: no objective");
  CmaesSearch search(f, dimensions, options, on_generation);
  return search.Run(start_unit);
}

}  // namespace homodyne
