// Tests of SimulateDataset (include/homodyne/simulate.h) read back through the reader.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "homodyne/simulate.h"
#include "io/hdf5_util.h"
#include "io_test_util.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using testing_io::LaminarSimulationConfig;
using testing_io::SelectionOf;
using testing_io::TempDirTest;

// All fitted points of all angles.
std::vector<double> ReadAllPoints(const std::string& path, const Config& config) {
  DataSelection selection = SelectionOf(config);
  selection.file_path = path;
  std::unique_ptr<BatchSource> source = OpenBatchSource(selection);
  const int n = source->info().num_times();
  std::vector<double> all;
  std::vector<double> values(static_cast<size_t>(UpperTriangleSize(n)));
  for (int a = 0; a < source->info().num_angles(); ++a) {
    source->ReadUpperTriangleRows(a, 0, n, std::span<double>(values));
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

class SimulatorTest : public TempDirTest {};

TEST_F(SimulatorTest, NoiseFreeFloat64ReproducesTheModel) {
  for (FileLayout layout : {FileLayout::kApsU, FileLayout::kApsOld}) {
    Config config = LaminarSimulationConfig(PathOf("sim.h5"), 30, 0.0);
    config.simulation.format = layout;
    const SimulationReport report = SimulateDataset(config);
    EXPECT_EQ(report.points_written, 3 * 30 * 30);
    EXPECT_GT(report.bytes_written, 0);
    EXPECT_EQ(std::filesystem::file_size(config.simulation.output),
              static_cast<uintmax_t>(report.bytes_written));

    std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionOf(config));
    const DatasetInfo& info = source->info();
    EXPECT_EQ(info.layout, layout);
    EXPECT_EQ(info.value_type, "float64");
    EXPECT_EQ(info.compression, "gzip");
    ASSERT_EQ(info.num_angles(), 3);
    EXPECT_DOUBLE_EQ(info.angles[2].phi_degrees, -160.0);
    const int n = info.num_times();
    ASSERT_EQ(n, 29);
    // The fitted grid t = (i + 1) dt: rows/columns >= 1 of the raw grid.
    const HomodyneModel model(config.analysis_mode, config.geometry, info.FittedTimes());
    const ModelEvaluation evaluation(model, config.simulation.physical_parameters);
    std::vector<double> expected(static_cast<size_t>(UpperTriangleSize(n)));
    std::vector<double> stored(expected.size());
    for (int a = 0; a < 3; ++a) {
      evaluation.EvaluateUpperTriangleRows(config.simulation.phi_angles_degrees[a],
                                           config.simulation.contrast[a], 1.0, 0, n, expected, {});
      source->ReadUpperTriangleRows(a, 0, n, std::span<double>(stored));
      for (size_t p = 0; p < stored.size(); ++p) {
        ASSERT_NEAR(stored[p], expected[p], 1e-12 * std::abs(expected[p])) << a << " " << p;
      }
    }
  }
}

// A q list (docs/configuration.md, Several q rings): one ring per q, each the model at its q,
// in both layouts; ring 0 is bitwise the file of its q alone (its noise too).
TEST_F(SimulatorTest, AQListWritesOneRingPerQ) {
  for (FileLayout layout : {FileLayout::kApsU, FileLayout::kApsOld}) {
    Config config = LaminarSimulationConfig(PathOf("rings.h5"), 30, 0.01);
    config.simulation.format = layout;
    config.data.wavevector_q_list = {0.0054, 0.0070};
    const SimulationReport report = SimulateDataset(config);
    EXPECT_EQ(report.points_written, 2 * 3 * 30 * 30);
    Config single = config;
    single.data.wavevector_q_list.clear();
    single.simulation.output = PathOf("single.h5");
    SimulateDataset(single);
    Config second = single;
    second.geometry.q_inv_angstrom = 0.0070;
    second.simulation.noise_sigma = 0.0;
    second.simulation.output = PathOf("second.h5");
    SimulateDataset(second);

    DataSelection rings = SelectionOf(config);
    rings.all_q_rings = true;
    const std::vector<RingInfo> listed = ListSelectedRings(rings);
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_DOUBLE_EQ(listed[1].q_inv_angstrom, 0.0070);
    EXPECT_EQ(listed[1].phi_degrees.size(), 3u);
    // Ring 0 alone: bitwise the single-ring file.
    DataSelection first_ring = SelectionOfRing(rings, listed[0]);
    first_ring.file_path = config.simulation.output;
    std::unique_ptr<BatchSource> ring0 = OpenBatchSource(first_ring);
    const std::vector<double> single_points = ReadAllPoints(PathOf("single.h5"), single);
    const int n = ring0->info().num_times();
    std::vector<double> points;
    std::vector<double> values(static_cast<size_t>(UpperTriangleSize(n)));
    for (int a = 0; a < 3; ++a) {
      ring0->ReadUpperTriangleRows(a, 0, n, std::span<double>(values));
      points.insert(points.end(), values.begin(), values.end());
    }
    EXPECT_EQ(points, single_points);
    // Ring 1: the model at its own q (within the noise of 0.01).
    DataSelection second_ring = SelectionOfRing(rings, listed[1]);
    std::unique_ptr<BatchSource> ring1 = OpenBatchSource(second_ring);
    const std::vector<double> clean = ReadAllPoints(PathOf("second.h5"), second);
    double largest = 0.0;
    size_t p = 0;
    for (int a = 0; a < 3; ++a) {
      ring1->ReadUpperTriangleRows(a, 0, n, std::span<double>(values));
      for (double value : values) largest = std::max(largest, std::abs(value - clean[p++]));
    }
    EXPECT_GT(largest, 0.0);
    EXPECT_LT(largest, 0.01 * 6.0);
  }
}

TEST_F(SimulatorTest, RefusesAllRings) {
  Config config = LaminarSimulationConfig(PathOf("all.h5"), 30, 0.0);
  config.data.all_q_rings = true;
  try {
    SimulateDataset(config);
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("analyzer_parameters.scattering.wavevector_q = all"));
  }
  EXPECT_FALSE(std::filesystem::exists(config.simulation.output));
}

