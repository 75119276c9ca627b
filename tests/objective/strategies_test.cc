// The large, chunked and streaming strategies (batched_objective.h) on simulated files: bitwise the
// same fit whatever the strategy, chunk size, prefetching, thread count or read path (float64
// through HDF5, float32 read directly), in laminar_flow and two_component, and a pass interrupted
// and resumed bitwise in both; parameter recovery on >= 1e6 points; a fit started at the optimum
// stays there; a poor start reaches the same optimum; an injected read fault is retried, then stops
// the pass naming the batch; a corrupt compressed chunk in the middle of the file stops a
// prefetching pass with an error naming file and dataset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/fault_injection.h"
#include "homodyne/errors.h"
#include "io/read_paths.h"
#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"
#include "support/listed_faults.h"
#include "support/simulated_data_fixture.h"

namespace homodyne {

// The mode by name in the parametrised tests' listings (gtest's value printer, found by ADL).
void PrintTo(AnalysisMode mode, std::ostream* out);
void PrintTo(AnalysisMode mode, std::ostream* out) { *out << ToString(mode); }

namespace {

class StrategiesTest : public SimulatedDataTest {
 protected:
  // The truth with each physical parameter and each contrast/offset scaled by `factor`.
  static Eigen::VectorXd ScaledStart(const Config& config, double factor) {
    Eigen::VectorXd start = Truth(config);
    start *= factor;
    return start;
  }
};

// The bitwise tests, once per mode with its own pass body: laminar_flow (the homodyne body) and
// two_component (docs/model.md, Two-component mode), each from a start off the truth that
// converges in well under the iteration limit.
class StrategiesByModeTest : public StrategiesTest,
                             public ::testing::WithParamInterface<AnalysisMode> {
 protected:
  static Eigen::VectorXd StartOf(const Config& config) {
    return ScaledStart(config, config.analysis_mode == AnalysisMode::kTwoComponent ? 1.05 : 1.2);
  }

  // The reference fit reached the optimum: it converged (laminar_flow), or (two_component, whose
  // f0 and f2 the data cannot separate: docs/model.md, Two-component mode) it walked along that
  // valley until the iteration limit with chi2 at the noise level.
  static ::testing::AssertionResult ReachedTheOptimum(const LevenbergMarquardtSummary& fit) {
    if (fit.IsConverged()) return ::testing::AssertionSuccess();
    if (GetParam() == AnalysisMode::kTwoComponent &&
        fit.status == LevenbergMarquardtStatus::kMaxIterations && fit.reduced_chi2 < 1.02) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << fit.reason << " (reduced chi2 " << fit.reduced_chi2 << ")";
  }

  // dtype: the simulated file's ("float32" files are read directly: docs/design.md section 8).
  void ExpectStrategiesBitwiseEqual(const LossOptions& loss, const std::string& dtype = "float64");
};

std::string ModeName(const ::testing::TestParamInfo<AnalysisMode>& info) {
  return std::string(ToString(info.param));
}

INSTANTIATE_TEST_SUITE_P(Modes, StrategiesByModeTest,
                         ::testing::Values(AnalysisMode::kLaminarFlow, AnalysisMode::kTwoComponent),
                         ModeName);

void ExpectBitwiseEqual(const LevenbergMarquardtSummary& a, const LevenbergMarquardtSummary& b,
                        const char* what) {
  EXPECT_EQ(a.status, b.status) << what;
  EXPECT_EQ(a.iterations, b.iterations) << what;
  EXPECT_EQ(a.final_chi2, b.final_chi2) << what;
  EXPECT_TRUE((a.theta.array() == b.theta.array()).all()) << what;
  EXPECT_TRUE((a.uncertainties.array() == b.uncertainties.array()).all()) << what;
}

// Large, chunked and streaming (with and without prefetch, several chunk sizes and thread counts)
// fit bitwise the same under `loss`.
void StrategiesByModeTest::ExpectStrategiesBitwiseEqual(const LossOptions& loss,
                                                        const std::string& dtype) {
  Config config = SimulationConfig(GetParam(), 150);
  config.simulation.dtype = dtype;
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const bool direct = dtype == "float32";  // uncompressed little-endian float32
  const std::vector<std::string> read_paths = io_internal::Float32ReadPaths(*source);
  ASSERT_EQ(static_cast<int>(read_paths.size()), source->info().num_angles());
  for (const std::string& why_not_direct : read_paths) {
    EXPECT_EQ(why_not_direct.empty(), direct) << why_not_direct;
  }
  const HomodyneModel model = ModelOf(config, *source);
  const std::vector<double> phi = AnglesOf(*source);
  constexpr int64_t kBatchPoints = 300;
  const PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);

