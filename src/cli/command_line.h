// The `homodyne` command line: the NLSQ-related flags of the reference package's CLI plus ours
// (README.md, Programs): strategy, memory, backend, threads, checkpoints, fast mode, dry run.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/results.h"

namespace homodyne::cli {

struct CommandLineOptions {
  std::string config_path = "./homodyne_config.yaml";  // --config
  bool config_path_given = false;
  std::string output_dir = "./homodyne_results";  // --output-dir
  std::string method = "nlsq";                    // --method (nlsq only in this engine)
  std::optional<std::string> data_file;           // --data-file
  bool static_mode = false;                       // --static-mode
  bool laminar_flow = false;                      // --laminar-flow
  std::optional<std::string> mode;                // --mode (the successor's spelling)
  std::vector<double> phi;                        // --phi A [B ...]: the angles to fit
  std::optional<int> multistart_n;                // --multistart-n (multi_start.n_starts)
  std::optional<int> max_iterations;              // --max-iterations
  std::optional<double> tolerance;                // --tolerance
  // --initial-* (any case: --initial-D0): parameter name -> value, one entry per flag given.
  std::map<std::string, double> initial_values;
  bool save_plots = false;                        // --save-plots
  std::optional<std::string> output_format;       // --output-format yaml|json|npz
  int verbosity = 0;                              // -v (count)
  bool quiet = false;                             // --quiet
  std::optional<int> threads;                     // --threads
  std::optional<std::string> strategy;            // --strategy
  std::optional<double> memory_limit_gb;          // --memory-limit-gb
  std::optional<std::string> backend;             // --backend cpu|cuda|auto
  std::optional<std::string> checkpoint_dir;      // --checkpoint-dir
  std::optional<int> checkpoint_frequency;        // --checkpoint-frequency
  std::optional<double> checkpoint_min_interval;  // --checkpoint-min-interval
  std::optional<bool> resume;                     // --resume / --no-resume
  bool fast_mode = false;                         // --fast-mode
  std::optional<std::string> global_search;       // --global-search auto|off|multi-start|cmaes
  bool no_variable_projection = false;            // --no-variable-projection
  std::optional<std::string> solver;              // --solver lm|ceres
  std::optional<std::string> uncertainty;         // --uncertainty auto|jackknife|standard|curvature
  bool profile_intervals = false;                 // --profile-intervals
  bool dry_run = false;                           // --dry-run
  // --q-index K: of several rings fitted independently, ring K alone (0-based, the order of the
  // config's list, ascending q for all): a SLURM array's task (docs/configuration.md, Several q
  // rings).
  std::optional<int> q_index;
  bool q_summary_only = false;  // --q-summary: only write OUTPUT_DIR/nlsq/q_summary.json and .csv
};

// What --output-format asks for: the reference's legacy summary (yaml, json) and the successor's
// nlsq/fitted_data.npz (npz; both: json and npz). std::nullopt for any other value.
struct OutputFormat {
  std::optional<LegacySummaryFormat> legacy_summary;
  bool npz = false;
};
std::optional<OutputFormat> ParseOutputFormat(const std::string& text);

// Parses argv and checks every flag value that needs no config. Returns std::nullopt after
// printing --help or --version (exit 0). Throws UsageError for bad usage (unknown flag, bad value,
// conflicting flags).
std::optional<CommandLineOptions> ParseCommandLine(int argc, char** argv);

// The flags that replace config values (docs/user-guide.md section 3), for ResolveConfig, which
// throws UsageError for a flag that does not fit the config (--initial-phi0 in static mode).
ConfigOverrides OverridesFromCommandLine(const CommandLineOptions& options);

}  // namespace homodyne::cli
