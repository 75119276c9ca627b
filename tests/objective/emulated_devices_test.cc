// Tests of the device backends' data movement and device count, on the host emulation
// (src/objective/device_pass_backend.h; docs/backends.md, Data resident on the device, Several
// GPUs):
//   - resident data: an in-memory fit uploads each batch's arrays once across all its passes, a
//     streaming fit copies them on every pass, data that do not fit fall back to copies on every
//     pass with a warning, and the results are bitwise the same in every case; a cached array is
//     never used for other data (the key of ResidentDataCache);
//   - several devices: the batches of a call split over K emulated devices give bitwise the sums
//     of one device (full and cost passes, K = 1, 2, 3) and bitwise the same fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "device_pass_comparison.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "objective/device_pass_backend.h"
#include "objective/emulated_pass_backend.h"
#include "objective/pass_backend.h"
#include "optimize/levenberg_marquardt.h"
#include "support/simulated_data_fixture.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass_testing::BitwiseEqual;
using device_pass_testing::PassCase;
using device_pass_testing::PassSums;
using ::testing::HasSubstr;

constexpr LaunchGeometry kGeometry{2, 64};

// The sums of every batch of a case in one call of each kind, the data declared as
// stable_data_id (0: reused buffers).
PassSums SumsOf(PassBackend& backend, const PassCase& pass_case, uint64_t stable_data_id) {
  const ModelEvaluation evaluation(pass_case.model, pass_case.physical);
  PassPoint point{&evaluation, pass_case.phi, pass_case.contrast, pass_case.offset, PassLoss()};
  point.stable_data_id = stable_data_id;
  const std::unique_ptr<PreparedPass> pass = backend.Prepare(point);
  const std::vector<const float*> pointers =
      device_pass_testing::PointersOf(pass_case, pass_case.batches);
  PassSums sums;
  const int g = pass->gram_size();
  sums.grams.assign(pointers.size(), Eigen::MatrixXd::Constant(g, g, -1.0));
  sums.finite.assign(pointers.size(), -1);
  sums.costs.assign(pass_case.batches.size(), -1.0);
  pass->ComputeGrams(pass_case.batches, pointers, sums.grams, sums.finite);
  pass->ComputeSquaredResiduals(pass_case.batches, pointers, sums.costs);
  return sums;
}

int64_t TotalResidentUploads(const PassBackend& backend) {
  int64_t total = 0;
  for (const EmulatedDeviceCounters& counters : EmulatedCounters(backend)) {
    total += counters.resident_uploads;
  }
  return total;
}

int64_t TotalLaunchCopies(const PassBackend& backend) {
  int64_t total = 0;
  for (const EmulatedDeviceCounters& counters : EmulatedCounters(backend)) {
    total += counters.launch_copies;
  }
  return total;
}

// The warnings logged while it lives.
class CapturedWarnings {
 public:
  CapturedWarnings() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(text_));
    logger->set_level(spdlog::level::warn);
    spdlog::set_default_logger(std::move(logger));
  }
  ~CapturedWarnings() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

