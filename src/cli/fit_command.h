// `homodyne --config FILE`: load the data, fit it, write the result files; or, with --dry-run,
// say what the fit would do.
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
// Several q rings (analyzer_parameters.scattering.wavevector_q a list or all): q_fit independent
// fits each ring (or the ring of --q-index) into options.output_dir/q_<q>/ and writes the summary
// OUTPUT_DIR/nlsq/q_summary.json and .csv (--q-summary: the summary alone); q_fit joint fits every
// ring's matrices at once into options.output_dir/nlsq/. Returns the worst exit code of the fits.
int RunFit(const Config& config, const CommandLineOptions& options, std::ostream& out);

// `homodyne --dry-run`: prints DescribeFitPlan (homodyne/fit.h) for the config's data to `out`
// and returns 0. Throws what the fit throws before its first pass, with the same message
// (InputError, DataError, ConfigError): a config the fit refuses is refused here too.
// With several rings: the rings, their angles and points first, then the plan of the first ring
// (independent; the ring of --q-index) or of the joint data set.
int RunDryRun(const Config& config, const CommandLineOptions& options, std::ostream& out);

}  // namespace homodyne::cli
