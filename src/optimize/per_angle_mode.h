// Per-angle contrast and offset: how they are parameterised in the fit (docs/model.md, Per-angle
// scaling).
#pragma once

#include <string>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"
#include "optimize/initial_values.h"

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

// Resolves optimization.nlsq.anti_degeneracy.per_angle_mode (a PerAngleModeRequest, config.h)
// for n_angles angles: `auto` becomes averaged when n_angles >= constant_scaling_threshold, else
// individual; `fourier` needs n_angles >= 1 + 2 fourier_order, else individual
// (docs/model.md, Per-angle scaling).
ResolvedScaling ResolvePerAngleMode(const NlsqOptions& nlsq, int n_angles);

// The parameters a per-angle mode optimises ("reduced"), mapped linearly onto the objective's full
// layout (batched_objective.h: [physical..., contrast_0..n-1, offset_0..n-1]):
//   theta_full = matrix * theta_reduced + shift.
// The reduced layout starts with the physical parameters (identity block), then the mode's scaling
// parameters. individual: identity; auto_averaged: [c, o] replicated; constant: no scaling
// parameter, the frozen values in `shift`; fourier: series coefficients (docs/model.md, Per-angle
// scaling).
struct ScalingMap {
  Eigen::MatrixXd matrix;                  // P_full x P_reduced
  Eigen::VectorXd shift;                   // P_full
  std::vector<std::string> reduced_names;  // P_reduced names, e.g. "contrast_fourier_c1"

  int num_full() const { return static_cast<int>(matrix.rows()); }
  int num_reduced() const { return static_cast<int>(matrix.cols()); }
  Eigen::VectorXd Expand(const Eigen::VectorXd& reduced) const { return matrix * reduced + shift; }
};

// Builds the map of a resolved per-angle mode (docs/model.md, Per-angle scaling) for the
// objective's full layout with num_physical physical parameters and phi_degrees.size() angles
// (data angle order). Reduced layout and names:
//   individual:    the identity; names physical_names, contrast[k], offset[k] (k = 0..n-1).
//   auto_averaged: [physical, contrast, offset]; the pair is replicated over every angle.
//   constant:      [physical]; shift holds per_angle_start[k].contrast / .offset (frozen).
//   fourier:       [physical, contrast_fourier_c0, contrast_fourier_c1..cK,
//                  contrast_fourier_s1..sK, offset_fourier_c0, ..., offset_fourier_sK]:
//                  contrast(phi_k) = c0 + sum_{m=1..K} (c_m cos(m phi_k) + s_m sin(m phi_k)),
//                  phi_k in radians, evaluated at every data angle (duplicate angles get equal
//                  rows); the same for offset. K = fourier_order.
// per_angle_start: one start per angle (only constant reads it). Throws std::invalid_argument on
// inconsistent sizes, fourier_order < 1 in fourier mode, or a scaling whose
// num_scaling_parameters does not match the map it describes.
ScalingMap BuildScalingMap(const ResolvedScaling& scaling, int num_physical,
                           const std::vector<std::string>& physical_names,
                           const std::vector<double>& phi_degrees,
                           const std::vector<ScalingEstimate>& per_angle_start, int fourier_order);

// True when the map is exactly the identity with zero shift (individual mode): the reduced and the
// full layouts coincide and nothing needs transforming.
bool IsIdentity(const ScalingMap& map);

// The reduced starting point for a full-layout start (physical starts, per-angle contrasts,
// per-angle offsets): the least-squares solution of matrix * reduced = full_start - shift. The
// leading physical block (columns that are unit vectors owning their row) is copied exactly, so
// individual returns full_start bitwise; auto_averaged gives the mean of the per-angle starts;
// fourier the least-squares coefficients (exact when the starts lie on a series of order K; c0 is
// their mean when the angles are evenly spread over the period; minimum-norm when the basis at the
// data angles is rank-deficient); constant the physical starts. full_start has num_full() values.
Eigen::VectorXd ReduceStartingPoint(const ScalingMap& map, const Eigen::VectorXd& full_start);

struct BoundBox {
  Eigen::VectorXd lower;  // empty = unbounded (levenberg_marquardt.h convention)
  Eigen::VectorXd upper;
};

// Bounds of the reduced parameters from the full-layout bounds (both empty = unbounded, returned
// empty). A reduced parameter whose column holds only 0 and 1 (it enters each full parameter it
// touches with weight 1: physical, individual, averaged contrast/offset, fourier c0) gets the
// intersection of those parameters' bounds, so the physical and the contrast/offset bounds carry
// over. Every other one (the fourier harmonics c_m, s_m) is unbounded (-inf, +inf): the reference
// bounds none of them, and a box of +- the bound width could clip a least-squares start. The
// bounds of c0 do not keep contrast(phi) itself inside its bounds at every angle.
BoundBox ReduceBounds(const ScalingMap& map, const Eigen::VectorXd& full_lower,
                      const Eigen::VectorXd& full_upper);

// A reduced solution expanded to the full layout (results always hold one contrast and one offset
// per angle: docs/model.md, Per-angle scaling).
struct ExpandedSolution {
  Eigen::VectorXd theta;          // Expand(reduced theta)
  Eigen::MatrixXd covariance;     // covariance_scale * T C T^T (T = matrix); empty if C is empty
  Eigen::VectorXd uncertainties;  // sqrt(max(diag(covariance), 0)); empty if C is empty
};

// Expands a reduced solution and its covariance C (num_reduced() square, or empty). Frozen values
// (constant mode) have zero covariance rows and columns because their rows of T are zero;
// averaged values are fully correlated across angles. covariance_scale rescales the covariance,
// e.g. max(lm_dof, 1) / max(effective_dof, 1) to move from the core's s^2 = chi2 / (N - P_reduced)
// to the reference's s^2 = chi2 / (N - n_eff) (docs/results.md, Degrees of freedom; see
// EffectiveParameterCount). For the identity map with scale 1 the result equals the input bitwise.
ExpandedSolution ExpandSolution(const ScalingMap& map, const Eigen::VectorXd& reduced_theta,
                                const Eigen::MatrixXd& reduced_covariance,
                                double covariance_scale = 1.0);

// n_eff of the reference's reduced chi2 = chi2 / (N_data - n_eff) and its covariance
// s^2 = chi2 / max(N_data - n_eff, 1) (docs/results.md, Degrees of freedom):
//   auto_averaged: 2 num_angles + num_physical (the reference counts the per-angle pairs although
//                  only 2 shared values are optimised),
//   constant:      num_physical,
//   otherwise:     num_optimised, the parameters the core optimised (ScalingMap::num_reduced()).
int EffectiveParameterCount(PerAngleMode mode, int num_physical, int num_angles, int num_optimised);

// Holds the full-layout parameters marked in `fixed_full` (initial_parameters.fixed_parameters) at
// their values in `full_start`: every reduced parameter that only moves fixed full parameters is
// removed and its contribution moved into the shift. The result maps the remaining (free) reduced
// parameters; it may have none (the caller reports that there is nothing to fit).
ScalingMap FixParameters(const ScalingMap& map, const std::vector<bool>& fixed_full,
                         const Eigen::VectorXd& full_start);

}  // namespace homodyne
