// The one seam to pagmo2: a CMA-ES run over the unit cube [0,1]^d driven one generation at a time
// (cmaes_search.h puts restarts, budgets and progress on top). Its interface has standard types
// only, and pagmo_bridge.cc is the only file that includes a pagmo header.
//
// Why a seam: the project compiles with -march=native, which on an AVX-512 machine raises Eigen's
// EIGEN_MAX_ALIGN_BYTES to 64, so that Eigen allocates through its own offset-aligned malloc and
// frees accordingly. Debian's libpagmo was built for generic x86-64 (16 bytes: plain malloc/free).
// pagmo::cmaes holds Eigen vectors and matrices that the library allocates and the code creating
// the object destroys; were that code compiled with -march=native, Eigen's inline free would not
// match the library's malloc and corrupt the heap. pagmo_bridge.cc is therefore compiled with
// -march=x86-64 (src/optimize/CMakeLists.txt) and keeps its Eigen code out of the rest of the
// program (see the top of pagmo_bridge.cc).
#pragma once

#include <functional>
#include <vector>

namespace homodyne::pagmo_bridge {

// One CMA-ES run (pagmo::cmaes with its default learning rates, N. Hansen, "The CMA evolution
// strategy: a tutorial", 2016). Candidates are clipped to [0,1]^d before they are evaluated
// (pagmo's force_bounds), so the fitness is never called outside the cube.
struct CmaesRunSettings {
  std::vector<double> mean;  // initial mean, in [0,1]^d; d = mean.size() >= 1
  int popsize = 0;           // lambda (candidates per generation), >= 5 (pagmo's minimum)
  int max_generations = 0;   // the run ends after this many generations, >= 1
  double sigma = 0.5;        // initial step size in unit coordinates (box width 1), > 0
  double tol_fun = 1e-8;     // pagmo ftol: end when the last population's best and worst values
                             // differ by less than this, >= 0
  double tol_x = 1e-8;       // pagmo xtol: end when a sampled step sigma B D z is shorter than
                             // this (2-norm, unit coordinates), >= 0
  unsigned seed = 0;         // pagmo's generator (std::mt19937) for the run
};

enum class CmaesRunEnd {
  kTolerance,       // tol_fun or tol_x met (checked by pagmo before each generation)
  kMaxGenerations,  // max_generations generations made
  kStopped,         // after_generation returned false
};

struct CmaesRunOutcome {
  int generations = 0;  // generations made (each popsize evaluations)
  CmaesRunEnd end = CmaesRunEnd::kMaxGenerations;
};

// Runs CMA-ES from settings (which must obey the rules above; HOMODYNE_CHECK aborts otherwise).
// fitness(x): the value to minimise at a candidate x in [0,1]^d; +inf is worst and NaN is taken as
// +inf. It is called sequentially, the candidates of a generation in population order, so a run is
// deterministic for a seed (and a given pagmo and standard library). Exceptions from fitness
// propagate. after_generation(generations made so far) is called after each generation; false
// ends the run. Costs popsize evaluations per generation and none besides.
CmaesRunOutcome RunCmaes(const CmaesRunSettings& settings,
                         const std::function<double(const std::vector<double>&)>& fitness,
                         const std::function<bool(int)>& after_generation);

}  // namespace homodyne::pagmo_bridge