  PackedDataObjective large(model, phi, 0.01, data, PassOptions{kBatchPoints, 0, {}, loss, {}, {}});
  ASSERT_GT(large.num_batches(), 20);
  const LevenbergMarquardtOptions options = BoundedOptions(large);
  const Eigen::VectorXd start = StartOf(config);
  const LevenbergMarquardtSummary reference = Minimize(options, large, start);
  ASSERT_TRUE(ReachedTheOptimum(reference));

  int chunks_seen = 0;
  PassOptions chunked_options{kBatchPoints,
                              3,
                              [&](const PassProgress& progress) {
                                ++chunks_seen;
                                EXPECT_LE(progress.batches_done, progress.num_batches);
                              },
                              loss,
                              {},
                              {}};
  PackedDataObjective chunked(model, phi, 0.01, data, chunked_options);
  ExpectBitwiseEqual(reference, Minimize(options, chunked, start), "chunked");
  EXPECT_GE(chunks_seen, chunked.passes() * (chunked.num_batches() / 3));

  // Streaming with and without prefetching, with different chunk sizes (and so different
  // prefetch orders), on 1 and 2 threads.
  const int threads = omp_get_max_threads();
  for (auto [prefetch, chunk, thread_count] :
       {std::tuple{true, 4, 2}, std::tuple{false, 1, 1}, std::tuple{true, 7, 1}}) {
    omp_set_num_threads(thread_count);
    BatchedObjective streaming(model, phi, 0.01, MakeStreamingPassData(*source, prefetch),
                               PassOptions{kBatchPoints, chunk, {}, loss, {}, {}});
    ExpectBitwiseEqual(reference, Minimize(options, streaming, start), "streaming");
    EXPECT_EQ(streaming.num_residuals(), large.num_residuals());
  }
  omp_set_num_threads(threads);
}

TEST_P(StrategiesByModeTest, LargeChunkedAndStreamingGiveBitwiseTheSameFit) {
  ExpectStrategiesBitwiseEqual(LossOptions{});
}

// The same from a float32 file, whose values every strategy reads directly (one preadv per
// read; streaming reads a chunk's batches of one angle with one read).
TEST_P(StrategiesByModeTest, LargeChunkedAndStreamingGiveBitwiseTheSameFitFromDirectReads) {
  ExpectStrategiesBitwiseEqual(LossOptions{}, "float32");
}

// The same under a robust loss (docs/model.md, Robust loss): the rescaled Gram matrices and the
// loss sums are reduced in batch order as the linear ones.
TEST_P(StrategiesByModeTest, LargeChunkedAndStreamingGiveBitwiseTheSameFitUnderARobustLoss) {
  ExpectStrategiesBitwiseEqual(LossOptions{LossFunction::kCauchy, 2.0});
}

// Fits >= 1e6 points (3 angles x 817 fitted times: 1.0e6 upper-triangle points, 2.0e6 in chi2)
// from a start 20% off and checks every parameter within 3 standard errors of the truth.
void ExpectRecoveryAtMillionPoints(BatchedObjective& objective, const Eigen::VectorXd& truth,
                                   const Eigen::VectorXd& start) {
  ASSERT_GE(objective.num_points(), 1000000);
  const LevenbergMarquardtOptions options = SimulatedDataTest::BoundedOptions(objective);
  const LevenbergMarquardtSummary summary = Minimize(options, objective, start);
  std::printf("%s\n", summary.BriefReport().c_str());
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_NEAR(summary.reduced_chi2, 1.0, 0.01);
  for (int a = 0; a < objective.num_parameters(); ++a) {
    std::printf("  theta[%d] = %.6g +- %.3g (truth %.6g, %.2f sigma)\n", a, summary.theta[a],
                summary.uncertainties[a], truth[a],
                (summary.theta[a] - truth[a]) / summary.uncertainties[a]);
    EXPECT_LE(std::abs(summary.theta[a] - truth[a]), 3.0 * summary.uncertainties[a]) << a;
  }
}

TEST_F(StrategiesTest, RecoversLaminarFlowFromAMillionPoints) {
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 818);
  std::unique_ptr<PackedDataObjective> objective = MakeObjective(config, 10000);
  ExpectRecoveryAtMillionPoints(*objective, Truth(config), ScaledStart(config, 1.2));
}

