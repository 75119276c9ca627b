// Tests of the chunk decoder (src/io/chunk_decoder.h) and of BatchSource::PrefetchRows, which
// uses it: compressed chunks decoded on several threads give bitwise the values H5Dread gives,
// for every supported filter pipeline, chunk shape and window; what the decoder cannot read is
// refused (the plan) or handed back to HDF5 (a corrupt chunk), whose reads report it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/chunk_decoder.h"
#include "io/hdf5_util.h"
#include "io/read_paths.h"
#include "io_test_util.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using testing_io::SelectionFor;
using testing_io::TempDirTest;
using testing_io::TestFileSpec;
using testing_io::WriteTestFile;

// A value whose bits differ from its neighbours' everywhere.
float ValueAt(int64_t row, int64_t column) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(row) + 0.011 * column) * 1e3 +
                            1e-3 * static_cast<double>(row * 7919 + column));
}

// What a test dataset is stored as.
struct Storage {
  std::string codec;  // "lzf" or "deflate"
  bool shuffle = false;
  bool fletcher32 = false;
  hid_t type = H5T_IEEE_F32LE;
};

// Writes a rows x columns matrix of ValueAt in chunks of chunk_rows x chunk_columns to `path` as
// dataset "m".
void WriteMatrix(const std::string& path, int64_t rows, int64_t columns, int64_t chunk_rows,
                 int64_t chunk_columns, const Storage& storage) {
  io_internal::InitializeHdf5();
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hsize_t extent[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(columns)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(chunk_rows), static_cast<hsize_t>(chunk_columns)};
  const hid_t space = H5Screate_simple(2, extent, nullptr);
  const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(create, 2, chunk);
  if (storage.fletcher32) H5Pset_fletcher32(create);
  if (storage.shuffle) H5Pset_shuffle(create);
  if (storage.codec == "lzf") {
    ASSERT_GE(H5Pset_filter(create, io_internal::kLzfFilterId, H5Z_FLAG_OPTIONAL, 0, nullptr), 0);
  } else {
    H5Pset_deflate(create, 4);
  }
  const hid_t dataset =
      H5Dcreate2(file, "m", storage.type, space, H5P_DEFAULT, create, H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  std::vector<float> values(static_cast<size_t>(rows * columns));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c)
      values[static_cast<size_t>(r * columns + c)] = ValueAt(r, c);
  }
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(dataset);
  H5Pclose(create);
  H5Sclose(space);
  H5Fclose(file);
}

// The rectangle through H5Dread.
std::vector<float> ReadThroughHdf5(hid_t dataset, int64_t row, int64_t rows, int64_t column,
                                   int64_t columns) {
  std::vector<float> out(static_cast<size_t>(rows * columns), -1.0f);
  const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(column)};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(columns)};
  const hid_t file_space = H5Dget_space(dataset);
  const hid_t memory_space = H5Screate_simple(2, count, nullptr);
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr);
  EXPECT_GE(H5Dread(dataset, H5T_NATIVE_FLOAT, memory_space, file_space, H5P_DEFAULT, out.data()),
            0);
  H5Sclose(memory_space);
  H5Sclose(file_space);
  return out;
}

class ChunkDecoderTest : public TempDirTest,
                         public ::testing::WithParamInterface<std::tuple<std::string, bool>> {};

TEST_P(ChunkDecoderTest, RectanglesDecodedOnSeveralThreadsAreBitwiseHdf5s) {
  const auto [codec, shuffle] = GetParam();
  const std::string path = PathOf("m.h5");
  // 7 x 5 chunks over a 45 x 38 matrix: edge chunks in both directions.
  WriteMatrix(path, 45, 38, 7, 5, {codec, shuffle});
  io_internal::InitializeHdf5();
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, "m", H5P_DEFAULT);
  std::string why_not;
  const std::optional<io_internal::ChunkPlan> plan =
      io_internal::PlanChunkDecoding(dataset, &why_not);
  ASSERT_TRUE(plan) << why_not;
  EXPECT_EQ(plan->shuffle, shuffle);
  EXPECT_EQ(plan->codec, codec == "lzf" ? io_internal::ChunkPlan::Codec::kLzf
                                        : io_internal::ChunkPlan::Codec::kDeflate);
  struct Box {
    int64_t row, rows, column, columns;
  };
  const std::vector<Box> boxes = {
      {0, 45, 0, 38}, {3, 11, 2, 30}, {44, 1, 37, 1}, {7, 7, 5, 5}, {10, 20, 0, 38}};
  for (int threads : {1, 2, 4}) {
    std::vector<std::vector<float>> outs;
    std::vector<io_internal::ChunkRectangle> rectangles;
    for (const Box& box : boxes) outs.emplace_back(static_cast<size_t>(box.rows * box.columns));
    for (size_t b = 0; b < boxes.size(); ++b) {
      rectangles.push_back({dataset, &*plan, boxes[b].row, boxes[b].rows, boxes[b].column,
                            boxes[b].columns, outs[b].data()});
    }
    ASSERT_TRUE(io_internal::DecodeChunkRectangles(rectangles, threads, &why_not)) << why_not;
    for (size_t b = 0; b < boxes.size(); ++b) {
      const std::vector<float> expected =
          ReadThroughHdf5(dataset, boxes[b].row, boxes[b].rows, boxes[b].column, boxes[b].columns);
      EXPECT_EQ(std::memcmp(outs[b].data(), expected.data(), expected.size() * sizeof(float)), 0)
          << "box " << b << ", " << threads << " threads";
    }
  }
  H5Dclose(dataset);
  H5Fclose(file);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, ChunkDecoderTest,
                         ::testing::Combine(::testing::Values("lzf", "deflate"), ::testing::Bool()),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) +
                                  (std::get<1>(param_info.param) ? "_shuffle" : "");
                         });

