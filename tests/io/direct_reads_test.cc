// Tests of the direct float32 reads (src/io/direct_reads.h; docs/design.md section 8, Input):
// where they apply they give bitwise HDF5's values (in place and through the bounce buffer),
// where they cannot be proven the source reads through HDF5, and a file cut short under the
// source is a DataError, not a crash.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/direct_reads.h"
#include "io/hdf5_util.h"
#include "io/read_paths.h"
#include "io_test_util.h"

namespace homodyne {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing_io::SelectionFor;
using testing_io::TempDirTest;
using testing_io::TestFileSpec;
using testing_io::WriteTestFile;

constexpr const char* kMatrices = "/xpcs/twotime/correlation_map";

// Values whose bits differ everywhere (so a value read from the wrong place shows), with a NaN
// and an infinity among them.
double VariedValue(int k, int i, int j) {
  if (k == 1 && i == 5 && j == 9) return std::numeric_limits<double>::quiet_NaN();
  if (k == 2 && i == 3 && j == 30) return -std::numeric_limits<double>::infinity();
  return std::sin(0.37 * i + 0.011 * j * j + 1.3 * k) * 1.0e3 + 1.0e-4 * (i * 131 + j);
}

// A 3-angle APS-U float32 file, uncompressed, chunked by the writer.
TestFileSpec Float32Spec(int frames, int chunk_rows, int chunk_cols = 0) {
  TestFileSpec spec;
  spec.dtype = "float32";
  spec.compression = "none";
  spec.frames = frames;
  spec.chunk_rows = chunk_rows;
  spec.chunk_cols = chunk_cols;
  spec.value = VariedValue;
  return spec;
}

// Float32Spec with one matrix (phi 0, bin 1): the tests of one large matrix.
TestFileSpec SingleFloat32Spec(int frames, int chunk_rows, int chunk_cols = 0) {
  TestFileSpec spec = Float32Spec(frames, chunk_rows, chunk_cols);
  spec.num_matrices = 1;
  spec.phi_values = {0.0};
  spec.bins = {1};
  return spec;
}

// How CopyWithStorage stores the matrices.
struct Storage {
  bool contiguous = false;
  hsize_t chunk[2] = {0, 0};  // when chunked
  hid_t file_type = H5T_IEEE_F32LE;
  hsize_t user_block = 0;        // bytes before HDF5's superblock; 0 or a power of 2 >= 512
  int unwritten_chunk_row = -1;  // >= 0: chunk (row, column) of every matrix is never written
  int unwritten_chunk_column = -1;
};

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what + " (" + io_internal::Hdf5ErrorText() + ")");
}

