// Precision at large shear phases: a long grid (N = 2000) with phases up to ~3e4 against a
// straightforward long-double transcription of the model (docs/model.md) written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "homodyne/model.h"

namespace homodyne {
namespace {

using Real = long double;

// Cumulative trapezoid in steps of max(a ts^b + c, 1e-10) (docs/model.md: Rates, The time
// integrals).
std::vector<Real> LongDoubleIntegral(const std::vector<Real>& ts, Real a, Real b, Real c) {
  std::vector<Real> cumulative(ts.size(), 0.0L);
  Real previous = 0.0L;
  for (std::size_t k = 0; k < ts.size(); ++k) {
    Real rate = a * std::pow(ts[k], b) + c;
    if (!(rate > 1e-10L)) rate = 1e-10L;
    if (k > 0) cumulative[k] = cumulative[k - 1] + 0.5L * (previous + rate);
    previous = rate;
  }
  return cumulative;
}

TEST(LargePhaseTest, MatchesLongDoubleTranscription) {
  ScatteringGeometry geometry;  // sinc prefactor 171.9 per step of shear rate
  geometry.q_inv_angstrom = 0.0054;
  geometry.gap_angstrom = 2e6;
  geometry.dt_seconds = 0.1;
  const int n = 2000;
  std::vector<double> t(n);
  for (int k = 0; k < n; ++k) t[static_cast<std::size_t>(k)] = k * geometry.dt_seconds;
  const HomodyneModel model(AnalysisMode::kLaminarFlow, geometry, t);
  const std::array<double, 7> params = {10.0, 0.1, 1.0, 0.05, 0.2, 0.01, 7.0};
  const ModelEvaluation evaluation(model, params);
  const double contrast = 0.4;
  // offset 0: c2 = contrast g1^2 keeps its relative precision where g1^2 ~ 1e-18 (an offset of 1
  // would round such values away).
  const double offset = 0.0;

  // Long-double reference of docs/model.md, from Rates to g1 floor and c2.
  const Real spacing = std::abs(static_cast<Real>(t[1]) - static_cast<Real>(t[0]));
  const Real eps_t = std::max(0.5L * spacing, 1e-8L);
  std::vector<Real> ts(t.size());
  for (std::size_t k = 0; k < t.size(); ++k) ts[k] = std::max(static_cast<Real>(t[k]), eps_t);
  const std::vector<Real> c_d = LongDoubleIntegral(ts, params[0], params[1], params[2]);
  const std::vector<Real> c_g = LongDoubleIntegral(ts, params[3], params[4], params[5]);
  const Real pi = 3.141592653589793238462643383279502884L;
  const Real q = geometry.q_inv_angstrom;
  const Real dt = geometry.dt_seconds;
  const Real wq_dt = 0.5L * q * q * dt;
  const Real sinc_prefactor = 0.5L / pi * q * static_cast<Real>(geometry.gap_angstrom) * dt;

  const std::size_t points = static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1) / 2;
  std::vector<double> c2(points);
  for (double phi : {7.0, 30.0, -120.0}) {
    evaluation.EvaluateUpperTriangleRows(phi, contrast, offset, 0, n, c2, {});
    const Real cos_psi = std::cos((static_cast<Real>(params[6]) - phi) * pi / 180.0L);
    Real max_phase = 0.0L;
    Real worst_error = 0.0L;  // relative to the sinc^4 envelope
    std::size_t point = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j, ++point) {
        const auto a = static_cast<std::size_t>(i);
        const auto b = static_cast<std::size_t>(j);
        const Real m_d = std::sqrt((c_d[a] - c_d[b]) * (c_d[a] - c_d[b]) + 1e-12L);
        const Real g1d = std::exp(std::max(-wq_dt * m_d, -700.0L));
        const Real m_g = std::sqrt((c_g[a] - c_g[b]) * (c_g[a] - c_g[b]) + 1e-12L);
        const Real phase = sinc_prefactor * cos_psi * m_g;
        const Real sinc =
            std::abs(phase) < 1e-4L ? 1.0L - phase * phase / 6.0L : std::sin(phase) / phase;
        const Real g1 = std::max(g1d * sinc * sinc, 1e-10L);
        const Real expected = offset + contrast * g1 * g1;
        // sinc^4 of a phase with absolute error delta moves by at most ~4 delta / Phi^4, so the
        // natural scale of the error is contrast g1d^2 min(1, Phi^-4).
        const Real envelope =
            contrast * g1d * g1d * std::min(1.0L, 1.0L / (phase * phase * phase * phase));
        worst_error = std::max(worst_error, std::abs(c2[point] - expected) / envelope);
        max_phase = std::max(max_phase, std::abs(phase));
      }
    }
    EXPECT_GT(max_phase, 1e3L) << "phi=" << phi;  // the test really has large phases
    EXPECT_LT(worst_error, 1e-8L) << "phi=" << phi << " max phase "
                                  << static_cast<double>(max_phase);
  }
}

}  // namespace
}  // namespace homodyne
