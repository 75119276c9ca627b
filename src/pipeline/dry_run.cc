// DescribeFitPlan (include/homodyne/fit.h): `homodyne --dry-run`, planned by the fit's own
// planning code (fit_plan.h).
#include "homodyne/fit.h"

#include "fit_plan.h"

#include <spdlog/spdlog.h>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "optimize/initial_values.h"
#include "pipeline/memory_budget.h"

namespace homodyne {
namespace {

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

std::string FormatAngles(const std::vector<double>& angles) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2);
  for (size_t k = 0; k < angles.size(); ++k) text << (k ? ", " : "") << angles[k];
  return text.str();
}

// The physical parameters' start values and bounds, as the fit will use them.
std::string FormatStartValues(const Config& config) {
  const std::vector<double> start = InitialPhysicalParameters(config);
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  std::ostringstream text;
  for (size_t p = 0; p < names.size(); ++p) {
    const ParameterBound& bound = config.BoundOf(names[p]);
    text << (p ? ", " : "") << names[p] << " " << start[p] << " in [" << bound.min << ", "
         << bound.max << "]";
  }
  return text.str();
}

}  // namespace

void DescribeFitPlan(const Config& config, BatchSource& source, std::ostream& out) {
  const DatasetInfo& info = source.info();
  for (const std::string& warning : info.warnings) spdlog::warn("{}", warning);

  std::vector<double> kept;
  for (const AngleInfo& angle : info.angles) kept.push_back(angle.phi_degrees);
  const int n_times = info.num_times();
  const FitPlan plan = PlanFit(config, info);
  if (!plan.scaling_warning.empty()) spdlog::warn("{}", plan.scaling_warning);
  const ProblemSize& size = plan.size;

  out << "homodyne dry run (no fit)\n";
  out << "  config            " << config.source_path << "\n";
  out << "  analysis mode     " << ToString(config.analysis_mode) << "\n";
  out << "  data file         " << info.file_path << "\n";
  out << "  layout            " << ToString(info.layout) << ", " << info.value_type << ", "
      << info.compression << " compression\n";
  out << "  q                 " << info.q_inv_angstrom << " 1/A (target "
      << config.data.wavevector_q_target << ")\n";
  out << "  dt                " << info.dt_seconds << " s\n";
  out << "  frames            " << info.frames_in_file << " in file; window starts at frame "
      << info.first_frame + 1 << ", " << info.num_raw_frames << " frames; " << n_times
      << " fitted times (frame 0 dropped)\n";
  out << "  angles kept       " << info.num_angles() << ": " << FormatAngles(kept) << " deg\n";
  if (!info.phi_filtered_out.empty()) {
    out << "  angles filtered   " << info.phi_filtered_out.size() << ": "
        << FormatAngles(info.phi_filtered_out) << " deg\n";
  }
  out << "  points to fit     " << info.num_fit_points() << " (" << size.fit_points
      << " upper-triangle points, each counted twice; diagonal excluded)\n";
  if (config.performance.fast_mode) {
    out << "  non-finite values not scanned (fast mode)\n";
  } else {
    const auto start = std::chrono::steady_clock::now();
    const NonFiniteCount count = CountNonFinite(source);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out << "  non-finite values " << count.nan << " NaN, " << count.inf << " Inf in "
        << count.points_scanned << " points scanned (" << std::fixed << std::setprecision(1)
        << seconds << " s); they are excluded from the fit\n"
        << std::defaultfloat;
  }
  out << "  parameters        " << plan.num_parameters << " fitted: " << plan.num_physical
      << " physical + " << plan.scaling.num_scaling_parameters << " scaling (per-angle mode "
      << ToString(plan.scaling.mode) << ": " << plan.scaling.reason << ")\n";
  out << "  start values      " << FormatStartValues(config) << "\n";
  out << "  sigma             " << config.nlsq.sigma << "\n";
  out << "  memory available  " << FormatBytes(plan.available.bytes) << " ("
      << plan.available.source << ")\n";
  out << "  batch size        " << size.batch_points << " points"
      << (config.streaming.batch_size ? " (optimization.streaming.batch_size)" : " (automatic)")
      << "\n";
  out << "  threads           " << size.threads << "\n";
  out << "  memory by strategy:\n";
  for (StrategyKind kind : {StrategyKind::kStandard, StrategyKind::kLarge, StrategyKind::kChunked,
                            StrategyKind::kStreaming}) {
    const MemoryEstimate estimate = EstimateMemory(kind, size);
    out << "    " << std::left << std::setw(10) << ToString(kind) << std::right << std::setw(11)
        << FormatBytes(static_cast<double>(estimate.TotalBytes())) << "  =";
    for (size_t k = 0; k < estimate.items.size(); ++k) {
      out << (k ? " + " : " ") << estimate.items[k].what << " "
          << FormatBytes(static_cast<double>(estimate.items[k].bytes));
    }
    out << "\n";
  }
  out << "  strategy          " << ToString(plan.strategy.kind) << " (" << plan.strategy.reason
      << ")\n";
}

}  // namespace homodyne
