// The Jacobi-scaled pseudo-inverse (scaled_pseudo_inverse.h).
#include "optimize/scaled_pseudo_inverse.h"

#include <algorithm>
#include <cmath>

namespace homodyne {

Eigen::VectorXd JacobiScale(const Eigen::MatrixXd& a, const std::vector<int>& indices) {
  const int count = static_cast<int>(indices.size());
  Eigen::VectorXd scale(count);
  for (int i = 0; i < count; ++i) {
    const double diagonal = a(indices[i], indices[i]);
    scale[i] = diagonal > 0.0 ? 1.0 / std::sqrt(diagonal) : 0.0;
  }
  return scale;
}

Eigen::MatrixXd ScaledBlock(const Eigen::MatrixXd& x, const std::vector<int>& indices,
                            const Eigen::VectorXd& scale) {
  const int count = static_cast<int>(indices.size());
  Eigen::MatrixXd scaled(count, count);
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) scaled(i, j) = scale[i] * x(indices[i], indices[j]) * scale[j];
  }
  return scaled;
}

bool InvertScaledBlock(const Eigen::MatrixXd& a, const std::vector<int>& indices,
                       ScaledPseudoInverse& result) {
  const int count = static_cast<int>(indices.size());
  result.scale.resize(0);
  result.pseudo_inverse = false;
  // An empty block (no free parameter: every one held on a bound) has the empty inverse; the
  // eigen-decomposition below would read the largest of no eigenvalues.
  if (count == 0) {
    result.scaled_inverse.resize(0, 0);
    result.undetermined_floor.resize(0, 0);
    return true;
  }
  result.scale = JacobiScale(a, indices);
  for (int i = 0; i < count; ++i) {
    if (!(a(indices[i], indices[i]) > 0.0)) result.pseudo_inverse = true;
  }
  const Eigen::MatrixXd scaled = ScaledBlock(a, indices, result.scale);
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
