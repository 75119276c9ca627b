// `homodyne --output-format yaml|json`: the reference package's legacy summary file,
// OUTPUT_DIR/homodyne_results.{yaml,json} (docs/results.md, Legacy summary).
#pragma once

#include <optional>
#include <string>

#include "homodyne/results.h"

namespace homodyne::cli {

// The file format of the legacy summary, from the value of --output-format. Returns nullopt for
// any other value; "npz" is not among them (this engine writes no NumPy archives).
enum class LegacySummaryFormat { kYaml, kJson };
std::optional<LegacySummaryFormat> ParseLegacySummaryFormat(const std::string& text);

// Writes output_dir/homodyne_results.yaml or .json (output_dir created if absent) through a
// temporary file and a rename, with the reference's fields: method "nlsq", analysis_mode,
// success (convergence_status == "converged"), optimization_time [s], device_config (backend,
// threads), parameters (the reference's vector order: contrasts, offsets, then the physical
// parameters) beside parameter_names, and diagnostics.chi_squared. Returns the path written.
// Throws InputError naming the path when it cannot be written.
std::string WriteLegacySummary(const FitResult& result, LegacySummaryFormat format,
                               const std::string& output_dir);

}  // namespace homodyne::cli