// Copies the APS-U file `source` to `target` with every matrix stored as `storage` says (values
// read and written as native float: the same bits).
void CopyWithStorage(const std::string& source, const std::string& target, const Storage& storage) {
  io_internal::InitializeHdf5();
  using io_internal::Hid;
  Hid create = io_internal::PlistHid(H5Pcreate(H5P_FILE_CREATE));
  if (storage.user_block > 0) Check(H5Pset_userblock(create.get(), storage.user_block) >= 0, "ub");
  Hid from = io_internal::FileHid(H5Fopen(source.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  Hid to =
      io_internal::FileHid(H5Fcreate(target.c_str(), H5F_ACC_TRUNC, create.get(), H5P_DEFAULT));
  Check(from.valid() && to.valid(), "open " + source + " / create " + target);
  Check(H5Ocopy(from.get(), "/xpcs", to.get(), "/xpcs", H5P_DEFAULT, H5P_DEFAULT) >= 0, "copy");
  for (const std::string& name : io_internal::GroupMemberNames(
           io_internal::GroupHid(H5Gopen2(from.get(), kMatrices, H5P_DEFAULT)).get())) {
    const std::string path = std::string(kMatrices) + "/" + name;
    Hid old_matrix = io_internal::DatasetHid(H5Dopen2(from.get(), path.c_str(), H5P_DEFAULT));
    const std::vector<hsize_t> dims = io_internal::DatasetDims(old_matrix.get());
    std::vector<float> values(static_cast<size_t>(dims[0] * dims[1]));
    Check(H5Dread(old_matrix.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                  values.data()) >= 0,
          "read " + path);
    Check(H5Ldelete(to.get(), path.c_str(), H5P_DEFAULT) >= 0, "delete " + path);
    Hid dcpl = io_internal::PlistHid(H5Pcreate(H5P_DATASET_CREATE));
    hsize_t tile[2] = {dims[0], dims[1]};
    if (!storage.contiguous) {
      Check(H5Pset_chunk(dcpl.get(), 2, storage.chunk) >= 0, "chunk");
      tile[0] = storage.chunk[0];
      tile[1] = storage.chunk[1];
    }
    Hid space = io_internal::SpaceHid(H5Screate_simple(2, dims.data(), nullptr));
    Hid matrix =
        io_internal::DatasetHid(H5Dcreate2(to.get(), path.c_str(), storage.file_type, space.get(),
                                           H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    Check(matrix.valid(), "create " + path);
    // Tile by tile (chunk by chunk), so that one chunk can be left unwritten (unallocated).
    for (hsize_t r = 0; r < dims[0]; r += tile[0]) {
      for (hsize_t c = 0; c < dims[1]; c += tile[1]) {
        if (static_cast<int>(r / tile[0]) == storage.unwritten_chunk_row &&
            static_cast<int>(c / tile[1]) == storage.unwritten_chunk_column) {
          continue;
        }
        const hsize_t start[2] = {r, c};
        const hsize_t count[2] = {std::min(tile[0], dims[0] - r), std::min(tile[1], dims[1] - c)};
        Check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0,
              "select");
        Check(H5Dwrite(matrix.get(), H5T_NATIVE_FLOAT, space.get(), space.get(), H5P_DEFAULT,
                       values.data()) >= 0,
              "write " + path);
      }
    }
  }
}

// Row ranges a pass reads: whole triangle, single rows, batches, the last row (no point).
std::vector<std::pair<int, int>> RowRanges(int n) {
  return {{0, n}, {0, 1}, {1, 7}, {7, n - 1}, {n - 1, n}, {n / 2, n / 2}, {3, n / 2 + 2}};
}

// Every row range of every angle read through `direct` and `hdf5` (a source that reads through
// HDF5 only): bitwise equal.
void ExpectBitwiseEqualReads(BatchSource& direct, BatchSource& hdf5) {
  const DatasetInfo& info = direct.info();
  const int n = info.num_times();
  ASSERT_EQ(n, hdf5.info().num_times());
  for (int angle = 0; angle < info.num_angles(); ++angle) {
    for (auto [begin, end] : RowRanges(n)) {
      const auto size = static_cast<size_t>(UpperTriangleRowsSize(n, begin, end));
      // Filled with different bytes, so a value left unwritten shows.
      std::vector<float> from_direct(size, 7.0f);
      std::vector<float> from_hdf5(size, -7.0f);
      direct.ReadUpperTriangleRows(angle, begin, end, std::span<float>(from_direct));
      hdf5.ReadUpperTriangleRows(angle, begin, end, std::span<float>(from_hdf5));
      EXPECT_EQ(std::memcmp(from_direct.data(), from_hdf5.data(), size * sizeof(float)), 0)
          << "angle " << angle << ", rows " << begin << "-" << end;
    }
  }
}

class DirectReadsTest : public TempDirTest {
 protected:
  // Opens `selection` twice: as OpenBatchSource does, and through HDF5 only.
  void Open(const DataSelection& selection) {
    direct_ = OpenBatchSource(selection);
    hdf5_ = io_internal::OpenHdfBatchSource(selection, /*allow_direct_reads=*/false);
    ASSERT_THAT(io_internal::Float32ReadPaths(*hdf5_), Each(HasSubstr("not allowed")));
  }
  std::vector<std::string> ReadPaths() const { return io_internal::Float32ReadPaths(*direct_); }

  std::unique_ptr<BatchSource> direct_;
  std::unique_ptr<BatchSource> hdf5_;
};

TEST_F(DirectReadsTest, ChunkedByRowsReadsDirectlyTheSameBits) {
  const std::string path = PathOf("chunked.h5");
  WriteTestFile(path, Float32Spec(41, 7));
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(std::string()));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

TEST_F(DirectReadsTest, ChunksSplitAcrossColumnsReadDirectlyTheSameBits) {
  const std::string path = PathOf("tiles.h5");
  WriteTestFile(path, Float32Spec(41, 5, 6));
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(std::string()));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

// Tiny chunks: a read of the whole triangle is thousands of pieces out of output order, more
// than one preadv may take (IOV_MAX).
TEST_F(DirectReadsTest, ManySmallChunksReadDirectlyTheSameBits) {
  const std::string path = PathOf("small_tiles.h5");
  TestFileSpec spec = SingleFloat32Spec(300, 4, 3);
  WriteTestFile(path, spec);
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(std::string()));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

TEST_F(DirectReadsTest, ContiguousReadsDirectlyTheSameBits) {
  const std::string chunked = PathOf("chunked.h5");
  const std::string path = PathOf("contiguous.h5");
  WriteTestFile(chunked, Float32Spec(41, 7));
  CopyWithStorage(chunked, path, Storage{.contiguous = true});
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(std::string()));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

TEST_F(DirectReadsTest, FrameWindowReadsDirectlyTheSameBits) {
  const std::string chunked = PathOf("chunked.h5");
  const std::string contiguous = PathOf("contiguous.h5");
  WriteTestFile(chunked, Float32Spec(41, 6, 8));
  CopyWithStorage(chunked, contiguous, Storage{.contiguous = true});
  for (const std::string& path : {chunked, contiguous}) {
    DataSelection selection = SelectionFor(path);
    selection.start_frame = 5;
    selection.end_frame = 33;
    Open(selection);
    ASSERT_EQ(direct_->info().first_frame, 4);
    ASSERT_EQ(direct_->info().num_times(), 28);
    EXPECT_THAT(ReadPaths(), Each(std::string())) << path;
    ExpectBitwiseEqualReads(*direct_, *hdf5_);
  }
}

// The chunk queries of HDF5 1.10 leave the user block out of the addresses, H5Dget_offset does
// not: the sample check finds where the values are either way.
TEST_F(DirectReadsTest, FileWithAUserBlockReadsDirectlyTheSameBits) {
  const std::string source = PathOf("source.h5");
  WriteTestFile(source, Float32Spec(41, 7));
  for (bool contiguous : {false, true}) {
    const std::string path = PathOf(contiguous ? "ub_contiguous.h5" : "ub_chunked.h5");
    CopyWithStorage(source, path,
                    Storage{.contiguous = contiguous, .chunk = {7, 41}, .user_block = 1024});
    Open(SelectionFor(path));
    EXPECT_THAT(ReadPaths(), Each(std::string())) << path;
    ExpectBitwiseEqualReads(*direct_, *hdf5_);
  }
}

TEST_F(DirectReadsTest, UnallocatedChunkReadsThroughHdf5) {
  const std::string source = PathOf("source.h5");
  const std::string path = PathOf("hole.h5");
  WriteTestFile(source, Float32Spec(41, 7));
  // Chunk (1, 3) holds rows 10..19, columns 30..39: upper triangle, needed.
  CopyWithStorage(
      source, path,
      Storage{.chunk = {10, 10}, .unwritten_chunk_row = 1, .unwritten_chunk_column = 3});
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(HasSubstr("not allocated")));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

// A chunk wholly below the diagonal is never read: it may be missing.
TEST_F(DirectReadsTest, UnallocatedChunkBelowTheDiagonalStillReadsDirectly) {
  const std::string source = PathOf("source.h5");
  const std::string path = PathOf("hole_below.h5");
  WriteTestFile(source, Float32Spec(41, 7));
  CopyWithStorage(
      source, path,
      Storage{.chunk = {10, 10}, .unwritten_chunk_row = 3, .unwritten_chunk_column = 1});
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(std::string()));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

TEST_F(DirectReadsTest, BigEndianFloat32ReadsThroughHdf5) {
  const std::string source = PathOf("source.h5");
  const std::string path = PathOf("big_endian.h5");
  WriteTestFile(source, Float32Spec(41, 7));
  CopyWithStorage(source, path, Storage{.contiguous = true, .file_type = H5T_IEEE_F32BE});
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(HasSubstr("little-endian IEEE float32")));
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

TEST_F(DirectReadsTest, Float64AndCompressedReadThroughHdf5) {
  for (auto [dtype, compression, reason] :
       {std::tuple{"float64", "none", "little-endian IEEE float32"},
        std::tuple{"float32", "lzf", "stored with a filter"},
        std::tuple{"float32", "gzip", "stored with a filter"}}) {
    const std::string path = PathOf(std::string(dtype) + "_" + compression + ".h5");
    TestFileSpec spec = Float32Spec(41, 7);
    spec.dtype = dtype;
    spec.compression = compression;
    WriteTestFile(path, spec);
    Open(SelectionFor(path));
    EXPECT_THAT(ReadPaths(), Each(HasSubstr(reason))) << path;
    ExpectBitwiseEqualReads(*direct_, *hdf5_);
  }
}

// Reads of more than a MiB go through the bounce buffer (an 800-frame matrix: its triangle is
// 1.3 MB), here with chunks split across columns (pieces out of output order).
TEST_F(DirectReadsTest, LargeReadsThroughTheBounceBufferGiveTheSameBits) {
  const std::string path = PathOf("large.h5");
  TestFileSpec spec = SingleFloat32Spec(800, 60, 300);
  WriteTestFile(path, spec);
  Open(SelectionFor(path));
  EXPECT_THAT(ReadPaths(), Each(std::string()));
  const int n = direct_->info().num_times();
  ASSERT_GT(UpperTriangleSize(n) * static_cast<int64_t>(sizeof(float)),
            io_internal::DirectReader::kBounceAboveBytes);
  ExpectBitwiseEqualReads(*direct_, *hdf5_);
}

// A raw file of a `rows` x `columns` float matrix, value (r, c) = r * columns + c, and a
// descriptor of it.
class RawMatrixFile {
 public:
  RawMatrixFile(const std::string& path, int64_t rows, int64_t columns) : columns_(columns) {
    std::vector<float> values(static_cast<size_t>(rows * columns));
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()),
               static_cast<std::streamsize>(values.size() * sizeof(float)));
    fd_ = io_internal::FileDescriptor(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  }
  int fd() const { return fd_.get(); }
  float ValueAt(int64_t row, int64_t column) const {
    return static_cast<float>(row * columns_ + column);
  }

 private:
  int64_t columns_;
  io_internal::FileDescriptor fd_;
};

// Every path of DirectReader on one contiguous matrix: in place, through a bounce buffer with
// several runs, and pieces larger than the bounce buffer read in place.
TEST_F(DirectReadsTest, ReaderGivesTheValuesOnEveryPath) {
  const int64_t size = 200;
  const RawMatrixFile file(PathOf("raw.bin"), size, size);
  ASSERT_TRUE(file.fd() >= 0);
  const io_internal::DirectLayout layout(size, size, 0, 0, 1, {0});
  // Rows 10..139 from the column after the diagonal, as the source reads them.
  std::vector<io_internal::RowSegment> segments;
  std::vector<float> out(static_cast<size_t>(UpperTriangleRowsSize(size - 1, 9, 139)), -1.0f);
  float* next = out.data();
  for (int64_t row = 10; row < 140; ++row) {
    segments.push_back({row, row + 1, size - row - 1, next});
    next += size - row - 1;
  }
  ASSERT_EQ(next, out.data() + out.size());
  for (auto [bounce_above, bounce] :
       {std::pair<int64_t, int64_t>{int64_t{1} << 40, 4096}, std::pair<int64_t, int64_t>{0, 4096},
        std::pair<int64_t, int64_t>{0, 256}}) {
    std::fill(out.begin(), out.end(), -1.0f);
    io_internal::DirectReader reader(bounce_above, bounce);
    reader.Read(file.fd(), layout, segments);
    size_t p = 0;
    for (const io_internal::RowSegment& segment : segments) {
      for (int64_t c = 0; c < segment.count; ++c, ++p) {
        ASSERT_EQ(out[p], file.ValueAt(segment.row, segment.column + c))
            << "bounce above " << bounce_above << ", bounce " << bounce << ", row " << segment.row;
      }
    }
  }
}

// Past the end of the file: a std::runtime_error saying so, on every path.
TEST_F(DirectReadsTest, ReaderReportsAShortRead) {
  const RawMatrixFile file(PathOf("raw.bin"), 50, 50);
  const io_internal::DirectLayout layout(100, 50, 0, 0, 1, {0});  // claims 100 rows
  std::vector<float> out(50);
  const io_internal::RowSegment beyond{60, 0, 50, out.data()};
  for (int64_t bounce_above : {int64_t{1} << 40, int64_t{0}}) {
    io_internal::DirectReader reader(bounce_above, 4096);
    try {
      reader.Read(file.fd(), layout, {&beyond, 1});
      FAIL() << "no error reading past the end";
    } catch (const std::runtime_error& error) {
      EXPECT_THAT(error.what(), StartsWith("short read: the file ends before byte"));
    }
  }
}

// Cut short after the source opened (and decided on direct reads): each read past the end is a
// DataError naming the file, the dataset and the rows, on any thread; rows before the cut still
// read.
TEST_F(DirectReadsTest, FileTruncatedUnderTheSourceIsADataError) {
  const std::string path = PathOf("truncated.h5");
  TestFileSpec spec = SingleFloat32Spec(300, 30);
  WriteTestFile(path, spec);
  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
  ASSERT_THAT(io_internal::Float32ReadPaths(*source), Each(std::string()));
  const int n = source->info().num_times();
  std::vector<float> first_rows(static_cast<size_t>(UpperTriangleRowsSize(n, 0, 3)));
  source->ReadUpperTriangleRows(0, 0, 3, std::span<float>(first_rows));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  std::string message;
  std::thread reader([&] {
    std::vector<float> values(static_cast<size_t>(UpperTriangleRowsSize(n, 250, 260)));
    try {
      source->ReadUpperTriangleRows(0, 250, 260, std::span<float>(values));
    } catch (const DataError& error) {
      message = error.what();
    }
  });
  reader.join();
  EXPECT_THAT(message, StartsWith(path + ": cannot read rows 251..260 of " + kMatrices +
                                  "/c2_00001 (short read"));
  std::vector<float> again(first_rows.size());
  source->ReadUpperTriangleRows(0, 0, 3, std::span<float>(again));
  EXPECT_EQ(std::memcmp(again.data(), first_rows.data(), again.size() * sizeof(float)), 0);
}

// Cut short before it opens: a DataError naming the file (from HDF5's open or from a read), never
// a crash.
TEST_F(DirectReadsTest, FileTruncatedBeforeOpeningIsADataError) {
  const std::string path = PathOf("truncated_before.h5");
  TestFileSpec spec = SingleFloat32Spec(300, 30);
  WriteTestFile(path, spec);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  try {
    std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
    const int n = source->info().num_times();
    std::vector<float> values(static_cast<size_t>(UpperTriangleSize(n)));
    source->ReadUpperTriangleRows(0, 0, n, std::span<float>(values));
    FAIL() << "truncated file read without error";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), StartsWith(path));
  }
}

}  // namespace
}  // namespace homodyne