TEST_F(SimulatorTest, WritesTheTruth) {
  Config config = LaminarSimulationConfig(PathOf("sim.h5"), 30, 0.0);
  config.simulation.noise_sigma = 0.01;
  config.simulation.seed = 7;
  SimulateDataset(config);
  io_internal::InitializeHdf5();
  io_internal::Hid file =
      io_internal::FileHid(H5Fopen(config.simulation.output.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  ASSERT_TRUE(file.valid());
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/simulation/parameters"),
            config.simulation.physical_parameters);
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/simulation/contrast"),
            (std::vector<double>{0.3, 0.4, 0.5}));
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/simulation/offset"),
            (std::vector<double>{1.0, 1.0, 1.0}));
  EXPECT_EQ(io_internal::ReadAllDoubles(file.get(), "/simulation/phi"),
            config.simulation.phi_angles_degrees);
  for (const char* name : {"noise_sigma", "seed", "analysis_mode", "dt", "q", "L"}) {
    EXPECT_GT(H5Aexists_by_name(file.get(), "/simulation", name, H5P_DEFAULT), 0) << name;
  }
  EXPECT_TRUE(io_internal::PathExists(file.get(), "/simulation/parameter_names"));
}

TEST_F(SimulatorTest, NoiseIsDeterministicAndIndependentOfThreads) {
  Config config = LaminarSimulationConfig(PathOf("a.h5"), 30, 0.0);
  config.simulation.noise_sigma = 0.01;
  config.simulation.frames = 80;
  config.simulation.compression = "lzf";
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  SimulateDataset(config);
  omp_set_num_threads(std::max(2, threads));
  config.simulation.output = PathOf("b.h5");
  SimulateDataset(config);
  omp_set_num_threads(threads);
  config.simulation.output = PathOf("c.h5");
  config.simulation.seed = 43;
  SimulateDataset(config);
  config.simulation.output = PathOf("clean.h5");
  config.simulation.noise_sigma = 0.0;
  SimulateDataset(config);

  const std::vector<double> a = ReadAllPoints(PathOf("a.h5"), config);
  const std::vector<double> b = ReadAllPoints(PathOf("b.h5"), config);
  const std::vector<double> c = ReadAllPoints(PathOf("c.h5"), config);
  const std::vector<double> clean = ReadAllPoints(PathOf("clean.h5"), config);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0.0;
  double sum_squares = 0.0;
  for (size_t p = 0; p < a.size(); ++p) {
    const double noise = a[p] - clean[p];
    sum += noise;
    sum_squares += noise * noise;
  }
  const double count = static_cast<double>(a.size());
  EXPECT_NEAR(sum / count, 0.0, 5.0 * 0.01 / std::sqrt(count));
  EXPECT_NEAR(std::sqrt(sum_squares / count), 0.01, 0.0005);
}

