// Itemised memory budgets of the strategies and the memory available to a run
// (docs/design.md section 3).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "homodyne/errors.h"
#include "pipeline/memory_budget.h"

namespace homodyne {
namespace {

constexpr double kBytesPerGb = 1024.0 * 1024.0 * 1024.0;

// Bytes of an Eigen dense matrix of doubles.
int64_t DoubleBytes(int64_t count) { return count * static_cast<int64_t>(sizeof(double)); }

// MemAvailable from /proc/meminfo in bytes, or 0 when unreadable.
double ReadMemAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double value_kb = 0.0;
  std::string unit;
  while (meminfo >> key >> value_kb >> unit) {
    if (key == "MemAvailable:") return value_kb * 1024.0;
  }
  return 0.0;
}

// The cgroup v2 (memory.max) or v1 (memory.limit_in_bytes) limit in bytes, or 0 when unlimited.
double ReadCgroupLimitBytes() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream file(path);
    std::string text;
    if (!(file >> text) || text == "max") continue;
    const double bytes = std::strtod(text.c_str(), nullptr);
    // cgroup v1 reports "unlimited" as a huge number.
    if (bytes > 0 && bytes < 1e18) return bytes;
  }
  return 0.0;
}

}  // namespace

int64_t MemoryEstimate::TotalBytes() const {
  int64_t total = 0;
  for (const MemoryItem& item : items) total += item.bytes;
  return total;
}

MemoryEstimate EstimateMemory(StrategyKind strategy, const ProblemSize& size) {
  const int64_t p = size.num_parameters;
  const int64_t batch = std::max<int64_t>(size.batch_points, 1);
  const int64_t threads = std::max(size.threads, 1);
  const int64_t angles = std::max(size.num_angles, 1);
  // Normal equations: J^T J, J^T r and the LM core's copies of them.
  const int64_t normal_equations = DoubleBytes(p * p + p) * 4;
  // Model precomputation: cumulative integrals and their derivatives, O(N).
  const int64_t model_tables = DoubleBytes(int64_t{size.num_times} * 8);
  // Pass kernel scratch (pass_kernel.h): per thread one tile of [J | e] (256 points x 12 padded
  // columns), the shared factors (8 x 256) and the static full pass's column sums (one per frame
  // and angle, and a vector's padding: docs/design.md section 2, The static full pass through
  // per-frame sums); per batch of a chunk one Gram matrix per angle.
  const int64_t tiles =
      DoubleBytes(threads * (256 * (12 + 8) + angles * (int64_t{size.num_times} + 16)));
  const int64_t gram = DoubleBytes(11 * 11);
  const int64_t batches = std::max<int64_t>(size.fit_points / batch, 1);

  MemoryEstimate estimate;
  estimate.strategy = strategy;
  const bool packed = strategy == StrategyKind::kLarge || strategy == StrategyKind::kChunked ||
                      (strategy == StrategyKind::kStandard && !size.full_jacobian);
  if (packed) {
    estimate.items = {
        {size.bytes_per_value == 4 ? "packed data (float32)" : "packed data (float64)",
         size.fit_points * size.bytes_per_value},
        {"per-thread tiles", tiles},
        {"per-batch Gram matrices of a chunk", std::min<int64_t>(batches, 1024) * angles * gram},
        {"normal equations", normal_equations},
        {"model tables", model_tables},
    };
    return estimate;
  }
  switch (strategy) {
    case StrategyKind::kStandard:  // Ceres: residual blocks and the whole Jacobian
      estimate.items = {
          {"data (float32)", size.fit_points * 4},
          {"residuals (double)", DoubleBytes(size.fit_points)},
          {"Jacobian N x P (double)", DoubleBytes(size.fit_points * p)},
          {"QR workspace (Jacobian copy)", DoubleBytes(size.fit_points * p)},
          {"model tables", model_tables},
      };
      break;
    case StrategyKind::kLarge:
    case StrategyKind::kChunked:
      break;  // packed, above
    case StrategyKind::kStreaming:
      // Chunks of 8 x threads batches: the one computed and the one being read
      // (batched_objective.h).
      estimate.items = {
          {"batches in flight (computed + prefetched chunk)", 2 * 8 * threads * batch * 4},
          // Whole chunk rows of every angle, read once per pass (beamline_reader.cc: at most
          // 16 MB of doubles, so 8 MB of the fit's float32 values): the bound, whatever the data.
          {"file reader row blocks", int64_t{8} << 20},
          // A prefetch of compressed chunks (BatchSource::PrefetchRows, io/chunk_decoder.h): their
          // stored bytes, at most the blocks' size, and one decoded chunk per decoding thread
          // (for chunks of 1 MiB, homodyne-simulate's).
          {"compressed chunks being decoded", (int64_t{8} << 20) + threads * (int64_t{1} << 20)},
          {"per-thread tiles", tiles},
          {"per-batch Gram matrices of a chunk", 8 * threads * angles * gram},
          {"normal equations", normal_equations},
          {"model tables", model_tables},
      };
      break;
  }
  return estimate;
}

