// nlsq/derived_rates.json (docs/results.md, What the data determine): the rates of the fitted
// model over the fitted window, each with its 68 % interval from the result's covariance. Private
// to src/io (results_json.cc writes it with the result set).
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string_view>

#include "homodyne/results.h"

namespace homodyne::io_internal {

inline constexpr std::string_view kDerivedRatesFileName = "derived_rates.json";
// At most this many times of the fitted grid (every k-th time, the last included).
inline constexpr int kDerivedRatesMaxTimes = 1000;

// The rates of result.analysis_mode at `times` (the fitted grid [s]; thinned to at most
// kDerivedRatesMaxTimes): static "D" (D0 t^alpha + D_offset, floored at 1e-10 as the model does);
// laminar_flow "D" and "gamma_dot"; two_component "D_ref", "D_sample" (floored at 0), "v" and
// "fraction" (the sample fraction x_s). Each rate R has "R_interval_68": [R - s, R + s] per time,
// s^2 = g^T C g with g the rate's gradient in the physical parameters (central differences) and C
// their block of result.covariance (the reported method's: result.uncertainty_method); null
// bounds when the covariance is missing. Also "t", "units", "analysis_mode",
// "uncertainty_method".
nlohmann::ordered_json DerivedRatesJson(const FitResult& result, std::span<const double> times);

}  // namespace homodyne::io_internal
