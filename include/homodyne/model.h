// The models of two-time correlations exactly as the reference packages compute them
// (docs/model.md), with their analytic Jacobians (docs/model.md, Jacobian): the homodyne modes
// static and laminar_flow (He et al., PNAS 2024), below, and the two-component (heterodyne) mode
// of the successor package (He et al., PNAS 2024 and 2025; docs/model.md, Two-component mode).
//
// Homodyne modes:
//   c2_k(i, j) = offset_k + contrast_k * g1(i, j)^2
//   g1 = max(g1_diffusion * sinc(Phi_k)^2, 1e-10)
//   g1_diffusion = exp(clip(-0.5 q^2 dt * M_D(i, j), -700, 0))
//   Phi_k(i, j) = q L dt / (2 pi) * cos(phi0 - phi_k) * M_G(i, j)            (laminar_flow only)
//   M_X(i, j) = sqrt((C_X[i] - C_X[j])^2 + 1e-12),  C_X = cumulative trapezoid of X(t) in steps
//   D(t) = max(D0 ts^alpha + D_offset, 1e-10), gamma_dot(t) = max(g0 ts^beta + g_off, 1e-10)
//   ts = max(t, eps_t), eps_t = max(|t[1] - t[0]| / 2, 1e-8)                  (the t=0 guard)
//   sinc(x) = sin(x)/x (unnormalised), 1 - x^2/6 + x^4/120 for |x| < 1e-4
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace homodyne {

enum class AnalysisMode { kStatic, kLaminarFlow, kTwoComponent };

// Safeguards of the reference kernel, shared by every evaluation of the model (docs/model.md:
// Rates, The time integrals, Diffusion factor, Shear factor, g1 floor and c2).
namespace model_limits {
inline constexpr double kMinTimeGuardSeconds = 1e-8;  // eps_t floor of the t -> 0 guard
inline constexpr double kRateFloor = 1e-10;           // D(t), gamma_dot(t) floor
inline constexpr double kSmoothAbsEpsilon = 1e-12;    // M = sqrt(x^2 + 1e-12)
inline constexpr double kLogG1DiffusionMin = -700.0;  // clip of log g1_diffusion
inline constexpr double kSincTaylorRadius = 1e-4;     // Taylor branch of sinc
inline constexpr double kG1Floor = 1e-10;             // floor of g1
}  // namespace model_limits

// "static", "laminar_flow" or "two_component".
std::string_view ToString(AnalysisMode mode);
// Accepts the reference packages' names and aliases (case-insensitive): static, static_isotropic,
// static_anisotropic, laminar_flow, two_component, heterodyne. Throws ConfigError for anything
// else.
AnalysisMode ParseAnalysisMode(std::string_view text);
// Every accepted name, for messages: "static, static_isotropic, ..., heterodyne".
std::string AnalysisModeNames();

// 3 (static: D0, alpha, D_offset), 7 (laminar_flow adds gamma_dot_t0, beta, gamma_dot_t_offset,
// phi0) or 14 (two_component: D0_ref, alpha_ref, D_offset_ref, D0_sample, alpha_sample,
// D_offset_sample, v0, v_beta, v_offset, f0, f1, f2, f3, phi0_het).
int NumPhysicalParameters(AnalysisMode mode);
// Canonical physical parameter names in model order.
const std::vector<std::string>& PhysicalParameterNames(AnalysisMode mode);

// Index of each physical parameter in the model's parameter vector (homodyne modes).
enum PhysicalIndex : int {
  kD0 = 0,
  kAlpha = 1,
  kDOffset = 2,
  kGammaDot0 = 3,
  kBeta = 4,
  kGammaDotOffset = 5,
  kPhi0 = 6,
};

// Experiment constants entering the model's prefactors.
struct ScatteringGeometry {
  double q_inv_angstrom = 0.0054;  // scattering wavevector q [1/Angstrom]
  double gap_angstrom = 2.0e6;     // stator-rotor gap L [Angstrom] (laminar_flow only)
  double dt_seconds = 0.001;       // frame time dt [s], the step of the time integrals

  // 0.5 q^2 dt ("wavevector_q_squared_half_dt" of the reference).
  double DiffusionPrefactor() const;
  // q L dt / (2 pi) ("sinc_prefactor" of the reference).
  double SincPrefactor() const;
};

// The model on one time grid. Immutable; safe to share between threads.
class HomodyneModel {
 public:
  // times_seconds: the 1-D time grid t_0..t_{N-1} (N >= 1) on which matrix element (i, j) means
  // (t1 = t_i, t2 = t_j). The fitted grid of the CLI is t_k = k dt for k = 1..N_raw-1.
  HomodyneModel(AnalysisMode mode, ScatteringGeometry geometry, std::vector<double> times_seconds);
  // The model of matrices whose q need not be one (a joint fit of several q rings: docs/design.md
  // section 2d): angle_q_inv_angstrom holds the q of each fitted matrix, in the fit's
  // angle order (at least one, each finite and > 0; std::invalid_argument otherwise).
  // geometry.q_inv_angstrom is replaced by the first matrix's q. Every matrix at one q: exactly
  // the one-q model of that q (num_rings() == 1, the same evaluations bitwise).
  HomodyneModel(AnalysisMode mode, ScatteringGeometry geometry, std::vector<double> times_seconds,
                std::vector<double> angle_q_inv_angstrom);

  AnalysisMode mode() const { return mode_; }
  const ScatteringGeometry& geometry() const { return geometry_; }
  const std::vector<double>& times_seconds() const { return times_seconds_; }
  int num_times() const { return static_cast<int>(times_seconds_.size()); }
  int num_physical() const { return NumPhysicalParameters(mode_); }
  // Derivatives per point: num_physical() columns, then contrast, then offset.
  int num_point_derivatives() const { return num_physical() + 2; }

  // The q of each matrix when the model was given them, else empty (every matrix at
  // geometry().q_inv_angstrom).
  const std::vector<double>& angle_q_inv_angstrom() const { return angle_q_; }
  // The q of matrix `angle`: angle_q_inv_angstrom()[angle] when given, else geometry()'s.
  double AngleQ(int angle) const;
  // The distinct q of the matrices (rings), ascending: 1 for a one-q model.
  int num_rings() const { return rings_ == nullptr ? 1 : static_cast<int>(rings_->size()); }
  // The ring of matrix `angle` (0 for a one-q model, whatever the angle).
  int RingOfAngle(int angle) const;
  // The one-q model of ring r: the same mode, gap, dt and times at the ring's q (this model for
  // a one-q model).
  const HomodyneModel& Ring(int ring) const;

 private:
  AnalysisMode mode_;
  ScatteringGeometry geometry_;
  std::vector<double> times_seconds_;
  std::vector<double> angle_q_;  // empty unless given
  std::vector<int> angle_ring_;  // per matrix, when rings_ is set
  // The one-q model of each ring when the matrices have several q (null: one q). Shared by
  // copies; immutable.
  std::shared_ptr<const std::vector<HomodyneModel>> rings_;
};

class ModePoint;  // src/model/mode_point.h: a mode's model at one parameter vector

// The model at one physical parameter vector. Construction does all the work that depends only
// on the parameters and the time grid (rates, cumulative integrals and their parameter
// derivatives): O(N). Evaluation per point is then O(1). Immutable after construction; safe to
// share between threads. Holds a reference to the model, which must outlive it.
class ModelEvaluation {
 public:
  // physical_parameters: num_physical() values in PhysicalParameterNames order (phi0 and phi0_het
  // in degrees).
  ModelEvaluation(const HomodyneModel& model, std::span<const double> physical_parameters);
  ~ModelEvaluation();
  ModelEvaluation(ModelEvaluation&&) noexcept;
  ModelEvaluation(const ModelEvaluation&) = delete;
  ModelEvaluation& operator=(const ModelEvaluation&) = delete;
  ModelEvaluation& operator=(ModelEvaluation&&) = delete;

  const HomodyneModel& model() const { return model_; }
  std::span<const double> physical_parameters() const { return parameters_; }
  // The mode's model (src/model/mode_point.h), for the pass kernel. One-q models only (a model
  // of several rings has one per ring: Ring).
  const ModePoint& point() const;

  // Rings (HomodyneModel::num_rings): the evaluation of ring r's one-q model at the same
  // parameters (this evaluation for a one-q model), and that of matrix `angle`'s ring. The
  // per-angle methods below need a one-q evaluation: call them on OfAngle(k) for a model of
  // several rings.
  int num_rings() const { return model_.num_rings(); }
  const ModelEvaluation& Ring(int ring) const;
  const ModelEvaluation& OfAngle(int angle) const { return Ring(model_.RingOfAngle(angle)); }

  // c2 at (i, j) for j in [j_begin, j_end) of one angle (any j, diagonal included).
  void ComputeC2RowSegment(double phi_degrees, double contrast, double offset, int i, int j_begin,
                           int j_end, std::span<double> c2_out) const;

  // c2 on the full N x N grid of one angle, diagonal included, no diagonal correction.
  // c2_out: N*N values, row-major (element (i, j) at i*N + j).
  void ComputeC2Matrix(double phi_degrees, double contrast, double offset,
                       std::span<double> c2_out) const;

  // c2 and its derivatives on rows [row_begin, row_end) of the strict upper triangle of one angle:
  // for each i in the range, j = i+1..N-1, in that order (the packed order of dataset.h).
  // c2_out: one value per point. jacobian_out: empty, or num_point_derivatives() values per point
  // (point-major): d c2 / d(physical parameters..., contrast, offset). The derivative is zero
  // where a floor or clip of the reference is active, as in the reference's autodiff.
  void EvaluateUpperTriangleRows(double phi_degrees, double contrast, double offset, int row_begin,
                                 int row_end, std::span<double> c2_out,
                                 std::span<double> jacobian_out) const;

 private:
  const HomodyneModel& model_;
  std::vector<double> parameters_;
  std::unique_ptr<const ModePoint> point_;               // null for a model of several rings
  std::vector<std::unique_ptr<ModelEvaluation>> rings_;  // one per ring, or empty
};

// Diagonal correction "basic" of the reference (docs/model.md, Diagonal correction), in place on a
// row-major N x N matrix: diag_i = mean of the symmetrised first off-diagonal neighbours. N <= 1:
// unchanged.
void ApplyDiagonalCorrection(int n, std::span<double> matrix);

}  // namespace homodyne
