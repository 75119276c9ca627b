// A least-squares problem in the reduced parameters of a per-angle scaling mode (per_angle_mode.h;
// docs/model.md, Per-angle scaling): the objective keeps its full layout [physical, contrasts,
// offsets] and this wrapper maps theta_full = T theta_reduced + shift (T = ScalingMap::matrix).
// The map is linear, so J_reduced = J_full T and the normal equations transform exactly:
//   J^T J -> T^T (J^T J) T,   J^T r -> T^T (J^T r),   chi2 and the residual count unchanged.
#pragma once

#include <cstdint>

#include <Eigen/Dense>

#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

class ReparametrizedProblem : public LeastSquaresProblem {
 public:
  // base: the full-layout problem; not owned, must outlive this object. map.num_full() must equal
  // base.num_parameters() (checked: programming error otherwise). An identity map (individual
  // mode, IsIdentity) forwards every call unchanged, so the results are bitwise the base's.
  ReparametrizedProblem(LeastSquaresProblem& base, ScalingMap map);

  int num_parameters() const override { return map_.num_reduced(); }
  // The base's count: the reparametrisation changes no residual. The core's dof is then
  // num_residuals - num_reduced; the reference's n_eff may differ (EffectiveParameterCount).
  int64_t num_residuals() const override { return base_.num_residuals(); }
  NormalEquations Accumulate(const Eigen::VectorXd& theta) override;
  double Cost(const Eigen::VectorXd& theta) override;

  const ScalingMap& map() const { return map_; }

 private:
  LeastSquaresProblem& base_;
  ScalingMap map_;
  bool identity_;
};

}  // namespace homodyne
