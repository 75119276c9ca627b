// PerformanceLog (src/pipeline/performance_log.h): the lines each observer event gives at each
// level and threshold, and that a log that cannot be written only warns.
#include "pipeline/performance_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "optimize/levenberg_marquardt.h"

namespace homodyne {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

PerformanceLogOptions Options(PerformanceLogLevel level, double threshold_seconds) {
  PerformanceLogOptions options;
  options.enabled = true;
  options.level = level;
  options.threshold_seconds = threshold_seconds;
  return options;
}

PassProgress Chunk(int64_t pass, bool full, int done, int total, int in_chunk, double chunk_seconds,
                   double pass_seconds) {
  PassProgress progress;
  progress.pass = pass;
  progress.full_pass = full;
  progress.batches_done = done;
  progress.num_batches = total;
  progress.batches_in_chunk = in_chunk;
  progress.chunk_seconds = chunk_seconds;
  progress.pass_seconds = pass_seconds;
  return progress;
}

GlobalSearchProgress Step(const char* stage, int index, int total, int64_t passes, double seconds) {
  GlobalSearchProgress progress;
  progress.stage = stage;
  progress.index = index;
  progress.total = total;
  progress.best_chi2 = 12.5;
  progress.passes = passes;
  progress.seconds = seconds;
  return progress;
}

LevenbergMarquardtIteration Iteration(int number, bool accepted, double seconds, int64_t passes) {
  LevenbergMarquardtIteration iteration;
  iteration.iteration = number;
  iteration.step_accepted = accepted;
  iteration.chi2 = 100.0;
  iteration.seconds = seconds;
  iteration.passes = passes;
  return iteration;
}

// The same fit's events, with known times (threshold 0.1 s: the local fit and the second pass
// are slow).
void FeedEvents(PerformanceLog& log) {
  log.OnPhase({"load", 0.25});
  log.OnGlobalSearch(Step("screening", 1, 2, 1, 0.010));
  log.OnGlobalSearch(Step("screening", 2, 2, 2, 0.030));
  log.OnGlobalSearch(Step("local fit", 1, 1, 9, 0.330));
  log.OnPhase({"global search", 0.35});
  log.OnIteration(Iteration(0, false, 0.050, 1));
  log.OnPassChunk(Chunk(1, true, 3, 6, 3, 0.010, 0.010));
  log.OnPassChunk(Chunk(1, true, 6, 6, 3, 0.020, 0.035));
  log.OnCheckpointSaved({"ck.h5", 0.004, 12345});
  log.OnPassChunk(Chunk(2, false, 6, 6, 6, 0.125, 0.125));
  log.OnIteration(Iteration(1, true, 0.090, 2));
  log.OnPhase({"final fit", 0.5});
  FitResult result;
  result.total_seconds = 1.5;
  result.convergence_status = "converged";
  result.iterations = 1;
  result.passes = 2;
  result.strategy = "chunked";
  result.load_seconds = 0.25;
  result.optimization_seconds = 0.5;
  result.memory_peak_mb = 42.0;
  log.LogTotal(result);
}

class PerformanceLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("homodyne_perf_log_" + std::to_string(getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(folder_);
    // spdlog's warnings into warnings_ instead of the console.
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_st>(warnings_)));
  }
  void TearDown() override {
    spdlog::set_default_logger(previous_);
    fs::remove_all(folder_);
  }

  // The log's lines without their timestamps (each checked to be "YYYY-mm-dd HH:MM:SS ").
  std::vector<std::string> Lines(const std::string& name = "performance.log") {
    std::ifstream in(folder_ / name);
    EXPECT_TRUE(in) << (folder_ / name);
    std::vector<std::string> lines;
    const std::regex stamp(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d )");
    for (std::string line; std::getline(in, line);) {
      EXPECT_TRUE(std::regex_search(line, stamp)) << line;
      lines.push_back(line.substr(20));
    }
    return lines;
  }

  fs::path folder_;
  std::ostringstream warnings_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(PerformanceLogTest, InfoLogsPassesCheckpointsStagesPhasesIterationsAndTheTotal) {
  {
    PerformanceLog log(Options(PerformanceLogLevel::kInfo, 0.1), folder_.string());
    ASSERT_TRUE(log.active());
    FeedEvents(log);
  }
  EXPECT_THAT(
      Lines(),
      ElementsAre(
          "[INFO] fit started (level INFO, slow from 0.1 s)",
          "[INFO] load phase completed in 0.250 s",
          "[INFO] global search stage screening completed in 0.030 s (2 candidates)",
          "[WARNING] slow: global search local fit 1/1 completed in 0.300 s (best chi2 "
          "1.25000000e+01) (threshold 0.1 s)",
          "[INFO] global search stage local fit completed in 0.300 s (1 local fits)",
          "[INFO] global search phase completed in 0.350 s",
          "[INFO] iteration 0 (start) completed in 0.050 s (chi2 1.00000000e+02, 1 passes so far)",
          "[INFO] pass 1 (J) completed in 0.035 s (6 batches)",
          "[INFO] checkpoint saved in 0.004 s (12345 bytes, ck.h5)",
          "[WARNING] slow: pass 2 (c) completed in 0.125 s (6 batches) (threshold 0.1 s)",
          // 0.040 s between the iterations, less the checkpoint save of 0.004 s.
          "[INFO] iteration 1 accepted completed in 0.036 s (chi2 1.00000000e+02, 2 passes so "
          "far)",
          "[INFO] final fit phase completed in 0.500 s",
          "[INFO] fit completed in 1.500 s total (converged, 1 iterations, 2 passes, strategy "
          "chunked, load 0.250 s, final fit 0.500 s, peak memory 42 MB)"));
  EXPECT_THAT(warnings_.str(), IsEmpty());
}

