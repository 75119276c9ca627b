// homodyne-simulate: writes a synthetic two-time correlation data set in a beamline layout from a
// config's `simulation:` section (plus analysis_mode and analyzer_parameters).
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <optional>

#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "homodyne/simulate.h"

namespace {

int Run(int argc, char** argv) {
  using namespace homodyne;
  CLI::App app{"homodyne-simulate: write a synthetic XPCS two-time data set (APS-U or APS-old)"};
  app.footer("Exit codes: 0 written, 1 bad input or write failure, 2 bad usage.");
  app.set_version_flag("--version", std::string("homodyne-cpp ") + HOMODYNE_VERSION);
  std::string config_path;
  std::optional<std::string> output;
  std::optional<int> frames;
  std::optional<double> noise;
  std::optional<uint64_t> seed;
  app.add_option("--config", config_path, "YAML config with a simulation: section")->required();
  app.add_option_function<std::string>(
      "--output", [&](const std::string& v) { output = v; },
      "Output HDF5 path (simulation.output)");
  app.add_option_function<int>(
      "--frames", [&](const int& v) { frames = v; }, "Frames (simulation.frames, >= 3)");
  app.add_option_function<double>(
      "--noise", [&](const double& v) { noise = v; }, "Noise sigma (simulation.noise_sigma, >= 0)");
  app.add_option_function<uint64_t>(
      "--seed", [&](const uint64_t& v) { seed = v; }, "Random seed (simulation.seed)");
  spdlog::set_pattern("%^[%l]%$ %v");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    throw UsageError(error.what());
  }

  Config config = LoadConfig(config_path);
  for (const std::string& warning : config.warnings) spdlog::warn("{}", warning);
  if (!config.simulation.present) {
    throw ConfigError(config_path + ": simulation: section missing (see configs/simulate_*.yaml)");
  }
  if (output) config.simulation.output = *output;
  if (frames) {
    if (*frames < 3) throw UsageError("--frames " + std::to_string(*frames) + ": must be >= 3");
    config.simulation.frames = *frames;
  }
  if (noise) {
    if (!(*noise >= 0)) throw UsageError("--noise " + std::to_string(*noise) + ": must be >= 0");
    config.simulation.noise_sigma = *noise;
  }
  if (seed) config.simulation.seed = *seed;

  const SimulationReport report = SimulateDataset(config);
  const double mb = static_cast<double>(report.bytes_written) / (1024.0 * 1024.0);
  std::printf("wrote %s: %lld points, %.1f MB in %.2f s (%.1f Mpoints/s, %.1f MB/s)\n",
              report.output_path.c_str(), static_cast<long long>(report.points_written), mb,
              report.seconds, static_cast<double>(report.points_written) / report.seconds / 1e6,
              mb / report.seconds);
  return kExitSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const homodyne::UsageError& error) {
    std::cerr << "homodyne-simulate: usage error: " << error.what() << "\n";
    return homodyne::kExitUsage;
  } catch (const std::exception& error) {
    std::cerr << "homodyne-simulate: error: " << error.what() << "\n";
    return homodyne::kExitFailure;
  }
}
