// The robust loss inside a pass (docs/model.md, Robust loss; docs/design.md section 4c): the
// per-point loss of scipy.optimize.least_squares and its rescaling of one tile of [J | e].
//
// As scipy's least_squares (its construct_loss_function and scale_for_robust_loss_function),
// with z = (e / s)^2, s = sigma f_scale in data units (so z = (r / f_scale)^2, r = e / sigma):
//   cost       = 0.5 f_scale^2 sum rho(z)
//   J_scale    = max(rho'(z) + 2 z rho''(z), DBL_EPSILON)
//   J row     *= sqrt(J_scale)            (every column of the model's Jacobian)
//   e         *= rho'(z) / sqrt(J_scale)
// so that J^T e of the rescaled tile is J^T (rho' e), the exact gradient of the cost, and J^T J
// is scipy's Gauss-Newton model of its Hessian. Under PassWeighting::kIrls (robust_loss.h)
// J_scale = max(rho'(z), DBL_EPSILON) instead: J^T e is the same gradient and J^T J is
// J^T diag(rho') J, iteratively reweighted least squares.
//
// Included only by the per-level kernel sources (through homodyne_pass_variant.h and
// two_component_pass_variant.h); the functions have internal linkage for the reasons of
// gram_block.h.
#pragma once

#include <cmath>

#include "model/gram_block.h"
#include "model/robust_loss.h"
#include "model/tile.h"

