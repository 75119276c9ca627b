// The self-check of a device backend (backend_self_check.h).
#include "objective/backend_self_check.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

// The largest difference so far and where it is (NaN counts as the largest).
struct LargestDifference {
  double value = 0.0;
  std::string where;
  void Note(double difference, double scale, const std::string& what) {
    const double relative = difference == 0.0 ? 0.0 : difference / scale;
    if (!(relative <= value)) {
      value = std::isnan(relative) ? std::numeric_limits<double>::infinity() : relative;
      where = what;
    }
  }
};

// "batch B angle K Gram entry (A, C)" (snprintf: GCC 12's -Wrestrict misfires on the
// concatenation of short strings).
std::string GramEntryName(size_t batch, size_t angle, int a, int c) {
  char text[96];
  std::snprintf(text, sizeof(text), "batch %zu angle %zu Gram entry (%d, %d)", batch, angle, a, c);
  return text;
}

std::string SlotName(size_t batch, size_t angle, const char* what) {
  char text[96];
  std::snprintf(text, sizeof(text), "batch %zu angle %zu %s", batch, angle, what);
  return text;
}

}  // namespace

std::string SelfCheckReport::Describe() const {
  if (!ran) return "backend self-check not run";
  char text[512];
  if (!failure.empty()) {
    std::snprintf(text, sizeof(text), "backend self-check failed: the device backend: %s (%.3g s)",
                  failure.c_str(), seconds);
    return text;
  }
  std::snprintf(text, sizeof(text),
                "backend self-check %s: a full and a cost pass on %lld points per angle, largest "
                "difference %.3g (%s), tolerance %.0e, %.3g s",
                passed ? "passed" : "failed", static_cast<long long>(points), largest_difference,
                where.empty() ? "none" : where.c_str(), kSelfCheckTolerance, seconds);
  return text;
}

