// The roofline of the fitting pass (docs/history/performance-notebook.md, "Roofline of the fitting
// pass"): the machine's limits and the pass kernel's parts, measured.
//   1. FMA peak: independent chains of double FMAs of the widest vector the CPU has (AVX-512: 8
//      lanes, AVX2: 4; roofline_kernels.h), 1 and 2 threads.
//   2. Read bandwidth: the sum of a 512 MiB float32 array, 1 and 2 threads.
//   3. The pass kernel on one thread (PassKernel, the process's instruction-set level) over the
//      benchmark grid of bench/objective_benchmark.cc (3 angles, N = 2000, 5,997,000 points):
//      full pass (AccumulateRows), cost pass (SumSquaredResiduals), scaling pass
//      (AccumulateScalingRows), and the Gram update alone
//      over the same tiles, as 4 x 4 blocks per tile (AddTileGram), as the lane Gram
//      (AddTileToLaneGram) and as the offset lane Gram of the full pass under the linear loss
//      (AddTileToOffsetLaneGram), in CPU seconds of the calling thread.
// Every figure is the best of `repeats` runs (argument 1, default 5): other processes only slow
// a run down. Usage: roofline_benchmark [repeats]; with ROOFLINE_PASS_ONLY set in the
// environment, only part 3; ROOFLINE_TIMES=N sets part 3's grid (default 2000; at N = 500 the
// 375,000 float32 values stay in a 2 MiB L2 cache, and the kernel's arithmetic is timed without
// the memory that other tenants of a shared machine contend for).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "model/mode_point.h"
#include "model/pass_kernel.h"
#include "model/tile.h"
#include "roofline_kernels.h"

namespace homodyne::roofline {

#if defined(ROOFLINE_HAS_AVX2)
namespace avx2 {
extern const Probes kProbes;
}
#endif
#if defined(ROOFLINE_HAS_AVX512)
namespace avx512 {
extern const Probes kProbes;
}
#endif

const Probes* BestProbes() {
#if defined(ROOFLINE_HAS_AVX512)
  if (__builtin_cpu_supports("avx512f")) return &avx512::kProbes;
#endif
#if defined(ROOFLINE_HAS_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2::kProbes;
#endif
  return nullptr;
}

}  // namespace homodyne::roofline

namespace {

using homodyne::roofline::Probes;

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ThreadCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// The best (smallest) of `repeats` timings of body() by `clock`.
template <typename Clock, typename Body>
double BestSeconds(int repeats, Clock clock, Body body) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double start = clock();
    body();
    best = std::min(best, clock() - start);
  }
  return best;
}

volatile double g_sink = 0.0;

void FmaPeak(const Probes& probes, int repeats) {
  const auto FmaChains = probes.fma_chains;
  const double lanes = probes.lanes;
  const int64_t iterations = 100'000'000;
  std::printf("FMA peak (%d-lane double FMA chains, %s; %lld FMA steps per chain)\n", probes.lanes,
              probes.level, static_cast<long long>(iterations));
  for (int chains : {1, 2, 4, 8, 10}) {
    const double seconds = BestSeconds(repeats, ThreadCpuSeconds,
                                       [&] { g_sink = g_sink + FmaChains(chains, iterations); });
    std::printf("  1 thread (CPU time), %2d chains: %.3g double FMA/s\n", chains,
                lanes * chains * static_cast<double>(iterations) / seconds);
  }
  for (int threads : {1, 2}) {
    const double seconds = BestSeconds(repeats, WallSeconds, [&] {
#pragma omp parallel num_threads(threads)
      {
        const double value = FmaChains(10, iterations);
#pragma omp critical
        g_sink = g_sink + value;
      }
    });
    std::printf("  %d thread(s) (wall time), 10 chains each: %.3g double FMA/s\n", threads,
                lanes * 10.0 * threads * static_cast<double>(iterations) / seconds);
  }
}

