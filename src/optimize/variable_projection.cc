// VariableProjectionProblem and SolveBoxedQuadratic (src/optimize/variable_projection.h).
#include "optimize/variable_projection.h"

#include "optimize/scaled_pseudo_inverse.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace homodyne {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// VariableProjectionProblem::SumsPhysicalBlock: the angles from which a two-component full pass
// sums the physical block over them. The sum's per-point part (about 250 multiply-adds) is shared
// by the angles and each angle's own Gram rows cost about 64 operations instead of 152, so it pays
// from about 4 angles on by the count; it was measured at 23 (docs/design.md section 2, The
// two-component physical block summed over the angles), and 8 keeps the fits of fewer angles as
// they were.
constexpr int kMinSummedAngles = 8;
// A summed pass whose contrast moves exceed this (relative) after all is taken again per angle.
constexpr double kSummedMoveLimit = 1e-9;

// A contrast this close to 0 would zero the Jacobian's physical columns at the evaluated point
// (they are contrast * d g1^2 / d theta); the pass is taken at this contrast instead and the
// result transformed to the projected one (the transform handles any evaluation point).
constexpr double kMinEvaluationContrast = 1e-6;

// The minimum-norm solution of a x = rhs for a symmetric positive semi-definite a (the shared
// Jacobi-scaled pseudo-inverse); 0 where the decomposition fails (non-finite input).
Eigen::MatrixXd SolvePseudoInverse(const Eigen::MatrixXd& a, const Eigen::MatrixXd& rhs) {
  std::vector<int> all(static_cast<size_t>(a.rows()));
  std::iota(all.begin(), all.end(), 0);
  ScaledPseudoInverse inverse;
  if (!InvertScaledBlock(a, all, inverse)) return Eigen::MatrixXd::Zero(rhs.rows(), rhs.cols());
  return inverse.Solve(rhs);
}

}  // namespace

Eigen::VectorXd SolveBoxedQuadratic(const Eigen::MatrixXd& a, const Eigen::VectorXd& b,
                                    const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                                    Eigen::VectorXd start) {
  const int n = static_cast<int>(b.size());
  Eigen::VectorXd x = start.cwiseMax(lower).cwiseMin(upper);
  if (n == 0) return x;
  // at[i]: -1 held at its lower bound, +1 at its upper bound, 0 free.
  std::vector<int> at(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    if (x[i] <= lower[i]) at[static_cast<size_t>(i)] = -1;
    if (x[i] >= upper[i]) at[static_cast<size_t>(i)] = 1;
  }
  // Each round either ends, releases one bound (the objective then strictly falls) or holds one
  // more variable; 4 (n + 1) rounds is ample for these sizes and bounds the loop regardless.
  for (int round = 0; round < 4 * (n + 1); ++round) {
    std::vector<int> free;
    for (int i = 0; i < n; ++i) {
      if (at[static_cast<size_t>(i)] == 0) free.push_back(i);
    }
    if (!free.empty()) {
      // Minimum-norm step of the free variables to the minimum of the free subproblem.
      const Eigen::VectorXd residual = b - a * x;
      const Eigen::VectorXd step = SolvePseudoInverse(a(free, free), residual(free));
      // The longest feasible fraction of the step; the variable that blocks it is held.
      double fraction = 1.0;
      int blocking = -1;
      int blocking_side = 0;
      for (size_t f = 0; f < free.size(); ++f) {
        const int i = free[f];
        const double delta = step[static_cast<Eigen::Index>(f)];
        if (delta < 0.0 && x[i] + delta < lower[i] && (lower[i] - x[i]) / delta < fraction) {
          fraction = (lower[i] - x[i]) / delta, blocking = i, blocking_side = -1;
        } else if (delta > 0.0 && x[i] + delta > upper[i] && (upper[i] - x[i]) / delta < fraction) {
          fraction = (upper[i] - x[i]) / delta, blocking = i, blocking_side = 1;
        }
      }
      for (size_t f = 0; f < free.size(); ++f) {
        x[free[f]] += fraction * step[static_cast<Eigen::Index>(f)];
      }
      if (blocking >= 0) {
        x[blocking] = blocking_side < 0 ? lower[blocking] : upper[blocking];
        at[static_cast<size_t>(blocking)] = blocking_side;
        continue;
      }
    }
    // Free subproblem solved: release the held variable whose multiplier has the wrong sign
    // (its gradient points into the box) by the largest amount, if any.
    const Eigen::VectorXd gradient = a * x - b;
    int release = -1;
    double worst = 0.0;
    for (int i = 0; i < n; ++i) {
      const int side = at[static_cast<size_t>(i)];
      const double into_box = side == -1 ? -gradient[i] : side == 1 ? gradient[i] : 0.0;
      if (into_box > worst && lower[i] < upper[i]) worst = into_box, release = i;
    }
    if (release < 0) break;
    at[static_cast<size_t>(release)] = 0;
  }
  return x;
}

