#include "optimize/start_sampling.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include <boost/random/sobol.hpp>

#include "optimize/number_text.h"

namespace homodyne {
namespace {

// Uniform in [0,1) with 53 random bits: the top 53 bits of one output, scaled exactly.
double UnitUniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Uniform integer in [0, count), count >= 1, unbiased: outputs in the incomplete last block of
// count values are rejected (a fraction below count / 2^64 of them).
uint64_t UniformIndex(std::mt19937_64& rng, uint64_t count) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const uint64_t remainder = (kMax % count + 1) % count;  // 2^64 mod count
  while (true) {
    const uint64_t x = rng();
    if (x <= kMax - remainder) return x % count;
  }
}

std::vector<Eigen::VectorXd> LatinHypercube(int n, int dimensions, uint64_t seed) {
  std::vector<Eigen::VectorXd> points(n, Eigen::VectorXd(dimensions));
  std::mt19937_64 rng(seed);
  std::vector<int> strata(n);
  for (int j = 0; j < dimensions; ++j) {
    std::iota(strata.begin(), strata.end(), 0);
    for (int i = n - 1; i > 0; --i) {  // Fisher-Yates, from the end
      const auto k = static_cast<int>(UniformIndex(rng, static_cast<uint64_t>(i) + 1));
      std::swap(strata[i], strata[k]);
    }
    for (int i = 0; i < n; ++i) {
      points[i](j) = (strata[i] + UnitUniform(rng)) / n;
    }
  }
  return points;
}

std::vector<Eigen::VectorXd> Sobol(int n, int dimensions) {
  // Values are 64-bit integers; point k < 2^b has only its top b bits set, so the scaling by
  // 2^-64 is exact for the first 2^53 points.
  boost::random::sobol engine(static_cast<std::size_t>(dimensions));
  std::vector<Eigen::VectorXd> points(n, Eigen::VectorXd(dimensions));
  for (auto& point : points) {
    for (int j = 0; j < dimensions; ++j) point(j) = std::ldexp(static_cast<double>(engine()), -64);
  }
  return points;
}

std::vector<Eigen::VectorXd> Random(int n, int dimensions, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Eigen::VectorXd> points(n, Eigen::VectorXd(dimensions));
  for (auto& point : points) {
    for (int j = 0; j < dimensions; ++j) point(j) = UnitUniform(rng);
  }
  return points;
}

// Clips u to [0,1]; NaN to 0.
double ClipUnit(double u) { return u >= 0.0 ? std::min(u, 1.0) : 0.0; }

}  // namespace

std::vector<Eigen::VectorXd> SampleUnitCube(SamplingStrategy strategy, int n, int dimensions,
                                            uint64_t seed) {
  if (n < 0) {
    throw std::invalid_argument("SampleUnitCube: n = " + std::to_string(n) + ": must be >= 0");
  }
  if (dimensions < 1) {
    throw std::invalid_argument("SampleUnitCube: dimensions = " + std::to_string(dimensions) +
                                ": must be >= 1");
  }
  switch (strategy) {
    case SamplingStrategy::kLatinHypercube:
      return LatinHypercube(n, dimensions, seed);
    case SamplingStrategy::kSobol: {
      constexpr auto kMaxDimensions = boost::random::detail::qrng_tables::sobol::max_dimension;
      if (static_cast<std::size_t>(dimensions) > kMaxDimensions) {
        throw std::invalid_argument("SampleUnitCube: dimensions = " + std::to_string(dimensions) +
                                    ": a Sobol sequence has at most " +
                                    std::to_string(kMaxDimensions));
      }
      return Sobol(n, dimensions);
    }
    case SamplingStrategy::kRandom:
      return Random(n, dimensions, seed);
  }
  throw std::invalid_argument("SampleUnitCube: unknown sampling strategy");
}

