// Throughput of the model kernel: EvaluateUpperTriangleRows with the Jacobian on an N = 2000 grid
// (one angle, all N (N - 1) / 2 upper-triangle points), single thread. items_per_second = points.
// And the per-pass set-up (BM_LaminarPassSetup/N): what every pass pays before its first point,
// whatever its number of points: the rate tables of ModelEvaluation at a new point and the pass
// body's preparation for 3 angles (ModePoint::PreparePass: per-angle coefficients, the
// separable factors, the shear tables), on a grid of N times. The global phase's coarse level
// runs hundreds of passes of about 5e4 points, where this set-up weighs
// (docs/history/performance-notebook.md, Per-pass set-up).
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "homodyne/model.h"
#include "model/isa_level.h"
#include "model/mode_point.h"
#include "model/robust_loss.h"

namespace {

constexpr int kNumTimes = 2000;

homodyne::HomodyneModel BenchmarkModel(homodyne::AnalysisMode mode, int num_times = kNumTimes) {
  homodyne::ScatteringGeometry geometry;  // template values: q 0.0054, L 2e6, dt 0.001
  std::vector<double> t(static_cast<std::size_t>(num_times));
  for (int k = 0; k < num_times; ++k) {
    t[static_cast<std::size_t>(k)] = (k + 1) * geometry.dt_seconds;  // the CLI's fitted grid
  }
  return homodyne::HomodyneModel(mode, geometry, t);
}

void RunUpperTriangle(benchmark::State& state, homodyne::AnalysisMode mode,
                      std::span<const double> physical, bool with_jacobian) {
  const homodyne::HomodyneModel model = BenchmarkModel(mode);
  const homodyne::ModelEvaluation evaluation(model, physical);
  const std::size_t points =
      static_cast<std::size_t>(kNumTimes) * static_cast<std::size_t>(kNumTimes - 1) / 2;
  std::vector<double> c2(points);
  std::vector<double> jacobian(
      with_jacobian ? points * static_cast<std::size_t>(model.num_point_derivatives()) : 0);
  for (auto _ : state) {
    evaluation.EvaluateUpperTriangleRows(20.0, 0.4, 1.0, 0, kNumTimes, c2, jacobian);
    benchmark::DoNotOptimize(c2.data());
    benchmark::DoNotOptimize(jacobian.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(points));
}

void BM_StaticWithJacobian(benchmark::State& state) {
  const std::array<double, 3> physical = {5e4, -0.3, 10.0};
  RunUpperTriangle(state, homodyne::AnalysisMode::kStatic, physical, true);
}

void BM_LaminarWithJacobian(benchmark::State& state) {
  const std::array<double, 7> physical = {5e4, -0.3, 10.0, 0.25, 0.2, 0.01, 5.0};
  RunUpperTriangle(state, homodyne::AnalysisMode::kLaminarFlow, physical, true);
}

void BM_StaticValuesOnly(benchmark::State& state) {
  const std::array<double, 3> physical = {5e4, -0.3, 10.0};
  RunUpperTriangle(state, homodyne::AnalysisMode::kStatic, physical, false);
}

void BM_LaminarValuesOnly(benchmark::State& state) {
  const std::array<double, 7> physical = {5e4, -0.3, 10.0, 0.25, 0.2, 0.01, 5.0};
  RunUpperTriangle(state, homodyne::AnalysisMode::kLaminarFlow, physical, false);
}

// The per-pass set-up at a new point each iteration (D0 varies, so nothing is reused), 3 angles.
void BM_LaminarPassSetup(benchmark::State& state) {
  const homodyne::HomodyneModel model =
      BenchmarkModel(homodyne::AnalysisMode::kLaminarFlow, static_cast<int>(state.range(0)));
  const std::array<double, 3> phi = {-90.0, -30.0, 30.0};
  const std::array<double, 3> contrast = {0.3, 0.3, 0.3};
  const std::array<double, 3> offset = {1.0, 1.0, 1.0};
  const homodyne::IsaLevel level = homodyne::ActiveIsaLevel();
  std::array<double, 7> physical = {5e4, -0.3, 10.0, 0.25, 0.2, 0.01, 5.0};
  for (auto _ : state) {
    physical[0] += 1.0;
    const homodyne::ModelEvaluation evaluation(model, physical);
    auto pass = evaluation.point().PreparePass(phi, contrast, offset, level, homodyne::PassLoss());
    benchmark::DoNotOptimize(pass.get());
  }
}

BENCHMARK(BM_LaminarPassSetup)->Arg(600)->Arg(2000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StaticWithJacobian)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LaminarWithJacobian)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StaticValuesOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LaminarValuesOnly)->Unit(benchmark::kMillisecond);

}  // namespace
