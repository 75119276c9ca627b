// Per-angle contrast and offset: how they are parameterised in the fit (reference section 2.4).
#pragma once

#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"

namespace homodyne {

enum class PerAngleMode {
  kIndividual,    // one contrast and one offset per angle: 2 n_phi parameters
  kConstant,      // fixed at the per-angle quantile estimates: 0 parameters
  kAutoAveraged,  // one contrast and one offset shared by every angle: 2 parameters
  kFourier,       // contrast(phi), offset(phi) as Fourier series of order K: 2 (1 + 2K)
};
std::string_view ToString(PerAngleMode mode);

struct ResolvedScaling {
  PerAngleMode mode = PerAngleMode::kIndividual;
  int num_scaling_parameters = 0;  // parameters the fit optimises for contrast and offset
  std::string reason;              // e.g. "auto with 3 angles >= constant_scaling_threshold 3"
};

// Resolves optimization.nlsq.anti_degeneracy.per_angle_mode for n_angles angles: `auto` becomes
// averaged when n_angles >= constant_scaling_threshold, else individual; `fourier` needs
// n_angles >= 1 + 2 fourier_order, else individual (reference section 2.4).
ResolvedScaling ResolvePerAngleMode(const NlsqOptions& nlsq, int n_angles);

// The parameters a per-angle mode optimises ("reduced"), mapped linearly onto the objective's full
// layout (objective.h: [physical..., contrast_0..n-1, offset_0..n-1]):
//   theta_full = matrix * theta_reduced + shift.
// The reduced layout starts with the physical parameters (identity block), then the mode's scaling
// parameters. individual: identity; auto_averaged: [c, o] replicated; constant: no scaling
// parameter, the frozen values in `shift`; fourier: series coefficients (reference section 2.4).
struct ScalingMap {
  Eigen::MatrixXd matrix;                  // P_full x P_reduced
  Eigen::VectorXd shift;                   // P_full
  std::vector<std::string> reduced_names;  // P_reduced names, e.g. "contrast_fourier_c1"

  int num_full() const { return static_cast<int>(matrix.rows()); }
  int num_reduced() const { return static_cast<int>(matrix.cols()); }
  Eigen::VectorXd Expand(const Eigen::VectorXd& reduced) const { return matrix * reduced + shift; }
};

}  // namespace homodyne
