// What the result writers share (results_json.cc, fitted_data_writer.cc): the results folder and
// fitted_data.h5's contents, so that results_json.cc publishes every result file as one set
// (WriteAllResultFiles, results.h). Private to src/io.
#pragma once

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
void AddFittedData(DurableFileSet& set, BatchSource& source, const ModelEvaluation& evaluation,
                   const std::vector<AngleScaling>& per_angle);

}  // namespace homodyne::io_internal
