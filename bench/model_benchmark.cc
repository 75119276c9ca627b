// Throughput of the model kernel: EvaluateUpperTriangleRows with the Jacobian on an N = 2000 grid
// (one angle, all N (N - 1) / 2 upper-triangle points), single thread. items_per_second = points.
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "homodyne/model.h"

namespace {

constexpr int kNumTimes = 2000;

homodyne::HomodyneModel BenchmarkModel(homodyne::AnalysisMode mode) {
  homodyne::ScatteringGeometry geometry;  // template values: q 0.0054, L 2e6, dt 0.001
  std::vector<double> t(kNumTimes);
  for (int k = 0; k < kNumTimes; ++k) {
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

BENCHMARK(BM_StaticWithJacobian)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LaminarWithJacobian)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StaticValuesOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LaminarValuesOnly)->Unit(benchmark::kMillisecond);

}  // namespace
