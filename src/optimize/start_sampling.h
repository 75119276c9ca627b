// Starting points for the global phase (docs/design.md section 4b): points in the unit cube
// [0,1]^d and the map between it and a parameter box, linear or logarithmic per parameter.
//
// Deterministic: SampleUnitCube gives bitwise the same points for the same (strategy, n,
// dimensions, seed) on every platform and thread count. Uniform numbers are derived from the raw
// 64-bit outputs of std::mt19937_64 (whose sequence the C++ standard fixes), never through
// std::uniform_*_distribution (whose output is implementation-defined).
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"  // SamplingStrategy

namespace homodyne {

// n points in [0,1]^dimensions (each coordinate in [0,1); a Latin hypercube coordinate may round
// up to its stratum's upper edge). n >= 0, dimensions >= 1, else std::invalid_argument; also for a
// Sobol sequence of more than 3667 dimensions. The seed is unused by kSobol.
//   kLatinHypercube: for each dimension in order, a Fisher-Yates permutation of the strata, then
//     the n jitters of that dimension, all from one std::mt19937_64(seed).
//   kRandom: point by point, coordinate by coordinate, from one std::mt19937_64(seed).
std::vector<Eigen::VectorXd> SampleUnitCube(SamplingStrategy strategy, int n, int dimensions,
                                            uint64_t seed);

// A parameter box searched in unit coordinates u in [0,1]^d. Parameter i is mapped
//   logarithmically, x = lower * (upper / lower)^u, when its bounds are both > 0 and span at least
//     two decades (upper >= 100 lower): D0 in [1e2, 1e5], gamma_dot_t0 in [1e-6, 0.5];
//   linearly, x = lower + u (upper - lower), otherwise;
//   to lower for every u when lower == upper (a fixed parameter).
// The endpoints map exactly: u = 0 to lower and u = 1 to upper.
struct SearchSpace {
  Eigen::VectorXd lower;        // parameter units, finite
  Eigen::VectorXd upper;        // parameter units, finite, >= lower
  std::vector<bool> log_scale;  // per parameter: mapped logarithmically
  // Per parameter: > 0 maps it by asinh(x / width) (symmetric log: linear within +-width,
  // logarithmic in magnitude beyond, either sign), for offsets whose bounds straddle 0 but whose
  // relevant values span decades (D_offset, gamma_dot_t_offset). 0 = as log_scale says.
  std::vector<double> symmetric_log_width;

  // Throws std::invalid_argument for different lengths, and naming the index for a bound that is
  // not finite or lower > upper.
  static SearchSpace FromBounds(const Eigen::VectorXd& lower, const Eigen::VectorXd& upper);

  // Maps parameter index by asinh(x / width) from now on (symmetric_log_width). Throws
  // std::invalid_argument for an index out of range or a width that is not finite and > 0.
  void UseSymmetricLog(int index, double width);

  int dimensions() const { return static_cast<int>(lower.size()); }
  // unit is clipped to [0,1] first (NaN is taken as 0); the result lies in the box.
  // std::invalid_argument if unit has the wrong length.
  Eigen::VectorXd FromUnit(const Eigen::VectorXd& unit) const;
  // x is clipped to the box first (NaN is taken as lower); the result lies in [0,1]. A fixed
  // parameter maps to 0.5 (any u maps back to it). std::invalid_argument if x has the wrong length.
  Eigen::VectorXd ToUnit(const Eigen::VectorXd& x) const;
};

}  // namespace homodyne
