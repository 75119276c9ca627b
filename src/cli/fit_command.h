// `homodyne --config FILE`: load the data, fit it, write the result files.
#pragma once

#include <iosfwd>

#include "command_line.h"
#include "homodyne/config.h"

namespace homodyne::cli {

// Fits config's data set with the in-memory pass (PackedDataObjective) and the LM core, writes
// nlsq/*.json under options.output_dir and prints a summary to `out`. Returns 0 when the fit
// finished (converged or max_iterations), 1 when the optimiser failed (results still written).
// Throws InputError/DataError for bad input, and Error when the selected strategy needs the
// streaming path (not in this build yet).
int RunFit(const Config& config, const CommandLineOptions& options, std::ostream& out);

}  // namespace homodyne::cli
