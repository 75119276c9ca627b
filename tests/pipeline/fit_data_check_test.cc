// Data a fit cannot be trusted with end in DataError naming c2_exp (docs/results.md, When a fit is
// refused), never in a result: all NaN, all +-inf, values beyond the float32 range, constant
// data, and fewer points than parameters. The same table runs through both C++ entry points (a
// beamline file opened as the CLI opens it, and arrays in memory as the Python module passes
// them), through a strategy that knows its data up front (standard) and one that counts them
// during its passes (streaming), with the global phase off and on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "io/beamline_writer.h"
#include "laminar_data.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

struct BadData {
  const char* name;
  int frames;                              // N of the data set (test::kTimes or fewer)
  std::function<double(double)> value_of;  // from the good value at that point
  const char* message;                     // what the DataError says
};

const std::vector<double> kPhi = {0.0, 60.0};
const std::vector<double> kTruth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};

std::vector<BadData> Cases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"all_nan", test::kTimes, [nan](double) { return nan; }, "too few finite c2_exp points"},
      {"all_inf", test::kTimes, [inf](double) { return -inf; }, "too few finite c2_exp points"},
      {"beyond_float32", test::kTimes, [](double v) { return v * 1e300; },
       "values beyond +-3.4e38"},
      {"constant", test::kTimes, [](double) { return 1.0; }, "every finite c2_exp point equals 1"},
      {"three_frames", 3, [](double v) { return v; }, "too few finite c2_exp points"},
  };
}

// The good laminar-flow matrices (laminar_data.h) turned bad, on a grid of bad.frames frames.
std::vector<double> BadMatrices(const BadData& bad) {
  const std::vector<double> good = test::LaminarC2(kTruth, kPhi);
  const int n = bad.frames;
  std::vector<double> values(kPhi.size() * n * n);
  for (size_t k = 0; k < kPhi.size(); ++k) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        values[(k * n + i) * n + j] = bad.value_of(good[(k * test::kTimes + i) * test::kTimes + j]);
      }
    }
  }
  return values;
}

// The matrices as an APS-old beamline file (float64, full symmetric matrices).
std::string WriteFile(const std::vector<double>& values, int frames, const std::string& path) {
  io_internal::BeamlineWriterOptions options;
  options.layout = FileLayout::kApsOld;
  options.frames = frames;
  options.dtype = "float64";
  io_internal::BeamlineWriter writer(path, options);
  writer.WriteApsOldBins(std::vector<double>(kPhi.size(), test::kQ), kPhi);
  for (size_t k = 0; k < kPhi.size(); ++k) {
    io_internal::MatrixWriter matrix = writer.CreateMatrix(static_cast<int>(k));
    matrix.WriteRows(0, frames,
                     std::span<const double>(values.data() + k * frames * frames,
                                             static_cast<size_t>(frames) * frames));
    matrix.Close();
  }
  writer.Close();
  return path;
}

Config FitConfig(StrategyKind strategy, GlobalSearchMethod method) {
  Config config = ParseConfig(test::kLaminarConfig, "fit_data_check_test");
  config.performance.strategy_override = strategy;
  config.nlsq.global_search.method = method;
  return config;
}

// Fits every case through `open` (the case's matrices -> a source) with every strategy and global
// method, and expects the case's DataError each time.
void ExpectEveryCaseRefused(
    const std::function<std::unique_ptr<BatchSource>(const BadData&, const std::vector<double>&)>&
        open) {
  for (const BadData& bad : Cases()) {
    const std::vector<double> values = BadMatrices(bad);
    for (const StrategyKind strategy : {StrategyKind::kStandard, StrategyKind::kStreaming}) {
      for (const GlobalSearchMethod method :
           {GlobalSearchMethod::kOff, GlobalSearchMethod::kAuto}) {
        SCOPED_TRACE(std::string(bad.name) + " " + std::string(ToString(strategy)) +
                     (method == GlobalSearchMethod::kOff ? " global off" : " global auto"));
        const std::unique_ptr<BatchSource> source = open(bad, values);
        try {
          Fit(FitConfig(strategy, method), *source);
          ADD_FAILURE() << "the fit returned a result";
        } catch (const DataError& error) {
          EXPECT_THAT(error.what(), HasSubstr(bad.message));
        }
      }
    }
  }
}

TEST(FitDataCheckTest, BadArraysInMemoryAreRefused) {
  ExpectEveryCaseRefused([](const BadData& bad, const std::vector<double>& values) {
    InMemoryData data = test::LaminarData(values, kPhi);
    data.num_times = bad.frames;
    return MakeInMemoryBatchSource(data);
  });
}

TEST(FitDataCheckTest, BadFilesAreRefused) {
  const std::filesystem::path directory = std::filesystem::temp_directory_path() /
                                          ("homodyne_fit_data_check_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  ExpectEveryCaseRefused([&](const BadData& bad, const std::vector<double>& values) {
    DataSelection selection;
    selection.file_path = WriteFile(values, bad.frames, (directory / bad.name).string() + ".h5");
    selection.wavevector_q_target = test::kQ;
    selection.dt_seconds = test::kDt;
    return OpenBatchSource(selection);
  });
  std::filesystem::remove_all(directory);
}

// The good data pass the same checks (the table's failures come from the data, not the set-up).
TEST(FitDataCheckTest, GoodDataAreFitted) {
  const std::vector<double> values = test::LaminarC2(kTruth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(values, kPhi));
  Config config = FitConfig(StrategyKind::kStreaming, GlobalSearchMethod::kOff);
  config.initial.values = kTruth;
  const FitOutcome outcome = Fit(config, *source);
  EXPECT_EQ(outcome.result.convergence_status, "converged");
  EXPECT_GT(outcome.result.degrees_of_freedom, 0);
}

}  // namespace
}  // namespace homodyne
