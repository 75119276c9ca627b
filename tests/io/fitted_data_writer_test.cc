// Tests of WriteFittedData (include/homodyne/results.h) and BatchSource::ReadCorrectedRows and
// ReadCorrectedUpperRows.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "homodyne/results.h"
#include "homodyne/simulate.h"
#include "io/hdf5_util.h"
#include "io/read_paths.h"
#include "io/result_files.h"
#include "io_test_util.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using testing_io::LaminarSimulationConfig;
using testing_io::SelectionOf;
using testing_io::TempDirTest;

// The creation property list of `dataset` in the HDF5 file `path`, after checking that the dataset
// is chunked in `side` x `side` tiles (an invalid list where it cannot be opened).
io_internal::Hid ChunkedCreatePlist(const std::string& path, const char* dataset_name,
                                    hsize_t side) {
  io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(file.valid()) << path;
  io_internal::Hid dataset =
      io_internal::DatasetHid(H5Dopen2(file.get(), dataset_name, H5P_DEFAULT));
  EXPECT_TRUE(dataset.valid()) << dataset_name;
  io_internal::Hid create = io_internal::PlistHid(H5Dget_create_plist(dataset.get()));
  hsize_t chunk[2] = {0, 0};
  EXPECT_EQ(H5Pget_chunk(create.get(), 2, chunk), 2) << dataset_name;
  EXPECT_EQ(chunk[0], side) << dataset_name;
  EXPECT_EQ(chunk[1], side) << dataset_name;
  return create;
}

// The written fit at (i, j) against the scalar model's value there: equal on the diagonal, within
// 8 ulp elsewhere (the pass kernel's model above the diagonal, its mirror below:
// fitted_data_writer.cc, TileEvaluation; tests/model/pass_kernel_test.cc,
// UpperSegmentsMatchTheScalarModel).
::testing::AssertionResult IsTheModel(double written, double scalar, int i, int j) {
  const double tolerance =
      i == j ? 0.0 : 8.0 * std::numeric_limits<double>::epsilon() * std::abs(scalar);
  if (std::abs(written - scalar) <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "fit at (" << i << ", " << j << ") " << written << ", the scalar model " << scalar;
}

// The truth as a fit result: one scaling per kept angle.
std::vector<AngleScaling> TruthScaling(const Config& config, const DatasetInfo& info) {
  std::vector<AngleScaling> scaling(static_cast<size_t>(info.num_angles()));
  for (size_t k = 0; k < scaling.size(); ++k) {
    scaling[k].phi_degrees = info.angles[k].phi_degrees;
    scaling[k].contrast = {"contrast", config.simulation.contrast[k], 0.0};
    scaling[k].offset = {"offset", 1.0, 0.0};
  }
  return scaling;
}

double ReadAttribute(hid_t object, const std::string& name) {
  io_internal::Hid attribute =
      io_internal::AttributeHid(H5Aopen(object, name.c_str(), H5P_DEFAULT));
  EXPECT_TRUE(attribute.valid()) << name;
  double value = std::nan("");
  EXPECT_GE(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value), 0) << name;
  return value;
}

class FittedDataWriterTest : public TempDirTest {
 protected:
  // Simulates, opens and writes; returns the path of fitted_data.h5.
  void Run(double noise) {
    config_ = LaminarSimulationConfig(PathOf("sim.h5"), 40, noise, 11);
    SimulateDataset(config_);
    source_ = OpenBatchSource(SelectionOf(config_));
    model_ = std::make_unique<HomodyneModel>(config_.analysis_mode, config_.geometry,
                                             source_->info().FittedTimes());
    evaluation_ =
        std::make_unique<ModelEvaluation>(*model_, config_.simulation.physical_parameters);
    scaling_ = TruthScaling(config_, source_->info());
    WriteFittedData(*source_, *evaluation_, scaling_, PathOf("out"));
    output_ = PathOf("out/nlsq/fitted_data.h5");
  }

  Config config_;
  std::unique_ptr<BatchSource> source_;
  std::unique_ptr<HomodyneModel> model_;
  std::unique_ptr<ModelEvaluation> evaluation_;
  std::vector<AngleScaling> scaling_;
  std::string output_;
};