VariableProjectionProblem::VariableProjectionProblem(BatchedObjective& objective, ScalingMap map,
                                                     BoundBox bounds,
                                                     const Eigen::VectorXd& reduced_start)
    : objective_(objective), map_(std::move(map)), bounds_(std::move(bounds)) {
  const int p_full = objective_.num_parameters();
  const int p_physical = objective_.num_physical();
  const int p_reduced = map_.num_reduced();
  if (map_.num_full() != p_full || reduced_start.size() != p_reduced) {
    throw std::invalid_argument(
        "variable projection: the map has " + std::to_string(map_.num_full()) + " x " +
        std::to_string(p_reduced) + " entries for " + std::to_string(p_full) +
        " parameters and a start of " + std::to_string(reduced_start.size()));
  }
  if (bounds_.lower.size() == 0) {
    bounds_.lower = Eigen::VectorXd::Constant(p_reduced, -kInf);
    bounds_.upper = Eigen::VectorXd::Constant(p_reduced, kInf);
  }
  for (int j = 0; j < p_reduced; ++j) {
    const bool physical = map_.matrix.col(j).head(p_physical).cwiseAbs().maxCoeff() > 0.0;
    const bool scaling = p_full > p_physical &&
                         map_.matrix.col(j).tail(p_full - p_physical).cwiseAbs().maxCoeff() > 0.0;
    if (physical && scaling) {
      throw std::invalid_argument("variable projection: reduced parameter " +
                                  map_.reduced_names[static_cast<size_t>(j)] +
                                  " moves both physical and scaling parameters");
    }
    (scaling ? linear_ : nonlinear_).push_back(j);
  }
  linear_estimate_ = reduced_start(linear_);
}

Eigen::VectorXd VariableProjectionProblem::NonlinearPart(const Eigen::VectorXd& reduced) const {
  return reduced(nonlinear_);
}

BoundBox VariableProjectionProblem::NonlinearBounds() const {
  return {bounds_.lower(nonlinear_), bounds_.upper(nonlinear_)};
}

std::vector<std::string> VariableProjectionProblem::NonlinearNames() const {
  std::vector<std::string> names;
  for (int j : nonlinear_) names.push_back(map_.reduced_names[static_cast<size_t>(j)]);
  return names;
}

LevenbergMarquardtOptions VariableProjectionProblem::LocalFitOptions(
    LevenbergMarquardtOptions base) const {
  const BoundBox bounds = NonlinearBounds();
  base.lower_bounds = bounds.lower;
  base.upper_bounds = bounds.upper;
  base.parameter_names = NonlinearNames();
  base.resume_state.reset();
  // Where the full pass sums the physical block over the angles (SumsPhysicalBlock), a trial
  // is judged by a scaling pass and only an accepted one gets the full pass, at the scaling that
  // scaling pass solved: a rejected trial costs a scaling pass instead of a full one.
  if (SumsPhysicalBlock()) base.trial_evaluation = TrialEvaluation::kCostOnlyPass;
  return base;
}

