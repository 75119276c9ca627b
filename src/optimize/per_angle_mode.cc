#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/errors.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

std::string_view ToString(PerAngleMode mode) {
  switch (mode) {
    case PerAngleMode::kIndividual:
      return "individual";
    case PerAngleMode::kConstant:
      return "constant";
    case PerAngleMode::kAutoAveraged:
      return "auto_averaged";
    case PerAngleMode::kFourier:
      return "fourier";
  }
  return "unknown";
}

ResolvedScaling ResolvePerAngleMode(const NlsqOptions& nlsq, int n_angles) {
  const ResolvedScaling individual{PerAngleMode::kIndividual, 2 * n_angles,
                                   "one contrast and offset per angle"};
  switch (nlsq.per_angle_mode) {
    case PerAngleModeRequest::kIndividual:
      return individual;
    case PerAngleModeRequest::kConstant:
      return {PerAngleMode::kConstant, 0,
              "contrast and offset fixed at per-angle quantile estimates"};
    case PerAngleModeRequest::kAuto: {
      if (n_angles >= nlsq.constant_scaling_threshold) {
        return {PerAngleMode::kAutoAveraged, 2,
                "auto: " + std::to_string(n_angles) + " angles >= constant_scaling_threshold " +
                    std::to_string(nlsq.constant_scaling_threshold) + ", one shared pair"};
      }
      ResolvedScaling resolved = individual;
      resolved.reason = "auto: " + std::to_string(n_angles) +
                        " angles < constant_scaling_threshold " +
                        std::to_string(nlsq.constant_scaling_threshold) + ", individual";
      return resolved;
    }
    case PerAngleModeRequest::kFourier: {
      const int coefficients = 1 + 2 * nlsq.fourier_order;
      if (n_angles >= coefficients) {
        return {PerAngleMode::kFourier, 2 * coefficients,
                "fourier of order " + std::to_string(nlsq.fourier_order)};
      }
      ResolvedScaling resolved = individual;
      resolved.reason = "fourier needs >= " + std::to_string(coefficients) + " angles, have " +
                        std::to_string(n_angles) + ": individual";
      return resolved;
    }
  }
  throw std::invalid_argument("ResolvePerAngleMode: per_angle_mode " +
                              std::to_string(static_cast<int>(nlsq.per_angle_mode)));
}

namespace {

// Fourier basis row of one angle (docs/model.md, Per-angle scaling): [1, cos(phi), .., cos(K phi),
// sin(phi), .., sin(K phi)], phi in radians.
Eigen::RowVectorXd FourierBasisRow(double phi_degrees, int order) {
  const double phi = phi_degrees * std::numbers::pi / 180.0;
  Eigen::RowVectorXd row(1 + 2 * order);
  row[0] = 1.0;
  for (int m = 1; m <= order; ++m) {
    row[m] = std::cos(m * phi);
    row[order + m] = std::sin(m * phi);
  }
  return row;
}

// Columns j < count of the map are e_j and own their row (row j has no other entry): the leading
// physical block, or every column of the identity map.
int LeadingPassThroughColumns(const ScalingMap& map) {
  int count = 0;
  while (count < map.num_reduced() && count < map.num_full()) {
    const int j = count;
    const bool unit_column = map.matrix(j, j) == 1.0 && map.matrix.col(j).cwiseAbs().sum() == 1.0;
    const bool owned_row = map.matrix.row(j).cwiseAbs().sum() == 1.0;
    if (!unit_column || !owned_row) break;
    ++count;
  }
  return count;
}

}  // namespace

