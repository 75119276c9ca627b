// homodyne-simulate: writes a synthetic two-time correlation data set in a beamline layout from a
// config's `simulation:` section (plus analysis_mode and analyzer_parameters).
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "homodyne/simulate.h"

namespace {

// A flag's whole text as a decimal integer in [low, high], or a UsageError naming the flag, the
// text as written, the range and the key. A sign where the range has none, a fraction, an exponent,
// trailing text and a value beyond the type (never wrapped) all fail the same way.
template <typename Integer>
Integer ParseIntegerFlag(const std::string& flag, const std::string& text, Integer low,
                         Integer high, const std::string& key) {
  Integer value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < low || value > high) {
    throw homodyne::UsageError(flag + " " + text + ": must be an integer in [" +
                               std::to_string(low) + ", " + std::to_string(high) + "] (" + key +
                               ")");
  }
  return value;
}

// --noise: the whole text a finite number >= 0 (simulation.noise_sigma), else a UsageError.
// ("speckle" is read before: simulation.noise_model.)
double ParseNoiseFlag(const std::string& text) {
  char* stop = nullptr;
  const double value = text.empty() ? std::nan("") : std::strtod(text.c_str(), &stop);
  if (text.empty() || stop != text.c_str() + text.size() || !std::isfinite(value) || value < 0.0) {
    throw homodyne::UsageError("--noise " + text +
                               ": must be a finite number >= 0 (simulation.noise_sigma)");
  }
  return value;
}

int Run(int argc, char** argv) {
  using namespace homodyne;
  CLI::App app{"homodyne-simulate: write a synthetic XPCS two-time data set (APS-U or APS-old)"};
  app.footer("Exit codes: 0 written, 1 bad input or write failure, 2 bad usage.");
  app.set_version_flag("--version", std::string("homodyne-cpp ") + HOMODYNE_VERSION);
  std::string config_path;
  std::optional<std::string> output;
  // Flags read as text and parsed here: CLI11 would wrap --seed -1 to 2^64 - 1.
  std::optional<std::string> frames;
  std::optional<std::string> noise;
  std::optional<std::string> seed;
  std::optional<std::string> pixels;
  std::optional<std::string> modes;
  app.add_option("--config", config_path, "YAML config with a simulation: section")->required();
  app.add_option_function<std::string>(
      "--output", [&](const std::string& v) { output = v; },
      "Output HDF5 path (simulation.output)");
  app.add_option_function<std::string>(
      "--frames", [&](const std::string& v) { frames = v; },
      "Frames (simulation.frames, 3 to 1000000)");
  app.add_option_function<std::string>(
      "--noise", [&](const std::string& v) { noise = v; },
      "Gaussian noise sigma (simulation.noise_sigma, finite, >= 0), or `speckle`: pixel "
      "intensities correlated as the model's g1, c2 as a correlator computes it "
      "(simulation.noise_model)");
  app.add_option_function<std::string>(
      "--pixels", [&](const std::string& v) { pixels = v; },
      "Speckle noise: pixels per angle (simulation.pixels, 1 to 1000000)");
  app.add_option_function<std::string>(
      "--modes", [&](const std::string& v) { modes = v; },
      "Speckle noise: incoherent modes per pixel (simulation.modes, 1 to 100)");
  app.add_option_function<std::string>(
      "--seed", [&](const std::string& v) { seed = v; },
      "Random seed (simulation.seed, 0 to 2^64 - 1)");
  spdlog::set_pattern("%^[%l]%$ %v");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    throw UsageError(error.what());
  }

  // The flags' values are checked before the config is read: a usage error is reported first.
  // The ranges are those of the config keys the flags override (docs/configuration.md,
  // Simulation); a seed is any 64-bit unsigned integer.
  const int64_t frames_value =
      frames ? ParseIntegerFlag<int64_t>("--frames", *frames, kMinSimulationFrames,
                                         kMaxSimulationFrames, "simulation.frames")
             : 0;
  const bool speckle = noise && *noise == "speckle";
  const double noise_value = noise && !speckle ? ParseNoiseFlag(*noise) : 0.0;
  const int64_t pixels_value =
      pixels ? ParseIntegerFlag<int64_t>("--pixels", *pixels, 1, 1000000, "simulation.pixels") : 0;
  const int64_t modes_value =
      modes ? ParseIntegerFlag<int64_t>("--modes", *modes, 1, 100, "simulation.modes") : 0;
  const uint64_t seed_value =
      seed ? ParseIntegerFlag<uint64_t>("--seed", *seed, 0, std::numeric_limits<uint64_t>::max(),
                                        "simulation.seed")
           : 0;

  Config config = LoadConfig(config_path);
  for (const std::string& warning : config.warnings) spdlog::warn("{}", warning);
  if (!config.simulation.present) {
    throw ConfigError(config_path + ": simulation: section missing (see configs/simulate_*.yaml)");
  }
  if (output) config.simulation.output = *output;
  if (frames) config.simulation.frames = static_cast<int>(frames_value);
  if (noise) config.simulation.noise_sigma = noise_value;
  if (noise) config.simulation.noise_model = speckle ? "speckle" : "gaussian";
  if (pixels) config.simulation.pixels = static_cast<int>(pixels_value);
  if (modes) config.simulation.modes = static_cast<int>(modes_value);
  if (seed) config.simulation.seed = seed_value;

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
