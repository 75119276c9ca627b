// The robust loss of a fit (optimization.nlsq.loss and f_scale; docs/model.md, Robust loss).
// Plain types only: the pass kernel's per-level sources include this header
// (src/model/robust_loss.h), so it must not instantiate any standard-library template.
#pragma once

namespace homodyne {

// rho(z) of scipy.optimize.least_squares, z = (r / f_scale)^2 (docs/model.md, Robust loss):
//   linear  rho = z
//   soft_l1 rho = 2 (sqrt(1 + z) - 1)
//   huber   rho = z for z <= 1, else 2 sqrt(z) - 1
//   cauchy  rho = ln(1 + z)
//   arctan  rho = arctan(z)
enum class LossFunction : int { kLinear = 0, kSoftL1, kHuber, kCauchy, kArctan };

// The loss of a fit: the function and its soft threshold f_scale, in units of the weighted
// residual r = (data - c2) / sigma.
struct LossOptions {
  LossFunction function = LossFunction::kLinear;  // optimization.nlsq.loss
  double f_scale = 1.0;                           // optimization.nlsq.f_scale, > 0 and finite
  bool is_linear() const { return function == LossFunction::kLinear; }
};

}  // namespace homodyne