TEST_F(PerformanceLogTest, DebugAddsChunksOfMultiChunkPassesAndGlobalSearchSteps) {
  {
    PerformanceLog log(Options(PerformanceLogLevel::kDebug, 0.1), folder_.string());
    FeedEvents(log);
  }
  const std::vector<std::string> lines = Lines();
  std::vector<std::string> debug;
  for (const std::string& line : lines) {
    if (line.starts_with("[DEBUG]")) debug.push_back(line);
  }
  // Pass 2 was one chunk: its pass line only.
  EXPECT_THAT(debug,
              ElementsAre("[DEBUG] global search screening 1/2 completed in 0.010 s (best chi2 "
                          "1.25000000e+01)",
                          "[DEBUG] global search screening 2/2 completed in 0.020 s (best chi2 "
                          "1.25000000e+01)",
                          "[DEBUG] pass 1 (J) batch 3/6 completed in 0.010 s",
                          "[DEBUG] pass 1 (J) batch 6/6 completed in 0.020 s"));
  EXPECT_EQ(lines.size(), 13 + debug.size());  // every INFO line as well
}

TEST_F(PerformanceLogTest, WarningLogsOnlySlowOperations) {
  {
    PerformanceLog log(Options(PerformanceLogLevel::kWarning, 0.1), folder_.string());
    FeedEvents(log);
  }
  EXPECT_THAT(Lines(),
              ElementsAre(HasSubstr("[WARNING] slow: global search local fit 1/1 completed in"),
                          HasSubstr("[WARNING] slow: pass 2 (c) completed in 0.125 s")));
}

TEST_F(PerformanceLogTest, ThresholdZeroMarksEveryOperationButNotTheSummaries) {
  {
    PerformanceLog log(Options(PerformanceLogLevel::kInfo, 0.0), folder_.string());
    FeedEvents(log);
  }
  int slow = 0;
  for (const std::string& line : Lines()) {
    const bool summary = line.find("phase completed") != std::string::npos ||
                         line.find("stage") != std::string::npos ||
                         line.find("fit started") != std::string::npos ||
                         line.find("fit completed") != std::string::npos;
    if (summary) {
      EXPECT_THAT(line, ::testing::StartsWith("[INFO] "));
    } else {
      EXPECT_THAT(line, ::testing::StartsWith("[WARNING] slow: "));
      EXPECT_THAT(line, ::testing::EndsWith(" (threshold 0 s)"));
      ++slow;
    }
  }
  // 3 global-search steps, 2 iterations, 2 chunks of pass 1, 2 passes, 1 checkpoint save: the
  // chunks and steps too, though DEBUG lines, for a slow line is written at every level.
  EXPECT_EQ(slow, 10);
}

TEST_F(PerformanceLogTest, OperationTimesLeaveOutTheCheckpointSavesMadeDuringThem) {
  {
    PerformanceLog log(Options(PerformanceLogLevel::kDebug, 10.0), folder_.string());
    log.OnPhase({"load", 0.0});
    log.OnGlobalSearch(Step("local fit", 1, 2, 5, 0.100));
    log.OnCheckpointSaved({"a.h5", 0.030, 1});              // after step 1: in step 2's time
    log.OnGlobalSearch(Step("local fit", 2, 2, 9, 0.250));  // 0.150 s wall
    log.OnCheckpointSaved({"b.h5", 0.050, 1});  // the phase's last save: not the final fit's
    log.OnPhase({"global search", 0.3});
    log.OnPassChunk(Chunk(3, true, 4, 8, 4, 0.040, 0.040));
    log.OnCheckpointSaved({"c.h5", 0.020, 1});               // after the first chunk: in the pass
    log.OnPassChunk(Chunk(3, true, 8, 8, 4, 0.050, 0.110));  // 0.110 s wall
    log.OnIteration(Iteration(0, false, 0.200, 1));          // 0.200 s wall, with c.h5
  }
  const std::vector<std::string> lines = Lines();
  const auto has = [&lines](const std::string& text) {
    for (const std::string& line : lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("[DEBUG] global search local fit 2/2 completed in 0.120 s"));
  EXPECT_TRUE(has("[INFO] global search stage local fit completed in 0.250 s (2 local fits)"));
  EXPECT_TRUE(has("[INFO] pass 3 (J) completed in 0.090 s (8 batches)"));
  EXPECT_TRUE(has("[INFO] iteration 0 (start) completed in 0.180 s"));
}

TEST_F(PerformanceLogTest, ANewMinimizeRestartsTheIterationClock) {
  {
    PerformanceLog log(Options(PerformanceLogLevel::kInfo, 10.0), folder_.string());
    log.OnIteration(Iteration(0, false, 0.5, 1));
    log.OnIteration(Iteration(1, true, 0.75, 2));
    log.OnIteration(Iteration(0, false, 0.125, 1));  // e.g. Ceres' fallback to the LM core
  }
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[2], HasSubstr("iteration 1 accepted completed in 0.250 s"));
  EXPECT_THAT(lines[3], HasSubstr("iteration 0 (start) completed in 0.125 s"));
}

