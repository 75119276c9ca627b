// What the result writers share (results_json.cc, fitted_data_writer.cc): the results folder and
// fitted_data.h5's contents, so that results_json.cc publishes every result file as one set
// (WriteAllResultFiles, results.h). Private to src/io.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "homodyne/results.h"
#include "io/durable_file.h"

namespace homodyne::io_internal {

// output_dir/nlsq, created (with parents) if absent. Throws InputError naming it and the reason.
std::filesystem::path CreateResultsFolder(const std::string& output_dir);

// Adds fitted_data.h5 (kFittedDataFileName) to `set` and writes its contents (results.h,
// WriteFittedData) with HDF5 into its temporary file, closed there, ready for
// DurableFileSet::Commit. Throws std::runtime_error naming the file, what failed (a dataset,
// rows) and HDF5's reason, and that nothing was published.
// Returns the temporary file's path (AddFittedDataNpz reads it back).
std::filesystem::path AddFittedData(DurableFileSet& set, BatchSource& source,
                                    const ModelEvaluation& evaluation,
                                    const std::vector<AngleScaling>& per_angle);

// fitted_data.h5's matrices go straight to the file (O_DIRECT, whole chunks) where the file system
// allows it, else through HDF5 (fitted_data_writer.cc, DirectChunkWriter); the same contents either
// way. For tests: direct writes off (false) or allowed again (true, the default), and how many
// chunks the last AddFittedData wrote directly.
void SetDirectChunkWritesForTesting(bool enabled);
int64_t DirectChunkWritesOfLastFittedData();

// Adds fitted_data.npz (kFittedDataNpzFileName, npz_writer.cc) to `set`: the successor's arrays
// (phi_angles, c2_exp, c2_theoretical_raw: the model at contrast 1 and offset 1,
// c2_theoretical_scaled, per_angle_scaling and per_angle_scaling_solver: [contrast, offset] per
// angle, residuals, residuals_normalized: residuals / sigma, t1, t2, q), the matrices read from
// `fitted_data_h5` (AddFittedData's temporary file, closed). Returns false, adding nothing, with a
// warning, when the archive would pass 4 GiB (ZIP64 is not written). Throws std::runtime_error as
// AddFittedData.
bool AddFittedDataNpz(DurableFileSet& set, const std::filesystem::path& fitted_data_h5,
                      const ModelEvaluation& evaluation, const std::vector<AngleScaling>& per_angle,
                      const std::vector<double>& times, double q_inv_angstrom, double sigma);

}  // namespace homodyne::io_internal