VariableProjectionProblem::EvaluatedPoint VariableProjectionProblem::EvaluatedPointAt(
    const Eigen::VectorXd& n) const {
  const int n_linear = static_cast<int>(linear_.size());
  EvaluatedPoint point;
  point.z.resize(map_.num_reduced());
  for (size_t i = 0; i < nonlinear_.size(); ++i) {
    point.z[nonlinear_[i]] = n[static_cast<Eigen::Index>(i)];
  }
  point.l0 = linear_estimate_.cwiseMax(bounds_.lower(linear_)).cwiseMin(bounds_.upper(linear_));
  for (int i = 0; i < n_linear; ++i) point.z[linear_[static_cast<size_t>(i)]] = point.l0[i];
  point.theta_on_map = map_.Expand(point.z);
  point.theta = point.theta_on_map;
  for (int k = 0; k < objective_.num_angles(); ++k) {
    double& contrast = point.theta[objective_.ContrastIndex(k)];
    if (std::abs(contrast) < kMinEvaluationContrast) contrast = kMinEvaluationContrast;
  }
  return point;
}

VariableProjectionProblem::ScalingSolution VariableProjectionProblem::SolveScaling(
    const EvaluatedPoint& point, const std::vector<Eigen::Matrix3d>& scaling_grams) const {
  const int n_angles = objective_.num_angles();
  const int n_linear = static_cast<int>(linear_.size());
  // The quadratic in l: per angle, moving (contrast, offset) by u changes the residual by
  // -(u_c g + u_o), so chi2 ~ sum_k u^T Q_k u - 2 u^T q_k + const with u = W_k l + base_k
  // (exact under the linear loss; under a robust one the majorizer of the cost, from the
  // weighted Gram matrices).
  std::vector<Eigen::MatrixXd> w(static_cast<size_t>(n_angles), Eigen::MatrixXd(2, n_linear));
  std::vector<Eigen::Vector2d> base(static_cast<size_t>(n_angles));
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n_linear, n_linear);
  Eigen::VectorXd b = Eigen::VectorXd::Zero(n_linear);
  for (int k = 0; k < n_angles; ++k) {
    const Eigen::Matrix3d& gram = scaling_grams[static_cast<size_t>(k)];
    const int rows[2] = {objective_.ContrastIndex(k), objective_.OffsetIndex(k)};
    Eigen::MatrixXd& wk = w[static_cast<size_t>(k)];
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < n_linear; ++i)
        wk(r, i) = map_.matrix(rows[r], linear_[static_cast<size_t>(i)]);
      // (contrast, offset) at l = 0, minus the evaluated values: u = W l + base.
      base[static_cast<size_t>(k)][r] =
          point.theta_on_map[rows[r]] - (wk.row(r) * point.l0)(0) - point.theta[rows[r]];
    }
    Eigen::Matrix2d q;
    q << gram(0, 0), gram(0, 1), gram(1, 0), gram(1, 1);
    const Eigen::Vector2d qe(gram(2, 0), gram(2, 1));
    a += wk.transpose() * q * wk;
    b += wk.transpose() * (qe - q * base[static_cast<size_t>(k)]);
  }
  ScalingSolution solution;
  solution.l = SolveBoxedQuadratic(a, b, bounds_.lower(linear_), bounds_.upper(linear_), point.l0);
  solution.moves.resize(static_cast<size_t>(n_angles));
  for (int k = 0; k < n_angles; ++k) {
    solution.moves[static_cast<size_t>(k)] =
        w[static_cast<size_t>(k)] * solution.l + base[static_cast<size_t>(k)];
  }
  return solution;
}