TEST_F(FittedDataWriterTest, ReadCorrectedRowsMatchesTheMatrix) {
  config_ = LaminarSimulationConfig(PathOf("sim.h5"), 40, 0.01, 11);
  SimulateDataset(config_);
  source_ = OpenBatchSource(SelectionOf(config_));
  const int n = source_->info().num_times();
  ASSERT_EQ(n, 39);
  std::vector<double> matrix(static_cast<size_t>(n * n));
  const std::vector<std::pair<int, int>> blocks = {{0, 1},   {0, 5},  {5, 17},  {17, 39},
                                                   {38, 39}, {0, 39}, {20, 20}, {1, 2}};
  for (int a = 0; a < source_->info().num_angles(); ++a) {
    source_->ReadCorrectedMatrix(a, matrix);
    for (const auto& [begin, end] : blocks) {
      std::vector<double> rows(static_cast<size_t>((end - begin) * n), -1.0);
      source_->ReadCorrectedRows(a, begin, end, rows);
      for (int i = begin; i < end; ++i) {
        for (int j = 0; j < n; ++j) {
          ASSERT_EQ(rows[static_cast<size_t>((i - begin) * n + j)],
                    matrix[static_cast<size_t>(i * n + j)])
              << a << " rows [" << begin << ", " << end << ") at " << i << " " << j;
        }
      }
    }
  }
}

// The default of ReadCorrectedUpperRows (through ReadCorrectedRows), on a source that has only
// ReadCorrectedMatrix of its own: the matrix's values from each band's diagonal on.
TEST_F(FittedDataWriterTest, DefaultCorrectedUpperRowsMatchTheMatrix) {
  const int n = 7;
  std::vector<double> values(static_cast<size_t>(2 * n * n));
  for (int a = 0; a < 2; ++a) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        values[static_cast<size_t>((a * n + i) * n + j)] =
            1.0 + 0.01 * (a + 1) * (std::min(i, j) + 0.1 * std::max(i, j));
      }
    }
  }
  InMemoryData data;
  data.float64_values = values;
  data.num_angles = 2;
  data.num_times = n;
  data.phi_degrees = {0.0, 45.0};
  data.q_inv_angstrom = 0.01;
  data.dt_seconds = 0.1;
  const std::unique_ptr<BatchSource> source = MakeInMemoryBatchSource(data);
  std::vector<double> matrix(static_cast<size_t>(n * n));
  for (int a = 0; a < 2; ++a) {
    source->ReadCorrectedMatrix(a, matrix);
    for (const auto& [begin, end] :
         std::vector<std::pair<int, int>>{{0, 3}, {3, 7}, {6, 7}, {2, 2}}) {
      const int width = n - begin;
      std::vector<double> rows(static_cast<size_t>((end - begin) * width), -1.0);
      source->ReadCorrectedUpperRows(a, begin, end, rows);
      for (int i = begin; i < end; ++i) {
        for (int j = begin; j < n; ++j) {
          ASSERT_EQ(rows[static_cast<size_t>((i - begin) * width + (j - begin))],
                    matrix[static_cast<size_t>(i * n + j)])
              << a << " rows [" << begin << ", " << end << ") at " << i << " " << j;
        }
      }
    }
  }
}