TEST_F(StrategiesTest, RecoversStaticFromAMillionPoints) {
  const Config config = SimulationConfig(AnalysisMode::kStatic, 818);
  std::unique_ptr<PackedDataObjective> objective = MakeObjective(config, 10000);
  ExpectRecoveryAtMillionPoints(*objective, Truth(config), ScaledStart(config, 1.2));
}

TEST_F(StrategiesTest, StartAtTheOptimumStaysAndPoorStartReachesIt) {
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 200);
  std::unique_ptr<PackedDataObjective> objective = MakeObjective(config, 5000);
  const LevenbergMarquardtOptions options = BoundedOptions(*objective);
  const LevenbergMarquardtSummary optimum = Minimize(options, *objective, ScaledStart(config, 1.1));
  ASSERT_TRUE(optimum.IsConverged()) << optimum.reason;

  const LevenbergMarquardtSummary restarted = Minimize(options, *objective, optimum.theta);
  ASSERT_TRUE(restarted.IsConverged()) << restarted.reason;
  EXPECT_LE(restarted.accepted_steps, 2);
  for (int a = 0; a < objective->num_parameters(); ++a) {
    EXPECT_NEAR(restarted.theta[a], optimum.theta[a], 1e-3 * optimum.uncertainties[a]) << a;
  }

  // Every parameter 50% off (above the truth for half of them, below for the others).
  Eigen::VectorXd poor = Truth(config);
  for (int a = 0; a < poor.size(); ++a) poor[a] *= (a % 2 == 0) ? 1.5 : 0.5;
  const LevenbergMarquardtSummary from_poor = Minimize(options, *objective, poor);
  ASSERT_TRUE(from_poor.IsConverged()) << from_poor.reason;
  EXPECT_NEAR(from_poor.final_chi2, optimum.final_chi2, 1e-9 * optimum.final_chi2);
  for (int a = 0; a < objective->num_parameters(); ++a) {
    EXPECT_NEAR(from_poor.theta[a], optimum.theta[a], 1e-2 * optimum.uncertainties[a]) << a;
  }
}

// Interrupting a pass between two chunks and resuming from the saved LM state (after the last
// finished iteration) and pass state (partial sums, next batch) gives bitwise the uninterrupted
// fit, wherever the interruption falls (first pass, a trial pass, late in the fit).
TEST_F(StrategiesTest, AnInjectedReadFaultIsRetriedThenStopsThePassNamingTheBatch) {
  // Arrange: every read of batch 1 fails (src/base/fault_injection.h), as an unreadable
  // dataset would.
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 60);
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const HomodyneModel model = ModelOf(config, *source);
  const std::vector<double> phi = AnglesOf(*source);
  const Eigen::VectorXd start = ScaledStart(config, 1.2);
  test::ListedFaults faults;
  faults.failing_batch_read = 1;
  const ScopedFaultInjector installed(faults);
  StreamingReadOptions read_options;
  read_options.prefetch = false;
  read_options.retry_backoff_seconds = 0.0;
  BatchedObjective streaming(model, phi, 0.01, MakeStreamingPassData(*source, read_options),
                             PassOptions{300, 1, {}, {}, {}, {}});
  ASSERT_GT(streaming.num_batches(), 2);

  // Act, assert: two retries, then a DataError that names the batch.
  try {
    streaming.Cost(start);
    FAIL() << "expected DataError";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("batch 1 "));
    EXPECT_THAT(error.what(), ::testing::HasSubstr("could not be read after 2 retries"));
  }
  EXPECT_EQ(streaming.read_retries(), 2);
}

