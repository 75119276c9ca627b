// The Jacobi-scaled pseudo-inverse of a symmetric positive semi-definite block, shared by the LM
// core (covariance, statistical stopping test) and variable projection (boxed QP steps, Kaufman's
// Schur complement), so that every place that inverts normal equations drops the same directions.
#pragma once

#include <vector>

#include <Eigen/Dense>

namespace homodyne {

// Eigenvalues of the scaled block below this times the largest are dropped
// (docs/design.md section 4).
inline constexpr double kPseudoInverseRcond = 1e-12;

// The block A_FF (rows and columns `indices` of a), Jacobi-scaled to S = D A_FF D
// (D_aa = 1 / sqrt(A_aa), 0 where A_aa <= 0), and the pseudo-inverse of S through its
// eigen-decomposition, eigenvalues below kPseudoInverseRcond times the largest dropped:
// A_FF^-1 ~ D S^+ D.
//
// A dropped direction v is one the data do not determine: its true variance 1 / lambda_v is at
// least 1 / cutoff (cutoff = kPseudoInverseRcond * lambda_max), not the 0 that S^+ gives it.
// `undetermined_floor` = sum over dropped v of v v^T / cutoff is that lower bound, for the
// covariance to add (S^+ + floor); steps and the statistical stopping test use S^+ alone, since
// no step along v is determined.
struct ScaledPseudoInverse {
  Eigen::VectorXd scale;               // D (diagonal), one entry per index
  Eigen::MatrixXd scaled_inverse;      // S^+
  Eigen::MatrixXd undetermined_floor;  // sum of v v^T / cutoff over dropped v; zero if none
  bool pseudo_inverse = false;         // a zero diagonal or a dropped eigenvalue

  // D S^+ D rhs: the minimum-norm least-squares solution of A_FF x = rhs (in D-scaled norm).
  Eigen::MatrixXd Solve(const Eigen::MatrixXd& rhs) const {
    return scale.asDiagonal() * (scaled_inverse * (scale.asDiagonal() * rhs));
  }
};

// The Jacobi scaling of the block A_FF (rows and columns `indices` of a): D_aa = 1 / sqrt(A_aa),
// 0 where A_aa <= 0.
Eigen::VectorXd JacobiScale(const Eigen::MatrixXd& a, const std::vector<int>& indices);
// D x_FF D: the block of x at `indices`, scaled by `scale` (JacobiScale of the matrix it scales).
Eigen::MatrixXd ScaledBlock(const Eigen::MatrixXd& x, const std::vector<int>& indices,
                            const Eigen::VectorXd& scale);

// False if the scaled block is not finite or its eigen-decomposition failed (only for absurdly
// scaled input). An empty `indices` (no free parameter) gives true and empty (0 x 0) results.
bool InvertScaledBlock(const Eigen::MatrixXd& a, const std::vector<int>& indices,
                       ScaledPseudoInverse& result);

}  // namespace homodyne
