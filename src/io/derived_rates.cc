// The rates of the fitted model and their intervals (derived_rates.h).
#include "io/derived_rates.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "homodyne/model.h"

namespace homodyne::io_internal {
namespace {

using nlohmann::ordered_json;

// A rate of the model at time t for physical parameters p (model order), and its unit.
struct Rate {
  std::string name;
  std::string unit;
  std::function<double(const std::vector<double>& p, double t)> at;
};

double Power(double t, double exponent) { return std::pow(t, exponent); }

// The two-component power with the successor's rule (docs/model.md, Two-component mode).
double PowerWithZero(double t, double exponent) {
  if (t <= 0.0) return 0.0;
  return std::pow(t <= 1e-10 ? 1e-10 : t, exponent);
}

double Softplus(double z) { return z > 30.0 ? z : std::log1p(std::exp(z)); }

double SoftUnit(double z) {
  return 1.0 - Softplus(50.0 * (1.0 - Softplus(50.0 * z) / 50.0)) / 50.0;
}

std::vector<Rate> RatesOf(AnalysisMode mode) {
  const auto floored = [](double value) {
    return value > model_limits::kRateFloor ? value : model_limits::kRateFloor;
  };
  switch (mode) {
    case AnalysisMode::kStatic:
    case AnalysisMode::kLaminarFlow: {
      std::vector<Rate> rates = {{"D", "Å²/s", [floored](const std::vector<double>& p, double t) {
                                    return floored(p[0] * Power(t, p[1]) + p[2]);
                                  }}};
      if (mode == AnalysisMode::kLaminarFlow) {
        rates.push_back({"gamma_dot", "1/s", [floored](const std::vector<double>& p, double t) {
                           return floored(p[3] * Power(t, p[4]) + p[5]);
                         }});
      }
      return rates;
    }
    case AnalysisMode::kTwoComponent:
      return {{"D_ref", "Å²/s",
               [](const std::vector<double>& p, double t) {
                 return std::max(p[0] * PowerWithZero(t, p[1]) + p[2], 0.0);
               }},
              {"D_sample", "Å²/s",
               [](const std::vector<double>& p, double t) {
                 return std::max(p[3] * PowerWithZero(t, p[4]) + p[5], 0.0);
               }},
              {"v", "Å/s",
               [](const std::vector<double>& p, double t) {
                 return p[6] * PowerWithZero(t, p[7]) + p[8];
               }},
              {"fraction", "", [](const std::vector<double>& p, double t) {
                 const double exponent = std::clamp(p[10] * (t - p[11]), -700.0, 700.0);
                 return SoftUnit(p[9] * std::exp(exponent) + p[12]);
               }}};
  }
  return {};
}

}  // namespace

ordered_json DerivedRatesJson(const FitResult& result, std::span<const double> times) {
  const size_t n_physical = result.physical.size();
  std::vector<double> values;
  for (const ParameterEstimate& estimate : result.physical) values.push_back(estimate.value);
  // The physical block of the covariance (the first n_physical rows and columns), if present.
  const size_t n = result.covariance_names.size();
  const bool has_covariance = n >= n_physical && result.covariance.size() == n * n;
  const auto covariance = [&](size_t i, size_t j) { return result.covariance[i * n + j]; };

  std::vector<double> grid;
  const size_t stride =
      std::max<size_t>(1, (times.size() + kDerivedRatesMaxTimes - 1) / kDerivedRatesMaxTimes);
  for (size_t i = 0; i < times.size(); i += stride) grid.push_back(times[i]);
  if (!times.empty() && grid.back() != times.back()) grid.push_back(times.back());

  ordered_json json = {{"analysis_mode", std::string(ToString(result.analysis_mode))},
                       {"uncertainty_method", result.uncertainty_method},
                       {"t", grid}};
  ordered_json units = {{"t", "s"}};
  for (const Rate& rate : RatesOf(result.analysis_mode)) {
    ordered_json rate_values = ordered_json::array();
    ordered_json intervals = ordered_json::array();
    for (double t : grid) {
      const double value = rate.at(values, t);
      rate_values.push_back(std::isfinite(value) ? ordered_json(value) : ordered_json(nullptr));
      if (!has_covariance || !std::isfinite(value)) {
        intervals.push_back({nullptr, nullptr});
        continue;
      }
      std::vector<double> gradient(n_physical, 0.0);
      for (size_t p = 0; p < n_physical; ++p) {
        const double step = 1e-6 * std::max(std::abs(values[p]), 1e-6);
        std::vector<double> up = values, down = values;
        up[p] += step;
        down[p] -= step;
        gradient[p] = (rate.at(up, t) - rate.at(down, t)) / (2.0 * step);
      }
      double variance = 0.0;
      for (size_t i = 0; i < n_physical; ++i) {
        for (size_t j = 0; j < n_physical; ++j) {
          variance += gradient[i] * covariance(i, j) * gradient[j];
        }
      }
      const double spread = std::sqrt(std::max(variance, 0.0));
      if (std::isfinite(spread)) {
        intervals.push_back({value - spread, value + spread});
      } else {
        intervals.push_back({nullptr, nullptr});
      }
    }
    json[rate.name] = std::move(rate_values);
    json[rate.name + "_interval_68"] = std::move(intervals);
    units[rate.name] = rate.unit;
  }
  json["units"] = std::move(units);
  return json;
}

}  // namespace homodyne::io_internal