// Overwrites the first half of the chunk of `dataset_path` that starts at row `chunk_row`, an
// LZF-compressed chunk, with 0xe0 bytes, which LZF cannot decode (its first instruction is a
// back-reference before the start of the output). Returns whether it found that chunk.
bool CorruptChunk(const std::string& file_path, const std::string& dataset_path,
                  hsize_t chunk_row) {
  hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t dataset = H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(dataset);
  hsize_t num_chunks = 0;
  H5Dget_num_chunks(dataset, space, &num_chunks);
  bool found = false;
  unsigned filter_mask = 0;
  haddr_t address = 0;
  hsize_t size = 0;
  for (hsize_t index = 0; index < num_chunks && !found; ++index) {
    hsize_t offset[2] = {0, 0};
    found = H5Dget_chunk_info(dataset, space, index, offset, &filter_mask, &address, &size) >= 0 &&
            offset[0] == chunk_row;
  }
  H5Sclose(space);
  H5Dclose(dataset);
  H5Fclose(file);
  if (!found) return false;
  EXPECT_EQ(filter_mask, 0u);  // stored compressed (LZF is optional: see beamline_writer.cc)
  EXPECT_GT(size, 64u);
  std::fstream bytes(file_path, std::ios::in | std::ios::out | std::ios::binary);
  bytes.seekp(static_cast<std::streamoff>(address));
  const std::string garbage(static_cast<size_t>(size / 2), '\xe0');
  bytes.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  EXPECT_TRUE(bytes.good());
  return true;
}

// The in-memory load of an LZF file (LoadPackedData, and ReadRuns of a rank's share) decodes the
// chunks itself on the passes' threads (BatchSource::PrefetchRows), every angle's rows of a piece
// at once: the same floats as the reads through HDF5 alone, on 1 and 3 threads.
TEST_F(StrategiesTest, TheInMemoryLoadOfLzfChunksIsBitwiseHdf5s) {
  Config config = SimulationConfig(AnalysisMode::kStatic, 400);
  config.simulation.compression = "lzf";
  config.simulation.dtype = "float32";  // what the chunk decoder reads
  SimulateDataset(config);
  DataSelection selection;
  selection.file_path = config.simulation.output;
  selection.wavevector_q_target = config.geometry.q_inv_angstrom;
  selection.dt_seconds = config.geometry.dt_seconds;
  std::unique_ptr<BatchSource> hdf5 = io_internal::OpenHdfBatchSource(selection, false);
  const PackedDataObjective::PackedData expected = PackedDataObjective::LoadPackedData(*hdf5);
  EXPECT_EQ(io_internal::RowsDecodedByPrefetch(*hdf5), 0);
  const std::vector<RowBatch> batches = SplitIntoBatches(hdf5->info().num_times(), 3000);
  const std::vector<std::pair<int, int>> runs = {{1, 4}, {6, static_cast<int>(batches.size())}};
  const std::unique_ptr<InMemoryPassData> expected_runs =
      InMemoryPassData::ReadRuns(*hdf5, batches, runs, 7000);
  hdf5.reset();
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
    // Blocks of 20000 points: several pieces and blocks per angle.
    EXPECT_EQ(PackedDataObjective::LoadPackedData(*source, 20000), expected) << threads;
    EXPECT_GT(io_internal::RowsDecodedByPrefetch(*source), 0);
    EXPECT_EQ(InMemoryPassData::ReadRuns(*source, batches, runs, 7000)->data(),
              expected_runs->data())
        << threads;
  }
  omp_set_num_threads(saved_threads);
}

