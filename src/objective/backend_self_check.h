// The self-check of a device backend (docs/design.md section 5; docs/backends.md, The
// self-check): before its first pass computes anything, a device backend's sums on a subsample are
// compared with the CPU backend's, and a backend that disagrees is not used. Written against the
// PassBackend interface only, so the host emulation (or a test backend that corrupts a sum)
// exercises it on a machine without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "homodyne/config.h"
#include "objective/pass_backend.h"

namespace homodyne {

// The largest difference the self-check accepts (docs/backends.md, The self-check): a Gram entry
// (a, c) passes when |x - y| <= kSelfCheckTolerance sqrt(G_aa G_cc) (G: the CPU's Gram; the scale
// that bounds |G_ac|), a cost when |x - y| <= kSelfCheckTolerance |y|; finite counts must be
// equal. The device computes the CPU's sums up to the rounding of its exp, sin, cos (a few 1e-14
// measured between the host emulation and the CPU); a wrong index, a race or a lost block gives
// differences of order one. 1e-9 lies between the two by orders of magnitude, and far below what
// would move a fit's parameters by a fraction of their uncertainty.
inline constexpr double kSelfCheckTolerance = 1e-9;

// The outcome of one self-check, for the log and convergence_metrics.json.
struct SelfCheckReport {
  bool ran = false;                 // false: no check was made (no pass yet)
  bool passed = false;              // every sum within kSelfCheckTolerance
  double largest_difference = 0.0;  // by the measure of kSelfCheckTolerance
  std::string where;     // the largest difference's sum, e.g. "angle 1 Gram entry (4, 2)"
  std::string failure;   // set when the device backend could not compute at all
  int64_t points = 0;    // points per angle of the subsample
  double seconds = 0.0;  // both backends' passes on the subsample
  // One line for the log, e.g. "backend self-check passed: 2 passes on 4095 points per angle,
  // largest difference 3.1e-15 (cost of batch 0), tolerance 1e-09, 0.012 s".
  std::string Describe() const;
};

// One full pass and one cost pass at `point` over `batches` on both backends, compared.
SelfCheckReport CompareBackends(PassBackend& candidate, PassBackend& reference,
                                const PassPoint& point, std::span<const RowBatch> batches,
                                std::span<const float* const> data);

// What a failed self-check does: performance.backend auto falls back to the reference (the CPU)
// with a warning; cuda stops the fit with the report's message (ConfigError "backend cuda: ...").
enum class SelfCheckPolicy { kFallBack, kStop };

// The policy of a requested backend: kAuto -> kFallBack, kCuda -> kStop (kCpu has no check).
SelfCheckPolicy SelfCheckPolicyFor(BackendKind requested);

// The rows of the subsample: the first batch of the first pass, cut after its first rows of at
// most kSelfCheckPoints points per angle (at least one row).
inline constexpr int64_t kSelfCheckPoints = 4096;

// `device` wrapped in its self-check: the first ComputeGrams or ComputeSquaredResiduals of any
// PreparedPass runs CompareBackends on the subsample of its batches (at the pass's point) against
// `reference` before it computes; on_report receives the report (also when it passed). When the
// check fails, or the device backend throws NotCompiledError (a mode it lacks) or Error while it
// runs: kFallBack computes this and every later pass on `reference` and kind() reports
// reference's kind; kStop throws ConfigError starting "backend cuda: self-check failed: ". The
// check runs once per wrapper. A DevicePassBackend on several devices (device_pass_backend.h) is
// checked device by device, each on the whole subsample (DevicePassBackend::OnDevice); the report
// is the first device's failure or else the largest difference, its `where` (or failure) starting
// with that device's description. The check's data are not kept on the device (its
// PassPoint::stable_data_id is 0).
std::shared_ptr<PassBackend> MakeSelfCheckingBackend(
    std::shared_ptr<PassBackend> device, std::shared_ptr<PassBackend> reference,
    SelfCheckPolicy policy, std::function<void(const SelfCheckReport&)> on_report);

}  // namespace homodyne
