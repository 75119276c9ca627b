#include "optimize/reparametrized_problem.h"

#include <utility>

#include "homodyne/errors.h"

namespace homodyne {

ReparametrizedProblem::ReparametrizedProblem(LeastSquaresProblem& base, ScalingMap map)
    : base_(base), map_(std::move(map)), identity_(IsIdentity(map_)) {
  HOMODYNE_CHECK(map_.num_full() == base_.num_parameters());
  HOMODYNE_CHECK(map_.shift.size() == map_.num_full());
}

NormalEquations ReparametrizedProblem::Accumulate(const Eigen::VectorXd& theta) {
  HOMODYNE_CHECK(theta.size() == num_parameters());
  if (identity_) return base_.Accumulate(theta);
  NormalEquations full = base_.Accumulate(map_.Expand(theta));
  NormalEquations reduced;
  const Eigen::MatrixXd product = map_.matrix.transpose() * full.jtj * map_.matrix;
  // Exactly symmetric, as the base's J^T J.
  reduced.jtj = 0.5 * (product + product.transpose());
  reduced.jtr = map_.matrix.transpose() * full.jtr;
  reduced.chi2 = full.chi2;
  reduced.num_points = full.num_points;
  return reduced;
}

double ReparametrizedProblem::Cost(const Eigen::VectorXd& theta) {
  HOMODYNE_CHECK(theta.size() == num_parameters());
  if (identity_) return base_.Cost(theta);
  return base_.Cost(map_.Expand(theta));
}

}  // namespace homodyne
