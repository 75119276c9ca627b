// Tests of the beamline reader and writer (docs/design.md section 8).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <tuple>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/hdf5_util.h"
#include "io_test_util.h"

namespace homodyne {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_io::SelectionFor;
using testing_io::StoredValue;
using testing_io::TempDirTest;
using testing_io::TestFileSpec;
using testing_io::WriteTestFile;

// Expects InspectDataset (and OpenBatchSource) to throw a DataError naming the file and `reason`.
void ExpectDataError(const DataSelection& selection, const std::string& reason) {
  try {
    InspectDataset(selection);
    FAIL() << "no DataError for " << selection.file_path;
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), ::testing::StartsWith(selection.file_path));
    EXPECT_THAT(error.what(), HasSubstr(reason));
  }
  EXPECT_THROW(OpenBatchSource(selection), DataError);
}

// Checks every fitted point of every angle against the stored values of matrices `matrices`.
template <typename T>
void ExpectFittedValues(BatchSource& source, const std::vector<int>& matrices, double tolerance) {
  const DatasetInfo& info = source.info();
  const int n = info.num_times();
  std::vector<T> values(static_cast<size_t>(UpperTriangleSize(n)));
  for (int a = 0; a < info.num_angles(); ++a) {
    source.ReadUpperTriangleRows(a, 0, n, std::span<T>(values));
    size_t p = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j, ++p) {
        const double expected = StoredValue(matrices[static_cast<size_t>(a)],
                                            info.first_frame + 1 + i, info.first_frame + 1 + j);
        ASSERT_NEAR(values[p], expected, tolerance * expected)
            << "angle " << a << " (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(PhiTest, NormalisesAsTheReference) {
  // The reference's angle normalisation (docs/design.md section 8).
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(210.0), -150.0);
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(-210.0), 150.0);
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(180.0), 180.0);
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(-180.0), 180.0);
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(360.0), 0.0);
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(720.0 + 45.0), 45.0);
  EXPECT_DOUBLE_EQ(NormalizePhiDegrees(-90.0), -90.0);
}

TEST(PhiTest, RangesIncludingWrapped) {
  const PhiRange wrapped{170.0, -170.0};
  EXPECT_TRUE(PhiInRange(175.0, wrapped));
  EXPECT_TRUE(PhiInRange(-175.0, wrapped));
  EXPECT_TRUE(PhiInRange(185.0, wrapped));  // = -175
  EXPECT_FALSE(PhiInRange(0.0, wrapped));
  const PhiRange plain{-10.0, 10.0};
  EXPECT_TRUE(PhiInRange(10.0, plain));
  EXPECT_TRUE(PhiInRange(355.0, plain));  // = -5
  EXPECT_FALSE(PhiInRange(11.0, plain));
  EXPECT_TRUE(PhiInRange(123.0, PhiRange{-180.0, 180.0}));  // a full turn keeps everything
  EXPECT_EQ(ToString(FileLayout::kApsU), "aps_u");
  EXPECT_EQ(ToString(FileLayout::kApsOld), "aps_old");
}

TEST(UpperTriangleTest, Offsets) {
  EXPECT_EQ(UpperTriangleSize(5), 10);
  EXPECT_EQ(UpperTriangleRowOffset(5, 0), 0);
  EXPECT_EQ(UpperTriangleRowOffset(5, 1), 4);
  EXPECT_EQ(UpperTriangleRowOffset(5, 4), 10);
  EXPECT_EQ(UpperTriangleRowsSize(5, 1, 3), 5);
}

// Round trips: layout x compression x dtype.
class RoundTripTest
    : public TempDirTest,
      public ::testing::WithParamInterface<std::tuple<FileLayout, std::string, std::string>> {};

