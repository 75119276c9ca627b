// Fits a static-mode data set built in memory with the installed library: the model makes the
// data, Fit (homodyne/fit.h) fits them, and the program exits 0 when D0 comes back within 1%.
#include <cmath>
#include <cstdio>
#include <vector>

#include <homodyne/config.h>
#include <homodyne/dataset.h>
#include <homodyne/fit.h>
#include <homodyne/model.h>

int main() {
  using namespace homodyne;
  const Config config = ParseConfig(R"(
analysis_mode: static
analyzer_parameters: {dt: 0.1, scattering: {wavevector_q: 0.0054}}
optimization:
  streaming: {enable_checkpoints: false}
)",
                                    "consumer");
  const int n = 80;
  std::vector<double> times;
  for (int i = 0; i < n; ++i) times.push_back(0.1 * (i + 1));
  const HomodyneModel model(AnalysisMode::kStatic, ScatteringGeometry{0.0054, 2e6, 0.1}, times);
  const std::vector<double> truth = {2000.0, -0.4, 20.0};
  const ModelEvaluation evaluation(model, truth);
  std::vector<double> c2(static_cast<size_t>(2 * n * n));
  evaluation.ComputeC2Matrix(0.0, 0.3, 1.0, std::span<double>(c2.data(), n * n));
  evaluation.ComputeC2Matrix(90.0, 0.25, 1.0, std::span<double>(c2.data() + n * n, n * n));
  InMemoryData data;
  data.float64_values = c2;
  data.num_angles = 2;
  data.num_times = n;
  data.phi_degrees = {0.0, 90.0};
  data.q_inv_angstrom = 0.0054;
  data.dt_seconds = 0.1;
  const auto source = MakeInMemoryBatchSource(data);
  const FitOutcome outcome = Fit(config, *source);
  const double d0 = outcome.result.physical.front().value;
  std::printf("D0 %.6g (truth 2000), reduced chi2 %.3g\n", d0, outcome.result.reduced_chi_squared);
  return std::abs(d0 / truth[0] - 1.0) < 0.01 ? 0 : 1;
}
