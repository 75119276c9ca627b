#include <algorithm>
#include <cctype>
#include <string>

#include "homodyne/config.h"
#include "homodyne/strategy.h"

namespace homodyne {
namespace {

std::string Lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
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
  const std::string lower = Lowercase(text);
  for (StrategyKind kind : {StrategyKind::kStandard, StrategyKind::kLarge, StrategyKind::kChunked,
                            StrategyKind::kStreaming}) {
    if (lower == ToString(kind)) return kind;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  for (LmSolver solver : {LmSolver::kLmCore, LmSolver::kCeres}) {
    if (lower == ToString(solver)) return solver;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  if (lower == "fixed_constant") return PerAngleModeRequest::kConstant;  // the reference's
  for (PerAngleModeRequest mode : {PerAngleModeRequest::kIndividual, PerAngleModeRequest::kConstant,
                                   PerAngleModeRequest::kAuto, PerAngleModeRequest::kFourier}) {
    if (lower == ToString(mode)) return mode;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  for (GlobalSearchMethod method : {GlobalSearchMethod::kAuto, GlobalSearchMethod::kOff,
                                    GlobalSearchMethod::kMultiStart, GlobalSearchMethod::kCmaes}) {
    if (lower == ToString(method)) return method;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  for (SamplingStrategy strategy :
       {SamplingStrategy::kLatinHypercube, SamplingStrategy::kSobol, SamplingStrategy::kRandom}) {
    if (lower == ToString(strategy)) return strategy;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  for (CmaesPreset preset : {CmaesPreset::kCmaesFast, CmaesPreset::kCmaes,
                             CmaesPreset::kCmaesGlobal, CmaesPreset::kCmaesHpc}) {
    if (lower == ToString(preset)) return preset;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  for (CmaesRestartStrategy strategy :
       {CmaesRestartStrategy::kNone, CmaesRestartStrategy::kIpop, CmaesRestartStrategy::kBipop}) {
    if (lower == ToString(strategy)) return strategy;
  }
  return std::nullopt;
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
  const std::string lower = Lowercase(text);
  for (BackendKind kind : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda}) {
    if (lower == ToString(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace homodyne