TEST_F(FittedDataWriterTest, WritesDataFitAndResiduals) {
  Run(0.01);
  const DatasetInfo& info = source_->info();
  const int n = info.num_times();
  io_internal::Hid file =
      io_internal::FileHid(H5Fopen(output_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  ASSERT_TRUE(file.valid());
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/t"), info.FittedTimes());
  const std::vector<double> phi = io_internal::ReadAllDoubles(file.get(), "/phi");
  ASSERT_EQ(phi.size(), 3u);
  EXPECT_DOUBLE_EQ(phi[2], -160.0);
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/q"),
            std::vector<double>{info.q_inv_angstrom});
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/contrast"),
            (std::vector<double>{0.3, 0.4, 0.5}));
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/offset"),
            (std::vector<double>{1.0, 1.0, 1.0}));

  std::vector<double> matrix(static_cast<size_t>(n * n));
  std::vector<double> row(static_cast<size_t>(n));
  for (int a = 0; a < 3; ++a) {
    char group_name[32];
    std::snprintf(group_name, sizeof(group_name), "/angles/phi_%03d", a);
    io_internal::Hid group = io_internal::GroupHid(H5Gopen2(file.get(), group_name, H5P_DEFAULT));
    ASSERT_TRUE(group.valid()) << group_name;
    EXPECT_EQ(ReadAttribute(group.get(), "phi"), scaling_[a].phi_degrees);
    EXPECT_EQ(ReadAttribute(group.get(), "contrast"), scaling_[a].contrast.value);
    EXPECT_EQ(ReadAttribute(group.get(), "offset"), 1.0);

    const std::string base = group_name;
    for (const char* name : {"/data", "/fit", "/residuals"}) {
      io_internal::Hid dataset =
          io_internal::DatasetHid(H5Dopen2(file.get(), (base + name).c_str(), H5P_DEFAULT));
      ASSERT_TRUE(dataset.valid());
      EXPECT_EQ(io_internal::DatasetDims(dataset.get()),
                (std::vector<hsize_t>{static_cast<hsize_t>(n), static_cast<hsize_t>(n)}));
      io_internal::Hid create = io_internal::PlistHid(H5Dget_create_plist(dataset.get()));
      EXPECT_EQ(H5Pget_layout(create.get()), H5D_CHUNKED);
      EXPECT_EQ(H5Pget_nfilters(create.get()), 0);  // uncompressed (see the writer)
    }
    const std::vector<double> data = io_internal::ReadAllDoubles(file.get(), base + "/data");
    const std::vector<double> fit = io_internal::ReadAllDoubles(file.get(), base + "/fit");
    const std::vector<double> residuals =
        io_internal::ReadAllDoubles(file.get(), base + "/residuals");
    source_->ReadCorrectedMatrix(a, matrix);
    EXPECT_EQ(data, matrix);
    ASSERT_EQ(fit.size(), matrix.size());
    ASSERT_EQ(residuals.size(), matrix.size());
    for (int i = 0; i < n; ++i) {
      evaluation_->ComputeC2RowSegment(scaling_[a].phi_degrees, scaling_[a].contrast.value, 1.0, i,
                                       0, n, row);
      for (int j = 0; j < n; ++j) {
        const size_t p = static_cast<size_t>(i * n + j);
        ASSERT_TRUE(IsTheModel(fit[p], row[static_cast<size_t>(j)], i, j)) << a;
        ASSERT_EQ(residuals[p], data[p] - fit[p]) << a << " " << i << " " << j;
      }
    }
  }
  // No temporary left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(PathOf("out/nlsq"))) {
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(FittedDataWriterTest, NoiseFreeResidualsVanishOffTheDiagonal) {
  Run(0.0);
  const int n = source_->info().num_times();
  io_internal::Hid file =
      io_internal::FileHid(H5Fopen(output_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  ASSERT_TRUE(file.valid());
  for (int a = 0; a < 3; ++a) {
    char name[48];
    std::snprintf(name, sizeof(name), "/angles/phi_%03d/residuals", a);
    const std::vector<double> residuals = io_internal::ReadAllDoubles(file.get(), name);
    ASSERT_EQ(residuals.size(), static_cast<size_t>(n * n));
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (i == j) continue;
        ASSERT_LT(std::abs(residuals[static_cast<size_t>(i * n + j)]), 1e-12)
            << a << " " << i << " " << j;
      }
    }
  }
}

// N = 1099: the writer streams 5 bands of 256 rows (the last of 75), each with its tiles and
// their mirror images below the diagonal (fitted_data_writer.cc); every value is checked, with 1,
// 2 and 4 threads (the writing thread alone, and with 1 and 3 helpers evaluating the tiles).
class FittedDataWriterThreadsTest : public FittedDataWriterTest,
                                    public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    FittedDataWriterTest::SetUp();
    callers_threads_ = omp_get_max_threads();
    omp_set_num_threads(GetParam());
  }
  void TearDown() override {
    omp_set_num_threads(callers_threads_);
    FittedDataWriterTest::TearDown();
  }
  int callers_threads_ = 1;
};

INSTANTIATE_TEST_SUITE_P(Threads, FittedDataWriterThreadsTest, ::testing::Values(1, 2, 4));

