// The uncertainties a result reports (docs/results.md, What the uncertainties mean; docs/design.md
// section 4d): the frame-block jackknife from the sums of one pass (objective/frame_block_sums.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "objective/frame_block_sums.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// The fewest blocks the jackknife uses (fewer when the grid has fewer than 16 frames).
inline constexpr int kMinJackknifeBlocks = 8;

// The residuals' correlation length along a row [frames]: the lag at which their correlation
// falls below 1/e, interpolated in log(lag) between the lags of sums (1 when it is below at lag 1;
// the number of frames when it never falls below).
int NoiseCorrelationFrames(const FrameBlockSums& sums);

// The residuals' correlation at lag 1 along a row (NaN when sums has no lag or no residual).
double RowCorrelationAtLag1(const FrameBlockSums& sums);

// Whether the residuals are uncorrelated along frames, as independent noise leaves them: their
// lag-1 correlation along rows is below kUncorrelatedLag1, and below 4 times its standard
// deviation under independent noise, 1 / sqrt(pairs), for small data sets. A correlator's output
// (speckle noise: above 0.5) and a model that misses a feature (a smooth residual) are well
// above it; a correlation of 0.02 at lag 1 alone would widen the uncertainties by a few percent.
// The default method (UncertaintyMethod::kAuto) reports the standard error when this holds,
// the jackknife otherwise (docs/results.md, What the uncertainties mean).
inline constexpr double kUncorrelatedLag1 = 0.02;
bool ResidualsUncorrelated(const FrameBlockSums& sums);

struct FrameBlockJackknife {
  Eigen::MatrixXd covariance;  // reduced layout (map.num_reduced() square)
  int blocks = 0;              // blocks the jackknife deleted one at a time
  int correlation_frames = 0;  // NoiseCorrelationFrames
  // The blocks are shorter than the correlation length even at kMinJackknifeBlocks: the noise is
  // correlated over more than an eighth of the window, and the uncertainties may be too small.
  bool blocks_too_short = false;
};

// The leverage of each block's points on the fit (docs/design.md section 4d): with D the
// Jacobi scaling of H over `support` (D_aa = 1 / sqrt(H_aa)), S = D H D (its eigenvalues below
// kPseudoInverseRcond times the largest dropped, as InvertScaledBlock drops them) and
// P_B = S^-1/2 D H_B D S^-1/2 (eigenvalues in [0, 1]: the share of the information on each
// direction that the block's points hold),
//   Adjust(H_B, s_B, p) = D S^-1/2 (I - P_B)^-p S^-1/2 D s_B,
// which at p = 1 is (H - H_B)^-1 s_B, the deleted block's refit step, and at p = 0 H^-1 s_B. A
// direction the block holds all of (1 - eigenvalue below kPseudoInverseRcond) adds nothing, as
// the pseudo-inverse of H - H_B drops it. H and H_B: reduced-layout matrices; s_B: over support.
class BlockLeverage {
 public:
  // nullopt when H's scaled block is not finite or its decomposition failed.
  static std::optional<BlockLeverage> Of(const Eigen::MatrixXd& h, const std::vector<int>& support);
  // nullopt when the block's share is not finite or its decomposition failed.
  std::optional<Eigen::VectorXd> Adjust(const Eigen::MatrixXd& h_block,
                                        const Eigen::VectorXd& gradient, double power) const;

 private:
  std::vector<int> support_;
  Eigen::VectorXd scale_;         // D (JacobiScale of H)
  Eigen::MatrixXd inverse_root_;  // S^-1/2
};

// The power p of the leverage correction (I - P_B)^-p of each deleted block's change of the
// solution: 1 is the refit's first Newton step (the CV3 estimator), 1/2 the bias-reduced
// linearisation (CR2); 3/4 chosen by coverage on the speckle simulator (docs/design.md
// section 4d).
inline constexpr double kJackknifeLeveragePower = 0.75;

// The linearised frame-block jackknife at the solution. The fine blocks of `sums` are merged (by
// 2, 4, ...) into the fewest blocks that are still at least frames / (correlation length), and at
// least kMinJackknifeBlocks (coverage on simulated ensembles chose this rule: docs/results.md,
// Checking error bars); then, with s_B the gradient sum (J^T e) of the points that touch block B
// (row or column in B), H_B their J^T J, H the total, and t_AB the gradient sum of the cell of
// blocks A < B:
//   C = sum_B u_B u_B^T - sum_{A<B} w_AB w_AB^T,
//   u_B = H^-1/2 (I - P_B)^-p H^-1/2 s_B,  P_B = H^-1/2 H_B H^-1/2,  w_AB = H^-1 t_AB,
// u_B the change of the solution when the points of block B are deleted, to first order, with
// the leverage correction's power p = kJackknifeLeveragePower (in Jacobi-scaled coordinates),
// less the cells counted for both of their blocks; negative eigenvalues of C are set to 0. In the
// reduced layout of `map`,
// over the reduced parameters `support` (the others get zero rows); the full-layout derivatives
// of sums map through map.matrix. nullopt when an inversion fails (a non-finite sum).
std::optional<FrameBlockJackknife> ComputeFrameBlockJackknife(const FrameBlockSums& sums,
                                                              const ScalingMap& map,
                                                              const std::vector<int>& support,
                                                              int num_physical);

// One end of a profile-likelihood interval (docs/results.md, Profile intervals).
struct ProfileEnd {
  double value = 0.0;  // NaN when the profile failed
  // "" when chi2 rose to the target there; "bound" when the bound came first (value is the
  // bound, where chi2 rose by less); "failed" when a profile point could not be computed.
  std::string note;
};

// The end on side `direction` (+1 upper, -1 lower) of the interval of a parameter at `value`:
// where rise(v) = chi2 at v with the others refitted, less the minimum, reaches `target`,
// searched from value + direction * first_step (the quadratic guess) by the secant of
// sqrt(rise) in v (linear on a quadratic chi2: one step), to within 1 % of target, at most
// kProfileEndEvaluations evaluations; the end stays within `bound` (the parameter's bound on that
// side, +-inf for none).
inline constexpr int kProfileEndEvaluations = 6;
ProfileEnd FindProfileEnd(const std::function<double(double)>& rise, double value,
                          double first_step, int direction, double bound, double target);

// `end` (on side `direction` of the interval of a parameter at `value`) moved out to the farthest
// of `points` (value held, chi2 less the minimum) on that side whose rise is below `target`. A
// profile point's refit is local, so its chi2 is at least the profile's there: a point below the
// level lies inside the profile-likelihood region wherever the search for the end stopped (on a
// rugged profile, whose refits at neighbouring values land in different minima, another level's
// search can find such a point beyond it). A point at `bound` makes the end the bound ("bound").
// An end that failed stays failed.
ProfileEnd WidenProfileEnd(const ProfileEnd& end, double value, int direction, double bound,
                           double target, const std::vector<std::pair<double, double>>& points);

}  // namespace homodyne
