// The only file that includes pagmo (see pagmo_bridge.h for why). Three measures give the Eigen
// code in this file libpagmo's configuration and keep it apart from the project's:
//
// 1. This file is compiled with -march=x86-64 -mtune=generic after the project's -march=native
//    (src/optimize/CMakeLists.txt; GCC and Clang obey the last -march), as libpagmo was.
//
// 2. libpagmo's allocation scheme is pinned below: 16-byte alignment and plain malloc/free, what
//    Eigen chooses on 64-bit glibc for generic x86-64. Eigen would choose its handmade aligned
//    malloc here in a -fsanitize=address build (it distrusts malloc's alignment under ASan), and
//    then free libpagmo's blocks the wrong way.
//
// 3. Eigen's namespace is renamed in this file, before any include. Eigen's inline functions and
//    templates (Eigen::internal::aligned_free, DenseStorage's destructor, ...) are emitted as weak
//    symbols wherever they are not inlined (always at -O0), and the linker keeps one definition
//    per name for the whole program: without the rename, this file's plain-free versions and the
//    other files' (64-byte handmade aligned malloc: the block starts before the pointer) would be
//    merged, and either choice frees some blocks the wrong way (a Debug build crashed with "double
//    free or corruption"). Renamed, this file's copies have names of their own. The classes'
//    layouts are unchanged, and no libpagmo function this file calls has an Eigen type in its
//    signature, so the library's symbols still match.
// Consequence: no Eigen type may cross this file's interface (pagmo_bridge.h has std types only).
// Check after changes: `nm -C pagmo_bridge.cc.o | grep 'Eigen::'` lists nothing.
#define Eigen homodyne_pagmo_bridge_eigen
#define EIGEN_MAX_ALIGN_BYTES 16
#define EIGEN_MALLOC_ALREADY_ALIGNED 1

#include "optimize/pagmo_bridge.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>

#include <pagmo/algorithms/cmaes.hpp>
#include <pagmo/population.hpp>
#include <pagmo/problem.hpp>
#include <pagmo/types.hpp>

#include "homodyne/errors.h"

namespace homodyne::pagmo_bridge {
namespace {

using Fitness = std::function<double(const std::vector<double>&)>;

// pagmo's user-defined problem: minimise *fitness over [0,1]^d. pagmo copies problems freely, so
// it holds the fitness by pointer (owned by RunCmaes's caller, outlives the run).
class UnitCubeProblem {
 public:
  UnitCubeProblem() = default;  // pagmo requires a default constructor
  UnitCubeProblem(const Fitness* fitness, std::size_t dimensions)
      : fitness_(fitness), dimensions_(dimensions) {}

  pagmo::vector_double fitness(const pagmo::vector_double& x) const {
    const double value = (*fitness_)(x);
    return {std::isnan(value) ? std::numeric_limits<double>::infinity() : value};
  }
  std::pair<pagmo::vector_double, pagmo::vector_double> get_bounds() const {
    return {pagmo::vector_double(dimensions_, 0.0), pagmo::vector_double(dimensions_, 1.0)};
  }
  std::string get_name() const { return "homodyne unit cube"; }

 private:
  const Fitness* fitness_ = nullptr;
  std::size_t dimensions_ = 1;
};

}  // namespace

CmaesRunOutcome RunCmaes(const CmaesRunSettings& settings, const Fitness& fitness,
                         const std::function<bool(int)>& after_generation) {
  HOMODYNE_CHECK(!settings.mean.empty());
  HOMODYNE_CHECK(settings.popsize >= 5);
  HOMODYNE_CHECK(settings.max_generations >= 1);
  HOMODYNE_CHECK(settings.sigma > 0.0);
  HOMODYNE_CHECK(settings.tol_fun >= 0.0 && settings.tol_x >= 0.0);

  // pagmo::cmaes starts from the population's best individual and skips a generation whose
  // population is flat (best == worst within ftol). So the population is the mean with the
  // placeholder value -inf (the best) and popsize - 1 copies with +inf: the run starts at the
  // mean, no evaluation is spent on it, and the first generation replaces all popsize individuals.
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  pagmo::problem problem{UnitCubeProblem(&fitness, settings.mean.size())};
  pagmo::population population(std::move(problem), 0u, settings.seed);
  population.push_back(settings.mean, pagmo::vector_double{-kInfinity});
  for (int i = 1; i < settings.popsize; ++i) {
    population.push_back(settings.mean, pagmo::vector_double{kInfinity});
  }

  // One generation per evolve call; memory = true keeps the mean, step size, covariance and
  // evolution paths from one call to the next.
  const pagmo::cmaes algorithm(/*gen=*/1u, /*cc=*/-1.0, /*cs=*/-1.0, /*c1=*/-1.0, /*cmu=*/-1.0,
                               settings.sigma, settings.tol_fun, settings.tol_x, /*memory=*/true,
                               /*force_bounds=*/true, settings.seed);
  CmaesRunOutcome outcome;
  while (outcome.generations < settings.max_generations) {
    // evolve returns without evaluating anything when a tolerance is met.
    const auto evaluations_before = population.get_problem().get_fevals();
    population = algorithm.evolve(std::move(population));
    if (population.get_problem().get_fevals() == evaluations_before) {
      outcome.end = CmaesRunEnd::kTolerance;
      return outcome;
    }
    ++outcome.generations;
    if (after_generation && !after_generation(outcome.generations)) {
      outcome.end = CmaesRunEnd::kStopped;
      return outcome;
    }
  }
  outcome.end = CmaesRunEnd::kMaxGenerations;
  return outcome;
}

}  // namespace homodyne::pagmo_bridge