TEST_P(RoundTripTest, ReadsWhatWasWritten) {
  const auto& [layout, compression, dtype] = GetParam();
  TestFileSpec spec;
  spec.layout = layout;
  spec.compression = compression;
  spec.dtype = dtype;
  spec.frames = 40;
  spec.chunk_rows = 7;
  if (layout == FileLayout::kApsOld) spec.q_values = {0.0054, 0.0054, 0.0054};
  const std::string path = PathOf("data.h5");
  WriteTestFile(path, spec);

  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
  const DatasetInfo& info = source->info();
  EXPECT_EQ(info.layout, layout);
  EXPECT_EQ(info.value_type, dtype);
  EXPECT_EQ(info.compression, compression);
  EXPECT_EQ(info.frames_in_file, 40);
  EXPECT_EQ(info.first_frame, 0);
  EXPECT_EQ(info.num_raw_frames, 40);
  EXPECT_EQ(info.num_times(), 39);
  EXPECT_EQ(info.num_fit_points(), 3 * 39 * 38);
  EXPECT_DOUBLE_EQ(info.q_inv_angstrom, 0.0054);
  ASSERT_EQ(info.num_angles(), 3);
  EXPECT_DOUBLE_EQ(info.angles[2].phi_degrees, 90.0);
  EXPECT_FALSE(info.angles[0].stores_both_triangles);
  EXPECT_TRUE(info.warnings.empty());
  const std::vector<double> times = info.FittedTimes();
  EXPECT_DOUBLE_EQ(times.front(), 0.1);
  EXPECT_DOUBLE_EQ(times.back(), 3.9);
  const double tolerance = dtype == "float32" ? 1e-7 : 1e-15;
  ExpectFittedValues<double>(*source, {0, 1, 2}, tolerance);
  ExpectFittedValues<float>(*source, {0, 1, 2}, 1e-7);
}

INSTANTIATE_TEST_SUITE_P(LayoutsCompressionsTypes, RoundTripTest,
                         ::testing::Combine(::testing::Values(FileLayout::kApsU,
                                                              FileLayout::kApsOld),
                                            ::testing::Values("none", "gzip", "lzf"),
                                            ::testing::Values("float32", "float64")),
                         [](const auto& param_info) {
                           return std::string(ToString(std::get<0>(param_info.param))) + "_" +
                                  std::get<1>(param_info.param) + "_" +
                                  std::get<2>(param_info.param);
                         });

class ReaderTest : public TempDirTest {
 protected:
  // A gzip file of 33 frames in 5 x 4 chunks (square-ish, across rows and columns), opened with a
  // frame window from frame 3 (30 fitted times): the row reads cross chunks both ways, and the
  // window does not start at the file's first frame.
  std::unique_ptr<BatchSource> OpenChunkedWindow() {
    TestFileSpec spec;
    spec.frames = 33;
    spec.chunk_rows = 5;
    spec.chunk_cols = 4;
    spec.compression = "gzip";
    const std::string path = PathOf("data.h5");
    WriteTestFile(path, spec);
    DataSelection selection = SelectionFor(path);
    selection.start_frame = 3;
    return OpenBatchSource(selection);
  }
};

TEST_F(ReaderTest, PackedRowBatchesMatchTheFullMatrix) {
  std::unique_ptr<BatchSource> source = OpenChunkedWindow();
  const int n = source->info().num_times();
  ASSERT_EQ(n, 30);
  std::vector<double> full(static_cast<size_t>(n) * n);
  source->ReadCorrectedMatrix(1, full);
  for (auto [begin, end] :
       {std::pair{0, 1}, std::pair{1, 7}, std::pair{7, 29}, std::pair{29, 30}, std::pair{12, 12}}) {
    std::vector<double> packed(static_cast<size_t>(UpperTriangleRowsSize(n, begin, end)));
    source->ReadUpperTriangleRows(1, begin, end, std::span<double>(packed));
    size_t p = 0;
    for (int i = begin; i < end; ++i) {
      for (int j = i + 1; j < n; ++j, ++p) {
        ASSERT_EQ(packed[p], full[static_cast<size_t>(i) * n + j]);
        ASSERT_EQ(packed[p], full[static_cast<size_t>(j) * n + i]);
      }
    }
    EXPECT_EQ(p, packed.size());
  }
}

// The fitted data's reads (fitted_data_writer.cc): each band of rows from the diagonal on, in
// order and out of order, across the file's chunks, in a frame window.
TEST_F(ReaderTest, CorrectedUpperRowsMatchTheMatrix) {
  std::unique_ptr<BatchSource> source = OpenChunkedWindow();
  const int n = source->info().num_times();
  ASSERT_EQ(n, 30);
  for (int angle = 0; angle < source->info().num_angles(); ++angle) {
    std::vector<double> full(static_cast<size_t>(n) * n);
    source->ReadCorrectedMatrix(angle, full);
    for (auto [begin, end] :
         {std::pair{0, 8}, std::pair{8, 16}, std::pair{16, 24}, std::pair{24, 30}, std::pair{3, 4},
          std::pair{29, 30}, std::pair{0, 30}, std::pair{12, 12}, std::pair{5, 21}}) {
      const int width = n - begin;
      std::vector<double> rows(static_cast<size_t>((end - begin) * width), -1.0);
      source->ReadCorrectedUpperRows(angle, begin, end, std::span<double>(rows));
      for (int i = begin; i < end; ++i) {
        for (int j = begin; j < n; ++j) {
          ASSERT_EQ(rows[static_cast<size_t>((i - begin) * width + (j - begin))],
                    full[static_cast<size_t>(i) * n + j])
              << "angle " << angle << " rows [" << begin << ", " << end << ") at " << i << " " << j;
        }
      }
    }
  }
}

