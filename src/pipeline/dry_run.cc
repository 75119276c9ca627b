// DescribeFitPlan (include/homodyne/fit.h): `homodyne --dry-run`, the fit prepared by the fit's
// own steps (PrepareFit, fit_preparation.h) and described, without a pass.
#include "homodyne/fit.h"

#include "fit_checkpoints.h"
#include "fit_preparation.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "config/path_checks.h"
#include "homodyne/dataset.h"
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

// Names with runs of consecutive indices collapsed: contrast[0], contrast[1], contrast[2] ->
// contrast[0..2]; other names as they are.
std::string FormatNames(const std::vector<std::string>& names) {
  auto split = [](const std::string& name, std::string& base, int& index) {
    const size_t open = name.find('[');
    if (open == std::string::npos || name.back() != ']') return false;
    base = name.substr(0, open);
    index = std::atoi(name.c_str() + open + 1);
    return true;
  };
  std::ostringstream text;
  for (size_t i = 0; i < names.size();) {
    std::string base, next_base;
    int first = 0, next = 0;
    size_t end = i + 1;
    if (split(names[i], base, first)) {
      while (end < names.size() && split(names[end], next_base, next) && next_base == base &&
             next == first + static_cast<int>(end - i)) {
        ++end;
      }
    }
    text << (i ? ", " : "");
    if (end - i > 1) {
      text << base << "[" << first << ".." << first + static_cast<int>(end - i) - 1 << "]";
    } else {
      text << names[i];
    }
    i = end;
  }
  return text.str();
}

// The fitted parameters (the reduced layout), physical and scaling, as the fit counts them.
void DescribeParameters(const PreparedFit& fit, std::ostream& out) {
  const FitParameters& parameters = *fit.parameters;
  const std::vector<std::string>& physical = PhysicalParameterNames(fit.config.analysis_mode);
  const std::vector<std::string>& fitted = parameters.map.reduced_names;
  const int n_physical =
      static_cast<int>(std::count_if(fitted.begin(), fitted.end(), [&](const std::string& name) {
        return IsPhysicalParameter(fit.config.analysis_mode, name);
      }));
  out << "  parameters        " << parameters.map.num_reduced() << " fitted: " << n_physical
      << " physical + " << parameters.map.num_reduced() - n_physical << " scaling (per-angle mode "
      << ToString(fit.plan.scaling.mode) << ": " << fit.plan.scaling.reason << ")\n";
  out << "  fitted            " << FormatNames(fitted) << "\n";
  // Held: full-layout parameters no fitted parameter moves (fixed_parameters; constant mode's
  // contrast and offset), at the value the fit holds them.
  const Eigen::VectorXd full_start = parameters.map.Expand(parameters.reduced_start);
  std::vector<std::string> held;
  for (int i = 0; i < parameters.map.num_full(); ++i) {
    if (parameters.map.matrix.row(i).isZero(0.0)) {
      held.push_back(parameters.full_names[static_cast<size_t>(i)]);
    }
  }
  if (!held.empty()) {
    out << "  held fixed        " << FormatNames(held) << " (at their start values)\n";
  }
  out << "  start values      ";
  for (size_t p = 0; p < physical.size(); ++p) {
    const ParameterBound& bound = fit.config.BoundOf(physical[p]);
    out << (p ? ", " : "") << physical[p] << " " << full_start[static_cast<Eigen::Index>(p)]
        << " in [" << bound.min << ", " << bound.max << "]";
  }
  out << "\n";
  for (const std::string& kind : {std::string("contrast"), std::string("offset")}) {
    std::vector<double> values;
    for (int i = 0; i < parameters.map.num_full(); ++i) {
      if (parameters.full_names[static_cast<size_t>(i)].rfind(kind + "[", 0) == 0) {
        values.push_back(full_start[i]);
      }
    }
    const ParameterBound& bound = fit.config.BoundOf(kind);
    out << "  " << std::left << std::setw(18) << (kind + " start") << std::right;
    if (values.size() <= 6) {
      for (size_t k = 0; k < values.size(); ++k) out << (k ? ", " : "") << values[k];
    } else {
      const auto [low, high] = std::minmax_element(values.begin(), values.end());
      out << *low << " .. " << *high << " over " << values.size() << " angles";
    }
    out << " in [" << bound.min << ", " << bound.max << "]\n";
  }
  for (const std::string& remark : parameters.start_warnings) {
    out << "  start clipped     " << remark << "\n";
  }
}