TEST_F(SimulatorTest, Float32StaticMode) {
  Config config = LaminarSimulationConfig(PathOf("static.h5"), 30, 0.0);
  config.analysis_mode = AnalysisMode::kStatic;
  config.simulation.physical_parameters = {500.0, 0.0, 0.0};
  config.simulation.dtype = "float32";
  config.simulation.compression = "none";
  config.simulation.contrast = {0.2};
  SimulateDataset(config);
  std::unique_ptr<BatchSource> source = OpenBatchSource(SelectionOf(config));
  EXPECT_EQ(source->info().value_type, "float32");
  const int n = source->info().num_times();
  std::vector<float> values(static_cast<size_t>(UpperTriangleSize(n)));
  source->ReadUpperTriangleRows(1, 0, n, std::span<float>(values));
  // D constant: g1 = exp(-0.5 q^2 dt D |i - j|) (docs/model.md, Diffusion factor), point (0, 1)
  // one step apart.
  const double expected = 1.0 + 0.2 * std::exp(-2.0 * 0.5 * 0.0054 * 0.0054 * 0.1 * 500.0);
  EXPECT_NEAR(values[0], expected, 1e-6);
}

TEST_F(SimulatorTest, CreatesMissingOutputFolder) {
  const Config config = LaminarSimulationConfig(PathOf("new_dir/nested/sim.h5"), 30, 0.0);
  SimulateDataset(config);
  EXPECT_TRUE(std::filesystem::exists(config.simulation.output));
}

TEST_F(SimulatorTest, FailuresLeaveNoFile) {
  // A folder that cannot be created: its parent is a regular file.
  std::ofstream(PathOf("plain_file")) << "not a folder";
  Config config = LaminarSimulationConfig(PathOf("plain_file/sim.h5"), 30, 0.0);
  try {
    SimulateDataset(config);
    FAIL();
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), ::testing::StartsWith(config.simulation.output));
    EXPECT_THAT(error.what(), HasSubstr("does not exist"));
  }
  config = LaminarSimulationConfig(PathOf("sim.h5"), 30, 0.0);
  config.simulation.contrast = {0.1, 0.2};  // 3 angles
  EXPECT_THROW(SimulateDataset(config), InputError);
  config.simulation.contrast = {0.1};
  config.simulation.physical_parameters = {1.0, 2.0};
  try {
    SimulateDataset(config);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("simulation.parameters"));
  }
  std::filesystem::remove(PathOf("plain_file"));
  EXPECT_TRUE(std::filesystem::is_empty(directory_));
}