ScalingMap BuildScalingMap(const ResolvedScaling& scaling, int num_physical,
                           const std::vector<std::string>& physical_names,
                           const std::vector<double>& phi_degrees,
                           const std::vector<ScalingEstimate>& per_angle_start, int fourier_order) {
  const int n = static_cast<int>(phi_degrees.size());
  if (num_physical < 0 || static_cast<int>(physical_names.size()) != num_physical) {
    throw std::invalid_argument("BuildScalingMap: " + std::to_string(physical_names.size()) +
                                " physical names for " + std::to_string(num_physical) +
                                " physical parameters");
  }
  if (static_cast<int>(per_angle_start.size()) != n) {
    throw std::invalid_argument("BuildScalingMap: " + std::to_string(per_angle_start.size()) +
                                " per-angle starts for " + std::to_string(n) + " angles");
  }
  if (scaling.mode == PerAngleMode::kFourier && fourier_order < 1) {
    throw std::invalid_argument(
        "BuildScalingMap: fourier_order = " + std::to_string(fourier_order) + ": must be >= 1");
  }
  // Scaling parameters of the reduced layout: per contrast and per offset.
  int per_quantity = 0;
  switch (scaling.mode) {
    case PerAngleMode::kIndividual:
      per_quantity = n;
      break;
    case PerAngleMode::kConstant:
      per_quantity = 0;
      break;
    case PerAngleMode::kAutoAveraged:
      per_quantity = 1;
      break;
    case PerAngleMode::kFourier:
      per_quantity = 1 + 2 * fourier_order;
      break;
  }
  if (scaling.num_scaling_parameters != 2 * per_quantity) {
    throw std::invalid_argument("BuildScalingMap: " + std::string(ToString(scaling.mode)) +
                                " with " + std::to_string(n) + " angles optimises " +
                                std::to_string(2 * per_quantity) +
                                " scaling parameters, the resolved scaling says " +
                                std::to_string(scaling.num_scaling_parameters));
  }

  const int num_full = num_physical + 2 * n;
  const int num_reduced = num_physical + 2 * per_quantity;
  ScalingMap map;
  map.matrix = Eigen::MatrixXd::Zero(num_full, num_reduced);
  map.shift = Eigen::VectorXd::Zero(num_full);
  map.matrix.topLeftCorner(num_physical, num_physical).setIdentity();
  map.reduced_names = physical_names;
  const int contrast_row = num_physical;    // first contrast of the full layout
  const int offset_row = num_physical + n;  // first offset of the full layout
  const int contrast_col = num_physical;    // first contrast parameter of the reduced layout
  const int offset_col = num_physical + per_quantity;
  switch (scaling.mode) {
    case PerAngleMode::kIndividual:
      map.matrix.bottomRightCorner(2 * n, 2 * n).setIdentity();
      for (const char* quantity : {"contrast", "offset"}) {
        for (int k = 0; k < n; ++k) {
          map.reduced_names.push_back(std::string(quantity) + "[" + std::to_string(k) + "]");
        }
      }
      break;
    case PerAngleMode::kConstant:
      for (int k = 0; k < n; ++k) {
        map.shift[contrast_row + k] = per_angle_start[static_cast<size_t>(k)].contrast;
        map.shift[offset_row + k] = per_angle_start[static_cast<size_t>(k)].offset;
      }
      break;
    case PerAngleMode::kAutoAveraged:
      map.matrix.block(contrast_row, contrast_col, n, 1).setOnes();
      map.matrix.block(offset_row, offset_col, n, 1).setOnes();
      map.reduced_names.push_back("contrast");
      map.reduced_names.push_back("offset");
      break;
    case PerAngleMode::kFourier: {
      for (int k = 0; k < n; ++k) {
        const Eigen::RowVectorXd row =
            FourierBasisRow(phi_degrees[static_cast<size_t>(k)], fourier_order);
        map.matrix.block(contrast_row + k, contrast_col, 1, per_quantity) = row;
        map.matrix.block(offset_row + k, offset_col, 1, per_quantity) = row;
      }
      for (const char* quantity : {"contrast", "offset"}) {
        const std::string prefix = std::string(quantity) + "_fourier_";
        map.reduced_names.push_back(prefix + "c0");
        for (int m = 1; m <= fourier_order; ++m) {
          map.reduced_names.push_back(prefix + "c" + std::to_string(m));
        }
        for (int m = 1; m <= fourier_order; ++m) {
          map.reduced_names.push_back(prefix + "s" + std::to_string(m));
        }
      }
      break;
    }
  }
  HOMODYNE_CHECK(static_cast<int>(map.reduced_names.size()) == num_reduced);
  return map;
}

bool IsIdentity(const ScalingMap& map) {
  return map.num_full() == map.num_reduced() && map.matrix.isIdentity(0.0) &&
         (map.shift.array() == 0.0).all();
}

Eigen::VectorXd ReduceStartingPoint(const ScalingMap& map, const Eigen::VectorXd& full_start) {
  HOMODYNE_CHECK(full_start.size() == map.num_full());
  const Eigen::VectorXd target = full_start - map.shift;
  const int copied = LeadingPassThroughColumns(map);
  Eigen::VectorXd reduced(map.num_reduced());
  // The pass-through block exactly, from full_start itself (its shift is zero or ignored below).
  for (int j = 0; j < copied; ++j) reduced[j] = full_start[j] - map.shift[j];
  const int rest_rows = map.num_full() - copied;
  const int rest_cols = map.num_reduced() - copied;
  if (rest_cols > 0) {
    // The remaining block is decoupled from the pass-through rows (they own their rows), so its
    // least-squares solution is that of the whole system.
    const Eigen::MatrixXd block = map.matrix.bottomRightCorner(rest_rows, rest_cols);
    reduced.tail(rest_cols) = block.completeOrthogonalDecomposition().solve(target.tail(rest_rows));
  }
  return reduced;
}

