// Time of one full pass of the host emulation of the CUDA backend (MakeEmulatedPassBackend,
// src/objective/emulated_pass_backend.h; docs/backends.md) on the grid of objective_benchmark.cc:
// 3 angles, N = 2000 fitted times t_i = (i + 1) 0.1 s (5,997,000 upper-triangle points), q 0.0054,
// dt 0.1, noise-free float32 c2 (contrast 0.3, offset 1) in memory, the default batches. The
// emulation runs the device kernels' threads one after the other on one host thread, so its time
// counts the device arithmetic per point executed on the CPU (static: through per-frame sums,
// docs/design.md section 2; laminar_flow: point by point), not a GPU's speed, which is unmeasured
// (docs/performance.md, Device backends). items_per_second = upper-triangle points per second.
// Built with the tests (the emulation is in the test library homodyne_testing).
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <memory>
#include <utility>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "objective/emulated_pass_backend.h"

namespace {

using homodyne::PackedDataObjective;

PackedDataObjective* MakeObjective(homodyne::AnalysisMode mode) {
  constexpr int kTimes = 2000;
  std::vector<double> times(kTimes);
  for (int i = 0; i < kTimes; ++i) times[static_cast<size_t>(i)] = (i + 1) * 0.1;
  homodyne::HomodyneModel model(mode, homodyne::ScatteringGeometry{0.0054, 2e6, 0.1}, times);
  const std::vector<double> phi = {0.0, 45.0, 90.0};
  std::vector<double> physical = {3000.0, -0.5, 10.0, 2.0e-5, 0.3, 1.0e-6, 5.0};
  physical.resize(static_cast<size_t>(model.num_physical()));
  homodyne::InMemoryPassData::PackedData data;
  {
    const homodyne::ModelEvaluation evaluation(model, physical);
    std::vector<double> c2(static_cast<size_t>(homodyne::UpperTriangleSize(kTimes)));
    for (double angle : phi) {
      evaluation.EvaluateUpperTriangleRows(angle, 0.3, 1.0, 0, kTimes, c2, {});
      data.emplace_back(c2.begin(), c2.end());
    }
  }
  homodyne::PassOptions options;
  options.batch_points = PackedDataObjective::kDefaultBatchPoints;
  return new PackedDataObjective(std::move(model), phi, 0.01, std::move(data), options,
                                 homodyne::MakeEmulatedPassBackend());
}

// The objective_benchmark.cc points near the truth: physical parameters, 3 contrasts, 3 offsets.
Eigen::VectorXd Theta(homodyne::AnalysisMode mode) {
  if (mode == homodyne::AnalysisMode::kStatic) {
    Eigen::VectorXd theta(9);
    theta << 3100.0, -0.45, 11.0, 0.3, 0.3, 0.3, 1.0, 1.0, 1.0;
    return theta;
  }
  Eigen::VectorXd theta(13);
  theta << 3100.0, -0.45, 11.0, 2.1e-5, 0.31, 1.1e-6, 5.5, 0.3, 0.3, 0.3, 1.0, 1.0, 1.0;
  return theta;
}

void FullPass(benchmark::State& state, homodyne::AnalysisMode mode) {
  static PackedDataObjective* objectives[2] = {nullptr, nullptr};
  PackedDataObjective*& objective = objectives[mode == homodyne::AnalysisMode::kStatic ? 0 : 1];
  if (objective == nullptr) objective = MakeObjective(mode);
  const Eigen::VectorXd theta = Theta(mode);
  for (auto _ : state) benchmark::DoNotOptimize(objective->Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective->num_points());
}

void BM_EmulatedFullPassStatic(benchmark::State& state) {
  FullPass(state, homodyne::AnalysisMode::kStatic);
}
void BM_EmulatedFullPassLaminar(benchmark::State& state) {
  FullPass(state, homodyne::AnalysisMode::kLaminarFlow);
}

}  // namespace

BENCHMARK(BM_EmulatedFullPassStatic)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmulatedFullPassLaminar)->Unit(benchmark::kMillisecond)->UseRealTime();
