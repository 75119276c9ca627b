// Save time and file size of a checkpoint (docs/design.md section 6: a save over 2 s is a warning;
// the target here is < 50 ms for up to 100 parameters). Each save is a full CheckpointStore::Save:
// HDF5 write, fsync of the file, rename, fsync of the folder, pruning to keep_last = 3.
//
//   build/bench/checkpoint_benchmark [--benchmark_filter=...]
//   HOMODYNE_BENCH_CHECKPOINT_DIR=/scratch/x build/bench/checkpoint_benchmark   (another disk)
//
// Counters: bytes = file size of one checkpoint; MB/s = bytes per second of save time.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "checkpoint/checkpoint_store.h"

namespace homodyne {
namespace {

// A checkpoint as the fit writes it inside a full pass: P parameters, dense J^T J with full
// mantissas (A^T A of a random A, as real normal equations), 100 iterations of chi2 history.
Checkpoint RealisticCheckpoint(int p) {
  std::mt19937_64 random(12345);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd a(4 * p, p);
  for (Eigen::Index k = 0; k < a.size(); ++k) a.data()[k] = normal(random);
  Checkpoint checkpoint;
  checkpoint.lm.theta = Eigen::VectorXd::NullaryExpr(p, [&] { return normal(random); });
  checkpoint.lm.jtj = a.transpose() * a;
  checkpoint.lm.jtr = Eigen::VectorXd::NullaryExpr(p, [&] { return normal(random); });
  checkpoint.lm.chi2 = 1.2345e6;
  checkpoint.lm.num_points = 1'000'000'000;
  for (int k = 0; k < 100; ++k) checkpoint.lm.chi2_history.push_back(1e6 / (1.0 + k));
  PassState pass;
  pass.theta = checkpoint.lm.theta;
  pass.jtj = checkpoint.lm.jtj * 0.5;
  pass.jtr = checkpoint.lm.jtr * 0.5;
  pass.next_batch = 40;
  pass.chi2 = 6e5;
  checkpoint.pass = pass;
  checkpoint.config_sha256 = std::string(64, 'c');
  checkpoint.data_fingerprint = "path=/data/x.h5\nsize=123456789\nangles=23 times=3000";
  checkpoint.engine_version = HOMODYNE_VERSION;
  checkpoint.timestamp_utc = "2026-06-01T00:00:00Z";
  return checkpoint;
}

std::filesystem::path BenchmarkFolder() {
  const char* base = std::getenv("HOMODYNE_BENCH_CHECKPOINT_DIR");
  const std::filesystem::path root = base != nullptr && *base != '\0'
                                         ? std::filesystem::path(base)
                                         : std::filesystem::temp_directory_path();
  return root / ("homodyne_checkpoint_bench_" + std::to_string(::getpid()));
}

// Arguments: P, compression (0/1).
void BM_CheckpointSave(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const bool compression = state.range(1) != 0;
  const std::filesystem::path folder = BenchmarkFolder();
  std::filesystem::remove_all(folder);
  CheckpointStore store(CheckpointOptions{folder.string(), 3, compression});
  Checkpoint checkpoint = RealisticCheckpoint(p);
  int64_t bytes = 0;
  for (auto _ : state) {
    ++checkpoint.global_batch;
    bytes = store.Save(checkpoint).bytes;
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  std::filesystem::remove_all(folder);
}
BENCHMARK(BM_CheckpointSave)
    ->ArgNames({"P", "compression"})
    ->ArgsProduct({{13, 53, 100}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Loading (LoadNewestValid: open, read, verify the checksum) of the newest of 3 files.
void BM_CheckpointLoad(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const std::filesystem::path folder = BenchmarkFolder();
  std::filesystem::remove_all(folder);
  CheckpointStore store(CheckpointOptions{folder.string(), 3, true});
  Checkpoint checkpoint = RealisticCheckpoint(p);
  for (int k = 1; k <= 3; ++k) {
    checkpoint.global_batch = k;
    store.Save(checkpoint);
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        store.LoadNewestValid(checkpoint.config_sha256, checkpoint.data_fingerprint, nullptr));
  }
  std::filesystem::remove_all(folder);
}
BENCHMARK(BM_CheckpointLoad)->ArgName("P")->Arg(13)->Arg(100)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace homodyne