// The reader refuses a file whose angles are not finite or repeat after normalisation to
// (-180, 180] (src/io/dataset_validation.h); the simulator refuses such angles before writing, with
// the same rule, so it never writes a file every fit refuses.
TEST_F(SimulatorTest, RefusesAnglesTheReaderRefuses) {
  struct Case {
    std::vector<double> angles;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{0.0, 360.0}, "simulation.phi_angles = [0, 360]: 0 and 360 are the same angle (0 degrees"},
      {{0.0, 45.0, 360.0}, "0 and 360 are the same angle"},
      {{10.0, -350.0}, "10 and -350 are the same angle (10 degrees"},
      {{180.0, -180.0}, "180 and -180 are the same angle (180 degrees"},
      {{30.0, 30.0}, "30 and 30 are the same angle"},
      {{0.0, std::nan("")}, "simulation.phi_angles = [0, nan]: nan is not finite"},
      {{-std::numeric_limits<double>::infinity()}, "-inf is not finite"},
  };
  for (const Case& test : cases) {
    Config config = LaminarSimulationConfig(PathOf("sim.h5"), 30, 0.0);
    config.simulation.phi_angles_degrees = test.angles;
    config.simulation.contrast = {0.3};
    config.simulation.offset = {1.0};
    try {
      SimulateDataset(config);
      ADD_FAILURE() << test.message << ": no error";
    } catch (const InputError& error) {
      EXPECT_THAT(error.what(), HasSubstr(test.message));
      EXPECT_THAT(error.what(), HasSubstr("(-180, 180]"));
    }
    EXPECT_TRUE(std::filesystem::is_empty(directory_)) << test.message;
  }
  // Distinct after normalisation: written, and read back with every angle.
  Config config = LaminarSimulationConfig(PathOf("sim.h5"), 30, 0.0);
  config.simulation.phi_angles_degrees = {0.0, 180.0, 370.0, -90.0};
  config.simulation.contrast = {0.3};
  config.simulation.offset = {1.0};
  SimulateDataset(config);
  EXPECT_EQ(OpenBatchSource(SelectionOf(config))->info().num_angles(), 4);
}

// A config whose experimental_data is the simulated file and whose frame window leaves fewer than
// 3 of its frames is refused before writing: `homodyne --config` would refuse the file.
TEST_F(SimulatorTest, RefusesAFrameWindowItsOwnFitRefuses) {
  Config config = LaminarSimulationConfig(PathOf("sim.h5"), 30, 0.0);
  config.data.file_path = PathOf("./sim.h5");
  config.data.start_frame = 29;  // frames 29, 30: 2 frames
  try {
    SimulateDataset(config);
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("analyzer_parameters.start_frame = 29"));
    EXPECT_THAT(error.what(), HasSubstr("[29, 30] holds 2 of the 30 simulated frames"));
  }
  config.data.start_frame = 31;
  EXPECT_THROW(SimulateDataset(config), InputError);
  config.data.start_frame = 1;
  config.data.end_frame = 2;
  EXPECT_THROW(SimulateDataset(config), InputError);
  EXPECT_TRUE(std::filesystem::is_empty(directory_));
  // A window of 3 frames, or a config that fits another file: written.
  config.data.end_frame = 3;
  SimulateDataset(config);
  config.data.file_path = PathOf("other.h5");
  config.data.end_frame = 2;
  SimulateDataset(config);
  EXPECT_TRUE(std::filesystem::exists(config.simulation.output));
}

// Speckle noise (simulation.noise_model: speckle; io/speckle_simulation.h): the correlator's c2
// averages to the model, and its noise is correlated along rows as a beamline's is.
class SpeckleSimulationTest : public TempDirTest {
 protected:
  Config SpeckleConfig(const std::string& name, int frames, int pixels) {
    Config config = LaminarSimulationConfig(PathOf(name), frames, 0.0);
    config.simulation.noise_model = "speckle";
    config.simulation.pixels = pixels;
    config.simulation.modes = 2;
    return config;
  }
  // The correlation of neighbouring points of a row, (i, j) and (i, j + 1), of stored - model.
  static double LagOneCorrelation(const std::vector<double>& stored,
                                  const std::vector<double>& model, int n, int angles) {
    double xy = 0.0, xx = 0.0, yy = 0.0;
    size_t row_start = 0;
    for (int a = 0; a < angles; ++a) {
      for (int i = 0; i < n; ++i) {
        const size_t points = static_cast<size_t>(n - 1 - i);
        for (size_t m = 0; m + 1 < points; ++m) {
          const double x = stored[row_start + m] - model[row_start + m];
          const double y = stored[row_start + m + 1] - model[row_start + m + 1];
          xy += x * y;
          xx += x * x;
          yy += y * y;
        }
        row_start += points;
      }
    }
    return xy / std::sqrt(xx * yy);
  }
};