TEST_F(StrategiesTest, ACorruptChunkMidFileStopsAPrefetchingPassNamingFileAndDataset) {
  // Arrange: an LZF file of 8 chunks of 131 rows per matrix (float64, 1000 frames: chunks of
  // about 1 MiB); the second angle's third chunk (rows 262-392, none of the rows the reader
  // samples when it opens the file) is corrupted, so a pass reads good batches, then fails in
  // the reader thread.
  Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 1000);
  config.simulation.compression = "lzf";
  SimulateDataset(config);
  const std::string dataset_path = "/xpcs/twotime/correlation_map/c2_00002";
  ASSERT_TRUE(CorruptChunk(config.simulation.output, dataset_path, 262));
  DataSelection selection;
  selection.file_path = config.simulation.output;
  selection.wavevector_q_target = config.geometry.q_inv_angstrom;
  selection.dt_seconds = config.geometry.dt_seconds;
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  StreamingReadOptions read_options;  // prefetch on: the reads run on the reader thread
  read_options.retry_backoff_seconds = 0.0;
  BatchedObjective streaming(ModelOf(config, *source), AnglesOf(*source), 0.01,
                             MakeStreamingPassData(*source, read_options),
                             PassOptions{5000, 2, {}, {}, {}, {}});
  ASSERT_GT(streaming.num_batches(), 8);

  // Act, assert: every pass stops with the file, the dataset and the rows that failed (retried
  // twice); the objective can still be destroyed (the reader thread ends, nothing hangs).
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      streaming.Accumulate(ScaledStart(config, 1.2));
      FAIL() << "expected DataError";
    } catch (const DataError& error) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr(config.simulation.output));
      EXPECT_THAT(error.what(), ::testing::HasSubstr(dataset_path));
      EXPECT_THAT(error.what(), ::testing::HasSubstr("could not be read after 2 retries"));
      EXPECT_THAT(error.what(), ::testing::HasSubstr("cannot read rows"));
    }
  }
  EXPECT_EQ(streaming.read_retries(), 4);
}

TEST_P(StrategiesByModeTest, ResumingAnInterruptedPassIsBitwiseIdentical) {
  const Config config = SimulationConfig(GetParam(), 120);
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const HomodyneModel model = ModelOf(config, *source);
  const std::vector<double> phi = AnglesOf(*source);
  constexpr int64_t kBatchPoints = 400;
  constexpr int kChunk = 2;
  const Eigen::VectorXd start = StartOf(config);

  // Every objective on the source is destroyed before the next one reads: a streaming
  // objective's prefetch thread may still be reading (HDF5 is not thread-safe).
  auto uninterrupted =
      std::make_unique<BatchedObjective>(model, phi, 0.01, MakeStreamingPassData(*source),
                                         PassOptions{kBatchPoints, kChunk, {}, {}, {}, {}});
  const LevenbergMarquardtOptions options = BoundedOptions(*uninterrupted);
  const LevenbergMarquardtSummary reference = Minimize(options, *uninterrupted, start);
  ASSERT_TRUE(ReachedTheOptimum(reference));
  const int chunks_per_pass = (uninterrupted->num_batches() + kChunk - 1) / kChunk;
  ASSERT_GT(chunks_per_pass, 3);
  uninterrupted.reset();

  struct Interrupted {};
  for (int interrupt_at : {1, chunks_per_pass + 2, 5 * chunks_per_pass - 1}) {
    std::optional<LevenbergMarquardtState> last_state;
    std::optional<PassState> saved_pass;
    int chunks = 0;
    LevenbergMarquardtOptions first_options = options;
    first_options.callback = [&last_state](const LevenbergMarquardtIteration& iteration) {
      last_state = iteration.state;
      return true;
    };
    {
      BatchedObjective first(model, phi, 0.01, MakeStreamingPassData(*source),
                             PassOptions{kBatchPoints,
                                         kChunk,
                                         [&](const PassProgress& progress) {
                                           if (++chunks == interrupt_at) {
                                             saved_pass = *progress.state;
                                             throw Interrupted{};
                                           }
                                         },
                                         {},
                                         {},
                                         {}});
      EXPECT_THROW(Minimize(first_options, first, start), Interrupted);
      ASSERT_TRUE(saved_pass.has_value());
      ASSERT_LT(saved_pass->next_batch, first.num_batches());
    }

    LevenbergMarquardtOptions resumed_options = options;
    resumed_options.resume_state = last_state;  // none when stopped in the first pass
    BatchedObjective resumed(model, phi, 0.01, MakeStreamingPassData(*source),
                             PassOptions{kBatchPoints, kChunk, {}, {}, {}, {}});
    resumed.ResumePass(*saved_pass);
    ExpectBitwiseEqual(reference, Minimize(resumed_options, resumed, start), "resumed");
  }
}

}  // namespace
}  // namespace homodyne
