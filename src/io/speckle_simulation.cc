// Speckle-level noise (speckle_simulation.h). How each factor of the model's g1 is made:
//   - diffusion: each field is an AR(1) complex Gaussian process, E(k+1) = a_k E(k) +
//     sqrt(1 - a_k^2) w_k with a_k = exp(-w (C_D[k+1] - C_D[k])) (docs/model.md, Diffusion factor:
//     w = 0.5 q^2 dt, C_D the trapezoid of D in steps). The product of the a_k from i to j is
//     exp(-w (C_D[j] - C_D[i])) = g1_D(i, j) exactly, because the exponent adds over frames;
//   - shear (laminar_flow): a mode's field is the sum of kShearScatterers independent fields, each
//     with the phase 2 y s cos(psi) C_G[k] of scatterers at a height y across the gap
//     (s = q L dt / 2 pi, psi = phi0 - phi: docs/model.md, Shear factor), each pixel's heights
//     drawn from the triangular distribution on [-1, 1] (y = u1 + u2 - 1, u1 and u2 uniform on
//     [0, 1]), whose mean of exp(2 i y x) is sinc(x)^2 = cf. A pixel's field correlation is then
//     g1_D times the mean of exp(i theta) over its S scatterers, whose mean square over pixels,
//     what c2 measures, is cf^2 (1 - 1/S) + 1/S; the correlator's c2 - 1 is therefore corrected
//     by the known g1_D^2 / S and divided by (1 - 1/S), which leaves the model's
//     g1^2 = g1_D^2 cf^2 as its expectation (a fixed quadrature of the heights instead would
//     alias at phases of tens of radians);
//   - two_component (docs/model.md, Two-component mode): a mode's field is
//     E(k) = x_r(k) E_r(k) + x_s(k) E_s(k) e^{i psi_k}, a reference and a sample field, each an
//     independent AR(1) process as above on its own transport integral (a_k = exp(-w (C[J_c][k+1]
//     - C[J_c][k])), w = q^2 / 2, so that their products are H_r and H_s exactly), x_s the
//     model's sample fraction and x_r = 1 - x_s, and psi_k = q cos(psi) C[v]_k the phase the flow
//     velocity gives the sample (psi = phi + phi0_het). The model's velocity is one velocity, not
//     a profile across a gap: every scatterer of the sample moves with it, so the phase is the
//     same for all of them and no heights are drawn. E is complex Gaussian with
//     <E(i)* E(j)> = x_r,i x_r,j H_r + x_s,i x_s,j H_s e^{i Phi} and <|E(i)|^2> = N_i
//     (x_r^2 + x_s^2), so by the Siegert relation <I(i) I(j)> / (<I(i)> <I(j)>) - 1 is the
//     model's g = (A^2 H_r^2 + B^2 H_s^2 + 2 A B H_r H_s cos Phi) / (N_i N_j) exactly (N >= 1/2:
//     the model's floor does not bind). The tables (C[J_c], C[v], x_s) are the model's own
//     (ComputeTwoComponentTables); the smooth |x|'s 1e-12 and the clip of log H at -700 are left
//     out as above;
//   - contrast: `modes` independent modes per pixel add their intensities (raw contrast
//     1 / modes), and c2 is rescaled to the configured contrast and offset:
//     c2 = offset + contrast (modes (<I(i) I(j)> / (<I(i)> <I(j)>) - 1) [- shear term]).
// The t -> 0 guard and the rate floors are the model's (docs/model.md, Rates); the smooth absolute
// value's 1e-12 and the g1 floor at 1e-10 are left out (their effect is below 1e-6).
#include "io/speckle_simulation.h"

#include <Eigen/Dense>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>
#include <string>

#include "homodyne/errors.h"
#include "model/two_component/two_component_point.h"

