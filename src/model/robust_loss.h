// The loss as a pass applies it (docs/model.md, Robust loss): what PassKernel, the mode bodies
// (mode_point.h) and the pass backends pass along. The per-point arithmetic is in
// robust_loss_tile.h, which only the kernel bodies include. Plain types only, for the reasons of
// include/homodyne/robust_loss.h.
#pragma once

#include "homodyne/robust_loss.h"

namespace homodyne {

// How a pass under a robust loss rescales each point's row of [J | e] (robust_loss_tile.h):
//   kScipy  scipy's least_squares: J by sqrt(J_scale), J_scale = max(rho' + 2 z rho'', EPS),
//           e by rho' / sqrt(J_scale): the Gauss-Newton model the fits minimise with.
//   kIrls   iteratively reweighted least squares: J and e both by sqrt(rho'), so that J^T J is
//           J^T diag(rho') J, the curvature of the majorizer of the cost (rho concave in z), and
//           J^T e the same exact gradient J^T (rho' e): what the robust variable projection
//           of the global phase solves its per-angle scaling with (docs/design.md section 4c).
// Either way the (e, e) entry receives s^2 sum rho(z). Ignored under the linear loss.
enum class PassWeighting : int { kScipy = 0, kIrls };

// The loss as a pass applies it: the function, the residual scale in data units and the
// rescaling.
struct PassLoss {
  LossFunction function = LossFunction::kLinear;
  double residual_scale = 1.0;  // sigma * f_scale (data units), > 0
  PassWeighting weighting = PassWeighting::kScipy;
};

}  // namespace homodyne