TEST_F(ReaderTest, CorrectedMatrixDiagonalUsesRawFrameZero) {
  TestFileSpec spec;
  spec.frames = 12;
  const std::string path = PathOf("data.h5");
  WriteTestFile(path, spec);
  DataSelection selection = SelectionFor(path);
  selection.start_frame = 2;  // raw frame 0 = file frame 1
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  const int n = source->info().num_times();
  ASSERT_EQ(n, 10);
  std::vector<double> full(static_cast<size_t>(n) * n);
  source->ReadCorrectedMatrix(0, full);
  // The diagonal correction (docs/model.md, Diagonal correction) on the raw matrix (file frames
  // 1..11): s_r = C[r, r+1]; the fitted diagonal i is raw r = i + 1: 0.5 (s_{r-1} + s_r), the last
  // one s_{N_raw-2}.
  auto s = [](int r) { return StoredValue(0, 1 + r, 2 + r); };
  for (int i = 0; i < n; ++i) {
    const int r = i + 1;
    const double expected = (r == n) ? s(r - 1) : 0.5 * (s(r - 1) + s(r));
    EXPECT_NEAR(full[static_cast<size_t>(i) * n + i], expected, 1e-15) << i;
  }
  EXPECT_DOUBLE_EQ(full[0 * n + 1], StoredValue(0, 2, 3));
  EXPECT_DOUBLE_EQ(full[1 * n + 0], StoredValue(0, 2, 3));
}

// experimental_data.diagonal_correction (docs/model.md, Diagonal correction): statistical takes
// each raw diagonal point's neighbours C[r, r+k], C[r-k, r], k = 1..window, inside the raw window
// (raw frame 0 included); apply = false keeps the stored diagonal. The matrix and the upper rows
// agree; the off-diagonal values are untouched.
TEST_F(ReaderTest, DiagonalCorrectionMethodsOfTheCorrectedReads) {
  TestFileSpec spec;
  spec.frames = 12;
  spec.chunk_rows = 4;
  spec.chunk_cols = 4;
  const std::string path = PathOf("diagonal.h5");
  WriteTestFile(path, spec);
  DataSelection selection = SelectionFor(path);
  selection.start_frame = 2;  // raw frame r = file frame 1 + r, N_raw = 11
  const int n_raw = 11;
  // The stored value at raw (r, c), r <= c.
  auto raw = [](int r, int c) { return StoredValue(0, 1 + r, 1 + c); };
  for (const std::string estimator : {"median", "mean", "trimmed_mean"}) {
    selection.diagonal_correction.method = "statistical";
    selection.diagonal_correction.estimator = estimator;
    selection.diagonal_correction.window = 3;
    selection.diagonal_correction.trim_fraction = 0.2;
    std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
    const int n = source->info().num_times();
    ASSERT_EQ(n, n_raw - 1);
    std::vector<double> full(static_cast<size_t>(n) * n);
    source->ReadCorrectedMatrix(0, full);
    for (int i = 0; i < n; ++i) {
      const int r = i + 1;
      std::vector<double> neighbours;
      for (int k = 1; k <= 3; ++k) {
        if (r + k < n_raw) neighbours.push_back(raw(r, r + k));
        if (r - k >= 0) neighbours.push_back(raw(r - k, r));
      }
      std::sort(neighbours.begin(), neighbours.end());
      const size_t count = neighbours.size();
      double expected = 0.0;
      if (estimator == "median") {
        expected = count % 2 ? neighbours[count / 2]
                             : 0.5 * (neighbours[count / 2 - 1] + neighbours[count / 2]);
      } else {
        const size_t cut = estimator == "mean" ? 0 : static_cast<size_t>(0.2 * count);
        for (size_t k = cut; k < count - cut; ++k) expected += neighbours[k];
        expected /= static_cast<double>(count - 2 * cut);
      }
      EXPECT_NEAR(full[static_cast<size_t>(i) * n + i], expected, 1e-14) << estimator << " " << i;
    }
    EXPECT_DOUBLE_EQ(full[0 * n + 1], raw(1, 2));  // off the diagonal: as stored
    std::vector<double> rows(static_cast<size_t>(4 * (n - 3)));
    source->ReadCorrectedUpperRows(0, 3, 7, std::span<double>(rows));
    for (int i = 3; i < 7; ++i) {
      EXPECT_EQ(rows[static_cast<size_t>((i - 3) * (n - 3) + (i - 3))],
                full[static_cast<size_t>(i) * n + i])
          << i;
    }
  }
  // apply_diagonal_correction: false: the stored diagonal.
  selection.diagonal_correction = {};
  selection.diagonal_correction.apply = false;
  std::unique_ptr<BatchSource> stored = OpenBatchSource(selection);
  std::vector<double> full(static_cast<size_t>(10) * 10);
  stored->ReadCorrectedMatrix(0, full);
  for (int i = 0; i < 10; ++i)
    EXPECT_DOUBLE_EQ(full[static_cast<size_t>(i) * 10 + i], raw(i + 1, i + 1));
}