BoundBox ReduceBounds(const ScalingMap& map, const Eigen::VectorXd& full_lower,
                      const Eigen::VectorXd& full_upper) {
  BoundBox box;
  if (full_lower.size() == 0 && full_upper.size() == 0) return box;
  HOMODYNE_CHECK(full_lower.size() == map.num_full() && full_upper.size() == map.num_full());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  box.lower = Eigen::VectorXd::Constant(map.num_reduced(), -kInf);
  box.upper = Eigen::VectorXd::Constant(map.num_reduced(), kInf);
  for (int j = 0; j < map.num_reduced(); ++j) {
    const auto column = map.matrix.col(j);
    const bool zero_one = ((column.array() == 0.0) || (column.array() == 1.0)).all();
    if (!zero_one || (column.array() == 0.0).all()) continue;  // harmonic: unbounded
    for (int i = 0; i < map.num_full(); ++i) {
      if (column[i] != 1.0) continue;
      box.lower[j] = std::max(box.lower[j], full_lower[i]);
      box.upper[j] = std::min(box.upper[j], full_upper[i]);
    }
  }
  return box;
}

ExpandedSolution ExpandSolution(const ScalingMap& map, const Eigen::VectorXd& reduced_theta,
                                const Eigen::MatrixXd& reduced_covariance,
                                double covariance_scale) {
  HOMODYNE_CHECK(reduced_theta.size() == map.num_reduced());
  const bool identity = IsIdentity(map);
  ExpandedSolution solution;
  solution.theta = identity ? reduced_theta : map.Expand(reduced_theta);
  if (reduced_covariance.size() == 0) return solution;
  HOMODYNE_CHECK(reduced_covariance.rows() == map.num_reduced() &&
                 reduced_covariance.cols() == map.num_reduced());
  if (identity) {
    solution.covariance = reduced_covariance;
  } else {
    solution.covariance = map.matrix * reduced_covariance * map.matrix.transpose();
    // Exactly symmetric, as the core's covariance.
    solution.covariance = 0.5 * (solution.covariance + solution.covariance.transpose()).eval();
  }
  if (covariance_scale != 1.0) solution.covariance *= covariance_scale;
  solution.uncertainties = solution.covariance.diagonal().cwiseMax(0.0).cwiseSqrt();
  return solution;
}

int EffectiveParameterCount(PerAngleMode mode, int num_physical, int num_angles,
                            int num_optimised) {
  switch (mode) {
    case PerAngleMode::kAutoAveraged:
      return 2 * num_angles + num_physical;
    case PerAngleMode::kConstant:
      return num_physical;
    case PerAngleMode::kIndividual:
    case PerAngleMode::kFourier:
      return num_optimised;
  }
  return num_optimised;
}

ScalingMap FixParameters(const ScalingMap& map, const std::vector<bool>& fixed_full,
                         const Eigen::VectorXd& full_start) {
  HOMODYNE_CHECK(static_cast<int>(fixed_full.size()) == map.num_full());
  HOMODYNE_CHECK(full_start.size() == map.num_full());
  const Eigen::VectorXd reduced_start = ReduceStartingPoint(map, full_start);
  std::vector<int> kept;
  ScalingMap fixed = map;
  for (int j = 0; j < map.num_reduced(); ++j) {
    bool only_fixed = true;
    for (int i = 0; i < map.num_full(); ++i) {
      if (map.matrix(i, j) != 0.0 && !fixed_full[static_cast<size_t>(i)]) only_fixed = false;
    }
    if (only_fixed) {
      fixed.shift += map.matrix.col(j) * reduced_start[j];
    } else {
      kept.push_back(j);
    }
  }
  fixed.matrix.resize(map.num_full(), static_cast<Eigen::Index>(kept.size()));
  fixed.reduced_names.clear();
  for (size_t k = 0; k < kept.size(); ++k) {
    fixed.matrix.col(static_cast<Eigen::Index>(k)) = map.matrix.col(kept[k]);
    fixed.reduced_names.push_back(map.reduced_names[static_cast<size_t>(kept[k])]);
  }
  return fixed;
}

}  // namespace homodyne
