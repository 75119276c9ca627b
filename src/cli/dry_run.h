// `homodyne --dry-run`: load config and data, print what a fit would do, fit nothing.
#pragma once

#include <iosfwd>

#include "command_line.h"
#include "homodyne/config.h"

namespace homodyne::cli {

// Prints the summary to `out`: file and layout, q, angles kept, frames, points to fit,
// non-finite values (scanned unless fast mode), parameter count, available memory, batch size,
// the itemised memory of each strategy and the strategy the selector would pick.
// Returns the exit code (0). Throws InputError/DataError for bad data.
int RunDryRun(const Config& config, const CommandLineOptions& options, std::ostream& out);

}  // namespace homodyne::cli
