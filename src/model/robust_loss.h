// The loss as a pass applies it (docs/model.md, Robust loss): what PassKernel, the mode bodies
// (mode_point.h) and the pass backends pass along. The per-point arithmetic is in
// robust_loss_tile.h, which only the kernel bodies include. Plain types only, for the reasons of
// include/homodyne/robust_loss.h.
#pragma once

#include "homodyne/robust_loss.h"

namespace homodyne {

// The loss as a pass applies it: the function and the residual scale in data units.
struct PassLoss {
  LossFunction function = LossFunction::kLinear;
  double residual_scale = 1.0;  // sigma * f_scale (data units), > 0
};

}  // namespace homodyne