SelfCheckReport CompareBackends(PassBackend& candidate, PassBackend& reference,
                                const PassPoint& point, std::span<const RowBatch> batches,
                                std::span<const float* const> data) {
  const auto start = std::chrono::steady_clock::now();
  SelfCheckReport report;
  report.ran = true;
  for (const RowBatch& batch : batches) report.points += batch.points;
  struct Sums {
    std::vector<Eigen::MatrixXd> grams;
    std::vector<int64_t> finite;
    std::vector<double> costs;
  };
  auto compute = [&](PassBackend& backend) {
    const std::unique_ptr<PreparedPass> pass = backend.Prepare(point);
    const int g = pass->gram_size();
    Sums sums;
    sums.grams.assign(data.size(), Eigen::MatrixXd::Zero(g, g));
    sums.finite.assign(data.size(), 0);
    sums.costs.assign(batches.size(), 0.0);
    pass->ComputeGrams(batches, data, sums.grams, sums.finite);
    pass->ComputeSquaredResiduals(batches, data, sums.costs);
    return sums;
  };
  const Sums expected = compute(reference);
  const Sums actual = compute(candidate);
  const size_t num_angles = point.phi_degrees.size();
  LargestDifference largest;
  for (size_t slot = 0; slot < expected.grams.size(); ++slot) {
    const size_t batch = slot / num_angles, angle = slot % num_angles;
    const Eigen::MatrixXd& x = actual.grams[slot];
    const Eigen::MatrixXd& y = expected.grams[slot];
    if (x.rows() != y.rows() || x.cols() != y.cols()) {
      largest.Note(std::numeric_limits<double>::infinity(), 1.0,
                   SlotName(batch, angle, "Gram size"));
      continue;
    }
    if (actual.finite[slot] != expected.finite[slot]) {
      largest.Note(std::numeric_limits<double>::infinity(), 1.0,
                   SlotName(batch, angle, "finite point count"));
    }
    for (int a = 0; a < y.rows(); ++a) {
      for (int c = 0; c <= a; ++c) {
        largest.Note(std::abs(x(a, c) - y(a, c)), std::sqrt(std::abs(y(a, a) * y(c, c))),
                     GramEntryName(batch, angle, a, c));
      }
    }
  }
  for (size_t b = 0; b < expected.costs.size(); ++b) {
    largest.Note(std::abs(actual.costs[b] - expected.costs[b]), std::abs(expected.costs[b]),
                 "cost of batch " + std::to_string(b));
  }
  report.largest_difference = largest.value;
  report.where = largest.where;
  report.passed = largest.value <= kSelfCheckTolerance;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

SelfCheckPolicy SelfCheckPolicyFor(BackendKind requested) {
  return requested == BackendKind::kCuda ? SelfCheckPolicy::kStop : SelfCheckPolicy::kFallBack;
}

namespace {

class SelfCheckingBackend : public PassBackend,
                            public std::enable_shared_from_this<SelfCheckingBackend> {
 public:
  SelfCheckingBackend(std::shared_ptr<PassBackend> device, std::shared_ptr<PassBackend> reference,
                      SelfCheckPolicy policy, std::function<void(const SelfCheckReport&)> on_report)
      : device_(std::move(device)),
        reference_(std::move(reference)),
        policy_(policy),
        on_report_(std::move(on_report)) {
    HOMODYNE_CHECK(device_ != nullptr && reference_ != nullptr);
  }

  BackendKind kind() const override {
    return use_reference_ ? reference_->kind() : device_->kind();
  }

  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override;

  // Runs the check on the subsample of `batches` at `point` unless it ran; afterwards
  // use_reference() says which backend computes.
  void CheckOnce(const PassPoint& point, std::span<const RowBatch> batches,
                 std::span<const float* const> data) {
    if (checked_) return;
    checked_ = true;
    const int num_times = point.evaluation->model().num_times();
    const RowBatch& first = batches.front();
    RowBatch subsample = first;
    subsample.row_end = first.row_begin + 1;
    while (subsample.row_end < first.row_end &&
           UpperTriangleRowsSize(num_times, first.row_begin, subsample.row_end + 1) <=
               kSelfCheckPoints) {
      ++subsample.row_end;
    }
    subsample.points = UpperTriangleRowsSize(num_times, subsample.row_begin, subsample.row_end);
    const std::span<const float* const> subsample_data = data.first(point.phi_degrees.size());
    // The check's arrays (a prefix of the first batch's) are copied for its launches, not kept
    // on the device.
    PassPoint check_point = point;
    check_point.stable_data_id = 0;
    // The check compares full passes, whichever columns the pass that triggers it asks for.
    check_point.columns = PassColumns::kAll;
    // Each device of a backend on several (DevicePassBackend::OnDevice) on the whole subsample.
    std::vector<std::pair<std::string, std::shared_ptr<PassBackend>>> units;
    const auto* devices = dynamic_cast<const DevicePassBackend*>(device_.get());
    if (devices != nullptr && devices->num_devices() > 1) {
      for (int d = 0; d < devices->num_devices(); ++d) {
        units.emplace_back(devices->device(d).description() + ": ", devices->OnDevice(d));
      }
    } else {
      units.emplace_back("", device_);
    }
    SelfCheckReport report;
    for (const auto& [name, unit] : units) {
      SelfCheckReport unit_report;
      const auto start = std::chrono::steady_clock::now();
      try {
        unit_report = CompareBackends(*unit, *reference_, check_point, std::span(&subsample, 1),
                                      subsample_data);
      } catch (const Error& error) {  // NotCompiledError (a mode it lacks), a device error
        unit_report.ran = true;
        unit_report.points = subsample.points;
        unit_report.failure = error.what();
        unit_report.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      if (!unit_report.failure.empty()) unit_report.failure = name + unit_report.failure;
      if (!unit_report.where.empty()) unit_report.where = name + unit_report.where;
      // The report of the devices: the first failure, else the largest difference.
      const double seconds = report.seconds + unit_report.seconds;
      const bool worse = !report.ran || (report.failure.empty() && !unit_report.failure.empty()) ||
                         (report.failure.empty() &&
                          !(unit_report.largest_difference <= report.largest_difference));
      if (worse) {
        const bool passed = (!report.ran || report.passed) && unit_report.passed;
        report = unit_report;
        report.passed = passed;
      } else {
        report.passed = report.passed && unit_report.passed;
      }
      report.seconds = seconds;
    }
    if (on_report_) on_report_(report);
    if (report.passed) return;
    if (policy_ == SelfCheckPolicy::kStop) {
      throw ConfigError("backend cuda: self-check failed: " + report.Describe() +
                        "; use --backend cpu");
    }
    use_reference_ = true;
  }

  bool use_reference() const { return use_reference_; }
  PassBackend& device() { return *device_; }
  PassBackend& reference() { return *reference_; }

 private:
  const std::shared_ptr<PassBackend> device_;
  const std::shared_ptr<PassBackend> reference_;
  const SelfCheckPolicy policy_;
  const std::function<void(const SelfCheckReport&)> on_report_;
  bool checked_ = false;
  bool use_reference_ = false;
};

// A pass of the wrapper: prepared on the backend that computes once the check has run.
class SelfCheckingPreparedPass : public PreparedPass {
 public:
  SelfCheckingPreparedPass(std::shared_ptr<SelfCheckingBackend> backend, const PassPoint& point)
      : backend_(std::move(backend)), point_(point) {}

  int gram_size() const override {
    return GramSizeOf(point_.columns, point_.evaluation->model().num_point_derivatives() + 1);
  }

  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
    if (batches.empty()) return;
    Target(batches, data).ComputeGrams(batches, data, grams, finite_points);
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    if (batches.empty()) return;
    Target(batches, data).ComputeSquaredResiduals(batches, data, squared_residuals);
  }

 private:
  PreparedPass& Target(std::span<const RowBatch> batches, std::span<const float* const> data) {
    backend_->CheckOnce(point_, batches, data);
    const bool use_reference = backend_->use_reference();
    if (target_ == nullptr || use_reference != target_is_reference_) {
      target_ = use_reference ? backend_->reference().Prepare(point_)
                              : backend_->device().Prepare(point_);
      target_is_reference_ = use_reference;
    }
    return *target_;
  }

  const std::shared_ptr<SelfCheckingBackend> backend_;
  const PassPoint point_;
  std::unique_ptr<PreparedPass> target_;
  bool target_is_reference_ = false;
};

std::unique_ptr<PreparedPass> SelfCheckingBackend::Prepare(const PassPoint& point) {
  HOMODYNE_CHECK(point.evaluation != nullptr && point.contrast.size() == point.phi_degrees.size() &&
                 point.offset.size() == point.phi_degrees.size());
  return std::make_unique<SelfCheckingPreparedPass>(shared_from_this(), point);
}

}  // namespace

std::shared_ptr<PassBackend> MakeSelfCheckingBackend(
    std::shared_ptr<PassBackend> device, std::shared_ptr<PassBackend> reference,
    SelfCheckPolicy policy, std::function<void(const SelfCheckReport&)> on_report) {
  return std::make_shared<SelfCheckingBackend>(std::move(device), std::move(reference), policy,
                                               std::move(on_report));
}

}  // namespace homodyne
