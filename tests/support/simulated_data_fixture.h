// A test fixture for fits on simulated data sets: a temporary folder, a simulation config with
// per-angle contrast and offset that differ by angle, the simulated file opened as a BatchSource,
// the true parameter vector in the objective's layout, and the bounds the fit tests use.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "homodyne/simulate.h"
#include "model/mode_catalog.h"
#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"

namespace homodyne {

class SimulatedDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = std::filesystem::temp_directory_path() /
                 ("homodyne_fit_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  // 3 angles (0, 45, 90), dt 0.1 s, noise 0.01, float64 uncompressed, written to sim.h5.
  Config SimulationConfig(AnalysisMode mode, int frames) const {
    Config config;
    config.analysis_mode = mode;
    config.geometry.q_inv_angstrom = 0.0054;
    config.geometry.gap_angstrom = 2.0e6;
    config.geometry.dt_seconds = 0.1;
    SimulationOptions& sim = config.simulation;
    sim.present = true;
    sim.output = (directory_ / "sim.h5").string();
    sim.frames = frames;
    sim.phi_angles_degrees = {0.0, 45.0, 90.0};
    switch (mode) {
      case AnalysisMode::kStatic:
        sim.physical_parameters = {3000.0, -0.5, 10.0};
        break;
      case AnalysisMode::kLaminarFlow:
        sim.physical_parameters = {3000.0, -0.5, 10.0, 2.0e-4, 0.3, 1.0e-5, 5.0};
        break;
      case AnalysisMode::kTwoComponent:
        // Model order (docs/model.md, Two-component mode): a slow reference and a fast sample
        // component, a flow velocity, a sample fraction rising from 0.5, a flow angle.
        sim.physical_parameters = {1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 20.0,
                                   0.5,    1.0,  0.3,  0.01,    0.5,  0.2, 2.0};
        break;
    }
    sim.contrast = {0.30, 0.25, 0.20};
    sim.offset = {1.00, 1.02, 0.98};
    sim.noise_sigma = 0.01;
    sim.seed = 1;
    sim.dtype = "float64";
    sim.compression = "none";
    return config;
  }

  // Simulates the config and opens the file as the fit does.
  static std::unique_ptr<BatchSource> SimulateAndOpen(const Config& config) {
    SimulateDataset(config);
    DataSelection selection;
    selection.file_path = config.simulation.output;
    selection.wavevector_q_target = config.geometry.q_inv_angstrom;
    selection.dt_seconds = config.geometry.dt_seconds;
    return OpenBatchSource(selection);
  }

  static HomodyneModel ModelOf(const Config& config, const BatchSource& source) {
    return HomodyneModel(config.analysis_mode, config.geometry, source.info().FittedTimes());
  }

  static std::vector<double> AnglesOf(const BatchSource& source) {
    std::vector<double> phi;
    for (const AngleInfo& angle : source.info().angles) phi.push_back(angle.phi_degrees);
    return phi;
  }

  // Simulates the config and builds the in-memory objective on the file's fitted grid.
  static std::unique_ptr<PackedDataObjective> MakeObjective(const Config& config,
                                                            int64_t batch_points) {
    std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
    // Small read blocks exercise the row-block loader.
    return std::make_unique<PackedDataObjective>(ModelOf(config, *source), AnglesOf(*source), 0.01,
                                                 PackedDataObjective::LoadPackedData(*source, 500),
                                                 batch_points);
  }

  static Eigen::VectorXd Truth(const Config& config) {
    const SimulationOptions& sim = config.simulation;
    const int p_phys = NumPhysicalParameters(config.analysis_mode);
    const int n = static_cast<int>(sim.phi_angles_degrees.size());
    Eigen::VectorXd theta(p_phys + 2 * n);
    for (int a = 0; a < p_phys; ++a) theta[a] = sim.physical_parameters[static_cast<size_t>(a)];
    for (int k = 0; k < n; ++k) {
      theta[p_phys + k] = sim.contrast[static_cast<size_t>(k)];
      theta[p_phys + n + k] = sim.offset[static_cast<size_t>(k)];
    }
    return theta;
  }

 public:
  // LM options with the bounds of the fit tests, for an objective's parameter layout: the
  // homodyne modes' own list; two_component's default bounds of the mode catalog.
  static LevenbergMarquardtOptions BoundedOptions(const BatchedObjective& objective) {
    std::vector<std::pair<double, double>> physical_bounds = {
        {1e2, 1e5}, {-2.0, 2.0}, {-1e5, 1e5}, {1e-6, 0.5}, {-2.0, 2.0}, {-0.1, 0.1}, {-10.0, 10.0}};
    if (objective.model().mode() == AnalysisMode::kTwoComponent) {
      physical_bounds.clear();
      for (const ParameterDefinition& parameter :
           DefinitionOf(AnalysisMode::kTwoComponent).physical) {
        physical_bounds.emplace_back(parameter.default_min, parameter.default_max);
      }
    }
    const int p = objective.num_parameters();
    LevenbergMarquardtOptions options;
    options.hold_bound_parameters_on_undetermined_directions =
        DefinitionOf(objective.model().mode()).exact_degeneracies;  // as FinalFitOptions
    options.lower_bounds.resize(p);
    options.upper_bounds.resize(p);
    for (int a = 0; a < objective.num_physical(); ++a) {
      options.lower_bounds[a] = physical_bounds[static_cast<size_t>(a)].first;
      options.upper_bounds[a] = physical_bounds[static_cast<size_t>(a)].second;
    }
    for (int k = 0; k < objective.num_angles(); ++k) {
      options.lower_bounds[objective.ContrastIndex(k)] = 0.0;
      options.upper_bounds[objective.ContrastIndex(k)] = 1.0;
      options.lower_bounds[objective.OffsetIndex(k)] = 0.5;
      options.upper_bounds[objective.OffsetIndex(k)] = 1.5;
    }
    return options;
  }

 protected:
  std::filesystem::path directory_;
};

}  // namespace homodyne