TEST_F(ReaderTest, ApsUSelectsTheExactQRing) {
  TestFileSpec spec;
  spec.q_values = {0.0050, 0.0054, 0.0060};
  spec.phi_values = {0.0, 45.0, 200.0};
  spec.bins = {1, 2, 3, 4, 5, 6, 7, 8, 9, 42};  // 42: outside 3 q x 3 phi, skipped
  spec.num_matrices = 9;
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, spec);

  const DatasetInfo info = InspectDataset(SelectionFor(path, 0.0054));
  ASSERT_EQ(info.num_angles(), 3);
  EXPECT_DOUBLE_EQ(info.q_inv_angstrom, 0.0054);
  EXPECT_EQ(info.angles[0].dataset_path, "/xpcs/twotime/correlation_map/c2_00004");
  EXPECT_EQ(info.angles[2].dataset_path, "/xpcs/twotime/correlation_map/c2_00006");
  EXPECT_DOUBLE_EQ(info.angles[2].phi_degrees, -160.0);
  ASSERT_EQ(info.warnings.size(), 1u);
  EXPECT_THAT(info.warnings[0], HasSubstr("skipped 1 processed bin"));

  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path, 0.0054));
  ExpectFittedValues<double>(*source, {3, 4, 5}, 1e-15);

  const DatasetInfo near = InspectDataset(SelectionFor(path, 0.0059));
  EXPECT_DOUBLE_EQ(near.q_inv_angstrom, 0.0060);
  EXPECT_EQ(near.angles[0].dataset_path, "/xpcs/twotime/correlation_map/c2_00007");
  EXPECT_THAT(near.warnings.back(), HasSubstr("using the closest ring"));
}

TEST_F(ReaderTest, ApsOldQWindow) {
  TestFileSpec spec;
  spec.layout = FileLayout::kApsOld;
  spec.q_values = {0.0050, 0.0052, 0.0080, 0.0053, 0.0054, 0.0055, 0.0056};
  spec.phi_values = {0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0};
  spec.num_matrices = 7;
  const std::string path = PathOf("old.h5");
  WriteTestFile(path, spec);
  // |q - 0.0054| <= 0.1 * 0.0054: all but 0.0080, in file order.
  const DatasetInfo info = InspectDataset(SelectionFor(path, 0.0054));
  ASSERT_EQ(info.num_angles(), 6);
  EXPECT_EQ(info.angles[2].dataset_path, "/exchange/C2T_all/c2_00004");
  EXPECT_DOUBLE_EQ(info.q_inv_angstrom, 0.0050);  // the first kept q (docs/design.md section 8)
  EXPECT_THAT(info.warnings.front(), HasSubstr("mixes several q rings"));

  // Fewer than 5 in the window: the 10 closest bins.
  TestFileSpec sparse;
  sparse.layout = FileLayout::kApsOld;
  sparse.num_matrices = 12;
  sparse.q_values.clear();
  sparse.phi_values.clear();
  for (int k = 0; k < 12; ++k) {
    sparse.q_values.push_back(0.001 * (k + 1));
    sparse.phi_values.push_back(10.0 * k);
  }
  const std::string sparse_path = PathOf("sparse.h5");
  WriteTestFile(sparse_path, sparse);
  DataSelection selection = SelectionFor(sparse_path, 0.001);
  const DatasetInfo few = InspectDataset(selection);
  ASSERT_EQ(few.num_angles(), 10);
  EXPECT_EQ(few.angles.front().dataset_path, "/exchange/C2T_all/c2_00001");
  EXPECT_EQ(few.angles.back().dataset_path, "/exchange/C2T_all/c2_00010");
}