namespace homodyne::io_internal {
namespace {

// Independent scatterer fields per mode of a pixel in laminar_flow (the shear's heights).
constexpr int kShearScatterers = 32;
using model_limits::kMinTimeGuardSeconds;
using model_limits::kRateFloor;

// The model's rate c0 t^exponent + c_offset on the grid (t -> 0 guard, floor), integrated by the
// trapezoid in steps: C_0 = 0, C_k = C_{k-1} + (f_{k-1} + f_k) / 2.
std::vector<double> CumulativeRate(const std::vector<double>& times, double c0, double exponent,
                                   double c_offset) {
  const size_t n = times.size();
  const double spacing = n > 1 ? std::abs(times[1] - times[0]) : 0.0;
  const double guard = spacing / 2 > kMinTimeGuardSeconds ? spacing / 2 : kMinTimeGuardSeconds;
  std::vector<double> rate(n);
  for (size_t k = 0; k < n; ++k) {
    const double ts = times[k] > guard ? times[k] : guard;
    const double value = c0 * std::pow(ts, exponent) + c_offset;
    rate[k] = value > kRateFloor ? value : kRateFloor;
  }
  std::vector<double> cumulative(n, 0.0);
  for (size_t k = 1; k < n; ++k) cumulative[k] = cumulative[k - 1] + 0.5 * (rate[k - 1] + rate[k]);
  return cumulative;
}

using IntensityMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The generator of pixel p of angle `angle_index`: its own stream, so that the intensities do not
// depend on the thread that draws them. salt: one per kind of field.
std::mt19937_64 PixelGenerator(const SpeckleOptions& options, int angle_index, int p,
                               uint32_t salt) {
  std::seed_seq seed{static_cast<uint32_t>(options.seed), static_cast<uint32_t>(options.seed >> 32),
                     static_cast<uint32_t>(angle_index), static_cast<uint32_t>(p), salt};
  return std::mt19937_64(seed);
}

// The AR(1) coefficients of a field whose correlation from frame i to j is exp(-w |C_j - C_i|)
// (C nondecreasing): decay a_k = exp(-w (C[k+1] - C[k])) and innovation sqrt(1 - a_k^2), k < n - 1.
void Ar1Coefficients(const std::vector<double>& cumulative, double w, std::vector<double>& decay,
                     std::vector<double>& innovation) {
  const size_t n = cumulative.size();
  decay.assign(n, 0.0);
  innovation.assign(n, 0.0);
  for (size_t k = 0; k + 1 < n; ++k) {
    const double a = std::exp(-w * (cumulative[k + 1] - cumulative[k]));
    decay[k] = a;
    innovation[k] = std::sqrt(std::max(0.0, 1.0 - a * a));
  }
}

// Intensities of the two_component mode (the file's header): intensity(k, p), frame k of pixel p.
IntensityMatrix TwoComponentIntensities(const HomodyneModel& model,
                                        std::span<const double> physical, double phi_degrees,
                                        const SpeckleOptions& options, int angle_index) {
  const int n = model.num_times();
  const int pixels = options.pixels;
  const int modes = options.modes;
  const TwoComponentTables tables = ComputeTwoComponentTables(model, physical);
  const double q = model.geometry().q_inv_angstrom;
  const double w = 0.5 * q * q;
  std::vector<double> decay_reference, innovation_reference, decay_sample, innovation_sample;
  Ar1Coefficients(tables.reference.cumulative, w, decay_reference, innovation_reference);
  Ar1Coefficients(tables.sample.cumulative, w, decay_sample, innovation_sample);
  const double psi = (phi_degrees + physical[two_component::kPhi0Het]) * std::numbers::pi / 180.0;
  const double phase_per_unit = q * std::cos(psi);
  // The sample's weight x_s e^{i psi_k} and the reference's x_r per frame.
  std::vector<std::complex<double>> sample_weight(static_cast<size_t>(n));
  std::vector<double> reference_weight(static_cast<size_t>(n));
  for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
    const double x_s = tables.fraction[k];
    sample_weight[k] = std::polar(x_s, phase_per_unit * tables.velocity.cumulative[k]);
    reference_weight[k] = 1.0 - x_s;
  }
  IntensityMatrix intensity = Eigen::MatrixXd::Zero(n, pixels);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < pixels; ++p) {
    std::mt19937_64 generator = PixelGenerator(options, angle_index, p, 0x2c0e7u);
    std::normal_distribution<double> normal(0.0, std::sqrt(0.5));  // unit complex variance
    for (int m = 0; m < modes; ++m) {
      std::complex<double> reference(normal(generator), normal(generator));
      std::complex<double> sample(normal(generator), normal(generator));
      for (int k = 0; k < n; ++k) {
        const size_t kk = static_cast<size_t>(k);
        if (k > 0) {
          const std::complex<double> kick_reference(normal(generator), normal(generator));
          const std::complex<double> kick_sample(normal(generator), normal(generator));
          reference =
              decay_reference[kk - 1] * reference + innovation_reference[kk - 1] * kick_reference;
          sample = decay_sample[kk - 1] * sample + innovation_sample[kk - 1] * kick_sample;
        }
        intensity(k, p) +=
            std::norm(reference_weight[kk] * reference + sample_weight[kk] * sample) / modes;
      }
    }
  }
  return intensity;
}

// The correlator: c2(i, j) = offset + contrast (modes (<I(i) I(j)> / (<I(i)> <I(j)>) - 1) -
// correction(i, j)) / (1 - spread), <> over the pixels (the columns of `intensity`), on the
// upper triangle and the diagonal of the row-major N x N matrix (zeros below).
template <typename Correction>
std::vector<double> CorrelatorMatrix(const IntensityMatrix& intensity, int modes, double contrast,
                                     double offset, const Correction& correction, double spread) {
  const int n = static_cast<int>(intensity.rows());
  const auto pixels = static_cast<double>(intensity.cols());
  const Eigen::VectorXd mean = intensity.rowwise().mean();
  std::vector<double> matrix(static_cast<size_t>(n) * static_cast<size_t>(n), 0.0);
#pragma omp parallel for schedule(dynamic, 8)
  for (int i = 0; i < n; ++i) {
    for (int j = i; j < n; ++j) {
      const double correlation =
          intensity.row(i).dot(intensity.row(j)) / pixels / (mean[i] * mean[j]);
      const double g1_squared = (modes * (correlation - 1.0) - correction(i, j)) / (1.0 - spread);
      matrix[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)] =
          offset + contrast * g1_squared;
    }
  }
  return matrix;
}

}  // namespace