int Occurrences(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(DeviceShareBoundsTest, ContiguousSharesOfAboutEqualPoints) {
  const std::vector<RowBatch> four = {{0, 1, 0, 5}, {1, 2, 5, 5}, {2, 3, 10, 5}, {3, 4, 15, 5}};
  EXPECT_EQ(DeviceShareBounds(four, 1), (std::vector<int>{0, 4}));
  EXPECT_EQ(DeviceShareBounds(four, 2), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(DeviceShareBounds(four, 4), (std::vector<int>{0, 1, 2, 3, 4}));
  // More devices than batches: the last devices have no share.
  EXPECT_EQ(DeviceShareBounds(four, 5), (std::vector<int>{0, 1, 2, 3, 4, 4}));
  // Unequal batches: the shares balance points, not batches.
  const std::vector<RowBatch> uneven = {
      {0, 1, 0, 30}, {1, 2, 30, 2}, {2, 3, 32, 2}, {3, 4, 34, 26}};
  EXPECT_EQ(DeviceShareBounds(uneven, 2), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(DeviceShareBounds(std::vector<RowBatch>{}, 2), (std::vector<int>{0, 0, 0}));
}

TEST(StableDataIdTest, InMemoryDataAreStableUnderAnIdOfTheirOwn) {
  InMemoryPassData first({{1.0F, 2.0F, 3.0F}});
  InMemoryPassData second({{1.0F, 2.0F, 3.0F}});
  EXPECT_NE(first.stable_data_id(), 0u);
  EXPECT_NE(second.stable_data_id(), 0u);
  EXPECT_NE(first.stable_data_id(), second.stable_data_id());
  // KeepOnly replaces the arrays: a new id, so device copies of the old ones are never used.
  const std::vector<RowBatch> batches = SplitIntoBatches(3, 1);  // rows 0 and 1 of 3 times
  ASSERT_EQ(batches.size(), 2u);
  const uint64_t before = first.stable_data_id();
  const std::vector<std::pair<int, int>> runs = {{1, 2}};
  first.KeepOnly(batches, runs, 1);
  EXPECT_NE(first.stable_data_id(), before);
  EXPECT_NE(first.stable_data_id(), 0u);
}

TEST(ResidentDataTest, ACachedArrayIsUsedForItsOwnDataOnly) {
  PassCase pass_case =
      device_pass_testing::MakeCase("resident", AnalysisMode::kLaminarFlow, 60, 300, 2);
  const int64_t arrays = static_cast<int64_t>(pass_case.batches.size() * pass_case.phi.size());
  const std::shared_ptr<PassBackend> backend = MakeEmulatedPassBackend(kGeometry);
  const PassSums copied = SumsOf(*backend, pass_case, 0);
  EXPECT_EQ(TotalResidentUploads(*backend), 0);
  EXPECT_EQ(TotalLaunchCopies(*backend), 2 * arrays);  // every array, in each of the two calls

  // Stable data: uploaded by the first call, read in place by the second; bitwise the copies'
  // sums.
  const uint64_t id = NewStableDataId();
  EXPECT_TRUE(BitwiseEqual(SumsOf(*backend, pass_case, id), copied));
  EXPECT_EQ(TotalResidentUploads(*backend), arrays);
  EXPECT_TRUE(BitwiseEqual(SumsOf(*backend, pass_case, id), copied));
  EXPECT_EQ(TotalResidentUploads(*backend), arrays);
  EXPECT_EQ(TotalLaunchCopies(*backend), 2 * arrays);
  EXPECT_EQ(EmulatedCounters(*backend)[0].resident_bytes,
            static_cast<int64_t>(pass_case.phi.size()) *
                static_cast<int64_t>(pass_case.data[0].size() * sizeof(float)));

  // The passes read the device copies: values changed behind the same id (which the PassData
  // contract forbids) are not seen...
  for (std::vector<float>& values : pass_case.data) {
    for (float& value : values) value *= 1.5F;
  }
  EXPECT_TRUE(BitwiseEqual(SumsOf(*backend, pass_case, id), copied));
  // ... and the same addresses under another id are other data: uploaded again, the previous
  // id's arrays freed.
  const PassSums changed = SumsOf(*backend, pass_case, NewStableDataId());
  EXPECT_EQ(TotalResidentUploads(*backend), 2 * arrays);
  EXPECT_EQ(EmulatedCounters(*backend)[0].resident_bytes,
            static_cast<int64_t>(pass_case.phi.size()) *
                static_cast<int64_t>(pass_case.data[0].size() * sizeof(float)));
  EXPECT_FALSE(BitwiseEqual(changed, copied));
  EXPECT_TRUE(BitwiseEqual(changed, SumsOf(*backend, pass_case, 0)));
}

TEST(SeveralDevicesTest, SumsAreBitwiseThoseOfOneDevice) {
  for (const PassCase& pass_case : device_pass_testing::ComparisonCases()) {
    SCOPED_TRACE(pass_case.name);
    const PassSums one = SumsOf(*MakeEmulatedPassBackend(kGeometry), pass_case, 0);
    for (int devices : {2, 3}) {
      for (const uint64_t id : {uint64_t{0}, NewStableDataId()}) {
        SCOPED_TRACE(std::to_string(devices) + " devices, data id " + std::to_string(id));
        const std::shared_ptr<PassBackend> backend =
            MakeEmulatedPassBackend(kGeometry, {devices, int64_t{1} << 40});
        EXPECT_TRUE(BitwiseEqual(SumsOf(*backend, pass_case, id), one));
        // A chunking of the batches into calls changes nothing either.
        const int half = static_cast<int>(pass_case.batches.size()) / 2;
        if (half > 0) {
          const PassSums part = device_pass_testing::ComputeSums(
              *backend, pass_case, PassLoss(), half, static_cast<int>(pass_case.batches.size()));
          for (size_t slot = 0; slot < part.grams.size(); ++slot) {
            const size_t whole = static_cast<size_t>(half) * pass_case.phi.size() + slot;
            EXPECT_TRUE(part.grams[slot].triangularView<Eigen::Lower>().toDenseMatrix() ==
                        one.grams[whole].triangularView<Eigen::Lower>().toDenseMatrix());
            EXPECT_EQ(part.finite[slot], one.finite[whole]);
          }
        }
        // Every device computes a share when there are enough batches.
        if (pass_case.batches.size() >= static_cast<size_t>(devices) * 2) {
          for (const EmulatedDeviceCounters& counters : EmulatedCounters(*backend)) {
            EXPECT_GT(counters.launches, 0);
          }
        }
      }
    }
  }
}

class DeviceFitTest : public SimulatedDataTest {
 protected:
  // A laminar_flow fit from 1.2 and 0.9 times the truth.
  LevenbergMarquardtSummary Fit(BatchedObjective& objective, const Config& config) const {
    Eigen::VectorXd start = Truth(config);
    for (int a = 0; a < objective.num_physical(); ++a) start[a] *= a % 2 == 0 ? 1.2 : 0.9;
    return Minimize(BoundedOptions(objective), objective, start);
  }

  static void ExpectBitwiseEqual(const LevenbergMarquardtSummary& actual,
                                 const LevenbergMarquardtSummary& expected) {
    ASSERT_TRUE(expected.IsConverged()) << expected.reason;
    EXPECT_EQ(actual.iterations, expected.iterations);
    ASSERT_EQ(actual.theta.size(), expected.theta.size());
    for (Eigen::Index a = 0; a < expected.theta.size(); ++a) {
      EXPECT_EQ(actual.theta[a], expected.theta[a]) << "parameter " << a;
    }
    EXPECT_EQ(actual.final_chi2, expected.final_chi2);
  }
};

TEST_F(DeviceFitTest, InMemoryFitUploadsOnceStreamingFitCopiesEveryPassSameResult) {
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 50);
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
  PassOptions options;
  options.batch_points = 170;
  const int64_t angles = static_cast<int64_t>(data.size());

  const std::shared_ptr<PassBackend> resident = MakeEmulatedPassBackend(kGeometry);
  PackedDataObjective in_memory(ModelOf(config, *source), AnglesOf(*source), 0.01, data, options,
                                resident);
  const LevenbergMarquardtSummary expected = Fit(in_memory, config);
  const int64_t arrays = static_cast<int64_t>(in_memory.num_batches()) * angles;
  ASSERT_GT(in_memory.passes(), 5);
  EXPECT_EQ(TotalResidentUploads(*resident), arrays);
  EXPECT_EQ(TotalLaunchCopies(*resident), 0);

  // Without the cache (no device memory for it): the same fit, every array copied every pass,
  // and one warning.
  CapturedWarnings warnings;
  const std::shared_ptr<PassBackend> no_memory = MakeEmulatedPassBackend(kGeometry, {1, 0});
  PackedDataObjective copied(ModelOf(config, *source), AnglesOf(*source), 0.01, data, options,
                             no_memory);
  ExpectBitwiseEqual(Fit(copied, config), expected);
  EXPECT_EQ(TotalResidentUploads(*no_memory), 0);
  EXPECT_EQ(TotalLaunchCopies(*no_memory), copied.passes() * arrays);
  EXPECT_EQ(Occurrences(warnings.text(), "copied to the device on every pass"), 1)
      << warnings.text();
  EXPECT_THAT(warnings.text(), HasSubstr("emulated device 0: device memory cannot hold"));

  // Streamed data (buffers reused): copied every pass, never cached; the same fit.
  const std::shared_ptr<PassBackend> streamed = MakeEmulatedPassBackend(kGeometry);
  BatchedObjective streaming(ModelOf(config, *source), AnglesOf(*source), 0.01,
                             MakeStreamingPassData(*source, /*prefetch=*/false), options, streamed);
  ExpectBitwiseEqual(Fit(streaming, config), expected);
  EXPECT_EQ(streaming.passes(), in_memory.passes());
  EXPECT_EQ(TotalResidentUploads(*streamed), 0);
  EXPECT_EQ(TotalLaunchCopies(*streamed), streaming.passes() * arrays);
}

TEST_F(DeviceFitTest, DataThatFitOnlyInPartKeepWhatFitsAndCopyTheRest) {
  const Config config = SimulationConfig(AnalysisMode::kStatic, 50);
  std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
  const PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
  PassOptions options;
  options.batch_points = 170;
  options.chunk_batches = 2;  // calls of two batches: the first ones fit, later ones do not
  PackedDataObjective reference(ModelOf(config, *source), AnglesOf(*source), 0.01, data, options,
                                MakeEmulatedPassBackend(kGeometry));
  const LevenbergMarquardtSummary expected = Fit(reference, config);

  const int64_t angles = static_cast<int64_t>(data.size());
  const int64_t all_bytes = angles * static_cast<int64_t>(data[0].size() * sizeof(float));
  CapturedWarnings warnings;
  const std::shared_ptr<PassBackend> half = MakeEmulatedPassBackend(kGeometry, {1, all_bytes / 2});
  PackedDataObjective partial(ModelOf(config, *source), AnglesOf(*source), 0.01, data, options,
                              half);
  ExpectBitwiseEqual(Fit(partial, config), expected);
  const int64_t arrays = static_cast<int64_t>(partial.num_batches()) * angles;
  const int64_t kept = TotalResidentUploads(*half);
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, arrays);
  EXPECT_LE(EmulatedCounters(*half)[0].resident_bytes, all_bytes / 2);
  EXPECT_EQ(TotalLaunchCopies(*half), partial.passes() * (arrays - kept));
  EXPECT_EQ(Occurrences(warnings.text(), "copied to the device on every pass"), 1)
      << warnings.text();
}

TEST_F(DeviceFitTest, FitIsBitwiseTheSameOnOneTwoAndThreeDevices) {
  for (AnalysisMode mode : {AnalysisMode::kLaminarFlow, AnalysisMode::kStatic}) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const Config config = SimulationConfig(mode, 50);
    std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
    const PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
    PassOptions options;
    options.batch_points = 170;
    LevenbergMarquardtSummary one_device;
    for (int devices : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(devices) + " devices");
      const std::shared_ptr<PassBackend> backend =
          MakeEmulatedPassBackend(kGeometry, {devices, int64_t{1} << 40});
      PackedDataObjective objective(ModelOf(config, *source), AnglesOf(*source), 0.01, data,
                                    options, backend);
      const LevenbergMarquardtSummary summary = Fit(objective, config);
      if (devices == 1) {
        ASSERT_TRUE(summary.IsConverged()) << summary.reason;
        one_device = summary;
      } else {
        ExpectBitwiseEqual(summary, one_device);
      }
      // Each device uploads its own share once: every array once in all.
      EXPECT_EQ(TotalResidentUploads(*backend),
                static_cast<int64_t>(objective.num_batches()) * static_cast<int64_t>(data.size()));
      for (const EmulatedDeviceCounters& counters : EmulatedCounters(*backend)) {
        EXPECT_GT(counters.resident_uploads, 0);
        EXPECT_EQ(counters.launch_copies, 0);
      }
    }
  }
}

}  // namespace
}  // namespace homodyne