TEST_F(PerformanceLogTest, AppendsToAnExistingLogInASubfolder) {
  PerformanceLogOptions options = Options(PerformanceLogLevel::kInfo, 0.1);
  options.filename = "logs/perf.log";
  { PerformanceLog first(options, folder_.string()); }
  { PerformanceLog second(options, folder_.string()); }
  EXPECT_EQ(Lines("logs/perf.log").size(), 2u);  // two "fit started" lines
}

TEST_F(PerformanceLogTest, DisabledWritesNothingAndLeavesTheObserverAlone) {
  PerformanceLog log(PerformanceLogOptions{}, folder_.string());
  EXPECT_FALSE(log.active());
  int calls = 0;
  FitObserver inner;
  inner.on_iteration = [&calls](const IterationProgress&) { ++calls; };
  const FitObserver observer = log.Observe(inner);
  observer.on_iteration(Iteration(0, false, 0.1, 1));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(observer.on_pass_chunk);
  EXPECT_FALSE(fs::exists(folder_));
}

TEST_F(PerformanceLogTest, ObserveRunsTheInnerHandlersFirst) {
  PerformanceLog log(Options(PerformanceLogLevel::kInfo, 10.0), folder_.string());
  std::vector<std::string> order;
  FitObserver inner;
  inner.on_phase = [&order](const FitPhaseReport& report) { order.push_back(report.phase); };
  const FitObserver observer = log.Observe(inner);
  ASSERT_TRUE(observer.on_pass_chunk);
  ASSERT_TRUE(observer.on_checkpoint_saved);
  observer.on_phase({"load", 0.5});
  observer.on_checkpoint_saved({"ck.h5", 0.001, 10});  // no inner handler: the log's only
  EXPECT_THAT(order, ElementsAre("load"));
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "[INFO] load phase completed in 0.500 s");
  EXPECT_EQ(lines[2], "[INFO] checkpoint saved in 0.001 s (10 bytes, ck.h5)");
}

// The run's wall by phase: the fit's share is its total less the load and the error bars, and
// the total adds the start and the writing.
TEST_F(PerformanceLogTest, WallByPhaseSplitsTheRun) {
  PerformanceLog log(Options(PerformanceLogLevel::kInfo, 10.0), folder_.string());
  FitResult result;
  result.total_seconds = 4.0;
  result.load_seconds = 0.75;
  result.uncertainty_seconds = 1.25;
  log.LogWallByPhase(0.125, result, 0.5);
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1],
            "[INFO] wall by phase: start 0.125 s, load 0.750 s, fit 2.000 s, error bars 1.250 s, "
            "writing 0.500 s (total 4.625 s)");
}

TEST_F(PerformanceLogTest, AnUnwritableFolderGivesOneWarningAndNoThrow) {
  fs::create_directories(folder_);
  std::ofstream(folder_ / "blocker") << "a file";
  PerformanceLogOptions options = Options(PerformanceLogLevel::kDebug, 0.0);
  options.filename = "blocker/perf.log";
  PerformanceLog log(options, folder_.string());
  EXPECT_FALSE(log.active());
  FeedEvents(log);
  log.LogFailure("after the log failed");
  const std::string warnings = warnings_.str();
  EXPECT_THAT(warnings, HasSubstr("blocker/perf.log: cannot create its folder"));
  EXPECT_THAT(warnings, HasSubstr("the fit goes on"));
  EXPECT_EQ(warnings.find("performance log"), warnings.rfind("performance log"));  // once
}

TEST_F(PerformanceLogTest, AFullDiskGivesOneWarningAndTheLogGoesQuiet) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  PerformanceLogOptions options = Options(PerformanceLogLevel::kDebug, 0.0);
  options.filename = "full";
  PerformanceLog log(options, "/dev");  // every write fails with ENOSPC
  EXPECT_FALSE(log.active());           // the first line already failed
  FeedEvents(log);
  const std::string warnings = warnings_.str();
  EXPECT_THAT(warnings, HasSubstr("performance log /dev/full: cannot write to it"));
  EXPECT_EQ(warnings.find("performance log"), warnings.rfind("performance log"));  // once
}

}  // namespace
}  // namespace homodyne