namespace homodyne {
namespace pass_kernel {
namespace {

// scipy's loss at z >= 0: rho, rho' and rho'' (derivatives with respect to z).
template <LossFunction kFunction>
inline void EvaluateLoss(double z, double* rho, double* d1, double* d2) {
  if constexpr (kFunction == LossFunction::kSoftL1) {
    const double t = 1.0 + z;
    const double root = std::sqrt(t);
    *rho = 2.0 * (root - 1.0);
    *d1 = 1.0 / root;
    *d2 = -0.5 / (t * root);
  } else if constexpr (kFunction == LossFunction::kHuber) {
    if (z <= 1.0) {
      *rho = z;
      *d1 = 1.0;
      *d2 = 0.0;
    } else {
      const double root = std::sqrt(z);
      *rho = 2.0 * root - 1.0;
      *d1 = 1.0 / root;
      *d2 = -0.5 / (z * root);
    }
  } else if constexpr (kFunction == LossFunction::kCauchy) {
    const double t = 1.0 + z;
    *rho = std::log1p(z);
    *d1 = 1.0 / t;
    *d2 = -1.0 / (t * t);
  } else if constexpr (kFunction == LossFunction::kArctan) {
    const double t = 1.0 + z * z;
    *rho = std::atan(z);
    *d1 = 1.0 / t;
    *d2 = -2.0 * z / (t * t);
  } else {
    *rho = z;
    *d1 = 1.0;
    *d2 = 0.0;
  }
}

// Rescales the tile's first `count` points for the loss (see the top of this file): columns
// [0, gram_size - 1) are J, column gram_size - 1 is e (0 at non-finite data points, whose J rows
// are 0 too: z = 0 leaves them 0). Returns sum s^2 rho(z) over the points (data units squared).
// Two passes, so that the second vectorises: the per-point factors (the loss's libm calls), then
// every column of J scaled by its points' factors.
template <LossFunction kFunction, PassWeighting kWeighting>
inline double RescaleTileFor(double* tile, int count, int gram_size, double residual_scale) {
  constexpr double kEpsilon = 2.220446049250313e-16;  // DBL_EPSILON, as scipy's EPS
  double* residuals = tile + (gram_size - 1) * kTilePoints;
  double row_scales[kTilePoints];
  double loss_sum = 0.0;
  for (int t = 0; t < count; ++t) {
    const double u = residuals[t] / residual_scale;
    const double z = u * u;
    double rho, d1, d2;
    EvaluateLoss<kFunction>(z, &rho, &d1, &d2);
    double j_scale = kWeighting == PassWeighting::kIrls ? d1 : d1 + 2.0 * z * d2;
    if (j_scale < kEpsilon) j_scale = kEpsilon;
    const double row_scale = std::sqrt(j_scale);
    row_scales[t] = row_scale;
    residuals[t] *= d1 / row_scale;
    loss_sum += rho;
  }
  for (int c = 0; c < gram_size - 1; ++c) {
    double* column = tile + c * kTilePoints;
#pragma omp simd
    for (int t = 0; t < count; ++t) column[t] *= row_scales[t];
  }
  return loss_sum * (residual_scale * residual_scale);
}

template <PassWeighting kWeighting>
inline double RescaleTileWith(const PassLoss& loss, double* tile, int count, int gram_size) {
  switch (loss.function) {
    case LossFunction::kSoftL1:
      return RescaleTileFor<LossFunction::kSoftL1, kWeighting>(tile, count, gram_size,
                                                               loss.residual_scale);
    case LossFunction::kHuber:
      return RescaleTileFor<LossFunction::kHuber, kWeighting>(tile, count, gram_size,
                                                              loss.residual_scale);
    case LossFunction::kCauchy:
      return RescaleTileFor<LossFunction::kCauchy, kWeighting>(tile, count, gram_size,
                                                               loss.residual_scale);
    case LossFunction::kArctan:
      return RescaleTileFor<LossFunction::kArctan, kWeighting>(tile, count, gram_size,
                                                               loss.residual_scale);
    case LossFunction::kLinear:
      break;
  }
  return 0.0;  // linear: never called (the kernels keep their plain path)
}

inline double RescaleTileForLoss(const PassLoss& loss, double* tile, int count, int gram_size) {
  return loss.weighting == PassWeighting::kIrls
             ? RescaleTileWith<PassWeighting::kIrls>(loss, tile, count, gram_size)
             : RescaleTileWith<PassWeighting::kScipy>(loss, tile, count, gram_size);
}

// sum s^2 rho((e / s)^2) over `count` residuals e (0 at non-finite data points).
template <LossFunction kFunction>
inline double LossSumOf(const double* residuals, int count, double residual_scale) {
  double loss_sum = 0.0;
  for (int t = 0; t < count; ++t) {
    const double u = residuals[t] / residual_scale;
    double rho, d1, d2;
    EvaluateLoss<kFunction>(u * u, &rho, &d1, &d2);
    loss_sum += rho;
  }
  return loss_sum * (residual_scale * residual_scale);
}

inline double LossSum(const PassLoss& loss, const double* residuals, int count) {
  switch (loss.function) {
    case LossFunction::kSoftL1:
      return LossSumOf<LossFunction::kSoftL1>(residuals, count, loss.residual_scale);
    case LossFunction::kHuber:
      return LossSumOf<LossFunction::kHuber>(residuals, count, loss.residual_scale);
    case LossFunction::kCauchy:
      return LossSumOf<LossFunction::kCauchy>(residuals, count, loss.residual_scale);
    case LossFunction::kArctan:
      return LossSumOf<LossFunction::kArctan>(residuals, count, loss.residual_scale);
    case LossFunction::kLinear:
      break;
  }
  return 0.0;
}

// One angle's tile into its Gram matrix under a robust loss: the rescaled tile's J^T J and
// J^T e, and in the (e, e) entry the loss sum s^2 sum rho(z) instead of the rescaled e^T e (which
// nothing uses), so the objective reads the cost where it reads chi2 under the linear loss.
inline void AddRobustTileGram(const PassLoss& loss, double* tile, int count, int gram_size,
                              double* gram) {
  const double loss_sum = RescaleTileForLoss(loss, tile, count, gram_size);
  const int last = (gram_size - 1) + (gram_size - 1) * gram_size;
  const double before = gram[last];
  AddTileGram(tile, count, gram_size, gram);
  gram[last] = before + loss_sum;
}

}  // namespace
}  // namespace pass_kernel
}  // namespace homodyne