int64_t AutomaticBatchSize(double available_bytes, int num_parameters) {
  const double raw = 0.1 * available_bytes / (8.0 * (1.0 + num_parameters));
  const double clamped = std::clamp(raw, 1000.0, 100000.0);
  const int64_t rounded = static_cast<int64_t>(std::llround(clamped / 1000.0)) * 1000;
  return std::clamp<int64_t>(rounded, 1000, 100000);
}

AvailableMemory DetectAvailableMemory(std::optional<double> command_line_gb,
                                      std::optional<double> config_gb) {
  if (command_line_gb) return {*command_line_gb * kBytesPerGb, "--memory-limit-gb"};
  if (config_gb) return {*config_gb * kBytesPerGb, "performance.memory_limit_gb"};
  if (const char* env = std::getenv("HOMODYNE_MEMORY_LIMIT"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    errno = 0;
    const double gb = std::strtod(env, &end);
    if (errno != 0 || end == env || *end != '\0' || !std::isfinite(gb) || gb <= 0) {
      throw InputError(std::string("HOMODYNE_MEMORY_LIMIT = '") + env +
                       "': must be a positive number of GB");
    }
    return {gb * kBytesPerGb, "HOMODYNE_MEMORY_LIMIT"};
  }
  const double available = ReadMemAvailableBytes();
  const double cgroup = ReadCgroupLimitBytes();
  if (cgroup > 0 && (available <= 0 || cgroup < available)) return {cgroup, "cgroup memory limit"};
  if (available > 0) return {available, "MemAvailable"};
  return {8.0 * kBytesPerGb, "default (8 GB: /proc/meminfo unreadable)"};
}

}  // namespace homodyne

namespace homodyne {
namespace {

std::string FormatGb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g GB", bytes / kBytesPerGb);
  return text;
}

StrategyKind SizeTier(int64_t fit_points) {
  if (fit_points < 1'000'000) return StrategyKind::kStandard;
  if (fit_points < 10'000'000) return StrategyKind::kLarge;
  if (fit_points < 100'000'000) return StrategyKind::kChunked;
  return StrategyKind::kStreaming;
}

}  // namespace

StrategyChoice SelectStrategy(const ProblemSize& size, double available_bytes,
                              std::optional<StrategyKind> forced) {
  constexpr double kUsableFraction = 0.7;
  const double usable = kUsableFraction * available_bytes;
  if (forced) {
    MemoryEstimate estimate = EstimateMemory(*forced, size);
    if (static_cast<double>(estimate.TotalBytes()) > available_bytes) {
      // Only streaming's budget does not grow with the data.
      const std::string leaner = *forced == StrategyKind::kStreaming
                                     ? ""
                                     : "choose a leaner strategy (streaming: constant memory) or ";
      throw InputError("strategy " + std::string(ToString(*forced)) + " needs about " +
                       FormatGb(static_cast<double>(estimate.TotalBytes())) + " but only " +
                       FormatGb(available_bytes) + " is available; " + leaner +
                       "raise --memory-limit-gb");
    }
    return {*forced, "forced by the user", std::move(estimate)};
  }
  // Tiers count points as chi2 does (both triangles), like the reference's n_phi * N^2.
  const int64_t counted_points = 2 * size.fit_points;
  StrategyKind kind = SizeTier(counted_points);
  std::string reason =
      std::to_string(counted_points) + " points: size tier " + std::string(ToString(kind));
  MemoryEstimate estimate = EstimateMemory(kind, size);
  while (static_cast<double>(estimate.TotalBytes()) > usable && kind != StrategyKind::kStreaming) {
    const StrategyKind leaner = static_cast<StrategyKind>(static_cast<int>(kind) + 1);
    reason += "; " + std::string(ToString(kind)) + " needs " +
              FormatGb(static_cast<double>(estimate.TotalBytes())) + " > 70% of " +
              FormatGb(available_bytes) + ", upgraded to " + std::string(ToString(leaner));
    kind = leaner;
    estimate = EstimateMemory(kind, size);
  }
  return {kind, reason, std::move(estimate)};
}

}  // namespace homodyne
