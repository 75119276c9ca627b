// Tests of the one read of c2 rows (src/objective/c2_rows.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "objective/c2_rows.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

// A source of n times whose point (i, j) of angle k holds 1000 k + 10 i + j; its first
// `failures` reads throw DataError("disk says no").
class FlakySource : public BatchSource {
 public:
  FlakySource(int n, int failures) : failures_(failures) {
    info_.file_path = "/data/run.h5";
    info_.num_raw_frames = n + 1;
    info_.angles.resize(2);
    info_.angles[0].dataset_path = "/c2_00001";
    info_.angles[1].dataset_path = "/c2_00002";
  }
  const DatasetInfo& info() const override { return info_; }
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end,
                             std::span<double> out) override {
    std::vector<float> values(out.size());
    ReadUpperTriangleRows(angle, row_begin, row_end, std::span<float>(values));
    for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  }
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end, std::span<float> out) override {
    ++reads;
    if (failures_ > 0) {
      --failures_;
      throw DataError("disk says no");
    }
    const int n = info_.num_times();
    EXPECT_EQ(static_cast<int64_t>(out.size()), UpperTriangleRowsSize(n, row_begin, row_end));
    size_t at = 0;
    for (int i = row_begin; i < row_end; ++i) {
      for (int j = i + 1; j < n; ++j) out[at++] = static_cast<float>(1000 * angle + 10 * i + j);
    }
  }
  void ReadCorrectedMatrix(int, std::span<double>) override {}

  int reads = 0;

 private:
  DatasetInfo info_;
  int failures_;
};

TEST(ReadC2RowsTest, ReadsTheRowsOfTheAngle) {
  FlakySource source(5, 0);
  std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(5, 2, 4)));

  ReadC2Rows(source, 1, 2, 4, values);

  EXPECT_EQ(values, (std::vector<float>{1023, 1024, 1034}));
  EXPECT_EQ(source.reads, 1);
}

TEST(ReadC2RowsTest, WithoutRetriesAFailureIsTheSourcesError) {
  FlakySource source(5, 1);
  std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(5, 0, 1)));

  try {
    ReadC2Rows(source, 0, 0, 1, values);
    FAIL() << "no error";
  } catch (const DataError& error) {
    EXPECT_STREQ(error.what(), "disk says no");
  }
  EXPECT_EQ(source.reads, 1);
}

TEST(ReadC2RowsTest, RetriesUntilTheReadSucceeds) {
  FlakySource source(5, 2);
  std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(5, 3, 4)));
  std::atomic<int64_t> retry_count{0};
  int hook_calls = 0;
  RowReadRetries retries{2, 0.0, "batch 3", &retry_count, [&hook_calls] { ++hook_calls; }};

  ReadC2Rows(source, 0, 3, 4, values, &retries);

  EXPECT_EQ(values, (std::vector<float>{34}));
  EXPECT_EQ(source.reads, 3);
  EXPECT_EQ(retry_count.load(), 2);
  EXPECT_EQ(hook_calls, 3);
}

TEST(ReadC2RowsTest, AfterTheLastRetryTheErrorNamesFileDatasetRowsAndCause) {
  FlakySource source(5, 10);
  std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(5, 1, 3)));
  std::atomic<int64_t> retry_count{0};
  RowReadRetries retries{2, 0.0, "batch 7", &retry_count, {}};

  try {
    ReadC2Rows(source, 1, 1, 3, values, &retries);
    FAIL() << "no error";
  } catch (const DataError& error) {
    EXPECT_STREQ(error.what(),
                 "/data/run.h5: dataset /c2_00002: batch 7 (fitted rows 1-2) could not be read "
                 "after 2 retries: disk says no");
  }
  EXPECT_EQ(source.reads, 3);
  EXPECT_EQ(retry_count.load(), 2);
}

TEST(ReadC2RowsTest, AFailingHookCountsAsAFailedRead) {
  FlakySource source(5, 0);
  std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(5, 0, 1)));
  RowReadRetries retries{1, 0.0, "batch 0", nullptr, [] { throw DataError("injected"); }};

  try {
    ReadC2Rows(source, 0, 0, 1, values, &retries);
    FAIL() << "no error";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), HasSubstr("could not be read after 1 retries: injected"));
  }
  EXPECT_EQ(source.reads, 0);
}

}  // namespace
}  // namespace homodyne
