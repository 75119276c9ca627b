// Throughput of one fitting pass (PackedDataObjective): laminar_flow, static and two_component, 3
// angles, N = 2000 fitted times (5,997,000 upper-triangle points), float32 data in memory (the
// "large" strategy). Accumulate = residuals + Jacobian + normal equations; Cost = residuals and
// chi2 only; ScalingGrams = the scaling pass of variable projection's cost (AccumulateAngleGrams
// with PassColumns::kScaling: per angle the 3 x 3 Gram of the contrast, offset and e columns). The
// *Cauchy cases: the same passes under the robust loss cauchy (docs/model.md, Robust loss). The
// *Coarse cases: the global phase's coarse level of a smaller data set (CoarseObjective).
// items_per_second = upper-triangle points per second. Threads: arg (1, 2). The context lines name
// the pass kernel's instruction-set level (pass_kernel: ..., chosen as in a fit: HOMODYNE_ISA or
// the best for this CPU); bench/isa_dispatch.sh compares levels and builds.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Dense>
#include <cstdlib>
#include <iostream>
#include <utility>
#include <vector>

#include "homodyne/backend.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"

namespace {

// Before main (benchmark_main): an invalid HOMODYNE_ISA ends the program with its message.
const bool kPassKernelContext = [] {
  try {
    benchmark::AddCustomContext("pass_kernel", homodyne::CpuKernelDescription());
  } catch (const homodyne::InputError& error) {
    std::cerr << "objective_benchmark: " << error.what() << "\n";
    std::exit(1);
  }
  return true;
}();

using homodyne::PackedDataObjective;

// configs/simulate_two_component.yaml's truth.
std::vector<double> TwoComponentTruth() {
  return {1000.0, 0.0, 0.0, 20000.0, -0.3, 0.0, 20.0, 0.5, 1.0, 0.3, 0.01, 0.5, 0.2, 2.0};
}

// The benchmarks' data: noise-free c2 (contrast 0.3, offset 1) at 3 angles on n times t_i =
// (i + 1) 0.1 s, at laminar flow's parameters (static: their first 3) or the two-component truth.
struct SimulatedData {
  homodyne::HomodyneModel model;
  std::vector<double> phi;
  homodyne::InMemoryPassData::PackedData data;
};

SimulatedData Simulate(homodyne::AnalysisMode mode, int n,
                       std::vector<double> phi = {0.0, 45.0, 90.0}) {
  std::vector<double> times(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) times[static_cast<size_t>(i)] = (i + 1) * 0.1;
  SimulatedData simulated{
      homodyne::HomodyneModel(mode, homodyne::ScatteringGeometry{0.0054, 2e6, 0.1}, times),
      std::move(phi),
      {}};
  std::vector<double> physical = {3000.0, -0.5, 10.0, 2.0e-5, 0.3, 1.0e-6, 5.0};
  if (mode == homodyne::AnalysisMode::kTwoComponent) physical = TwoComponentTruth();
  physical.resize(static_cast<size_t>(simulated.model.num_physical()));
  const homodyne::ModelEvaluation evaluation(simulated.model, physical);
  std::vector<double> c2(static_cast<size_t>(homodyne::UpperTriangleSize(n)));
  for (double angle : simulated.phi) {
    evaluation.EvaluateUpperTriangleRows(angle, 0.3, 1.0, 0, n, c2, {});
    simulated.data.emplace_back(c2.begin(), c2.end());
  }
  return simulated;
}

PackedDataObjective* MakeObjective(homodyne::AnalysisMode mode,
                                   homodyne::LossOptions loss = homodyne::LossOptions()) {
  SimulatedData simulated = Simulate(mode, 2000);
  homodyne::PassOptions options;
  options.batch_points = PackedDataObjective::kDefaultBatchPoints;
  options.loss = loss;
  return new PackedDataObjective(std::move(simulated.model), simulated.phi, 0.01,
                                 std::move(simulated.data), options);
}

PackedDataObjective& LaminarObjective() {
  static PackedDataObjective* objective = MakeObjective(homodyne::AnalysisMode::kLaminarFlow);
  return *objective;
}

PackedDataObjective& StaticObjective() {
  static PackedDataObjective* objective = MakeObjective(homodyne::AnalysisMode::kStatic);
  return *objective;
}

Eigen::VectorXd Theta() {
  Eigen::VectorXd theta(13);
  theta << 3100.0, -0.45, 11.0, 2.1e-5, 0.31, 1.1e-6, 5.5, 0.3, 0.3, 0.3, 1.0, 1.0, 1.0;
  return theta;
}

void BM_AccumulateLaminar(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = LaminarObjective();
  const Eigen::VectorXd theta = Theta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_CostLaminar(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = LaminarObjective();
  const Eigen::VectorXd theta = Theta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Cost(theta));
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_ScalingGramsLaminar(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = LaminarObjective();
  const Eigen::VectorXd theta = Theta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        objective.AccumulateAngleGrams(theta, false, homodyne::PassColumns::kScaling)
            .finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

Eigen::VectorXd StaticTheta() {
  Eigen::VectorXd theta(9);
  theta << 3100.0, -0.45, 11.0, 0.3, 0.3, 0.3, 1.0, 1.0, 1.0;
  return theta;
}

void BM_AccumulateStatic(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = StaticObjective();
  const Eigen::VectorXd theta = StaticTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_CostStatic(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = StaticObjective();
  const Eigen::VectorXd theta = StaticTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Cost(theta));
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_ScalingGramsStatic(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = StaticObjective();
  const Eigen::VectorXd theta = StaticTheta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        objective.AccumulateAngleGrams(theta, false, homodyne::PassColumns::kScaling)
            .finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

PackedDataObjective& TwoComponentObjective() {
  static PackedDataObjective* objective = MakeObjective(homodyne::AnalysisMode::kTwoComponent);
  return *objective;
}

Eigen::VectorXd TwoComponentTheta() {
  const std::vector<double> truth = TwoComponentTruth();
  Eigen::VectorXd theta(20);
  for (int i = 0; i < 14; ++i) theta[i] = 1.05 * truth[static_cast<size_t>(i)];
  theta.tail(6) << 0.3, 0.3, 0.3, 1.0, 1.0, 1.0;
  return theta;
}

void BM_AccumulateTwoComponent(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = TwoComponentObjective();
  const Eigen::VectorXd theta = TwoComponentTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_CostTwoComponent(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = TwoComponentObjective();
  const Eigen::VectorXd theta = TwoComponentTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Cost(theta));
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_ScalingGramsTwoComponent(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = TwoComponentObjective();
  const Eigen::VectorXd theta = TwoComponentTheta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        objective.AccumulateAngleGrams(theta, false, homodyne::PassColumns::kScaling)
            .finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

// A pass of the global phase's coarse level (docs/design.md section 4b) on the two-component
// example's data size (configs/simulate_two_component.yaml: 500 frames, the first dropped, 3
// angles): every 8th row of the 499-time grid (47,250 points; one batch per row, rows of 1 to 498
// points), the passes that take nearly all of that example's fit (docs/performance.md,
// Two-component mode). Laminar flow on the same grid for comparison.
homodyne::BatchedObjective& CoarseObjective(homodyne::AnalysisMode mode) {
  const auto make = [](homodyne::AnalysisMode m) {
    const SimulatedData simulated = Simulate(m, 499);
    return homodyne::MakeRowSubsampleObjective(simulated.data, simulated.model, simulated.phi, 0.01,
                                               8)
        .release();
  };
  static homodyne::BatchedObjective* two_component = make(homodyne::AnalysisMode::kTwoComponent);
  static homodyne::BatchedObjective* laminar = make(homodyne::AnalysisMode::kLaminarFlow);
  return mode == homodyne::AnalysisMode::kTwoComponent ? *two_component : *laminar;
}

void BM_AccumulateTwoComponentCoarse(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  homodyne::BatchedObjective& objective = CoarseObjective(homodyne::AnalysisMode::kTwoComponent);
  const Eigen::VectorXd theta = TwoComponentTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

// The coarse level of docs/performance.md's 23-angle two-component fit ("A 23-angle x 1001-frame
// fit": 1000 fitted times, angles 0, 8, ..., 176, every 62nd row: 196,673 points), the passes of
// its global phase's local fits (AccumulateAngleGrams, variable projection's full pass) and of
// their scaling.
homodyne::BatchedObjective& ManyAngleCoarseObjective() {
  static homodyne::BatchedObjective* objective = [] {
    std::vector<double> phi;
    for (int k = 0; k < 23; ++k) phi.push_back(8.0 * k);
    const SimulatedData simulated = Simulate(homodyne::AnalysisMode::kTwoComponent, 1000, phi);
    return homodyne::MakeRowSubsampleObjective(simulated.data, simulated.model, simulated.phi, 0.01,
                                               62)
        .release();
  }();
  return *objective;
}

Eigen::VectorXd ManyAngleTwoComponentTheta() {
  const std::vector<double> truth = TwoComponentTruth();
  Eigen::VectorXd theta(14 + 2 * 23);
  for (int i = 0; i < 14; ++i) theta[i] = 1.05 * truth[static_cast<size_t>(i)];
  theta.segment(14, 23).setConstant(0.3);
  theta.tail(23).setConstant(1.0);
  return theta;
}

void BM_AngleGramsTwoComponent23Coarse(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  homodyne::BatchedObjective& objective = ManyAngleCoarseObjective();
  const Eigen::VectorXd theta = ManyAngleTwoComponentTheta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(objective.AccumulateAngleGrams(theta).finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

// The same pass with the physical block summed over the angles (PassColumns::kSummedPhysical:
// variable projection's full pass at the scaling its scaling pass solved).
void BM_SummedAngleGramsTwoComponent23Coarse(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  homodyne::BatchedObjective& objective = ManyAngleCoarseObjective();
  const Eigen::VectorXd theta = ManyAngleTwoComponentTheta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        objective.AccumulateAngleGrams(theta, false, homodyne::PassColumns::kSummedPhysical)
            .finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_ScalingGramsTwoComponent23Coarse(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  homodyne::BatchedObjective& objective = ManyAngleCoarseObjective();
  const Eigen::VectorXd theta = ManyAngleTwoComponentTheta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        objective.AccumulateAngleGrams(theta, false, homodyne::PassColumns::kScaling)
            .finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_ScalingGramsTwoComponentCoarse(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  homodyne::BatchedObjective& objective = CoarseObjective(homodyne::AnalysisMode::kTwoComponent);
  const Eigen::VectorXd theta = TwoComponentTheta();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        objective.AccumulateAngleGrams(theta, false, homodyne::PassColumns::kScaling)
            .finite_points);
  }
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_AccumulateLaminarCoarse(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  homodyne::BatchedObjective& objective = CoarseObjective(homodyne::AnalysisMode::kLaminarFlow);
  const Eigen::VectorXd theta = Theta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

// The same passes under a robust loss (docs/model.md, Robust loss): cauchy with f_scale 1, at the
// same theta. The rescaling's arithmetic is the same wherever a point lies relative to f_scale
// (cauchy has no branch).
PackedDataObjective& CauchyObjective(homodyne::AnalysisMode mode) {
  static PackedDataObjective* laminar =
      MakeObjective(homodyne::AnalysisMode::kLaminarFlow,
                    homodyne::LossOptions{homodyne::LossFunction::kCauchy, 1.0});
  static PackedDataObjective* fixed = MakeObjective(
      homodyne::AnalysisMode::kStatic, homodyne::LossOptions{homodyne::LossFunction::kCauchy, 1.0});
  return mode == homodyne::AnalysisMode::kStatic ? *fixed : *laminar;
}

void BM_AccumulateLaminarCauchy(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = CauchyObjective(homodyne::AnalysisMode::kLaminarFlow);
  const Eigen::VectorXd theta = Theta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_CostLaminarCauchy(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = CauchyObjective(homodyne::AnalysisMode::kLaminarFlow);
  const Eigen::VectorXd theta = Theta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Cost(theta));
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_AccumulateStaticCauchy(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = CauchyObjective(homodyne::AnalysisMode::kStatic);
  const Eigen::VectorXd theta = StaticTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Accumulate(theta).chi2);
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

void BM_CostStaticCauchy(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  PackedDataObjective& objective = CauchyObjective(homodyne::AnalysisMode::kStatic);
  const Eigen::VectorXd theta = StaticTheta();
  for (auto _ : state) benchmark::DoNotOptimize(objective.Cost(theta));
  state.SetItemsProcessed(state.iterations() * objective.num_points());
}

BENCHMARK(BM_AccumulateLaminar)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CostLaminar)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ScalingGramsLaminar)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AccumulateStatic)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CostStatic)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ScalingGramsStatic)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AccumulateTwoComponent)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CostTwoComponent)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ScalingGramsTwoComponent)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AccumulateTwoComponentCoarse)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ScalingGramsTwoComponentCoarse)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AngleGramsTwoComponent23Coarse)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SummedAngleGramsTwoComponent23Coarse)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ScalingGramsTwoComponent23Coarse)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AccumulateLaminarCoarse)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AccumulateLaminarCauchy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CostLaminarCauchy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AccumulateStaticCauchy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CostStaticCauchy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
