// The YAML parser behind ResolveConfig (private to src/config; yaml-cpp stays in
// config_loader.cc).
#pragma once

#include <optional>
#include <string>

#include "homodyne/config.h"
#include "homodyne/model.h"

namespace homodyne::config_internal {

// Parses and validates YAML text for `mode` (std::nullopt: the file's analysis_mode). Everything
// that depends on the mode (bounds, default parameter names, custom starts, simulation
// parameters, the other mode's names dropped with a warning) is built for that mode. Throws
// InputError (not YAML) or ConfigError ("<source_name>: <yaml.path> = <value>: <rule>").
Config ParseConfigText(const std::string& yaml_text, const std::string& source_name,
                       std::optional<AnalysisMode> mode);

}  // namespace homodyne::config_internal