SearchSpace SearchSpace::FromBounds(const Eigen::VectorXd& lower, const Eigen::VectorXd& upper) {
  if (lower.size() != upper.size()) {
    throw std::invalid_argument("search space: " + std::to_string(lower.size()) +
                                " lower bounds but " + std::to_string(upper.size()) +
                                " upper bounds");
  }
  SearchSpace space;
  space.lower = lower;
  space.upper = upper;
  space.log_scale.assign(lower.size(), false);
  space.symmetric_log_width.assign(lower.size(), 0.0);
  for (Eigen::Index i = 0; i < lower.size(); ++i) {
    if (!std::isfinite(lower(i)) || !std::isfinite(upper(i)) || !(lower(i) <= upper(i))) {
      throw std::invalid_argument("search space: parameter #" + std::to_string(i) +
                                  " has lower = " + FormatNumber(lower(i)) +
                                  ", upper = " + FormatNumber(upper(i)) +
                                  ": bounds must be finite with lower <= upper");
    }
    space.log_scale[i] = lower(i) > 0.0 && upper(i) >= 100.0 * lower(i);
  }
  return space;
}

void SearchSpace::UseSymmetricLog(int index, double width) {
  if (index < 0 || index >= dimensions() || !std::isfinite(width) || !(width > 0.0)) {
    throw std::invalid_argument("search space: symmetric log for parameter #" +
                                std::to_string(index) + " with width " + FormatNumber(width) +
                                ": needs an index in range and a finite width > 0");
  }
  symmetric_log_width[static_cast<size_t>(index)] = width;
  log_scale[static_cast<size_t>(index)] = false;
}

Eigen::VectorXd SearchSpace::FromUnit(const Eigen::VectorXd& unit) const {
  if (unit.size() != lower.size()) {
    throw std::invalid_argument("SearchSpace::FromUnit: " + std::to_string(unit.size()) +
                                " coordinates for " + std::to_string(lower.size()) + " parameters");
  }
  Eigen::VectorXd x(unit.size());
  for (Eigen::Index i = 0; i < unit.size(); ++i) {
    const double u = ClipUnit(unit(i));
    double value;
    if (u == 0.0 || lower(i) == upper(i)) {
      value = lower(i);
    } else if (u == 1.0) {
      value = upper(i);
    } else if (const double width = symmetric_log_width[static_cast<size_t>(i)]; width > 0.0) {
      const double low = std::asinh(lower(i) / width);
      value = width * std::sinh(low + u * (std::asinh(upper(i) / width) - low));
    } else if (log_scale[i]) {
      value = lower(i) * std::exp(u * std::log(upper(i) / lower(i)));
    } else {
      value = lower(i) + u * (upper(i) - lower(i));
    }
    x(i) = std::clamp(value, lower(i), upper(i));  // rounding may step just outside
  }
  return x;
}

Eigen::VectorXd SearchSpace::ToUnit(const Eigen::VectorXd& x) const {
  if (x.size() != lower.size()) {
    throw std::invalid_argument("SearchSpace::ToUnit: " + std::to_string(x.size()) +
                                " values for " + std::to_string(lower.size()) + " parameters");
  }
  Eigen::VectorXd unit(x.size());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    if (lower(i) == upper(i)) {
      unit(i) = 0.5;
      continue;
    }
    const double value = x(i) >= lower(i) ? std::min(x(i), upper(i)) : lower(i);  // NaN: lower
    double u;
    if (const double width = symmetric_log_width[static_cast<size_t>(i)]; width > 0.0) {
      const double low = std::asinh(lower(i) / width);
      u = (std::asinh(value / width) - low) / (std::asinh(upper(i) / width) - low);
    } else if (log_scale[i]) {
      u = std::log(value / lower(i)) / std::log(upper(i) / lower(i));
    } else {
      u = (value - lower(i)) / (upper(i) - lower(i));
    }
    unit(i) = std::clamp(u, 0.0, 1.0);
  }
  return unit;
}

}  // namespace homodyne
