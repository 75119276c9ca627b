// The one check of a shell's overrides (ConfigOverrides, config.h) that needs no config: the CLI
// runs it on its flags as it parses them, ResolveConfig on whatever it is given (the Python
// module's keyword options included), so a value is refused alike from both shells, the message
// naming the override as that shell spells it. What needs the config (a parameter name that is
// not of the analysis mode) ResolveConfig checks after the file is parsed.
#pragma once

#include "homodyne/config.h"

namespace homodyne {

// How a message names an override: the CLI's flag, "--memory-limit-gb -1: must be > 0", or the
// keyword of the Python module (ConfigOverrides' fields as Python spells them; what ResolveConfig
// uses), "memory_limit_gb = -1: must be > 0". An initial value is named by its origin
// ("--initial-d0", "initial_params['D0']") in both.
enum class OverrideSpelling { kCommandLine, kKeyword };

// Throws UsageError naming the first override that breaks its rule:
//   max_iterations and checkpoint_frequency > 0, threads >= 1; tolerance and memory_limit_gb
//   > 0 and finite; checkpoint_min_interval >= 0 and finite; checkpoint_dir not empty; strategy,
//   backend, solver and global_search one of their names (global_search: auto, off, multi-start or
//   multi_start, cmaes, case as written); every initial value finite, D0's > 0.
void CheckOverrides(const ConfigOverrides& overrides, OverrideSpelling spelling);

}  // namespace homodyne
