// Checks of the paths a fit writes to (docs/configuration.md, Streaming, checkpoints, fault
// tolerance; Performance log): the checkpoint folder, the output folder and the performance log,
// for configs from YAML (config_loader.cc), overrides (config_resolution.cc) and every job the
// shells run, the Python module's with data from a dict included (RunFitJob,
// src/pipeline/fit_job.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "homodyne/config.h"

namespace homodyne {

// True when `path` holds a NUL character. The system calls read a path only up to its first NUL,
// so a file meant for "out\0put" would land in "out". YAML carries one in a double-quoted string
// ("\0"), Python in any str.
bool HasNul(std::string_view path);

// `path` with every NUL written as \0, for a message.
std::string ShowNuls(std::string_view path);

// "KEY = 'VALUE': contains a NUL character (\0) at position P; ...": the message for a path with
// a NUL, VALUE shown with every NUL as \0.
std::string NulInPathMessage(std::string_view key, std::string_view path);

// When a performance log at `filename` (relative to the output folder, as
// logging.performance.filename) equals the results folder or a result file (kResultFileNames in
// nlsq/) or lies inside one, the message naming both ("logging.performance.filename = ...");
// nullopt otherwise. Compared after lexical normalisation ("./nlsq//parameters.json" is
// "nlsq/parameters.json").
std::optional<std::string> PerformanceLogOnResultsMessage(const std::string& filename);

// Every path of a fit job: optimization.streaming.checkpoint_dir and
// logging.performance.filename of `config`, and `output_dir` (CLI --output-dir, fit_nlsq's
// output_dir). Throws ConfigError naming the key (config.source_path first for the config's keys)
// for a NUL in any of them, for an empty output_dir, and naming both paths for a performance log
// on a result path.
void CheckJobPaths(const Config& config, const std::optional<std::string>& output_dir);

}  // namespace homodyne
