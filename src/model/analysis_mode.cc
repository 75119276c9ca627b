// Analysis modes and their physical parameter names (docs/model.md, Modes;
// docs/configuration.md, Parameters).
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"

namespace homodyne {

std::string_view ToString(AnalysisMode mode) {
  switch (mode) {
    case AnalysisMode::kStatic:
      return "static";
    case AnalysisMode::kLaminarFlow:
      return "laminar_flow";
  }
  HOMODYNE_CHECK(false && "unknown AnalysisMode");
  return {};
}

AnalysisMode ParseAnalysisMode(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // As the reference: "static" with its two aliases, and "laminar_flow" (docs/model.md, Modes).
  if (lower == "static" || lower == "static_isotropic" || lower == "static_anisotropic") {
    return AnalysisMode::kStatic;
  }
  if (lower == "laminar_flow") return AnalysisMode::kLaminarFlow;
  throw ConfigError("analysis_mode = \"" + std::string(text) +
                    "\": must be one of static, static_isotropic, static_anisotropic, "
                    "laminar_flow");
}

int NumPhysicalParameters(AnalysisMode mode) { return mode == AnalysisMode::kLaminarFlow ? 7 : 3; }

const std::vector<std::string>& PhysicalParameterNames(AnalysisMode mode) {
  static const std::vector<std::string> kStaticNames = {"D0", "alpha", "D_offset"};
  static const std::vector<std::string> kLaminarNames = {
      "D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "gamma_dot_t_offset", "phi0"};
  return mode == AnalysisMode::kLaminarFlow ? kLaminarNames : kStaticNames;
}

}  // namespace homodyne