TEST_F(ReaderTest, FrameSlicing) {
  TestFileSpec spec;
  spec.frames = 100;
  const std::string path = PathOf("frames.h5");
  WriteTestFile(path, spec);
  DataSelection selection = SelectionFor(path);
  selection.start_frame = 11;
  selection.end_frame = 60;  // frames 10..59, N_raw = 50, as the reference
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  EXPECT_EQ(source->info().first_frame, 10);
  EXPECT_EQ(source->info().num_raw_frames, 50);
  ExpectFittedValues<double>(*source, {0, 1, 2}, 1e-15);

  selection.end_frame = -1;
  EXPECT_EQ(InspectDataset(selection).num_raw_frames, 90);
  selection.start_frame = 0;  // clamped to 1
  EXPECT_EQ(InspectDataset(selection).num_raw_frames, 100);
  selection.end_frame = 500;  // clamped to the file, with a warning
  const DatasetInfo clamped = InspectDataset(selection);
  EXPECT_EQ(clamped.num_raw_frames, 100);
  EXPECT_THAT(clamped.warnings.back(), HasSubstr("end_frame = 500"));
}

TEST_F(ReaderTest, PhiFilteringKeepsRangesIncludingWrapped) {
  TestFileSpec spec;
  spec.phi_values = {0.0, 90.0, 175.0, 190.0, 270.0};
  spec.bins = {1, 2, 3, 4, 5};
  spec.num_matrices = 5;
  const std::string path = PathOf("phi.h5");
  WriteTestFile(path, spec);
  DataSelection selection = SelectionFor(path);
  selection.phi_filtering_enabled = true;
  selection.phi_ranges = {{170.0, -170.0}, {-95.0, -85.0}};
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  const DatasetInfo& info = source->info();
  ASSERT_EQ(info.num_angles(), 3);
  EXPECT_DOUBLE_EQ(info.angles[0].phi_degrees, 175.0);
  EXPECT_DOUBLE_EQ(info.angles[1].phi_degrees, -170.0);
  EXPECT_DOUBLE_EQ(info.angles[2].phi_degrees, -90.0);
  EXPECT_THAT(info.phi_filtered_out, ElementsAre(0.0, 90.0));
  ExpectFittedValues<double>(*source, {2, 3, 4}, 1e-15);

  selection.phi_ranges = {{20.0, 30.0}};  // matches nothing: all kept, with a warning
  const DatasetInfo all = InspectDataset(selection);
  EXPECT_EQ(all.num_angles(), 5);
  EXPECT_THAT(all.warnings.back(), HasSubstr("kept no angle"));

  selection.phi_filtering_enabled = false;
  selection.phi_ranges = {{170.0, -170.0}};
  EXPECT_EQ(InspectDataset(selection).num_angles(), 5);
}

TEST_F(ReaderTest, FileStoringBothTrianglesIsNotDoubled) {
  TestFileSpec spec;
  spec.both_triangles = true;
  spec.compression = "lzf";
  const std::string path = PathOf("both.h5");
  WriteTestFile(path, spec);
  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
  EXPECT_TRUE(source->info().angles[0].stores_both_triangles);
  EXPECT_THAT(source->info().warnings.front(), HasSubstr("stores both triangles"));
  ExpectFittedValues<double>(*source, {0, 1, 2}, 1e-15);
}

TEST_F(ReaderTest, CountsNonFiniteFittedPoints) {
  TestFileSpec spec;
  spec.frames = 10;
  spec.value = [](int k, int i, int j) {
    if (k == 0 && i == 2 && j == 5) return std::numeric_limits<double>::quiet_NaN();
    if (k == 1 && i == 3 && j == 9) return std::numeric_limits<double>::infinity();
    if (k == 1 && i == 4 && j == 4) return std::numeric_limits<double>::infinity();  // diagonal
    if (k == 2 && i == 0) return std::numeric_limits<double>::quiet_NaN();           // raw frame 0
    return StoredValue(k, i, j);
  };
  const std::string path = PathOf("nan.h5");
  WriteTestFile(path, spec);
  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
  const NonFiniteCount count = CountNonFinite(*source, 4);
  EXPECT_EQ(count.nan, 1);
  EXPECT_EQ(count.inf, 1);
  EXPECT_EQ(count.points_scanned, 3 * UpperTriangleSize(9));
}