void ReadBandwidth(const Probes& probes, int repeats) {
  const int64_t count = int64_t{1} << 27;  // 512 MiB of float32
  float* values = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(count) * 4));
#pragma omp parallel for schedule(static) num_threads(2)
  for (int64_t i = 0; i < count; ++i) values[i] = 1.0f;
  std::printf("Read bandwidth (sum of %lld float32, 512 MiB)\n", static_cast<long long>(count));
  for (int threads : {1, 2}) {
    const double seconds = BestSeconds(repeats, WallSeconds, [&] {
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num();
        const int64_t begin = count * t / threads, end = count * (t + 1) / threads;
        const double value = probes.sum_floats(values + begin, end - begin);
#pragma omp critical
        g_sink = g_sink + value;
      }
    });
    std::printf("  %d thread(s): %.3g GB/s = %.3g float32/s\n", threads,
                4.0 * static_cast<double>(count) / seconds / 1e9,
                static_cast<double>(count) / seconds);
  }
  std::free(values);
}

void PassParts(const Probes& probes, homodyne::AnalysisMode mode, const char* name, int repeats) {
  const char* times_text = std::getenv("ROOFLINE_TIMES");
  const int n = times_text != nullptr ? std::max(16, std::atoi(times_text)) : 2000;
  std::vector<double> times(n);
  for (int i = 0; i < n; ++i) times[static_cast<size_t>(i)] = (i + 1) * 0.1;
  homodyne::HomodyneModel model(mode, homodyne::ScatteringGeometry{0.0054, 2e6, 0.1}, times);
  std::vector<double> truth = {3000.0, -0.5, 10.0, 2.0e-5, 0.3, 1.0e-6, 5.0};
  std::vector<double> theta = {3100.0, -0.45, 11.0, 2.1e-5, 0.31, 1.1e-6, 5.5};
  truth.resize(static_cast<size_t>(model.num_physical()));
  theta.resize(static_cast<size_t>(model.num_physical()));
  const std::vector<double> phi = {0.0, 45.0, 90.0};
  const std::vector<double> contrast = {0.3, 0.3, 0.3}, offset = {1.0, 1.0, 1.0};
  const int64_t per_angle = homodyne::UpperTriangleSize(n);
  const int64_t points = per_angle * static_cast<int64_t>(phi.size());
  std::vector<std::vector<float>> data;
  {
    const homodyne::ModelEvaluation truth_evaluation(model, truth);
    std::vector<double> c2(static_cast<size_t>(per_angle));
    for (double angle : phi) {
      truth_evaluation.EvaluateUpperTriangleRows(angle, 0.3, 1.0, 0, n, c2, {});
      data.emplace_back(c2.begin(), c2.end());
    }
  }
  std::vector<const float*> data_pointers;
  for (const auto& values : data) data_pointers.push_back(values.data());
  const homodyne::ModelEvaluation evaluation(model, theta);
  const homodyne::PassKernel kernel(evaluation, phi, contrast, offset);
  homodyne::PassKernel::Workspace workspace(kernel.gram_size());
  const int g = kernel.gram_size();
  std::vector<Eigen::MatrixXd> grams(phi.size(), Eigen::MatrixXd::Zero(g, g));
  std::vector<int64_t> finite(phi.size(), 0);

  const double full = BestSeconds(repeats, ThreadCpuSeconds, [&] {
    kernel.AccumulateRows(0, n, data_pointers, grams, finite, workspace);
  });
  const double cost = BestSeconds(repeats, ThreadCpuSeconds, [&] {
    g_sink = g_sink + kernel.SumSquaredResiduals(0, n, data_pointers, workspace);
  });
  std::vector<Eigen::MatrixXd> scaling_grams(phi.size(), Eigen::MatrixXd::Zero(3, 3));
  const double scaling = BestSeconds(repeats, ThreadCpuSeconds, [&] {
    kernel.AccumulateScalingRows(0, n, data_pointers, scaling_grams, finite, workspace);
  });
  // The Gram update alone over the same tiles (a tile of arbitrary values), on 64-byte
  // boundaries as the pass's scratch (mode_point.h, CacheLineAllocator).
  constexpr int kTile = homodyne::pass_kernel::kTilePoints;
  homodyne::CacheLineDoubles tile(
      static_cast<size_t>(kTile) * homodyne::pass_kernel::PaddedTileColumns(g), 0.0);
  for (int c = 0; c < g; ++c) {
    for (int t = 0; t < kTile; ++t) tile[static_cast<size_t>(c * kTile + t)] = 1e-3 * (c + t);
  }
  std::vector<double> gram(static_cast<size_t>(g * g), 0.0);
  homodyne::CacheLineDoubles lanes(static_cast<size_t>(homodyne::pass_kernel::LaneGramDoubles(g)),
                                   0.0);
  const int angles = static_cast<int>(phi.size());
  // The best CPU seconds of update(count) for every tile of the pass (each row's segments of
  // kTile points).
  const auto tiles_seconds = [&](auto update) {
    return BestSeconds(repeats, ThreadCpuSeconds, [&] {
      for (int i = 0; i < n; ++i) {
        for (int j = i + 1; j < n; j += kTile) update(std::min(kTile, n - j));
      }
    });
  };
  const double gram_seconds = tiles_seconds(
      [&](int count) { probes.repeat_tile_gram(tile.data(), count, g, angles, gram.data()); });
  const double lane_seconds = tiles_seconds([&](int count) {
    probes.repeat_lane_gram(tile.data(), count, g, angles, lanes.data(), gram.data());
  });
  const double offset_lane_seconds = tiles_seconds([&](int count) {
    probes.repeat_offset_lane_gram(tile.data(), count, g, angles, lanes.data(), gram.data());
  });
  g_sink = g_sink + gram[0];
  const double p = static_cast<double>(points);
  std::printf("%s pass kernel, 1 thread (%s), %lld points, CPU seconds of the thread:\n", name,
              std::string(homodyne::ToString(kernel.isa_level())).c_str(),
              static_cast<long long>(points));
  std::printf("  full pass:   %.6f s = %.3g points/s\n", full, p / full);
  std::printf("    the Gram update alone over the same tiles (%s):\n", probes.level);
  std::printf("    Gram update as 4 x 4 blocks per tile (AddTileGram): %.6f s = %.3g points/s\n",
              gram_seconds, p / gram_seconds);
  std::printf("    Gram update as lane Gram (AddTileToLaneGram): %.6f s = %.3g points/s\n",
              lane_seconds, p / lane_seconds);
  std::printf(
      "    Gram update as offset lane Gram (AddTileToOffsetLaneGram, the full pass's): %.6f s = "
      "%.3g points/s\n",
      offset_lane_seconds, p / offset_lane_seconds);
  std::printf("  cost pass:   %.6f s = %.3g points/s\n", cost, p / cost);
  std::printf("  scaling pass: %.6f s = %.3g points/s\n", scaling, p / scaling);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const Probes* probes = homodyne::roofline::BestProbes();
  if (probes == nullptr) {
    std::fprintf(stderr,
                 "roofline_benchmark: this CPU has neither AVX2 with FMA nor AVX-512, the levels "
                 "its probes are built for\n");
    return 1;
  }
  std::printf("Probes at level %s (%d doubles per vector)\n", probes->level, probes->lanes);
  if (std::getenv("ROOFLINE_PASS_ONLY") == nullptr) {
    FmaPeak(*probes, repeats);
    ReadBandwidth(*probes, repeats);
  }
  PassParts(*probes, homodyne::AnalysisMode::kLaminarFlow, "laminar_flow", repeats);
  PassParts(*probes, homodyne::AnalysisMode::kStatic, "static", repeats);
  return 0;
}