// The checkpoint a fit would resume from (the announcement it logs then), or why none.
void DescribeCheckpoints(const PreparedFit& fit, std::ostream& out) {
  const FitCheckpoints& checkpoints = *fit.checkpoints;
  const std::string& directory = checkpoints.store_options().directory;
  out << "  checkpoints       ";
  if (!checkpoints.enabled()) {
    out << "off (optimization.streaming.enable_checkpoints: false)\n";
  } else if (!fit.config.streaming.resume_from_checkpoint) {
    const size_t earlier = CheckpointStore(checkpoints.store_options()).List().size();
    out << "--no-resume: the fit starts afresh";
    if (earlier > 0)
      out << " and removes the " << earlier << " earlier checkpoint(s) in " << directory;
    out << "\n";
  } else if (fit.resume_point) {
    out << ResumeAnnouncement(fit.resume_point->checkpoint, fit.resume_point->path,
                              std::chrono::system_clock::now())
        << "\n";
  } else {
    out << "none to resume in " << directory << "\n";
  }
}

}  // namespace

void DescribeFitPlan(const Config& config, BatchSource& source, std::ostream& out) {
  // The paths the job would write (RunFitJob checks them before fitting; the output folder is the
  // shell's and is not known here).
  CheckJobPaths(config, std::nullopt);
  const FitObserver no_observer;
  const std::unique_ptr<PreparedFit> fit = PrepareFit(config, source, no_observer);
  const DatasetInfo& info = source.info();
  const int n_times = info.num_times();
  const FitPlan& plan = fit->plan;
  const ProblemSize& size = plan.size;

  out << "homodyne dry run (no fit)\n";
  out << "  config            " << config.source_path << "\n";
  out << "  analysis mode     " << ToString(config.analysis_mode) << "\n";
  out << "  data file         " << info.file_path << "\n";
  out << "  layout            " << ToString(info.layout) << ", " << info.value_type << ", "
      << info.compression << " compression\n";
  out << "  q                 " << info.q_inv_angstrom << " 1/A (target "
      << config.data.wavevector_q_target << ")\n";
  out << "  dt                " << info.dt_seconds << " s " << DtSourceNote(config) << "\n";
  out << "  frames            " << info.frames_in_file << " in file; window starts at frame "
      << info.first_frame + 1 << ", " << info.num_raw_frames << " frames; " << n_times
      << " fitted times (frame 0 dropped)\n";
  out << "  angles kept       " << info.num_angles() << ": " << FormatAngles(fit->phi_degrees)
      << " deg\n";
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
    char scan_seconds[32];
    std::snprintf(scan_seconds, sizeof(scan_seconds), "%.1f", seconds);
    out << "  non-finite values " << count.nan << " NaN, " << count.inf << " Inf in "
        << count.points_scanned << " points scanned (" << scan_seconds
        << " s); they are excluded from the fit\n";
  }
  out << "  backend           " << ToString(fit->backend.backend->kind()) << " ("
      << fit->backend.reason << ")\n";
  DescribeParameters(*fit, out);
  out << "  sigma             " << config.nlsq.sigma << "\n";
  out << "  objective         " << LossText(config.nlsq.loss) << "\n";
  if (!config.ignored_keys.empty()) out << "  " << IgnoredKeysText(config) << "\n";
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
  for (const std::string& action : fit->result.recovery_actions) {
    out << "  fallback          " << action << "\n";
  }
  DescribeCheckpoints(*fit, out);
}

}  // namespace homodyne