TEST(H5pyFileTest, ReadsLzfChunksWrittenByH5py) {
  // tests/data/aps_u_h5py_lzf.h5: written by h5py 3.7 with compression="lzf", chunks (6, 24),
  // float32; q = [0.0054, 0.0060], phi = [0, 90, 200], bins 1..6, matrix k (0-based) holds
  // 1 + 0.001 k + 0.01 i + 0.0001 j for j >= i, zeros below.
  DataSelection selection;
  selection.file_path = std::string(HOMODYNE_TEST_DATA_DIR) + "/aps_u_h5py_lzf.h5";
  selection.wavevector_q_target = 0.0060;
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  const DatasetInfo& info = source->info();
  EXPECT_EQ(info.compression, "lzf");
  EXPECT_EQ(info.value_type, "float32");
  EXPECT_EQ(info.num_raw_frames, 24);
  ASSERT_EQ(info.num_angles(), 3);
  EXPECT_DOUBLE_EQ(info.angles[2].phi_degrees, -160.0);
  const int n = info.num_times();
  std::vector<double> values(static_cast<size_t>(UpperTriangleSize(n)));
  for (int a = 0; a < 3; ++a) {
    source->ReadUpperTriangleRows(a, 0, n, std::span<double>(values));
    size_t p = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j, ++p) {
        const double expected = 1.0 + 0.001 * (3 + a) + 0.01 * (i + 1) + 0.0001 * (j + 1);
        ASSERT_NEAR(values[p], expected, 1e-6);
      }
    }
  }
}

// Bad inputs: each gives a DataError starting with the path and naming the problem.
class BadInputTest : public TempDirTest {};

TEST_F(BadInputTest, NoSuchFile) {
  ExpectDataError(SelectionFor(PathOf("missing.h5")), "no such file");
}

TEST_F(BadInputTest, NotHdf5) {
  const std::string path = PathOf("text.h5");
  std::ofstream(path) << "this is not HDF5\n";
  ExpectDataError(SelectionFor(path), "not an HDF5 file");
}

TEST_F(BadInputTest, NeitherLayoutListsTopLevel) {
  const std::string path = PathOf("other.h5");
  {
    io_internal::InitializeHdf5();
    io_internal::Hid file =
        io_internal::FileHid(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    io_internal::CreateGroups(file.get(), "/entry/data");
    const double value = 1.0;
    io_internal::WriteDoubles(file.get(), "/counts", {1}, std::span<const double>(&value, 1));
  }
  ExpectDataError(SelectionFor(path), "neither APS-U layout");
  ExpectDataError(SelectionFor(path), "top level holds: /counts, /entry");
}

// An APS-U file whose only matrix has the given shape.
void WriteApsUWithShape(const std::string& path, const std::vector<hsize_t>& dims) {
  io_internal::BeamlineWriterOptions options;
  options.frames = 4;
  io_internal::BeamlineWriter writer(path, options);
  writer.WriteApsUBins(std::vector<double>{0.0054}, std::vector<double>{0.0},
                       std::vector<int64_t>{1});
  hsize_t count = 1;
  for (hsize_t d : dims) count *= d;
  io_internal::WriteDoubles(writer.file(), "/xpcs/twotime/correlation_map/c2_00001", dims,
                            std::vector<double>(count, 1.0));
  writer.Close();
}

TEST_F(BadInputTest, APathWithANulIsNamed) {
  // "a\0b.h5" would open "a" for the system; the message shows the NUL as \0.
  try {
    OpenBatchSource(SelectionFor(PathOf(std::string("a\0b.h5", 6))));
    FAIL() << "a path with a NUL was opened";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), HasSubstr("a\\0b.h5: the data file's path contains a NUL character "
                                        "(\\0) at position"));
  }
}

TEST_F(BadInputTest, AFifoIsRefusedBeforeItIsOpened) {
  // Opening a FIFO with no writer blocks: the reader must refuse it from its type alone.
  const std::string path = PathOf("pipe.h5");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ExpectDataError(SelectionFor(path), "is not a regular file");
}

