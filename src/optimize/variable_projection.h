// Variable projection of the per-angle scaling (docs/design.md section 4b; Golub and Pereyra, SIAM
// J. Numer. Anal. 10 (1973) 413; Kaufman, BIT 15 (1975) 49).
//
// c2 = offset_k + contrast_k g1^2 is linear in each angle's contrast and offset, and the per-angle
// modes (per_angle_mode.h) keep that linear: the reduced parameters z = [n, l] split into the
// nonlinear ones n (physical, the map's columns that touch only physical rows) and the linear ones
// l (contrast and offset coefficients). For given n, chi2(n, l) is an exact quadratic in l, so the
// best l(n) inside its bounds is a small box-constrained quadratic programme. The projected problem
// minimises chi2(n, l(n)) over n alone:
//   - one full pass per evaluation (BatchedObjective::AccumulateAngleGrams): the per-angle Gram
//     matrices at the point evaluated give the quadratic in l, and transform exactly to the
//     Gram matrices at (n, l(n)) (the Jacobian's physical columns scale with the contrast, the
//     residual moves along the contrast and offset columns), so no second pass is needed;
//   - a cost evaluation (Cost: the LM core's trial points, the global phase's screening and
//     CMA-ES) needs only the 3 x 3 Gram of [d c2 / d contrast_k, d c2 / d offset_k, e] per angle
//     (the quadratic in l and the residual's move): one scaling pass (PassColumns::kScaling),
//     about a cost pass's work on the CPU instead of a full pass's;
//   - Kaufman's normal equations: the Schur complement of the free linear block,
//       H = H_nn - H_nl H_ll^-1 H_ln,   g = g_n - H_nl H_ll^-1 g_l   (g_l = 0 at l(n)),
//     the Gauss-Newton model of chi2(n, l(n)); linear parameters held on a bound are constants.
// Why: the LM core then searches only the 3 or 7 physical parameters, and every trial point is
// judged with the best scaling for it, which widens the basin of convergence (measured in
// docs/performance.md, The global phase). The final covariance still comes from the full problem:
// the caller refines from FullPoint() with the reduced problem (ReparametrizedProblem).
//
// Under a robust loss (the objective's PassOptions::loss; docs/design.md section 4c) the cost is
// no quadratic in l. The pass then weights each point's row of [J | e] by sqrt(rho'(z)) at the
// evaluated point (n, l0) (BatchedObjective::AccumulateAngleGrams, weighted), and the same
// algebra gives one step of iteratively reweighted least squares: rho is concave in z, so the
// weighted quadratic is a majorizer of the cost in l that touches it at l0; its boxed minimum l1
// lowers the cost, and the value returned, the majorizer at l1, is an upper bound of the cost at
// (n, l1), equal to it once l stops moving. The normal equations are the majorizer's: J^T
// diag(rho') J and the exact gradient J^T (rho' e). l1 becomes the estimate of the next
// evaluation, so along a local fit the scaling converges with the physical parameters; one pass
// per evaluation, as under the linear loss.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// argmin over lower <= x <= upper of 0.5 x^T A x - b^T x, A symmetric positive semi-definite
// (small: a few dozen variables). Primal active set: bounds may be -inf / +inf. A singular free
// block is solved in the least-squares sense (minimum-norm step, eigenvalues below 1e-12 times
// the largest dropped), so a degenerate pair (contrast and offset of a flat angle) gives a finite
// answer. start: a feasible guess (clipped to the bounds); deterministic.
Eigen::VectorXd SolveBoxedQuadratic(const Eigen::MatrixXd& a, const Eigen::VectorXd& b,
                                    const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                                    Eigen::VectorXd start);

class VariableProjectionProblem : public LeastSquaresProblem {
 public:
  // objective: the full-layout problem (batched_objective.h), not owned, must outlive this object.
  // map: the per-angle mode's reduced layout (per_angle_mode.h), after FixParameters; every reduced
  // column touches either physical rows only (nonlinear) or contrast/offset rows only (linear).
  // bounds: of the reduced parameters (ReduceBounds; empty = unbounded). reduced_start: the
  // reduced start; its linear part is where the first evaluation takes the scaling from.
  // Throws std::invalid_argument on inconsistent sizes or a column that mixes both kinds.
  VariableProjectionProblem(BatchedObjective& objective, ScalingMap map, BoundBox bounds,
                            const Eigen::VectorXd& reduced_start);

