// Simulated data in memory for the pipeline tests: the model of a mode (laminar_flow unless named)
// at `truth` on a grid of kTimes frames (dt kDt, q kQ, gap kGap) at the given angles, contrast 0.3
// and offset 1, with seeded Gaussian noise of sigma 0.01 (the config's sigma). InMemoryData does
// not own its values: keep the c2 vector alive while the source made from it lives.
#pragma once

#include <random>
#include <span>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/model.h"

namespace homodyne::test {

inline constexpr int kTimes = 90;
inline constexpr double kDt = 0.05;
inline constexpr double kQ = 0.02;
inline constexpr double kGap = 2e6;
// The matching config lines (laminar_flow, checkpoints off unless a test turns them on).
inline constexpr const char* kLaminarConfig = R"(
analysis_mode: laminar_flow
analyzer_parameters: {dt: 0.05, scattering: {wavevector_q: 0.02},
                      geometry: {stator_rotor_gap: 2000000.0}}
optimization:
  nlsq: {sigma: 0.01}
  streaming: {enable_checkpoints: false}
)";

// The same lines for static (it reads no gap).
inline constexpr const char* kStaticConfig = R"(
analysis_mode: static
analyzer_parameters: {dt: 0.05, scattering: {wavevector_q: 0.02}}
optimization:
  nlsq: {sigma: 0.01}
  streaming: {enable_checkpoints: false}
)";

// The same lines for two_component (docs/model.md, Two-component mode; it reads no gap).
inline constexpr const char* kTwoComponentConfig = R"(
analysis_mode: two_component
analyzer_parameters: {dt: 0.05, scattering: {wavevector_q: 0.02}}
optimization:
  nlsq: {sigma: 0.01}
  streaming: {enable_checkpoints: false}
)";

// The matrices of `mode`'s model, angle after angle (InMemoryData order); `truth` holds the mode's
// physical parameters in model order.
inline std::vector<double> SimulatedC2(AnalysisMode mode, const std::vector<double>& truth,
                                       const std::vector<double>& phi, unsigned seed = 7) {
  std::vector<double> times;
  for (int i = 0; i < kTimes; ++i) times.push_back(kDt * (i + 1));
  const HomodyneModel model(mode, ScatteringGeometry{kQ, kGap, kDt}, times);
  const ModelEvaluation evaluation(model, truth);
  std::vector<double> c2(phi.size() * kTimes * kTimes);
  std::mt19937_64 random(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (size_t k = 0; k < phi.size(); ++k) {
    const std::span<double> matrix(c2.data() + k * kTimes * kTimes, kTimes * kTimes);
    evaluation.ComputeC2Matrix(phi[k], 0.3, 1.0, matrix);
    for (double& value : matrix) value += noise(random);
  }
  return c2;
}

// SimulatedC2 of laminar_flow.
inline std::vector<double> LaminarC2(const std::vector<double>& truth,
                                     const std::vector<double>& phi, unsigned seed = 7) {
  return SimulatedC2(AnalysisMode::kLaminarFlow, truth, phi, seed);
}

// A view of SimulatedC2's (or LaminarC2's) matrices at the angles `phi` it was made for.
inline InMemoryData LaminarData(const std::vector<double>& c2, const std::vector<double>& phi) {
  InMemoryData data;
  data.float64_values = c2;
  data.num_angles = static_cast<int>(phi.size());
  data.num_times = kTimes;
  data.phi_degrees = phi;
  data.q_inv_angstrom = kQ;
  data.dt_seconds = kDt;
  return data;
}

}  // namespace homodyne::test