TEST_F(BadInputTest, AMatrixDeclaredButNeverWrittenIsRefused) {
  // 100000 x 100000 float32 declared in chunks, none written: HDF5 would read the fill value.
  const std::string path = PathOf("declared.h5");
  {
    io_internal::BeamlineWriterOptions options;
    options.frames = 4;
    io_internal::BeamlineWriter writer(path, options);
    writer.WriteApsUBins(std::vector<double>{0.0054}, std::vector<double>{0.0},
                         std::vector<int64_t>{1});
    const hsize_t dims[2] = {100000, 100000};
    const hsize_t chunk[2] = {256, 256};
    io_internal::Hid space = io_internal::SpaceHid(H5Screate_simple(2, dims, nullptr));
    io_internal::Hid create = io_internal::PlistHid(H5Pcreate(H5P_DATASET_CREATE));
    ASSERT_GE(H5Pset_chunk(create.get(), 2, chunk), 0);
    io_internal::CreateGroups(writer.file(), "/xpcs/twotime/correlation_map");
    io_internal::Hid dataset = io_internal::DatasetHid(
        H5Dcreate2(writer.file(), "/xpcs/twotime/correlation_map/c2_00001", H5T_IEEE_F32LE,
                   space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT));
    ASSERT_TRUE(dataset.valid());
    dataset = io_internal::Hid();
    writer.Close();
  }
  ExpectDataError(SelectionFor(path), "declares 100000 x 100000 float32 values");
  ExpectDataError(SelectionFor(path), "but the file stores 0 bytes of it");
}

TEST_F(BadInputTest, MatrixNotSquareOrWrongRank) {
  const std::string path = PathOf("rect.h5");
  WriteApsUWithShape(path, {10, 12});
  ExpectDataError(SelectionFor(path), "has shape (10 x 12): expected a square");
  const std::string cube = PathOf("cube.h5");
  WriteApsUWithShape(cube, {3, 10, 10});
  ExpectDataError(SelectionFor(cube), "(rank 2)");
}

TEST_F(BadInputTest, FramesOutOfRange) {
  TestFileSpec spec;
  spec.frames = 20;
  const std::string path = PathOf("frames.h5");
  WriteTestFile(path, spec);
  DataSelection selection = SelectionFor(path);
  selection.start_frame = 21;
  ExpectDataError(selection, "start_frame = 21 is beyond the file's 20 frames");
  selection.start_frame = 10;
  selection.end_frame = 5;
  ExpectDataError(selection, "end_frame = 5 is before start_frame = 10");
  selection.end_frame = 11;
  ExpectDataError(selection, "holds 2 frame(s)");
}

TEST_F(BadInputTest, QNotPresentNamesTheClosest) {
  TestFileSpec spec;
  spec.q_values = {0.0030, 0.0080};
  spec.phi_values = {0.0};
  spec.bins = {1, 2};
  spec.num_matrices = 2;
  const std::string path = PathOf("q.h5");
  WriteTestFile(path, spec);
  ExpectDataError(SelectionFor(path, 0.0054), "q = 0.0054 1/A is not present");
  ExpectDataError(SelectionFor(path, 0.0054), "closest available q is 0.003");
}

TEST_F(BadInputTest, EveryAngleFilteredOut) {
  TestFileSpec spec;
  spec.bins = {0, 17};  // neither names a (q, phi) pair
  spec.num_matrices = 0;
  const std::string path = PathOf("empty.h5");
  WriteTestFile(path, spec);
  ExpectDataError(SelectionFor(path), "every angle was filtered out");
}

// A NaN phi in the file crashed the selection; now the list entry is named.
TEST_F(BadInputTest, NonFinitePhiOrQNamesTheListEntry) {
  TestFileSpec spec;
  spec.phi_values = {0.0, std::numeric_limits<double>::quiet_NaN(), 90.0};
  const std::string path = PathOf("nan_phi.h5");
  WriteTestFile(path, spec);
  ExpectDataError(SelectionFor(path),
                  "/xpcs/qmap/dynamic_v_list_dim1[1] = nan: q and phi values "
                  "must be finite");
  TestFileSpec old_layout;
  old_layout.layout = FileLayout::kApsOld;
  old_layout.q_values = {0.0054, std::numeric_limits<double>::infinity(), 0.0054};
  const std::string old_path = PathOf("inf_q.h5");
  WriteTestFile(old_path, old_layout);
  ExpectDataError(SelectionFor(old_path), "/xpcs/dqlist[1] = inf");
}

// 0 and 360 degrees are one angle: fitting it twice would count its data twice.
TEST_F(BadInputTest, DuplicatePhiAfterNormalisation) {
  TestFileSpec spec;
  spec.phi_values = {0.0, 360.0, 90.0};
  const std::string path = PathOf("duplicate_phi.h5");
  WriteTestFile(path, spec);
  ExpectDataError(SelectionFor(path), "are both at phi = 0 degrees");
}

