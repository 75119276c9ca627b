// The YAML parser behind ResolveConfig (private to src/config; yaml-cpp stays in
// config_loader.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "homodyne/config.h"
#include "homodyne/model.h"

namespace homodyne::config_internal {

// The largest config text accepted, in bytes (docs/configuration.md, Errors and warnings): the
// templates are under 30 KB, and yaml-cpp needs about 250 bytes of memory per byte of a long
// list (a 4 MiB list took 1 GB).
inline constexpr uintmax_t kMaxConfigBytes = 1024 * 1024;

// "<source_name>: <size> is larger than a config file may be (<limit>) ..."; `bytes` unknown
// (std::nullopt: a pipe or a device read up to the limit) says "more than" the limit.
std::string ConfigTooLargeMessage(const std::string& source_name, std::optional<uintmax_t> bytes);

// Parses and validates YAML text for `mode` (std::nullopt: the file's analysis_mode). Everything
// that depends on the mode (bounds, default parameter names, custom starts, simulation
// parameters, the other mode's names dropped with a warning) is built for that mode. Throws
// InputError (not YAML) or ConfigError ("<source_name>: <yaml.path> = <value>: <rule>").
Config ParseConfigText(const std::string& yaml_text, const std::string& source_name,
                       std::optional<AnalysisMode> mode);

}  // namespace homodyne::config_internal
