#include "homodyne/errors.h"
#include "homodyne/scaling.h"

namespace homodyne {

std::string_view ToString(PerAngleMode mode) {
  switch (mode) {
    case PerAngleMode::kIndividual:
      return "individual";
    case PerAngleMode::kConstant:
      return "constant";
    case PerAngleMode::kAutoAveraged:
      return "auto_averaged";
    case PerAngleMode::kFourier:
      return "fourier";
  }
  return "unknown";
}

ResolvedScaling ResolvePerAngleMode(const NlsqOptions& nlsq, int n_angles) {
  const std::string& mode = nlsq.per_angle_mode;
  const ResolvedScaling individual{PerAngleMode::kIndividual, 2 * n_angles,
                                   "one contrast and offset per angle"};
  if (mode == "individual") return individual;
  if (mode == "constant" || mode == "fixed_constant") {
    return {PerAngleMode::kConstant, 0,
            "contrast and offset fixed at per-angle quantile estimates"};
  }
  if (mode == "auto" || mode == "auto_averaged") {
    if (n_angles >= nlsq.constant_scaling_threshold) {
      return {PerAngleMode::kAutoAveraged, 2,
              "auto: " + std::to_string(n_angles) + " angles >= constant_scaling_threshold " +
                  std::to_string(nlsq.constant_scaling_threshold) + ", one shared pair"};
    }
    ResolvedScaling resolved = individual;
    resolved.reason = "auto: " + std::to_string(n_angles) +
                      " angles < constant_scaling_threshold " +
                      std::to_string(nlsq.constant_scaling_threshold) + ", individual";
    return resolved;
  }
  if (mode == "fourier") {
    const int coefficients = 1 + 2 * nlsq.fourier_order;
    if (n_angles >= coefficients) {
      return {PerAngleMode::kFourier, 2 * coefficients,
              "fourier of order " + std::to_string(nlsq.fourier_order)};
    }
    ResolvedScaling resolved = individual;
    resolved.reason = "fourier needs >= " + std::to_string(coefficients) + " angles, have " +
                      std::to_string(n_angles) + ": individual";
    return resolved;
  }
  throw ConfigError("optimization.nlsq.anti_degeneracy.per_angle_mode = '" + mode +
                    "': must be one of individual, constant, auto, fourier");
}

}  // namespace homodyne
