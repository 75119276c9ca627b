// The four fitting strategies of docs/design.md section 3 and their memory budgets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "homodyne/config.h"  // StrategyKind

namespace homodyne {

// Size of a fitting problem, as the memory estimates need it.
struct ProblemSize {
  int64_t fit_points =
      0;  // strict upper-triangle points over all angles (each counts twice in chi2)
  int num_parameters = 0;  // parameters optimised
  int num_times = 0;       // N of the fitted grid
  int num_angles = 0;
  int bytes_per_value = 8;   // 4 when the data are float32 (kept packed in memory as float32)
  int64_t batch_points = 0;  // points per batch (AutomaticBatchSize or the config)
  int threads = 1;
  // The standard strategy's solver holds the whole Jacobian (optimization.nlsq.solver ceres).
  // False for the LM core (solver lm, the default), which sums batches like large.
  bool full_jacobian = false;
};

// One line of an itemised memory budget.
struct MemoryItem {
  std::string what;  // e.g. "packed data (float32)"
  int64_t bytes = 0;
};

struct MemoryEstimate {
  StrategyKind strategy = StrategyKind::kStandard;
  std::vector<MemoryItem> items;
  int64_t TotalBytes() const;
};

// Itemised peak memory of a strategy (docs/design.md section 3):
// standard: packed data + batch buffers as large (LM core), or data + full Jacobian with a QR
// copy when size.full_jacobian (Ceres); large/chunked: packed data + per-thread batch buffers;
// streaming: a few batches in flight, independent of the data size.
MemoryEstimate EstimateMemory(StrategyKind strategy, const ProblemSize& size);

// Points per batch: 10% of the available memory / (8 (1 + P)), clamped to [1000, 100000] and
// rounded to a multiple of 1000 (docs/design.md section 3).
int64_t AutomaticBatchSize(double available_bytes, int num_parameters);

// Memory the run may use, and where that number came from.
struct AvailableMemory {
  double bytes = 0.0;
  std::string source;  // "--memory-limit-gb", "performance.memory_limit_gb",
                       // "HOMODYNE_MEMORY_LIMIT", "MemAvailable", "cgroup memory.max"
};
// First of: the command line, the config, the environment variable HOMODYNE_MEMORY_LIMIT (GB),
// else the smaller of /proc/meminfo MemAvailable and the cgroup limit. Throws InputError for an
// unparsable or non-positive HOMODYNE_MEMORY_LIMIT.
AvailableMemory DetectAvailableMemory(std::optional<double> command_line_gb,
                                      std::optional<double> config_gb);

// The strategy a run uses and why (logged, and written to the results).
struct StrategyChoice {
  StrategyKind kind = StrategyKind::kStandard;
  std::string reason;
  MemoryEstimate estimate;  // of the chosen strategy
};

// Size tier first, on the points chi2 counts (2 fit_points): < 1e6 standard, < 1e7 large,
// < 1e8 chunked, else streaming. Then
// one tier leaner at a time while the estimate exceeds 70% of available_bytes. A forced strategy
// is kept as asked; a forced strategy whose estimate exceeds the available memory is an InputError
// saying why (docs/design.md section 3).
StrategyChoice SelectStrategy(const ProblemSize& size, double available_bytes,
                              std::optional<StrategyKind> forced);

}  // namespace homodyne