std::vector<double> SpeckleTwoTimeMatrix(const HomodyneModel& model,
                                         std::span<const double> physical, double phi_degrees,
                                         double contrast, double offset,
                                         const SpeckleOptions& options, int angle_index) {
  const AnalysisMode mode = model.mode();
  if (mode != AnalysisMode::kStatic && mode != AnalysisMode::kLaminarFlow &&
      mode != AnalysisMode::kTwoComponent) {
    throw InputError(
        "simulation.noise_model = speckle: made for the static, laminar_flow and "
        "two_component modes, not " +
        std::string(ToString(mode)) + " (use noise_model: gaussian)");
  }
  const int n = model.num_times();
  const int pixels = options.pixels;
  const int modes = options.modes;
  if (mode == AnalysisMode::kTwoComponent) {
    const IntensityMatrix intensity =
        TwoComponentIntensities(model, physical, phi_degrees, options, angle_index);
    return CorrelatorMatrix(
        intensity, modes, contrast, offset, [](int, int) { return 0.0; }, 0.0);
  }
  const std::vector<double>& times = model.times_seconds();
  const bool shear = mode == AnalysisMode::kLaminarFlow;
  const int scatterers = shear ? kShearScatterers : 1;

  const double w = model.geometry().DiffusionPrefactor();
  const std::vector<double> diffusion =
      CumulativeRate(times, physical[kD0], physical[kAlpha], physical[kDOffset]);
  std::vector<double> decay, innovation;  // a_k and sqrt(1 - a_k^2), k < n - 1
  Ar1Coefficients(diffusion, w, decay, innovation);
  std::vector<double> shear_phase(static_cast<size_t>(n), 0.0);  // s cos(psi) C_G[k]
  if (shear) {
    const std::vector<double> flow =
        CumulativeRate(times, physical[kGammaDot0], physical[kBeta], physical[kGammaDotOffset]);
    const double psi = (physical[kPhi0] - phi_degrees) * std::numbers::pi / 180.0;
    const double scale = model.geometry().SincPrefactor() * std::cos(psi);
    for (int k = 0; k < n; ++k) {
      shear_phase[static_cast<size_t>(k)] = scale * flow[static_cast<size_t>(k)];
    }
  }

  // intensity(k, p): frame k of pixel p (a row of frames is contiguous over pixels).
  IntensityMatrix intensity = Eigen::MatrixXd::Zero(n, pixels);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < pixels; ++p) {
    std::mt19937_64 generator = PixelGenerator(options, angle_index, p, 0x5bec1e5u);
    std::normal_distribution<double> normal(0.0, std::sqrt(0.5));  // unit complex variance
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<std::complex<double>> field(static_cast<size_t>(n));
    for (int m = 0; m < modes; ++m) {
      std::fill(field.begin(), field.end(), std::complex<double>(0.0, 0.0));
      for (int s = 0; s < scatterers; ++s) {
        const double height = shear ? uniform(generator) + uniform(generator) - 1.0 : 0.0;
        std::complex<double> amplitude(normal(generator), normal(generator));
        for (int k = 0; k < n; ++k) {
          if (k > 0) {
            const std::complex<double> kick(normal(generator), normal(generator));
            amplitude = decay[static_cast<size_t>(k) - 1] * amplitude +
                        innovation[static_cast<size_t>(k) - 1] * kick;
          }
          field[static_cast<size_t>(k)] +=
              shear
                  ? amplitude * std::polar(1.0, 2.0 * height * shear_phase[static_cast<size_t>(k)])
                  : amplitude;
        }
      }
      for (int k = 0; k < n; ++k) {
        intensity(k, p) +=
            std::norm(field[static_cast<size_t>(k)]) / (static_cast<double>(scatterers) * modes);
      }
    }
  }

  // Shear: c2 - 1 = (g1_D^2 / S + (1 - 1/S) g1^2) / modes in expectation (above).
  const double spread = shear ? 1.0 / scatterers : 0.0;
  return CorrelatorMatrix(
      intensity, modes, contrast, offset,
      [&](int i, int j) {
        const double g1_diffusion = std::exp(
            -w * std::abs(diffusion[static_cast<size_t>(j)] - diffusion[static_cast<size_t>(i)]));
        return spread * g1_diffusion * g1_diffusion;
      },
      spread);
}

}  // namespace homodyne::io_internal
