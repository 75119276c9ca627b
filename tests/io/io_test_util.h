// Helpers of the src/io tests: a per-test temporary directory and small beamline files written
// with the private BeamlineWriter.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "io/beamline_writer.h"

namespace homodyne::testing_io {

// A fresh directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    directory_ = std::filesystem::temp_directory_path() /
                 ("homodyne_io_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string PathOf(const std::string& file) const { return (directory_ / file).string(); }

  std::filesystem::path directory_;
};

// A laminar-flow simulation of 3 angles (0, 45, 200 degrees) with per-angle contrast, float64,
// gzip, written to `output` by SimulateDataset.
inline Config LaminarSimulationConfig(const std::string& output, int frames, double noise_sigma,
                                      uint64_t seed = SimulationOptions{}.seed) {
  Config config;
  config.analysis_mode = AnalysisMode::kLaminarFlow;
  config.geometry.q_inv_angstrom = 0.0054;
  config.geometry.gap_angstrom = 2.0e6;
  config.geometry.dt_seconds = 0.1;
  SimulationOptions& sim = config.simulation;
  sim.present = true;
  sim.output = output;
  sim.frames = frames;
  sim.phi_angles_degrees = {0.0, 45.0, 200.0};
  sim.physical_parameters = {1000.0, -0.3, 10.0, 0.002, -0.2, 0.0001, 10.0};
  sim.contrast = {0.3, 0.4, 0.5};
  sim.offset = {1.0};
  sim.noise_sigma = noise_sigma;
  sim.seed = seed;
  sim.dtype = "float64";
  sim.compression = "gzip";
  return config;
}

// The selection that reads back a simulated file with the config's q and dt.
inline DataSelection SelectionOf(const Config& config) {
  DataSelection selection;
  selection.file_path = config.simulation.output;
  selection.wavevector_q_target = config.geometry.q_inv_angstrom;
  selection.dt_seconds = config.geometry.dt_seconds;
  return selection;
}

// Value stored at file (row i, column j) of matrix k, i <= j.
inline double StoredValue(int k, int i, int j) { return 1.0 + 0.1 * k + 0.001 * i + 0.00001 * j; }

struct TestFileSpec {
  FileLayout layout = FileLayout::kApsU;
  std::string dtype = "float64";
  std::string compression = "none";
  int frames = 20;
  int chunk_rows = 0;
  int chunk_cols = 0;
  // APS-U: q list, phi list and processed bins (1-based); APS-old: q and phi per matrix.
  std::vector<double> q_values = {0.0054};
  std::vector<double> phi_values = {0.0, 45.0, 90.0};
  std::vector<int64_t> bins = {1, 2, 3};
  int num_matrices = 3;
  bool both_triangles = false;  // store the mirror image below the diagonal too
  std::function<double(int, int, int)> value = StoredValue;
};

inline void WriteTestFile(const std::string& path, const TestFileSpec& spec) {
  io_internal::BeamlineWriterOptions options;
  options.layout = spec.layout;
  options.frames = spec.frames;
  options.dtype = spec.dtype;
  options.compression = spec.compression;
  options.chunk_rows = spec.chunk_rows;
  options.chunk_cols = spec.chunk_cols;
  io_internal::BeamlineWriter writer(path, options);
  if (spec.layout == FileLayout::kApsU) {
    writer.WriteApsUBins(spec.q_values, spec.phi_values, spec.bins);
  } else {
    writer.WriteApsOldBins(spec.q_values, spec.phi_values);
  }
  const int n = spec.frames;
  std::vector<double> rows;
  for (int k = 0; k < spec.num_matrices; ++k) {
    io_internal::MatrixWriter matrix = writer.CreateMatrix(k);
    // Uneven blocks of rows exercise partial chunks.
    for (int begin = 0; begin < n; begin += 3) {
      const int count = std::min(3, n - begin);
      rows.assign(static_cast<size_t>(count) * n, 0.0);
      for (int r = 0; r < count; ++r) {
        const int i = begin + r;
        for (int j = 0; j < n; ++j) {
          double value = 0.0;
          if (j >= i)
            value = spec.value(k, i, j);
          else if (spec.both_triangles)
            value = spec.value(k, j, i);
          rows[static_cast<size_t>(r) * n + j] = value;
        }
      }
      matrix.WriteRows(begin, count, rows);
    }
    matrix.Close();
  }
  writer.Close();
}

inline DataSelection SelectionFor(const std::string& path, double q = 0.0054) {
  DataSelection selection;
  selection.file_path = path;
  selection.wavevector_q_target = q;
  selection.dt_seconds = 0.1;
  return selection;
}

}  // namespace homodyne::testing_io