NormalEquations VariableProjectionProblem::ProjectedEquations(const Eigen::VectorXd& n,
                                                              Eigen::VectorXd* reduced_point) {
  const int p_physical = objective_.num_physical();
  const int n_angles = objective_.num_angles();
  const int n_linear = static_cast<int>(linear_.size());
  const Eigen::VectorXd linear_lower = bounds_.lower(linear_);
  const Eigen::VectorXd linear_upper = bounds_.upper(linear_);

  // The evaluated point: n with the current linear estimate (contrasts kept off 0).
  const EvaluatedPoint point = EvaluatedPointAt(n);
  const Eigen::VectorXd& theta = point.theta;
  // At the scaling the last Cost solved at this n (the LM core's accepted trial, kCostOnlyPass)
  // the moves below are rounding, so the physical block may come summed over the angles
  // (PassColumns::kSummedPhysical): the transform scales it by angle 0's factor, within rounding
  // of each angle's own. Elsewhere, or if a move is larger after all, each angle's block.
  bool summed = SumsPhysicalBlock() && solved_at_.size() == n.size() && solved_at_ == n &&
                point.theta == point.theta_on_map;
  solved_at_.resize(0);
  ++passes_;
  // Under a robust loss the pass weights each point's row by sqrt(rho'(z)) (see the top of
  // variable_projection.h); under the linear loss it is the plain pass.
  AngleGrams angle_grams =
      objective_.AccumulateAngleGrams(theta, /*weighted=*/!objective_.loss().is_linear(),
                                      summed ? PassColumns::kSummedPhysical : PassColumns::kAll);
  const int m = static_cast<int>(angle_grams.grams.front().rows()) - 1;  // e column
  const int ci = m - 2;                                                  // contrast column
  const int oi = m - 1;                                                  // offset column
  std::vector<Eigen::Matrix3d> scaling_grams(static_cast<size_t>(n_angles));
  const auto solve = [&] {
    for (int k = 0; k < n_angles; ++k) {
      scaling_grams[static_cast<size_t>(k)] =
          angle_grams.grams[static_cast<size_t>(k)].bottomRightCorner(3, 3);
    }
    return SolveScaling(point, scaling_grams);
  };
  ScalingSolution scaling = solve();
  if (summed) {
    for (int k = 0; k < n_angles; ++k) {
      const double contrast = theta[objective_.ContrastIndex(k)];
      if (!(std::abs(scaling.moves[static_cast<size_t>(k)][0]) <=
            kSummedMoveLimit * std::abs(contrast))) {
        summed = false;
      }
    }
    if (!summed) {
      ++passes_;
      angle_grams = objective_.AccumulateAngleGrams(theta, /*weighted=*/false, PassColumns::kAll);
      scaling = solve();
    }
  }
  const Eigen::VectorXd& l = scaling.l;

  // Each angle's Gram matrix moved to (contrast, offset) = W l + base: physical columns scale
  // by contrast_new / contrast_evaluated, the residual column moves by -(du_c g + du_o). Under
  // a robust loss its (e, e) entry becomes the majorizer at l: an upper bound of the cost there.
  const int p_full = objective_.num_parameters();
  const double scale = 2.0 / (objective_.sigma() * objective_.sigma());
  Eigen::MatrixXd jtj = Eigen::MatrixXd::Zero(p_full, p_full);
  Eigen::VectorXd jtr = Eigen::VectorXd::Zero(p_full);
  double chi2 = 0.0;
  std::vector<int> index(static_cast<size_t>(m));
  for (int i = 0; i < p_physical; ++i) index[static_cast<size_t>(i)] = i;
  for (int k = 0; k < n_angles; ++k) {
    const Eigen::Vector2d& u = scaling.moves[static_cast<size_t>(k)];
    const double contrast_evaluated = theta[objective_.ContrastIndex(k)];
    Eigen::MatrixXd transform = Eigen::MatrixXd::Identity(m + 1, m + 1);
    for (int i = 0; i < p_physical; ++i) {
      transform(i, i) = (contrast_evaluated + u[0]) / contrast_evaluated;
    }
    transform(ci, m) = -u[0];
    transform(oi, m) = -u[1];
    const Eigen::MatrixXd gram =
        transform.transpose() * angle_grams.grams[static_cast<size_t>(k)] * transform;
    index[static_cast<size_t>(ci)] = objective_.ContrastIndex(k);
    index[static_cast<size_t>(oi)] = objective_.OffsetIndex(k);
    for (int c = 0; c < m; ++c) {
      for (int r = 0; r < m; ++r) {
        jtj(index[static_cast<size_t>(r)], index[static_cast<size_t>(c)]) += scale * gram(r, c);
      }
      jtr[index[static_cast<size_t>(c)]] -= scale * gram(m, c);  // J_r = -J_model / sigma
    }
    chi2 += scale * gram(m, m);
  }

  // Reduced layout, then Kaufman's Schur complement of the free linear block.
  const Eigen::MatrixXd h = map_.matrix.transpose() * jtj * map_.matrix;
  const Eigen::VectorXd g = map_.matrix.transpose() * jtr;
  std::vector<int> free_linear;
  for (int i = 0; i < n_linear; ++i) {
    if (l[i] > linear_lower[i] && l[i] < linear_upper[i]) {
      free_linear.push_back(linear_[static_cast<size_t>(i)]);
    }
  }
  NormalEquations result;
  result.jtj = h(nonlinear_, nonlinear_);
  result.jtr = g(nonlinear_);
  if (!free_linear.empty()) {
    const Eigen::MatrixXd h_ll = h(free_linear, free_linear);
    const Eigen::MatrixXd h_ln = h(free_linear, nonlinear_);
    const Eigen::MatrixXd x = SolvePseudoInverse(h_ll, h_ln);
    result.jtj -= h_ln.transpose() * x;
    result.jtr -= x.transpose() * g(free_linear);
  }
  result.jtj = (0.5 * (result.jtj + result.jtj.transpose())).eval();
  result.chi2 = chi2;
  result.num_points = 2 * angle_grams.finite_points;
  if (std::isfinite(chi2) && l.allFinite()) linear_estimate_ = l;
  if (reduced_point != nullptr) {
    *reduced_point = point.z;
    for (int i = 0; i < n_linear; ++i) (*reduced_point)[linear_[static_cast<size_t>(i)]] = l[i];
  }
  return result;
}

