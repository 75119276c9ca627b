#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "homodyne/config.h"

namespace homodyne {
namespace {

std::string Lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

// The value of `values` whose ToString equals `text` in any case; std::nullopt for none.
template <typename Enum>
std::optional<Enum> ParseByName(std::string_view text, std::initializer_list<Enum> values) {
  const std::string lower = Lowercase(text);
  for (const Enum value : values) {
    if (lower == ToString(value)) return value;
  }
  return std::nullopt;
}

}  // namespace

std::string_view ToString(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kStandard:
      return "standard";
    case StrategyKind::kLarge:
      return "large";
    case StrategyKind::kChunked:
      return "chunked";
    case StrategyKind::kStreaming:
      return "streaming";
  }
  return "unknown";
}

std::optional<StrategyKind> ParseStrategyKind(std::string_view text) {
  return ParseByName<StrategyKind>(text, {StrategyKind::kStandard, StrategyKind::kLarge,
                                          StrategyKind::kChunked, StrategyKind::kStreaming});
}

std::string_view ToString(LmSolver solver) {
  switch (solver) {
    case LmSolver::kLmCore:
      return "lm";
    case LmSolver::kCeres:
      return "ceres";
  }
  return "unknown";
}

std::optional<LmSolver> ParseLmSolver(std::string_view text) {
  return ParseByName<LmSolver>(text, {LmSolver::kLmCore, LmSolver::kCeres});
}

std::string_view ToString(UncertaintyMethod method) {
  switch (method) {
    case UncertaintyMethod::kAuto:
      return "auto";
    case UncertaintyMethod::kJackknife:
      return "jackknife";
    case UncertaintyMethod::kStandard:
      return "standard";
    case UncertaintyMethod::kCurvature:
      return "curvature";
  }
  return "unknown";
}

std::optional<UncertaintyMethod> ParseUncertaintyMethod(std::string_view text) {
  return ParseByName<UncertaintyMethod>(
      text, {UncertaintyMethod::kAuto, UncertaintyMethod::kJackknife, UncertaintyMethod::kStandard,
             UncertaintyMethod::kCurvature});
}

std::string_view ToString(LossFunction function) {
  switch (function) {
    case LossFunction::kLinear:
      return "linear";
    case LossFunction::kSoftL1:
      return "soft_l1";
    case LossFunction::kHuber:
      return "huber";
    case LossFunction::kCauchy:
      return "cauchy";
    case LossFunction::kArctan:
      return "arctan";
  }
  return "unknown";
}

std::optional<LossFunction> ParseLossFunction(std::string_view text) {
  return ParseByName<LossFunction>(
      text, {LossFunction::kLinear, LossFunction::kSoftL1, LossFunction::kHuber,
             LossFunction::kCauchy, LossFunction::kArctan});
}

std::string_view ToString(PerAngleModeRequest mode) {
  switch (mode) {
    case PerAngleModeRequest::kIndividual:
      return "individual";
    case PerAngleModeRequest::kConstant:
      return "constant";
    case PerAngleModeRequest::kAuto:
      return "auto";
    case PerAngleModeRequest::kFourier:
      return "fourier";
  }
  return "unknown";
}

std::optional<PerAngleModeRequest> ParsePerAngleModeRequest(std::string_view text) {
  if (Lowercase(text) == "fixed_constant")
    return PerAngleModeRequest::kConstant;  // the reference's
  return ParseByName<PerAngleModeRequest>(
      text, {PerAngleModeRequest::kIndividual, PerAngleModeRequest::kConstant,
             PerAngleModeRequest::kAuto, PerAngleModeRequest::kFourier});
}

std::string_view ToString(GlobalSearchMethod method) {
  switch (method) {
    case GlobalSearchMethod::kAuto:
      return "auto";
    case GlobalSearchMethod::kOff:
      return "off";
    case GlobalSearchMethod::kMultiStart:
      return "multi_start";
    case GlobalSearchMethod::kCmaes:
      return "cmaes";
  }
  return "unknown";
}

std::optional<GlobalSearchMethod> ParseGlobalSearchMethod(std::string_view text) {
  return ParseByName<GlobalSearchMethod>(
      text, {GlobalSearchMethod::kAuto, GlobalSearchMethod::kOff, GlobalSearchMethod::kMultiStart,
             GlobalSearchMethod::kCmaes});
}

std::string_view ToString(SamplingStrategy strategy) {
  switch (strategy) {
    case SamplingStrategy::kLatinHypercube:
      return "latin_hypercube";
    case SamplingStrategy::kSobol:
      return "sobol";
    case SamplingStrategy::kRandom:
      return "random";
  }
  return "unknown";
}

std::optional<SamplingStrategy> ParseSamplingStrategy(std::string_view text) {
  return ParseByName<SamplingStrategy>(text, {SamplingStrategy::kLatinHypercube,
                                              SamplingStrategy::kSobol, SamplingStrategy::kRandom});
}

std::string_view ToString(CmaesPreset preset) {
  switch (preset) {
    case CmaesPreset::kCmaesFast:
      return "cmaes-fast";
    case CmaesPreset::kCmaes:
      return "cmaes";
    case CmaesPreset::kCmaesGlobal:
      return "cmaes-global";
    case CmaesPreset::kCmaesHpc:
      return "cmaes-hpc";
  }
  return "unknown";
}

std::optional<CmaesPreset> ParseCmaesPreset(std::string_view text) {
  return ParseByName<CmaesPreset>(text, {CmaesPreset::kCmaesFast, CmaesPreset::kCmaes,
                                         CmaesPreset::kCmaesGlobal, CmaesPreset::kCmaesHpc});
}

std::string_view ToString(CmaesRestartStrategy strategy) {
  switch (strategy) {
    case CmaesRestartStrategy::kNone:
      return "none";
    case CmaesRestartStrategy::kIpop:
      return "ipop";
    case CmaesRestartStrategy::kBipop:
      return "bipop";
  }
  return "unknown";
}

std::optional<CmaesRestartStrategy> ParseCmaesRestartStrategy(std::string_view text) {
  return ParseByName<CmaesRestartStrategy>(
      text,
      {CmaesRestartStrategy::kNone, CmaesRestartStrategy::kIpop, CmaesRestartStrategy::kBipop});
}

std::string_view ToString(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::optional<BackendKind> ParseBackendKind(std::string_view text) {
  return ParseByName<BackendKind>(text,
                                  {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda});
}

}  // namespace homodyne
