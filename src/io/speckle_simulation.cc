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

}  // namespace

std::vector<double> SpeckleTwoTimeMatrix(const HomodyneModel& model,
                                         std::span<const double> physical, double phi_degrees,
                                         double contrast, double offset,
                                         const SpeckleOptions& options, int angle_index) {
  const AnalysisMode mode = model.mode();
  if (mode != AnalysisMode::kStatic && mode != AnalysisMode::kLaminarFlow) {
    throw InputError("simulation.noise_model = speckle: made for static and laminar_flow modes, "
                     "not " + std::string(ToString(mode)) + " (use noise_model: gaussian)");
  }
  const std::vector<double>& times = model.times_seconds();
  const int n = model.num_times();
  const int pixels = options.pixels;
  const int modes = options.modes;
  const bool shear = mode == AnalysisMode::kLaminarFlow;
  const int scatterers = shear ? kShearScatterers : 1;

  const double w = model.geometry().DiffusionPrefactor();
  const std::vector<double> diffusion =
      CumulativeRate(times, physical[kD0], physical[kAlpha], physical[kDOffset]);
  std::vector<double> decay(static_cast<size_t>(n), 0.0);  // a_k, k < n - 1
  std::vector<double> innovation(static_cast<size_t>(n), 0.0);
  for (int k = 0; k + 1 < n; ++k) {
    const double a = std::exp(-w * (diffusion[static_cast<size_t>(k) + 1] -
                                    diffusion[static_cast<size_t>(k)]));
    decay[static_cast<size_t>(k)] = a;
    innovation[static_cast<size_t>(k)] = std::sqrt(std::max(0.0, 1.0 - a * a));
  }
  std::vector<double> shear_phase(static_cast<size_t>(n), 0.0);  // s cos(psi) C_G[k]
  if (shear) {
    const std::vector<double> flow = CumulativeRate(times, physical[kGammaDot0], physical[kBeta],
                                                    physical[kGammaDotOffset]);
    const double psi = (physical[kPhi0] - phi_degrees) * std::numbers::pi / 180.0;
    const double scale = model.geometry().SincPrefactor() * std::cos(psi);
    for (int k = 0; k < n; ++k) {
      shear_phase[static_cast<size_t>(k)] = scale * flow[static_cast<size_t>(k)];
    }
  }

  // intensity(k, p): frame k of pixel p (a row of frames is contiguous over pixels).
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> intensity =
      Eigen::MatrixXd::Zero(n, pixels);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < pixels; ++p) {
    std::seed_seq seed{static_cast<uint32_t>(options.seed),
                       static_cast<uint32_t>(options.seed >> 32), static_cast<uint32_t>(angle_index),
                       static_cast<uint32_t>(p), 0x5bec1e5u};
    std::mt19937_64 generator(seed);
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
              shear ? amplitude * std::polar(1.0, 2.0 * height * shear_phase[static_cast<size_t>(k)])
                    : amplitude;
        }
      }
      for (int k = 0; k < n; ++k) {
        intensity(k, p) += std::norm(field[static_cast<size_t>(k)]) /
                           (static_cast<double>(scatterers) * modes);
      }
    }
  }

  // The correlator: <I(i) I(j)> / (<I(i)> <I(j)>) over pixels, then the configured scaling.
  const Eigen::VectorXd mean = intensity.rowwise().mean();
  std::vector<double> matrix(static_cast<size_t>(n) * static_cast<size_t>(n), 0.0);
  // Shear: c2 - 1 = (g1_D^2 / S + (1 - 1/S) g1^2) / modes in expectation (above).
  const double spread = shear ? 1.0 / scatterers : 0.0;
#pragma omp parallel for schedule(dynamic, 8)
  for (int i = 0; i < n; ++i) {
    for (int j = i; j < n; ++j) {
      const double correlation =
          intensity.row(i).dot(intensity.row(j)) / pixels / (mean[i] * mean[j]);
      const double g1_diffusion = std::exp(-w * std::abs(diffusion[static_cast<size_t>(j)] -
                                                         diffusion[static_cast<size_t>(i)]));
      const double g1_squared = (modes * (correlation - 1.0) -
                                 spread * g1_diffusion * g1_diffusion) / (1.0 - spread);
      matrix[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)] =
          offset + contrast * g1_squared;
    }
  }
  return matrix;
}

}  // namespace homodyne::io_internal
