// The least-squares problem the LM core minimises (src/optimize/levenberg_marquardt.h) and what
// one pass over the data gives it. Here, at the objective's layer and not the optimiser's, because
// the objective implements it (BatchedObjective) and the optimisers consume it: a header at the
// lower of the two layers that use it lets each include it without climbing (docs/design.md
// section 9, Layers).
//
// Sign convention (used everywhere in this header and by the LM core):
//   residuals  r_n(theta) = (data_n - model_n(theta)) / sigma_n
//   Jacobian   J_nj       = d r_n / d theta_j            (= -d model_n / d theta_j / sigma_n)
//   chi2                  = sum_n r_n^2
//   gradient   g          = J^T r                        (= half the gradient of chi2)
//   Gauss-Newton step     (J^T J) delta = -J^T r
// A problem that computes d model / d theta instead must negate jtr (not jtj) to follow it.
#pragma once

#include <cstdint>

#include <Eigen/Dense>

namespace homodyne {

// What one full pass over the data produces (docs/design.md section 4). Sums are reduced in a
// fixed (batch) order by the producer, so the same theta gives bitwise the same numbers.
struct NormalEquations {
  Eigen::MatrixXd jtj;     // J^T J, P x P, symmetric positive semi-definite
  Eigen::VectorXd jtr;     // J^T r, P
  double chi2 = 0.0;       // sum of r^2 (dimensionless: residuals are divided by sigma)
  int64_t num_points = 0;  // residuals summed in this pass (each counted once per residual)
};

// The least-squares problem the core minimises; strategies implement it
// (docs/design.md section 3). A pass may touch 1e9 points, so the core calls these as rarely as it
// can and records how often.
class LeastSquaresProblem {
 public:
  virtual ~LeastSquaresProblem() = default;

  // P, the length of theta. Constant for the life of the problem.
  virtual int num_parameters() const = 0;
  // Residuals in chi2, for the degrees of freedom dof = num_residuals - num_parameters. A strategy
  // that evaluates the strict upper triangle and counts each point twice
  // (docs/design.md section 1) returns twice the number of evaluated points here, so dof matches
  // the full matrices.
  virtual int64_t num_residuals() const = 0;
  // Full pass: J^T J, J^T r and chi2 at theta, with the sign convention at the top of this file.
  // Non-finite values are allowed in the result (the core rejects such points); exceptions are
  // for failures that must end the run (I/O errors) and propagate out of Minimize.
  virtual NormalEquations Accumulate(const Eigen::VectorXd& theta) = 0;
  // Cost-only pass: chi2 at theta (may be NaN or +inf; such trial points are rejected).
  virtual double Cost(const Eigen::VectorXd& theta) = 0;
};

}  // namespace homodyne