TEST_P(FittedDataWriterThreadsTest, SeveralBandsAndTilesOnALargerGrid) {
  config_ = LaminarSimulationConfig(PathOf("sim.h5"), 40, 0.01, 11);
  config_.simulation.frames = 1100;
  config_.simulation.phi_angles_degrees = {30.0};
  config_.simulation.contrast = {0.4};
  SimulateDataset(config_);
  source_ = OpenBatchSource(SelectionOf(config_));
  const int n = source_->info().num_times();
  ASSERT_EQ(n, 1099);
  const HomodyneModel model(config_.analysis_mode, config_.geometry, source_->info().FittedTimes());
  const ModelEvaluation evaluation(model, config_.simulation.physical_parameters);
  const std::vector<AngleScaling> scaling = TruthScaling(config_, source_->info());
  WriteFittedData(*source_, evaluation, scaling, PathOf("out"));
  ASSERT_TRUE(
      ChunkedCreatePlist(PathOf("out/nlsq/fitted_data.h5"), "/angles/phi_000/fit", 256).valid());
  io_internal::Hid file = io_internal::FileHid(
      H5Fopen(PathOf("out/nlsq/fitted_data.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  ASSERT_TRUE(file.valid());
  std::vector<double> matrix(static_cast<size_t>(n) * static_cast<size_t>(n));
  source_->ReadCorrectedMatrix(0, matrix);
  const std::vector<double> data = io_internal::ReadAllDoubles(file.get(), "/angles/phi_000/data");
  EXPECT_EQ(data, matrix);
  const std::vector<double> fit = io_internal::ReadAllDoubles(file.get(), "/angles/phi_000/fit");
  const std::vector<double> residuals =
      io_internal::ReadAllDoubles(file.get(), "/angles/phi_000/residuals");
  ASSERT_EQ(fit.size(), matrix.size());
  ASSERT_EQ(residuals.size(), matrix.size());
  std::vector<double> row(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    evaluation.ComputeC2RowSegment(scaling[0].phi_degrees, 0.4, 1.0, i, 0, n, row);
    for (int j = 0; j < n; ++j) {
      const size_t p = static_cast<size_t>(i) * n + j;
      ASSERT_TRUE(IsTheModel(fit[p], row[static_cast<size_t>(j)], i, j));
      ASSERT_EQ(residuals[p], matrix[p] - fit[p]) << i << " " << j;
    }
  }
}

// Whether the file system of `folder` opens a file for direct writes (O_DIRECT): where it does not
// (tmpfs), the writer writes every chunk through HDF5.
bool DirectWritesPossibleIn(const std::string& folder) {
  const std::string probe = folder + "/direct_probe";
  std::ofstream(probe) << "";
  const int fd = open(probe.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd >= 0) close(fd);
  std::filesystem::remove(probe);
  return fd >= 0;
}

// Every dataset and attribute of fitted_data.h5, as doubles, by path.
std::map<std::string, std::vector<double>> FileContents(const std::string& path, int angles) {
  io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(file.valid()) << path;
  std::map<std::string, std::vector<double>> contents;
  for (const char* name : {"/t", "/phi", "/q", "/contrast", "/offset"}) {
    contents[name] = io_internal::ReadAllDoubles(file.get(), name);
  }
  for (int a = 0; a < angles; ++a) {
    char group_name[32];
    std::snprintf(group_name, sizeof(group_name), "/angles/phi_%03d", a);
    const std::string base = group_name;
    for (const char* name : {"/data", "/fit", "/residuals"}) {
      contents[base + name] = io_internal::ReadAllDoubles(file.get(), base + name);
    }
    io_internal::Hid group = io_internal::GroupHid(H5Gopen2(file.get(), group_name, H5P_DEFAULT));
    for (const char* name : {"phi", "q", "contrast", "offset"}) {
      contents[base + "@" + name] = {ReadAttribute(group.get(), name)};
    }
  }
  return contents;
}

// Direct writes (O_DIRECT, fitted_data_writer.cc DirectChunkWriter) against HDF5's writes of the
// same chunks: the same values in every dataset and attribute, bitwise, for every mode (static,
// laminar_flow, two_component: the fit the model's within 8 ulp at every point, IsTheModel), N =
// 1099 (tiles of 256 and of 75 at the edge), 2 threads and 1; the same chunk shape. Direct writes
// happen where the temporary folder's file system allows them.
class FittedDataWriterDirectTest : public FittedDataWriterTest,
                                   public ::testing::WithParamInterface<AnalysisMode> {
 protected:
  void TearDown() override {
    io_internal::SetDirectChunkWritesForTesting(true);
    FittedDataWriterTest::TearDown();
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, FittedDataWriterDirectTest,
                         ::testing::Values(AnalysisMode::kStatic, AnalysisMode::kLaminarFlow,
                                           AnalysisMode::kTwoComponent));

TEST_P(FittedDataWriterDirectTest, SameContentsAsWritesThroughHdf5) {
  config_ = LaminarSimulationConfig(PathOf("sim.h5"), 40, 0.01, 11);
  config_.simulation.frames = 1100;
  config_.simulation.phi_angles_degrees = {30.0, 100.0};
  config_.simulation.contrast = {0.4, 0.3};
  if (GetParam() == AnalysisMode::kStatic) {
    config_.analysis_mode = AnalysisMode::kStatic;
    config_.simulation.physical_parameters = {1000.0, -0.3, 10.0};
  }
  if (GetParam() == AnalysisMode::kTwoComponent) {
    config_.analysis_mode = AnalysisMode::kTwoComponent;
    config_.simulation.physical_parameters = {1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 20.0,
                                              0.5,    1.0,  0.3,  0.01,    0.5,  0.2, 2.0};
  }
  SimulateDataset(config_);
  source_ = OpenBatchSource(SelectionOf(config_));
  const int n = source_->info().num_times();
  const HomodyneModel model(config_.analysis_mode, config_.geometry, source_->info().FittedTimes());
  const ModelEvaluation evaluation(model, config_.simulation.physical_parameters);
  const std::vector<AngleScaling> scaling = TruthScaling(config_, source_->info());

  io_internal::SetDirectChunkWritesForTesting(false);
  WriteFittedData(*source_, evaluation, scaling, PathOf("hdf5"));
  EXPECT_EQ(io_internal::DirectChunkWritesOfLastFittedData(), 0);
  io_internal::SetDirectChunkWritesForTesting(true);
  WriteFittedData(*source_, evaluation, scaling, PathOf("direct"));
  // 2 angles x 3 matrices x 25 chunks (5 x 5 of side 256), where direct writes are possible.
  const bool possible = DirectWritesPossibleIn(PathOf("direct/nlsq"));
  EXPECT_EQ(io_internal::DirectChunkWritesOfLastFittedData(), possible ? 2 * 3 * 25 : 0);

  // One thread: the tiles evaluated and written without helper threads, the same file.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  WriteFittedData(*source_, evaluation, scaling, PathOf("direct1"));
  omp_set_num_threads(threads);
  EXPECT_EQ(io_internal::DirectChunkWritesOfLastFittedData(), possible ? 2 * 3 * 25 : 0);

  const auto hdf5 = FileContents(PathOf("hdf5/nlsq/fitted_data.h5"), 2);
  const auto direct = FileContents(PathOf("direct/nlsq/fitted_data.h5"), 2);
  for (const std::string folder : {"direct", "direct1"}) {
    const auto written = FileContents(PathOf(folder + "/nlsq/fitted_data.h5"), 2);
    ASSERT_EQ(hdf5.size(), written.size()) << folder;
    for (const auto& [name, values] : hdf5) {
      ASSERT_EQ(written.count(name), 1u) << folder << " " << name;
      const std::vector<double>& other = written.at(name);
      ASSERT_EQ(values.size(), other.size()) << folder << " " << name;
      EXPECT_EQ(std::memcmp(values.data(), other.data(), values.size() * sizeof(double)), 0)
          << folder << " " << name;
    }
  }
  // The fit, mirrored or evaluated, is the model at every point, and the data the matrix.
  std::vector<double> matrix(static_cast<size_t>(n) * static_cast<size_t>(n));
  std::vector<double> row(static_cast<size_t>(n));
  for (int a = 0; a < 2; ++a) {
    char base[32];
    std::snprintf(base, sizeof(base), "/angles/phi_%03d", a);
    source_->ReadCorrectedMatrix(a, matrix);
    EXPECT_EQ(direct.at(std::string(base) + "/data"), matrix);
    const std::vector<double>& fit = direct.at(std::string(base) + "/fit");
    for (int i = 0; i < n; ++i) {
      evaluation.ComputeC2RowSegment(scaling[a].phi_degrees, scaling[a].contrast.value, 1.0, i, 0,
                                     n, row);
      for (int j = 0; j < n; ++j) {
        ASSERT_TRUE(
            IsTheModel(fit[static_cast<size_t>(i) * n + j], row[static_cast<size_t>(j)], i, j))
            << a;
      }
    }
  }
  io_internal::Hid create =
      ChunkedCreatePlist(PathOf("direct/nlsq/fitted_data.h5"), "/angles/phi_001/residuals", 256);
  ASSERT_TRUE(create.valid());
  EXPECT_EQ(H5Pget_nfilters(create.get()), 0);
}

// A diagonal tile of a symmetric model is evaluated on and right of its diagonal and its fit
// mirrored below (fitted_data_writer.cc, TileEvaluation): the fit is still the model at every
// point, and the residuals below the diagonal are the source's data there minus the fit, also
// where the source's matrix is not symmetric (data in memory, as given). One tile (N = 40).
TEST_F(FittedDataWriterTest, DiagonalTileOfAnAsymmetricSource) {
  config_ = LaminarSimulationConfig(PathOf("sim.h5"), 41, 0.01, 11);
  const int n = 40;
  std::vector<double> values(static_cast<size_t>(2 * n * n));
  for (int a = 0; a < 2; ++a) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {  // (i, j) and (j, i) differ
        values[static_cast<size_t>((a * n + i) * n + j)] = 1.0 + 0.01 * a + 0.003 * i + 0.0007 * j;
      }
    }
  }
  InMemoryData data;
  data.float64_values = values;
  data.num_angles = 2;
  data.num_times = n;
  data.phi_degrees = {10.0, 60.0};
  data.q_inv_angstrom = config_.geometry.q_inv_angstrom;
  data.dt_seconds = config_.geometry.dt_seconds;
  source_ = MakeInMemoryBatchSource(data);
  const HomodyneModel model(config_.analysis_mode, config_.geometry, source_->info().FittedTimes());
  const ModelEvaluation evaluation(model, config_.simulation.physical_parameters);
  std::vector<AngleScaling> scaling(2);
  for (size_t k = 0; k < 2; ++k) {
    scaling[k].phi_degrees = data.phi_degrees[k];
    scaling[k].contrast = {"contrast", 0.3 + 0.1 * static_cast<double>(k), 0.0};
    scaling[k].offset = {"offset", 1.0, 0.0};
  }
  WriteFittedData(*source_, evaluation, scaling, PathOf("out"));
  const auto contents = FileContents(PathOf("out/nlsq/fitted_data.h5"), 2);
  std::vector<double> matrix(static_cast<size_t>(n * n));
  std::vector<double> row(static_cast<size_t>(n));
  int below_differs = 0;  // points below the diagonal whose data are not their mirror's
  for (int a = 0; a < 2; ++a) {
    char base[32];
    std::snprintf(base, sizeof(base), "/angles/phi_%03d", a);
    const std::vector<double>& data_out = contents.at(std::string(base) + "/data");
    const std::vector<double>& fit = contents.at(std::string(base) + "/fit");
    const std::vector<double>& residuals = contents.at(std::string(base) + "/residuals");
    source_->ReadCorrectedMatrix(a, matrix);
    for (int i = 0; i < n; ++i) {
      evaluation.ComputeC2RowSegment(scaling[a].phi_degrees, scaling[a].contrast.value, 1.0, i, 0,
                                     n, row);
      for (int j = 0; j < n; ++j) {
        const size_t at = static_cast<size_t>(i) * n + j;
        ASSERT_EQ(data_out[at], matrix[at]) << a << " " << i << " " << j;
        ASSERT_TRUE(IsTheModel(fit[at], row[static_cast<size_t>(j)], i, j)) << a;
        ASSERT_EQ(fit[at], fit[static_cast<size_t>(j) * n + i]) << a << " " << i << " " << j;
        ASSERT_EQ(residuals[at], data_out[at] - fit[at]) << a << " " << i << " " << j;
        if (j < i && data_out[at] != data_out[static_cast<size_t>(j) * n + i]) ++below_differs;
      }
    }
  }
  EXPECT_GT(below_differs, 0);  // the source is asymmetric where the writer reads it
}

// The fit's data in memory lent to the source (io_internal::LendHeldUpperTriangles, what
// WriteFitResults does after an in-memory fit): the same file, bitwise, as with the data read
// from the file again, and no row decoded for it. float32, lzf and uncompressed, N = 300 (two
// bands: the second band's first diagonal value from the lent data). Not taken: float64 data,
// a triangle of another size, a source in memory.
class FittedDataWriterHeldDataTest : public FittedDataWriterTest,
                                     public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(Compression, FittedDataWriterHeldDataTest,
                         ::testing::Values(std::string("lzf"), std::string("none")));

TEST_P(FittedDataWriterHeldDataTest, SameFileAsTheDataReadAgain) {
  config_ = LaminarSimulationConfig(PathOf("sim.h5"), 301, 0.01, 11);
  config_.simulation.dtype = "float32";
  config_.simulation.compression = GetParam();
  SimulateDataset(config_);
  source_ = OpenBatchSource(SelectionOf(config_));
  const int n = source_->info().num_times();
  ASSERT_EQ(n, 300);
  const int angles = source_->info().num_angles();
  const HomodyneModel model(config_.analysis_mode, config_.geometry, source_->info().FittedTimes());
  const ModelEvaluation evaluation(model, config_.simulation.physical_parameters);
  const std::vector<AngleScaling> scaling = TruthScaling(config_, source_->info());
  auto held = std::make_shared<std::vector<std::vector<float>>>(static_cast<size_t>(angles));
  for (int a = 0; a < angles; ++a) {
    std::vector<float>& triangle = (*held)[static_cast<size_t>(a)];
    triangle.resize(static_cast<size_t>(UpperTriangleSize(n)));
    source_->ReadUpperTriangleRows(a, 0, n, std::span<float>(triangle));
  }

  WriteFittedData(*source_, evaluation, scaling, PathOf("reread"));
  const int64_t decoded = io_internal::RowsDecodedForCorrectedReads(*source_);
  if (GetParam() == "lzf") {
    EXPECT_GT(decoded, 0);  // decoded for the corrected reads
  }
  // A triangle of another size is not taken.
  auto short_triangles = std::make_shared<std::vector<std::vector<float>>>(*held);
  short_triangles->back().pop_back();
  EXPECT_FALSE(io_internal::LendHeldUpperTriangles(*source_, short_triangles));
  ASSERT_TRUE(io_internal::LendHeldUpperTriangles(*source_, held));
  WriteFittedData(*source_, evaluation, scaling, PathOf("held"));
  EXPECT_EQ(io_internal::RowsDecodedForCorrectedReads(*source_), decoded);
  EXPECT_FALSE(io_internal::LendHeldUpperTriangles(*source_, nullptr));

  const auto reread = FileContents(PathOf("reread/nlsq/fitted_data.h5"), angles);
  const auto lent = FileContents(PathOf("held/nlsq/fitted_data.h5"), angles);
  ASSERT_EQ(reread.size(), lent.size());
  for (const auto& [name, values] : reread) {
    ASSERT_EQ(lent.count(name), 1u) << name;
    const std::vector<double>& other = lent.at(name);
    ASSERT_EQ(values.size(), other.size()) << name;
    EXPECT_EQ(std::memcmp(values.data(), other.data(), values.size() * sizeof(double)), 0) << name;
  }

  // float64 in the file: the floats the fit would hold are not the file's values.
  Config float64 = LaminarSimulationConfig(PathOf("sim64.h5"), 301, 0.01, 11);
  float64.simulation.compression = GetParam();
  SimulateDataset(float64);
  const std::unique_ptr<BatchSource> source64 = OpenBatchSource(SelectionOf(float64));
  EXPECT_FALSE(io_internal::LendHeldUpperTriangles(*source64, held));
  // A source of data in memory reads no file.
  std::vector<double> values(static_cast<size_t>(3 * n * n), 1.0);
  InMemoryData data;
  data.float64_values = values;
  data.num_angles = 3;
  data.num_times = n;
  data.phi_degrees = {0.0, 45.0, 200.0};
  data.q_inv_angstrom = 0.0054;
  data.dt_seconds = 0.1;
  EXPECT_FALSE(io_internal::LendHeldUpperTriangles(*MakeInMemoryBatchSource(data), held));
}

TEST_F(FittedDataWriterTest, UnwritableOutputDirNamesThePath) {
  config_ = LaminarSimulationConfig(PathOf("sim.h5"), 40, 0.01, 11);
  SimulateDataset(config_);
  source_ = OpenBatchSource(SelectionOf(config_));
  const HomodyneModel model(config_.analysis_mode, config_.geometry, source_->info().FittedTimes());
  const ModelEvaluation evaluation(model, config_.simulation.physical_parameters);
  // A regular file where the output folder should be: nothing can be created under it.
  const std::string blocker = PathOf("not_a_folder");
  std::ofstream(blocker) << "x";
  try {
    WriteFittedData(*source_, evaluation, TruthScaling(config_, source_->info()), blocker);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr(blocker));
  }
}

}  // namespace
}  // namespace homodyne