double VariableProjectionProblem::ProjectedCost(const Eigen::VectorXd& n) {
  const int n_angles = objective_.num_angles();
  const EvaluatedPoint point = EvaluatedPointAt(n);
  ++passes_;
  const AngleGrams angle_grams =
      objective_.AccumulateAngleGrams(point.theta, /*weighted=*/false, PassColumns::kScaling);
  std::vector<Eigen::Matrix3d> scaling_grams(static_cast<size_t>(n_angles));
  for (int k = 0; k < n_angles; ++k) {
    scaling_grams[static_cast<size_t>(k)] = angle_grams.grams[static_cast<size_t>(k)];
  }
  const ScalingSolution scaling = SolveScaling(point, scaling_grams);
  // The (e, e) entry of each angle's Gram moved to (contrast, offset) = W l + base: t^T G t with
  // t = (-u_c, -u_o, 1), as ProjectedEquations' transform gives it.
  const double scale = 2.0 / (objective_.sigma() * objective_.sigma());
  double chi2 = 0.0;
  for (int k = 0; k < n_angles; ++k) {
    const Eigen::Vector2d& u = scaling.moves[static_cast<size_t>(k)];
    const Eigen::Vector3d t(-u[0], -u[1], 1.0);
    chi2 += scale * (t.transpose() * scaling_grams[static_cast<size_t>(k)] * t)(0, 0);
  }
  if (std::isfinite(chi2) && scaling.l.allFinite()) {
    linear_estimate_ = scaling.l;
    solved_at_ = n;
  } else {
    solved_at_.resize(0);
  }
  return chi2;
}

bool VariableProjectionProblem::SumsPhysicalBlock() const {
  return objective_.loss().is_linear() &&
         objective_.model().mode() == AnalysisMode::kTwoComponent &&
         objective_.num_angles() >= kMinSummedAngles;
}

NormalEquations VariableProjectionProblem::Accumulate(const Eigen::VectorXd& n) {
  return ProjectedEquations(n, nullptr);
}

double VariableProjectionProblem::Cost(const Eigen::VectorXd& n) {
  // Under the linear loss the projected chi2 needs only the scaling columns' sums (a pass of
  // about a cost pass's work on the CPU); under a robust loss the weighted full pass.
  if (objective_.loss().is_linear()) return ProjectedCost(n);
  return ProjectedEquations(n, nullptr).chi2;
}

Eigen::VectorXd VariableProjectionProblem::ReducedPoint(const Eigen::VectorXd& n) {
  Eigen::VectorXd reduced;
  ProjectedEquations(n, &reduced);
  return reduced;
}

}  // namespace homodyne
