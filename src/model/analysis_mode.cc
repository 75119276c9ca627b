// Analysis modes and their physical parameter names (docs/model.md, Modes;
// docs/configuration.md, Parameters), read from the mode catalog (mode_catalog.h).
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/mode_catalog.h"

namespace homodyne {

std::string_view ToString(AnalysisMode mode) { return DefinitionOf(mode).name; }

std::string AnalysisModeNames() {
  std::string names;
  for (const ModeDefinition& mode : AllModeDefinitions()) {
    names += (names.empty() ? "" : ", ") + std::string(mode.name);
    for (std::string_view alias : mode.aliases) names += ", " + std::string(alias);
  }
  return names;
}

AnalysisMode ParseAnalysisMode(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const ModeDefinition& mode : AllModeDefinitions()) {
    if (lower == mode.name) return mode.mode;
    for (std::string_view alias : mode.aliases) {
      if (lower == alias) return mode.mode;
    }
  }
  throw ConfigError("analysis_mode = \"" + std::string(text) + "\": must be one of " +
                    AnalysisModeNames());
}

int NumPhysicalParameters(AnalysisMode mode) {
  return static_cast<int>(DefinitionOf(mode).physical.size());
}

const std::vector<std::string>& PhysicalParameterNames(AnalysisMode mode) {
  static const std::map<AnalysisMode, std::vector<std::string>> kNames = [] {
    std::map<AnalysisMode, std::vector<std::string>> names;
    for (const ModeDefinition& definition : AllModeDefinitions()) {
      for (const ParameterDefinition& parameter : definition.physical) {
        names[definition.mode].emplace_back(parameter.name);
      }
    }
    return names;
  }();
  return kNames.at(mode);
}

}  // namespace homodyne