  // The nonlinear parameters n (in the reduced layout's order).
  int num_parameters() const override { return static_cast<int>(nonlinear_.size()); }
  int64_t num_residuals() const override { return objective_.num_residuals(); }
  // Kaufman's normal equations of chi2(n, l(n)) (see the top of this file), one pass; under a
  // robust loss those of the majorizer of the robust cost at the new scaling.
  NormalEquations Accumulate(const Eigen::VectorXd& n) override;
  // chi2(n, l(n)): one scaling pass (the projection needs only the per-angle sums of the
  // contrast, offset and e columns), the same l(n) as Accumulate; under a robust loss the full
  // weighted pass and the majorizer's value, an upper bound of the robust cost at (n,
  // linear_estimate()).
  double Cost(const Eigen::VectorXd& n) override;

  // Indices of the nonlinear and linear parameters in the reduced layout.
  const std::vector<int>& nonlinear_indices() const { return nonlinear_; }
  const std::vector<int>& linear_indices() const { return linear_; }
  // The nonlinear part of a reduced point, and bounds of the nonlinear parameters.
  Eigen::VectorXd NonlinearPart(const Eigen::VectorXd& reduced) const;
  BoundBox NonlinearBounds() const;
  std::vector<std::string> NonlinearNames() const;
  // base with the nonlinear parameters' bounds and names and no resume state: the options of a
  // local fit of this problem (from NonlinearPart(start)).
  LevenbergMarquardtOptions LocalFitOptions(LevenbergMarquardtOptions base) const;
  // The reduced point [n, l(n)] at n, from one pass (ends the projection: the caller refines
  // the full problem from here).
  Eigen::VectorXd ReducedPoint(const Eigen::VectorXd& n);
  // Passes made so far.
  int64_t passes() const { return passes_; }
  // The linear estimate the next evaluation is taken at (the best scaling of the last one): the
  // only state carried from one evaluation to the next. Under the linear loss results agree to
  // rounding whatever it is (under a robust loss an evaluation's value depends on it, as one
  // reweighting step from it); restoring it makes a replayed search (global_search.h) continue
  // bitwise.
  const Eigen::VectorXd& linear_estimate() const { return linear_estimate_; }
  void set_linear_estimate(const Eigen::VectorXd& estimate) {
    linear_estimate_ = estimate;
    solved_at_.resize(0);
  }
  // True when a full pass at the scaling the last Cost solved at the same n sums the physical
  // block over the angles (PassColumns::kSummedPhysical): the two-component mode under the
  // linear loss with at least 8 angles. Then LocalFitOptions judges trials by Cost.
  bool SumsPhysicalBlock() const;

 private:
  // Where an evaluation at n takes its pass: the reduced point z (n with the linear estimate l0,
  // clipped to its bounds), theta_on_map = map(z), and theta, theta_on_map with every contrast
  // kept off 0 (kMinEvaluationContrast).
  struct EvaluatedPoint {
    Eigen::VectorXd z;
    Eigen::VectorXd l0;
    Eigen::VectorXd theta_on_map;
    Eigen::VectorXd theta;
  };
  // The best scaling l(n) in its bounds and each angle's move u_k = (contrast, offset) at l(n)
  // minus those at the evaluated theta.
  struct ScalingSolution {
    Eigen::VectorXd l;
    std::vector<Eigen::Vector2d> moves;
  };
  EvaluatedPoint EvaluatedPointAt(const Eigen::VectorXd& n) const;
  // The boxed quadratic in l from each angle's 3 x 3 Gram matrix of [d c2 / d contrast_k,
  // d c2 / d offset_k, e] at point.theta (full symmetric), solved from point.l0: what both
  // ProjectedEquations and ProjectedCost solve.
  ScalingSolution SolveScaling(const EvaluatedPoint& point,
                               const std::vector<Eigen::Matrix3d>& scaling_grams) const;
  // One pass at n with the current linear estimate; returns the reduced normal equations at
  // (n, l(n)) with chi2, and stores l(n) as the next estimate.
  NormalEquations ProjectedEquations(const Eigen::VectorXd& n, Eigen::VectorXd* reduced_point);
  // chi2(n, l(n)) from one scaling pass (PassColumns::kScaling; linear loss only): the same l(n)
  // as ProjectedEquations (SolveScaling), stored as the next estimate, and its chi2 up to the
  // rounding of other sums.
  double ProjectedCost(const Eigen::VectorXd& n);

  BatchedObjective& objective_;
  ScalingMap map_;
  BoundBox bounds_;  // reduced layout; -inf / +inf where unbounded
  std::vector<int> nonlinear_;
  std::vector<int> linear_;
  Eigen::VectorXd linear_estimate_;  // l at the last evaluation: where the next one is taken
  // The n at which the last evaluation was a Cost that solved linear_estimate_ (empty otherwise):
  // a full pass there is at its best scaling up to rounding (ProjectedEquations).
  Eigen::VectorXd solved_at_;
  int64_t passes_ = 0;
};

}  // namespace homodyne