class ChunkPlanTest : public TempDirTest {
 protected:
  // The plan's refusal of a 20 x 20 matrix stored as `storage` ("" when it is planned).
  std::string WhyNot(const Storage& storage) {
    const std::string path = PathOf("p.h5");
    WriteMatrix(path, 20, 20, 6, 6, storage);
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t dataset = H5Dopen2(file, "m", H5P_DEFAULT);
    std::string why_not;
    const bool planned = io_internal::PlanChunkDecoding(dataset, &why_not).has_value();
    H5Dclose(dataset);
    H5Fclose(file);
    return planned ? "" : why_not;
  }
};

TEST_F(ChunkPlanTest, RefusesWhatItCannotDecodeExactly) {
  EXPECT_EQ(WhyNot({"lzf"}), "");
  EXPECT_THAT(WhyNot({"deflate", false, true}), HasSubstr("filter pipeline"));
  EXPECT_THAT(WhyNot({"lzf", false, false, H5T_IEEE_F64LE}), HasSubstr("float32"));
  EXPECT_THAT(WhyNot({"deflate", false, false, H5T_IEEE_F32BE}), HasSubstr("float32"));
}

// A file of 3 angles x 33 frames in 5 x 4 chunks of `compression`, float32, opened with a frame
// window from frame 3 (30 fitted times) twice: as OpenBatchSource does, and through HDF5 only.
class PrefetchRowsTest : public TempDirTest {
 protected:
  void Open(const std::string& compression) {
    TestFileSpec spec;
    spec.dtype = "float32";
    spec.frames = 33;
    spec.chunk_rows = 5;
    spec.chunk_cols = 4;
    spec.compression = compression;
    source_.reset();
    hdf5_.reset();
    path_ = PathOf("data_" + compression + ".h5");
    WriteTestFile(path_, spec);
    DataSelection selection = SelectionFor(path_);
    selection.start_frame = 3;
    source_ = OpenBatchSource(selection);
    hdf5_ = io_internal::OpenHdfBatchSource(selection, /*allow_direct_reads=*/false);
  }
  // Rows [begin, end) of every angle from both sources, the first after PrefetchRows.
  void ExpectPrefetchedRowsBitwiseEqual(int begin, int end, int threads) {
    const int prepared = source_->PrefetchRows(begin, end, threads);
    EXPECT_GT(prepared, begin);
    EXPECT_LE(prepared, end);
    const int n = source_->info().num_times();
    const size_t size = static_cast<size_t>(UpperTriangleRowsSize(n, begin, end));
    for (int angle = 0; angle < 3; ++angle) {
      std::vector<float> prefetched(size, 7.0f);
      std::vector<float> through_hdf5(size, -7.0f);
      source_->ReadUpperTriangleRows(angle, begin, end, std::span<float>(prefetched));
      hdf5_->ReadUpperTriangleRows(angle, begin, end, std::span<float>(through_hdf5));
      EXPECT_EQ(std::memcmp(prefetched.data(), through_hdf5.data(), size * sizeof(float)), 0)
          << "angle " << angle << ", rows " << begin << "-" << end << ", " << threads << " threads";
    }
  }
  std::string path_;
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<BatchSource> hdf5_;
};

TEST_F(PrefetchRowsTest, PrefetchedLzfAndGzipRowsAreBitwiseHdf5s) {
  for (const std::string compression : {"lzf", "gzip"}) {
    SCOPED_TRACE(compression);
    Open(compression);
    // In order (each range overlapping the block the previous one left), backwards, again, and
    // single rows at the ends.
    for (int threads : {1, 2, 3}) {
      for (auto [begin, end] : {std::pair{0, 6}, std::pair{6, 17}, std::pair{17, 30},
                                std::pair{2, 29}, std::pair{29, 30}, std::pair{0, 1}}) {
        ExpectPrefetchedRowsBitwiseEqual(begin, end, threads);
      }
    }
    // The rows came from the decoder, not from HDF5's reads after a failed prefetch.
    EXPECT_GT(io_internal::RowsDecodedByPrefetch(*source_), 0);
    EXPECT_EQ(io_internal::RowsDecodedByPrefetch(*hdf5_), 0);
  }
}

