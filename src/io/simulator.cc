// homodyne-simulate: synthetic beamline files from the model (include/homodyne/simulate.h).
//
// Memory: one block of rows (block_rows x frames doubles, <= ~16 MiB) plus the model's O(frames)
// cumulative integrals, whatever the size of the data set. Rows of a block are computed in
// parallel (OpenMP); each row draws its noise from its own generator seeded by (seed, angle, row),
// so the file does not depend on the thread count. Blocks are written in order.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "homodyne/simulate.h"
#include "io/beamline_writer.h"
#include "io/durable_file.h"
#include "io/speckle_simulation.h"

namespace homodyne {
namespace {

using io_internal::BeamlineWriter;
using io_internal::BeamlineWriterOptions;

// Block of rows computed in parallel before being written.
constexpr size_t kBlockBytes = size_t{16} << 20;

[[noreturn]] void Reject(const std::string& key, const std::string& value,
                         const std::string& rule) {
  throw InputError("simulation." + key + " = " + value + ": " + rule);
}

// One value per angle from a list of 1 or n_angles values.
std::vector<double> PerAngle(const std::vector<double>& values, size_t n_angles,
                             const std::string& key) {
  if (values.size() == 1) return std::vector<double>(n_angles, values.front());
  if (values.size() != n_angles) {
    Reject(key, std::to_string(values.size()) + " values",
           "give 1 value or one per angle (" + std::to_string(n_angles) + ")");
  }
  return values;
}

// An angle as a message shows it: 360, 0.5, nan, -inf.
std::string AngleText(double degrees) {
  std::ostringstream text;
  text.precision(15);
  text << degrees;
  return text.str();
}

// The reader's rules for the angles of a file (src/io/dataset_validation.h): each finite, and no
// two the same after normalisation to (-180, 180] (0 and 360 are one angle). A file that breaks
// them is refused by every fit, so the simulator refuses the angles before writing anything.
void ValidateAngles(const std::vector<double>& angles) {
  std::string list = "[";
  for (size_t k = 0; k < angles.size(); ++k) list += (k ? ", " : "") + AngleText(angles[k]);
  list += "]";
  for (size_t k = 0; k < angles.size(); ++k) {
    if (!std::isfinite(angles[k])) {
      Reject("phi_angles", list,
             AngleText(angles[k]) + " is not finite: each angle must be a finite number of " +
                 "degrees (homodyne normalises them to (-180, 180])");
    }
    for (size_t other = 0; other < k; ++other) {
      const double normalised = NormalizePhiDegrees(angles[k]);
      if (NormalizePhiDegrees(angles[other]) == normalised) {
        Reject("phi_angles", list,
               AngleText(angles[other]) + " and " + AngleText(angles[k]) + " are the same angle (" +
                   AngleText(normalised) +
                   " degrees after normalisation to (-180, 180]): homodyne reads each angle "
                   "once and refuses such a file");
      }
    }
  }
}

// When the config's experimental_data is the simulated file, its frame window
// (analyzer_parameters.start_frame, end_frame) must hold at least 3 of the simulated frames, as
// the reader requires (src/io/dataset_inspection.cc: 1-based, inclusive, end -1 or past the file
// clamped to the last frame): else `homodyne --config` with this config refuses what was written.
void ValidateOwnFrameWindow(const Config& config) {
  const SimulationOptions& sim = config.simulation;
  std::error_code error;
  const auto output = std::filesystem::weakly_canonical(sim.output, error);
  if (error || config.data.file_path.empty()) return;
  const auto data = std::filesystem::weakly_canonical(config.data.file_path, error);
  if (error || data != output) return;
  const int first = std::max(config.data.start_frame, 1) - 1;
  const int end =
      config.data.end_frame < 0 ? sim.frames : std::min(config.data.end_frame, sim.frames);
  const int window = std::max(0, end - first);
  if (window < 3) {
    throw InputError(
        "analyzer_parameters.start_frame = " + std::to_string(config.data.start_frame) +
        ", end_frame = " + std::to_string(config.data.end_frame) + ": the window [" +
        std::to_string(first + 1) + ", " + std::to_string(end) + "] holds " +
        std::to_string(window) + " of the " + std::to_string(sim.frames) +
        " simulated frames (simulation.frames); " +
        "homodyne with this config needs at least 3 and would refuse the file");
  }
}

void Validate(const Config& config) {
  const SimulationOptions& sim = config.simulation;
  if (sim.output.empty()) Reject("output", "\"\"", "must name a file");
  if (sim.frames < kMinSimulationFrames) {
    Reject("frames", std::to_string(sim.frames),
           "must be >= " + std::to_string(kMinSimulationFrames));
  }
  if (sim.phi_angles_degrees.empty()) Reject("phi_angles", "[]", "must list at least one angle");
  if (config.data.all_q_rings) {
    throw InputError(
        "analyzer_parameters.scattering.wavevector_q = all: homodyne-simulate writes the rings "
        "the config lists; give a number or a list of numbers [1/Angstrom]");
  }
  ValidateAngles(sim.phi_angles_degrees);
  ValidateOwnFrameWindow(config);
  const int n_physical = NumPhysicalParameters(config.analysis_mode);
  if (static_cast<int>(sim.physical_parameters.size()) != n_physical) {
    Reject("parameters", std::to_string(sim.physical_parameters.size()) + " values",
           "mode " + std::string(ToString(config.analysis_mode)) + " needs " +
               std::to_string(n_physical));
  }
  if (!(sim.noise_sigma >= 0.0) || !std::isfinite(sim.noise_sigma)) {
    Reject("noise_sigma", std::to_string(sim.noise_sigma), "must be finite and >= 0");
  }
  if (sim.noise_model == "speckle") {
    if (sim.noise_sigma > 0.0) {
      Reject("noise_sigma", std::to_string(sim.noise_sigma),
             "speckle noise (noise_model: speckle) replaces the Gaussian noise: set noise_sigma 0");
    }
    if (sim.frames > io_internal::kMaxSpeckleFrames) {
      Reject("frames", std::to_string(sim.frames),
             "speckle noise holds each angle's N x N matrix in memory: at most " +
                 std::to_string(io_internal::kMaxSpeckleFrames) + " frames");
    }
    if (static_cast<int64_t>(sim.frames) * sim.pixels > io_internal::kMaxSpeckleValues) {
      Reject("pixels", std::to_string(sim.pixels),
             "pixels x frames must be at most " + std::to_string(io_internal::kMaxSpeckleValues) +
                 " (the intensities of one angle are held in memory)");
    }
  } else if (sim.noise_model != "gaussian") {
    Reject("noise_model", sim.noise_model, "must be gaussian or speckle");
  }
  if (sim.dtype != "float32" && sim.dtype != "float64") {
    Reject("dtype", sim.dtype, "must be float32 or float64");
  }
  if (sim.compression != "none" && sim.compression != "gzip" && sim.compression != "lzf") {
    Reject("compression", sim.compression, "must be none, gzip or lzf");
  }
}

// The truth a fit should recover, under /simulation.
void WriteTruth(const BeamlineWriter& writer, const Config& config,
                const std::vector<double>& contrast, const std::vector<double>& offset) {
  const SimulationOptions& sim = config.simulation;
  try {
    io_internal::CreateGroups(writer.file(), "/simulation");
    io_internal::Hid group =
        io_internal::GroupHid(H5Gopen2(writer.file(), "/simulation", H5P_DEFAULT));
    const hid_t g = group.get();
    io_internal::WriteDoubles(g, "parameters", {sim.physical_parameters.size()},
                              sim.physical_parameters);
    io_internal::WriteStrings(g, "parameter_names", PhysicalParameterNames(config.analysis_mode));
    io_internal::WriteDoubles(g, "contrast", {contrast.size()}, contrast);
    io_internal::WriteDoubles(g, "offset", {offset.size()}, offset);
    io_internal::WriteDoubles(g, "phi", {sim.phi_angles_degrees.size()}, sim.phi_angles_degrees);
    io_internal::WriteAttribute(g, "noise_sigma", sim.noise_sigma);
    io_internal::WriteAttribute(g, "noise_model", sim.noise_model);
    if (sim.noise_model == "speckle") {
      io_internal::WriteAttribute(g, "pixels", static_cast<int64_t>(sim.pixels));
      io_internal::WriteAttribute(g, "modes", static_cast<int64_t>(sim.modes));
    }
    io_internal::WriteAttribute(g, "seed", static_cast<uint64_t>(sim.seed));
    io_internal::WriteAttribute(g, "analysis_mode", std::string(ToString(config.analysis_mode)));
    io_internal::WriteAttribute(g, "dt", config.geometry.dt_seconds);
    io_internal::WriteAttribute(g, "q", config.geometry.q_inv_angstrom);
    io_internal::WriteAttribute(g, "L", config.geometry.gap_angstrom);
    io_internal::WriteAttribute(g, "frames", static_cast<int64_t>(sim.frames));
    io_internal::WriteAttribute(g, "dtype", sim.dtype);
    io_internal::WriteAttribute(g, "compression", sim.compression);
    io_internal::WriteAttribute(g, "layout", std::string(ToString(sim.format)));
  } catch (const std::runtime_error& error) {
    throw DataError(writer.path() + ": cannot write /simulation (" + error.what() + ")");
  }
}

// Writes the whole file at `path` (the temporary name).
void WriteSimulation(const Config& config, const std::string& path) {
  const SimulationOptions& sim = config.simulation;
  const size_t n_angles = sim.phi_angles_degrees.size();
  const std::vector<double> contrast = PerAngle(sim.contrast, n_angles, "contrast");
  const std::vector<double> offset = PerAngle(sim.offset, n_angles, "offset");
  const int frames = sim.frames;
  // The rings: analyzer_parameters.scattering.wavevector_q, one number or a list (one ring per
  // q, each with every angle: docs/configuration.md, Several q rings).
  const std::vector<double> rings = config.data.wavevector_q_list.empty()
                                        ? std::vector<double>{config.geometry.q_inv_angstrom}
                                        : config.data.wavevector_q_list;
  const size_t n_rings = rings.size();

  BeamlineWriterOptions options;
  options.layout = sim.format;
  options.frames = frames;
  options.dtype = sim.dtype;
  options.compression = sim.compression;
  BeamlineWriter writer(path, options);
  // Matrix m = ring * n_angles + angle (ring-major), bin m + 1.
  if (sim.format == FileLayout::kApsU) {
    std::vector<int64_t> bins(n_rings * n_angles);
    for (size_t k = 0; k < bins.size(); ++k) bins[k] = static_cast<int64_t>(k) + 1;
    writer.WriteApsUBins(rings, sim.phi_angles_degrees, bins);
  } else {
    std::vector<double> q_list;
    std::vector<double> phi_list;
    for (double q : rings) {
      q_list.insert(q_list.end(), n_angles, q);
      phi_list.insert(phi_list.end(), sim.phi_angles_degrees.begin(), sim.phi_angles_degrees.end());
    }
    writer.WriteApsOldBins(q_list, phi_list);
  }
  WriteTruth(writer, config, contrast, offset);
  if (n_rings > 1) {
    try {
      io_internal::Hid group =
          io_internal::GroupHid(H5Gopen2(writer.file(), "/simulation", H5P_DEFAULT));
      io_internal::WriteDoubles(group.get(), "q_list", {n_rings}, rings);
    } catch (const std::runtime_error& error) {
      throw DataError(writer.path() + ": cannot write /simulation/q_list (" + error.what() + ")");
    }
  }

  // Raw grid t_k = k dt, k = 0..frames-1 (the t=0 guard of the model applies at k = 0).
  std::vector<double> times(static_cast<size_t>(frames));
  for (int k = 0; k < frames; ++k) times[static_cast<size_t>(k)] = k * config.geometry.dt_seconds;
  for (size_t ring = 0; ring < n_rings; ++ring) {
    ScatteringGeometry geometry = config.geometry;
    geometry.q_inv_angstrom = rings[ring];
    const HomodyneModel model(config.analysis_mode, geometry, times);
    const ModelEvaluation evaluation(model, sim.physical_parameters);

    // Blocks: whole chunks of rows, about kBlockBytes of doubles.
    const int chunk_rows = writer.chunk_rows();
    const size_t row_bytes = sizeof(double) * static_cast<size_t>(frames);
    const int chunks_per_block =
        std::max(1, static_cast<int>(kBlockBytes / (row_bytes * static_cast<size_t>(chunk_rows))));
    const int block_rows = std::min(frames, chunks_per_block * chunk_rows);
    std::vector<double> block(static_cast<size_t>(block_rows) * static_cast<size_t>(frames));

    for (size_t angle = 0; angle < n_angles; ++angle) {
      // The matrix's index seeds its noise: ring 0 draws what a single-ring file draws.
      const size_t index = ring * n_angles + angle;
      io_internal::MatrixWriter matrix = writer.CreateMatrix(static_cast<int>(index));
      const double phi = sim.phi_angles_degrees[angle];
      if (sim.noise_model == "speckle") {
        const std::vector<double> speckle = io_internal::SpeckleTwoTimeMatrix(
            model, sim.physical_parameters, phi, contrast[angle], offset[angle],
            {sim.pixels, sim.modes, sim.seed}, static_cast<int>(index));
        for (int row_begin = 0; row_begin < frames; row_begin += block_rows) {
          const int rows = std::min(block_rows, frames - row_begin);
          matrix.WriteRows(row_begin, rows,
                           std::span<const double>(speckle).subspan(
                               static_cast<size_t>(row_begin) * static_cast<size_t>(frames),
                               static_cast<size_t>(rows) * static_cast<size_t>(frames)));
        }
        matrix.Close();
        continue;
      }
      for (int row_begin = 0; row_begin < frames; row_begin += block_rows) {
        const int rows = std::min(block_rows, frames - row_begin);
#pragma omp parallel for schedule(dynamic, 4)
        for (int r = 0; r < rows; ++r) {
          const int i = row_begin + r;
          double* row = block.data() + static_cast<size_t>(r) * static_cast<size_t>(frames);
          std::fill(row, row + i, 0.0);  // APS convention: zeros below the diagonal
          evaluation.ComputeC2RowSegment(
              phi, contrast[angle], offset[angle], i, i, frames,
              std::span<double>(row + i, static_cast<size_t>(frames - i)));
          if (sim.noise_sigma > 0.0) {
            std::seed_seq seed{static_cast<uint32_t>(sim.seed),
                               static_cast<uint32_t>(sim.seed >> 32), static_cast<uint32_t>(index),
                               static_cast<uint32_t>(i)};
            std::mt19937_64 generator(seed);
            std::normal_distribution<double> noise(0.0, sim.noise_sigma);
            for (int j = i; j < frames; ++j) row[j] += noise(generator);
          }
        }
        matrix.WriteRows(row_begin, rows,
                         std::span<const double>(block.data(), static_cast<size_t>(rows) *
                                                                   static_cast<size_t>(frames)));
      }
      matrix.Close();
    }
  }
  writer.Close();
}

}  // namespace

SimulationReport SimulateDataset(const Config& config) {
  Validate(config);
  const SimulationOptions& sim = config.simulation;
  const auto start = std::chrono::steady_clock::now();
  const std::filesystem::path output(sim.output);
  const std::filesystem::path directory =
      output.has_parent_path() ? output.parent_path() : std::filesystem::path(".");
  // Create the output folder as a user expects (e.g. ./data/ of the ready configs).
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (!std::filesystem::is_directory(directory, error)) {
    throw DataError(sim.output + ": cannot create the file: directory " + directory.string() +
                    " does not exist and cannot be created");
  }
  const size_t n_rings = std::max<size_t>(config.data.wavevector_q_list.size(), 1);
  spdlog::info("simulating {}{} angles x {} x {} frames ({}, {}) to {}",
               n_rings > 1 ? std::to_string(n_rings) + " q rings x " : std::string(),
               sim.phi_angles_degrees.size(), sim.frames, sim.frames, sim.dtype, sim.compression,
               sim.output);
  SimulationReport report;
  // HDF5 writes a temporary file block by block (memory stays one block whatever the file size),
  // which is then fsynced and renamed: a failed simulation never leaves a half-written file
  // under the final name (io/durable_file.h).
  try {
    io_internal::DurableFile file(output);
    WriteSimulation(config, file.temporary_path().string());
    report.bytes_written = file.Commit();
  } catch (const DataError& failure) {  // the writer's, naming the temporary file
    throw DataError(sim.output + ": cannot write the file (" + failure.what() + ")");
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& failure) {
    throw DataError(sim.output + ": cannot write the file (" + failure.what() + ")");
  }
  report.output_path = sim.output;
  report.points_written = static_cast<int64_t>(n_rings * sim.phi_angles_degrees.size()) *
                          static_cast<int64_t>(sim.frames) * static_cast<int64_t>(sim.frames);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("wrote {} points, {} bytes in {:.2f} s", report.points_written, report.bytes_written,
               report.seconds);
  return report;
}

}  // namespace homodyne
