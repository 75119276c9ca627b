// Writes realistic synthetic data sets in the beamline layouts (homodyne-simulate).
#pragma once

#include <cstdint>
#include <string>

#include "homodyne/config.h"

namespace homodyne {

struct SimulationReport {
  std::string output_path;
  int64_t points_written = 0;  // matrix elements stored (n_angles * frames^2)
  int64_t bytes_written = 0;   // file size on disk
  double seconds = 0.0;        // wall time of the write
};

// Writes config.simulation to its output in the layout a beamline writes: one upper-triangle half
// matrix per angle (frame k at time k dt, k = 0..frames-1, the t=0 guard applying), computed row by
// row and streamed to the file so memory stays bounded for any size, plus the truth under
// /simulation (parameters, contrast, offset, phi, noise_sigma, seed, analysis_mode, dt, q, L).
// With noise_sigma 0 and float64 the stored upper triangle is the model exactly; noise is drawn
// per stored element (so the rebuilt matrix is symmetric). Deterministic for a given seed.
// Throws InputError / DataError (output not writable, disk full) naming the path.
SimulationReport SimulateDataset(const Config& config);

}  // namespace homodyne