// The corrected reads (ReadCorrectedUpperRows, the fitted data's writer's) of LZF and gzip
// chunks decode them on OpenMP's threads (the row blocks of DecodeDoubleBlock): the same doubles
// as through HDF5, bitwise, for bands in order, a band that starts inside a block, and whole rows
// (ReadCorrectedRows), on 1 to 3 threads.
TEST_F(PrefetchRowsTest, CorrectedRowsDecodedOnEveryThreadAreBitwiseHdf5s) {
  const int saved_threads = omp_get_max_threads();
  for (const std::string compression : {"lzf", "gzip"}) {
    SCOPED_TRACE(compression);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Open(compression);
      const int n = source_->info().num_times();
      for (int angle = 0; angle < 3; ++angle) {
        for (auto [begin, end] : {std::pair{0, 7}, std::pair{7, 19}, std::pair{19, 30},
                                  std::pair{11, 13}, std::pair{29, 30}}) {
          const size_t size = static_cast<size_t>((end - begin) * (n - begin));
          std::vector<double> decoded(size, 7.0);
          std::vector<double> through_hdf5(size, -7.0);
          source_->ReadCorrectedUpperRows(angle, begin, end, decoded);
          hdf5_->ReadCorrectedUpperRows(angle, begin, end, through_hdf5);
          EXPECT_EQ(std::memcmp(decoded.data(), through_hdf5.data(), size * sizeof(double)), 0)
              << "angle " << angle << ", rows " << begin << "-" << end << ", " << threads
              << " threads";
        }
        const size_t whole = static_cast<size_t>(5 * n);
        std::vector<double> decoded(whole, 7.0);
        std::vector<double> through_hdf5(whole, -7.0);
        source_->ReadCorrectedRows(angle, 12, 17, decoded);
        hdf5_->ReadCorrectedRows(angle, 12, 17, through_hdf5);
        EXPECT_EQ(std::memcmp(decoded.data(), through_hdf5.data(), whole * sizeof(double)), 0);
      }
      // The rows came from the decoder, not from HDF5's reads.
      EXPECT_GT(io_internal::RowsDecodedForCorrectedReads(*source_), 0);
      EXPECT_EQ(io_internal::RowsDecodedForCorrectedReads(*hdf5_), 0);
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST_F(PrefetchRowsTest, AnOutOfRangeRequestDoesNothing) {
  Open("lzf");
  EXPECT_EQ(source_->PrefetchRows(-1, 3, 2), 3);
  EXPECT_EQ(source_->PrefetchRows(5, 5, 2), 5);
  EXPECT_EQ(source_->PrefetchRows(0, 31, 2), 31);
  EXPECT_EQ(io_internal::RowsDecodedByPrefetch(*source_), 0);
  ExpectPrefetchedRowsBitwiseEqual(0, 30, 2);
}

// Every stored chunk of angle 0's matrix wholly above the diagonal overwritten with 0xFF bytes
// (an LZF back-reference before the start of the output): the prefetch leaves the rows to HDF5,
// whose read reports the file and the dataset, as without a prefetch; the other angles still read.
TEST_F(PrefetchRowsTest, ACorruptChunkIsReportedByTheReadNotThePrefetch) {
  Open("lzf");
  const std::string dataset_path = source_->info().angles[0].dataset_path;
  const int n = source_->info().num_times();
  source_.reset();
  hdf5_.reset();
  std::vector<std::pair<haddr_t, hsize_t>> stored;  // address and size of every chunk
  {
    const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t dataset = H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT);
    const hid_t space = H5Dget_space(dataset);
    hsize_t chunks = 0;
    ASSERT_GE(H5Dget_num_chunks(dataset, space, &chunks), 0);
    for (hsize_t c = 0; c < chunks; ++c) {
      hsize_t offset[2];
      unsigned mask = 0;
      haddr_t address = 0;
      hsize_t size = 0;
      ASSERT_GE(H5Dget_chunk_info(dataset, space, c, offset, &mask, &address, &size), 0);
      // Only chunks wholly above the diagonal (5 x 4 chunks): opening the file samples rows
      // below it (the triangle convention's check).
      if (offset[1] >= offset[0] + 5) stored.emplace_back(address, size);
    }
    H5Sclose(space);
    H5Dclose(dataset);
    H5Fclose(file);
  }
  ASSERT_FALSE(stored.empty());
  {
    std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
    for (const auto& [address, size] : stored) {
      file.seekp(static_cast<std::streamoff>(address));
      const std::string damage(static_cast<size_t>(size), static_cast<char>(0xFF));
      file.write(damage.data(), static_cast<std::streamsize>(damage.size()));
    }
  }
  DataSelection selection = SelectionFor(path_);
  selection.start_frame = 3;
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  EXPECT_NO_THROW(source->PrefetchRows(0, n, 2));
  EXPECT_EQ(io_internal::RowsDecodedByPrefetch(*source), 0);
  std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(n, 0, n)));
  try {
    source->ReadUpperTriangleRows(0, 0, n, std::span<float>(values));
    ADD_FAILURE() << "a damaged LZF chunk was read without an error";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), HasSubstr(path_));
    EXPECT_THAT(error.what(), HasSubstr(dataset_path));
  }
  EXPECT_NO_THROW(source->ReadUpperTriangleRows(1, 0, n, std::span<float>(values)));
}

}  // namespace
}  // namespace homodyne
