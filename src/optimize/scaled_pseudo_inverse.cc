// InvertScaledBlock (scaled_pseudo_inverse.h).
#include "optimize/scaled_pseudo_inverse.h"

#include <algorithm>
#include <cmath>

namespace homodyne {

bool InvertScaledBlock(const Eigen::MatrixXd& a, const std::vector<int>& indices,
                       ScaledPseudoInverse& result) {
  const int count = static_cast<int>(indices.size());
  result.scale.resize(count);
  result.pseudo_inverse = false;
  // An empty block (no free parameter: every one held on a bound) has the empty inverse; the
  // eigen-decomposition below would read the largest of no eigenvalues.
  if (count == 0) {
    result.scaled_inverse.resize(0, 0);
    result.undetermined_floor.resize(0, 0);
    return true;
  }
  for (int i = 0; i < count; ++i) {
    const double diagonal = a(indices[i], indices[i]);
    result.scale[i] = diagonal > 0.0 ? 1.0 / std::sqrt(diagonal) : 0.0;
    if (!(diagonal > 0.0)) result.pseudo_inverse = true;
  }
  Eigen::MatrixXd scaled(count, count);
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      scaled(i, j) = result.scale[i] * a(indices[i], indices[j]) * result.scale[j];
    }
  }
  if (!scaled.allFinite()) return false;
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(scaled);
  if (eigen.info() != Eigen::Success) return false;
  const Eigen::VectorXd& values = eigen.eigenvalues();
  const double cutoff = kPseudoInverseRcond * std::max(values.maxCoeff(), 0.0);
  const Eigen::MatrixXd& vectors = eigen.eigenvectors();
  Eigen::VectorXd inverse_values(count);
  Eigen::VectorXd floor_values = Eigen::VectorXd::Zero(count);
  for (int i = 0; i < count; ++i) {
    if (values[i] > cutoff && values[i] > 0.0) {
      inverse_values[i] = 1.0 / values[i];
    } else {
      inverse_values[i] = 0.0;
      result.pseudo_inverse = true;
      if (cutoff > 0.0) floor_values[i] = 1.0 / cutoff;
    }
  }
  result.scaled_inverse = vectors * inverse_values.asDiagonal() * vectors.transpose();
  result.undetermined_floor = vectors * floor_values.asDiagonal() * vectors.transpose();
  return true;
}

}  // namespace homodyne
