// `homodyne --config FILE`: load the data, fit it, write the result files.
#pragma once

#include <iosfwd>

#include "command_line.h"
#include "homodyne/config.h"

namespace homodyne::cli {

// Fits config's data set with the strategy PlanFit selects (falling back to a leaner one when
// setting it up runs out of memory), writes nlsq/*.json and nlsq/fitted_data.h5 under
// options.output_dir and prints a summary to `out`. Returns 0 when the fit finished (converged or
// max_iterations), 1 when the optimiser failed (results still written). Throws InputError /
// DataError for bad input.
int RunFit(const Config& config, const CommandLineOptions& options, std::ostream& out);

}  // namespace homodyne::cli