TEST_F(ReaderTest, PhiThatLookLikeRadiansWarn) {
  TestFileSpec spec;
  spec.phi_values = {0.0, 0.785, 1.571};
  const std::string path = PathOf("radians.h5");
  WriteTestFile(path, spec);
  const DatasetInfo info = InspectDataset(SelectionFor(path));
  ASSERT_EQ(info.num_angles(), 3);
  ASSERT_FALSE(info.warnings.empty());
  EXPECT_THAT(info.warnings.back(), HasSubstr("every phi is within +-2 pi (3 angles)"));
  // One angle near 0 is an ordinary angle in degrees.
  spec.phi_values = {1.0};
  spec.bins = {1};
  spec.num_matrices = 1;
  WriteTestFile(PathOf("one_angle.h5"), spec);
  EXPECT_TRUE(InspectDataset(SelectionFor(PathOf("one_angle.h5"))).warnings.empty());
}

// The same rules hold for data in memory (the Python dict path and the C++ API).
TEST_F(BadInputTest, InMemoryDataPassTheSameChecks) {
  const std::vector<double> values(2 * 4 * 4, 1.0);
  InMemoryData data;
  data.float64_values = values;
  data.num_angles = 2;
  data.num_times = 4;
  data.q_inv_angstrom = 0.0054;
  data.dt_seconds = 0.1;
  data.phi_degrees = {-180.0, 180.0};  // one angle: (-180, 180] holds 180 only
  try {
    MakeInMemoryBatchSource(data);
    FAIL() << "no error";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), HasSubstr("are both at phi = 180 degrees"));
  }
  data.phi_degrees = {0.0, 1.0};
  const auto source = MakeInMemoryBatchSource(data);
  ASSERT_EQ(source->info().warnings.size(), 1u);
  EXPECT_THAT(source->info().warnings.front(), HasSubstr("if these are radians, convert them"));
}

TEST_F(BadInputTest, CountMismatchBetweenBinsAndMatrices) {
  TestFileSpec spec;
  spec.num_matrices = 2;  // 3 bins
  const std::string path = PathOf("mismatch.h5");
  WriteTestFile(path, spec);
  ExpectDataError(SelectionFor(path), "count mismatch: 3 valid bins");

  TestFileSpec old;
  old.layout = FileLayout::kApsOld;
  old.q_values = {0.0054, 0.0054, 0.0054};
  old.num_matrices = 4;
  const std::string old_path = PathOf("old_mismatch.h5");
  WriteTestFile(old_path, old);
  ExpectDataError(SelectionFor(old_path), "count mismatch: 3 bins");
}

// One angle of 300 frames in gzip chunks: a file cut in half leaves chunks that fail to inflate.
void WriteGzipOneAngleFile(const std::string& path) {
  TestFileSpec spec;
  spec.frames = 300;
  spec.compression = "gzip";
  spec.num_matrices = 1;
  spec.phi_values = {0.0};
  spec.bins = {1};
  WriteTestFile(path, spec);
}

TEST_F(BadInputTest, TruncatedFileFailsCleanly) {
  const std::string path = PathOf("truncated.h5");
  WriteGzipOneAngleFile(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  try {
    std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
    const int n = source->info().num_times();
    std::vector<double> values(static_cast<size_t>(UpperTriangleSize(n)));
    source->ReadUpperTriangleRows(0, 0, n, std::span<double>(values));
    FAIL() << "truncated file read without error";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), ::testing::StartsWith(path));
  }
}

// HDF5 switches its error-stack printing off per thread: a read that fails on another thread
// than the one that opened the file (streaming's prefetch thread) must not print either.
TEST_F(BadInputTest, FailedReadOnAnotherThreadPrintsNoHdf5Diagnostics) {
  const std::string path = PathOf("truncated_later.h5");
  WriteGzipOneAngleFile(path);
  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionFor(path));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  std::string message;
  std::string printed;
  std::thread reader([&] {
    const int n = source->info().num_times();
    std::vector<float> values(static_cast<size_t>(UpperTriangleSize(n)));
    ::testing::internal::CaptureStderr();
    try {
      source->ReadUpperTriangleRows(0, 0, n, std::span<float>(values));
    } catch (const DataError& error) {
      message = error.what();
    }
    printed = ::testing::internal::GetCapturedStderr();
  });
  reader.join();
  EXPECT_THAT(message, ::testing::StartsWith(path));
  EXPECT_EQ(printed, "");
}

TEST_F(BadInputTest, WriterCannotCreate) {
  io_internal::BeamlineWriterOptions options;
  options.frames = 4;
  const std::string path = PathOf("no/such/dir/out.h5");
  try {
    io_internal::BeamlineWriter writer(path, options);
    FAIL();
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), ::testing::StartsWith(path + ": cannot create the file"));
  }
}

}  // namespace
}  // namespace homodyne