TEST_F(SpeckleSimulationTest, AveragesToTheModelWithShearAndContrast) {
  // 40 frames, 3e4 pixels: the correlator's noise is some 1e-3, the shear and decay of the
  // model some 0.1.
  const Config config = SpeckleConfig("speckle.h5", 40, 30000);
  SimulateDataset(config);
  Config exact = LaminarSimulationConfig(PathOf("exact.h5"), 40, 0.0);
  SimulateDataset(exact);
  const std::vector<double> stored = ReadAllPoints(config.simulation.output, config);
  const std::vector<double> model = ReadAllPoints(exact.simulation.output, exact);
  ASSERT_EQ(stored.size(), model.size());
  double largest_difference = 0.0;
  double model_low = model[0], model_high = model[0];
  for (size_t p = 0; p < stored.size(); ++p) {
    largest_difference = std::max(largest_difference, std::abs(stored[p] - model[p]));
    model_low = std::min(model_low, model[p]);
    model_high = std::max(model_high, model[p]);
  }
  EXPECT_GT(model_high - model_low, 0.1);
  EXPECT_LT(largest_difference, 0.05 * (model_high - model_low));
}

TEST_F(SpeckleSimulationTest, NoiseIsCorrelatedAlongRowsAsAGaussianOneIsNot) {
  const Config speckle = SpeckleConfig("speckle.h5", 60, 300);
  SimulateDataset(speckle);
  Config gaussian = LaminarSimulationConfig(PathOf("gaussian.h5"), 60, 0.01);
  SimulateDataset(gaussian);
  Config exact = LaminarSimulationConfig(PathOf("exact.h5"), 60, 0.0);
  SimulateDataset(exact);
  const std::vector<double> model = ReadAllPoints(exact.simulation.output, exact);
  const int n = 59;  // the fitted grid
  EXPECT_GT(LagOneCorrelation(ReadAllPoints(speckle.simulation.output, speckle), model, n, 3), 0.5);
  EXPECT_LT(
      std::abs(LagOneCorrelation(ReadAllPoints(gaussian.simulation.output, gaussian), model, n, 3)),
      0.1);
}

TEST_F(SpeckleSimulationTest, DeterministicWhateverTheThreads) {
  Config config = SpeckleConfig("a.h5", 50, 500);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  SimulateDataset(config);
  omp_set_num_threads(std::max(2, threads));
  config.simulation.output = PathOf("b.h5");
  SimulateDataset(config);
  config.simulation.output = PathOf("c.h5");
  config.simulation.seed += 1;
  SimulateDataset(config);
  omp_set_num_threads(threads);
  const std::vector<double> a = ReadAllPoints(PathOf("a.h5"), config);
  EXPECT_EQ(a, ReadAllPoints(PathOf("b.h5"), config));
  EXPECT_NE(a, ReadAllPoints(PathOf("c.h5"), config));
}

TEST_F(SpeckleSimulationTest, RefusesWhatItCannotSimulate) {
  Config both = SpeckleConfig("both.h5", 30, 100);
  both.simulation.noise_sigma = 0.01;
  EXPECT_THAT([&] { SimulateDataset(both); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("set noise_sigma 0")));
  Config pixels = SpeckleConfig("pixels.h5", 3000, 1000000);
  EXPECT_THAT([&] { SimulateDataset(pixels); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("pixels x frames")));
  EXPECT_FALSE(std::filesystem::exists(PathOf("pixels.h5")));
}

// two_component (speckle_simulation.h): the reference's and the sample's fields added, the
// sample's with the flow's phase. The parameters decay the sample over the window (H_s from 1 to
// about 0.3) and turn the phase by about 6 rad at phi = 0, so that every term of the model's g
// (A^2 H_r^2, B^2 H_s^2, the cross term's cos Phi) shapes the matrices.
Config TwoComponentSpeckleConfig(const std::string& path, int frames, int pixels, double noise) {
  Config config = LaminarSimulationConfig(path, frames, noise);
  config.analysis_mode = AnalysisMode::kTwoComponent;
  config.simulation.physical_parameters = {1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 200.0,
                                           0.5,    1.0,  0.3,  0.01,    0.5,  0.2, 2.0};
  if (pixels > 0) {
    config.simulation.noise_model = "speckle";
    config.simulation.pixels = pixels;
    config.simulation.modes = 2;
  }
  return config;
}

TEST_F(SpeckleSimulationTest, AveragesToTheTwoComponentModel) {
  // 40 frames, 3e4 pixels: the correlator's noise is some 1e-3, the model's variation some 0.1.
  const Config config = TwoComponentSpeckleConfig(PathOf("speckle.h5"), 40, 30000, 0.0);
  SimulateDataset(config);
  const Config exact = TwoComponentSpeckleConfig(PathOf("exact.h5"), 40, 0, 0.0);
  SimulateDataset(exact);
  const std::vector<double> stored = ReadAllPoints(config.simulation.output, config);
  const std::vector<double> model = ReadAllPoints(exact.simulation.output, exact);
  ASSERT_EQ(stored.size(), model.size());
  // The same fields without the phase (phi0_het moved by 90 degrees turns cos Phi into sin Phi,
  // zero at Phi = 0 and different elsewhere): the matrices must tell it apart.
  Config turned = exact;
  turned.simulation.output = PathOf("turned.h5");
  turned.simulation.physical_parameters[13] += 90.0;
  SimulateDataset(turned);
  const std::vector<double> other = ReadAllPoints(turned.simulation.output, turned);
  double largest_difference = 0.0, largest_other = 0.0;
  double model_low = model[0], model_high = model[0];
  for (size_t p = 0; p < stored.size(); ++p) {
    largest_difference = std::max(largest_difference, std::abs(stored[p] - model[p]));
    largest_other = std::max(largest_other, std::abs(other[p] - model[p]));
    model_low = std::min(model_low, model[p]);
    model_high = std::max(model_high, model[p]);
  }
  EXPECT_GT(model_high - model_low, 0.05);
  EXPECT_LT(largest_difference, 0.05 * (model_high - model_low));
  EXPECT_GT(largest_other, 5.0 * largest_difference);
}

TEST_F(SpeckleSimulationTest, TwoComponentNoiseIsCorrelatedAlongRowsAndDeterministic) {
  Config config = TwoComponentSpeckleConfig(PathOf("a.h5"), 60, 300, 0.0);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  SimulateDataset(config);
  omp_set_num_threads(std::max(2, threads));
  config.simulation.output = PathOf("b.h5");
  SimulateDataset(config);
  omp_set_num_threads(threads);
  const Config exact = TwoComponentSpeckleConfig(PathOf("exact.h5"), 60, 0, 0.0);
  SimulateDataset(exact);
  const std::vector<double> a = ReadAllPoints(PathOf("a.h5"), config);
  EXPECT_EQ(a, ReadAllPoints(PathOf("b.h5"), config));
  const int n = 59;  // the fitted grid
  EXPECT_GT(LagOneCorrelation(a, ReadAllPoints(exact.simulation.output, exact), n, 3), 0.5);
}

}  // namespace
}  // namespace homodyne
