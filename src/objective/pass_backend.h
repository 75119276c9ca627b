// The compute backends of a fitting pass (docs/design.md section 5).
//
// A pass (batched_objective.h) is a sum over batches. The objective owns the batch list, fetches
// the data (PassData), reduces the per-batch sums in batch order and hands the normal equations to
// the LM core; a backend computes only the per-batch sums, for any range of batches it is given:
//   - PassBackend::Prepare binds one point theta (the model evaluated at its physical
//     parameters, the angles, the per-angle contrast and offset) and returns a PreparedPass;
//   - PreparedPass::ComputeGrams / ComputeSquaredResiduals compute, for every batch of a range,
//     each angle's Gram matrix of [J | e] (full passes) or the sum of e^2 (cost-only passes).
// A batch's output depends only on the point, the batch's rows and its data, never on which
// other batches share the call, on the thread count or on the call order. So the objective's
// batch-order reduction gives bitwise the same sums whatever the chunking, a device backend may
// compute a whole chunk of batches in one launch, and the ranks of an MPI job each compute a share
// of every chunk, whose per-batch sums they gather and reduce in batch order (docs/design.md
// section 5b).
//
// Backends: cpu (the batches of a range over the threads of worker_pool.h, the vectorised
// PassKernel of src/model/pass_kernel.h); cuda (device_pass_backend.h: the kernels of
// cuda/pass_kernels.cu, always behind the self-check of backend_self_check.h) and its host
// emulation for tests (docs/backends.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <Eigen/Dense>

#include "homodyne/config.h"  // BackendKind
#include "homodyne/model.h"
#include "model/robust_loss.h"
#include "objective/batched_objective.h"

namespace homodyne {

// PassColumns (which columns of [J | e] a pass's Gram matrices cover) is in batched_objective.h.

// The side of the Gram matrices of a pass over `columns` for a model of full_gram_size = M + 1.
inline int GramSizeOf(PassColumns columns, int full_gram_size) {
  return columns == PassColumns::kScaling ? 3 : full_gram_size;
}

// The point theta of a pass, as a backend needs it. Views: what they refer to must outlive every
// PreparedPass made from this point.
struct PassPoint {
  const ModelEvaluation* evaluation = nullptr;  // the model at theta's physical parameters
  std::span<const double> phi_degrees;          // one per angle
  std::span<const double> contrast;             // one per angle (theta's contrast block)
  std::span<const double> offset;               // one per angle (theta's offset block)
  // The loss the pass applies (src/model/robust_loss.h): linear gives the sums documented below;
  // another rescales each point's row of [J | e] and puts s^2 sum rho(z) where e^T e would be.
  PassLoss loss;
  // Where the data pointers of the passes' calls come from (PassData::stable_data_id):
  //   0 (the default): buffers that may be reused with other values from one call to the next
  //     (streaming's double buffers, a test's vectors): a backend reads them during the call only;
  //   nonzero: every pointer the calls pass points at values that stay valid and unchanged for
  //     as long as data of this id exist, and no two data of one process ever share an id. A
  //     device backend may then keep a copy of a (id, pointer, points) array on the device and
  //     use it in later calls instead of copying the values again (device_pass_backend.h,
  //     ResidentDataCache).
  uint64_t stable_data_id = 0;
  // The columns of ComputeGrams' matrices (PassColumns); kScaling requires the linear loss.
  PassColumns columns = PassColumns::kAll;
};

// The per-batch sums of passes at one point, on one backend. Used by one pass at a time (not
// thread-safe); the data pointers are those of PassData::Fetch.
//
// Layout of a call on batches[0 .. B): data, grams and finite_points hold B * num_angles entries,
// entry i * num_angles + k for batch i and angle k. data[i * num_angles + k] points at the
// batches[i].points values of angle k (dataset.h packed order).
class PreparedPass {
 public:
  virtual ~PreparedPass() = default;

  // The side of each angle's Gram matrix: M + 1 = P_phys + 3 ([J | e], batched_objective.h
  // AngleGrams) for PassColumns::kAll, 3 for kScaling (GramSizeOf).
  virtual int gram_size() const = 0;

  // Sets grams[i * num_angles + k] (gram_size() square, allocated by the caller) to angle k's
  // unscaled Gram matrix [J | e]^T [J | e] over batch i's finite data points (J = d c2 /
  // d(physical..., contrast_k, offset_k), e = data - c2; under PassColumns::kScaling J = d c2 /
  // d(contrast_k, offset_k) only), and finite_points[...] to their number. Only the lower
  // triangle and the diagonal are defined on return.
  virtual void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                            std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) = 0;

  // Sets squared_residuals[i] to the sum of e^2 over batch i's finite data points of every angle
  // (B entries).
  virtual void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                                       std::span<const float* const> data,
                                       std::span<double> squared_residuals) = 0;
};

// One compute backend. Shared by the objectives of a fit (the global phase's subsample and the
// strategy's objective), which use it one after the other.
class PassBackend {
 public:
  virtual ~PassBackend() = default;
  // kCpu or kCuda (never kAuto): what the results report as the backend.
  virtual BackendKind kind() const = 0;
  // Binds a pass's point. point.evaluation and the spans must outlive the result; their sizes
  // agree (phi_degrees, contrast and offset have one value per angle).
  virtual std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) = 0;
  // True when its passes take batches of strided rows (RowBatch::row_stride > 1).
  virtual bool SupportsRowStride() const { return false; }
};

// The CPU backend: the batches of each call over the worker pool's threads (worker_pool.h; a
// call with too few points for them runs on the calling thread), PassKernel per batch (for
// PassColumns::kScaling its own kernel, PassKernel::AccumulateScalingRows).
std::shared_ptr<PassBackend> MakeCpuPassBackend();

// point prepared on `backend`, whatever the rings of its model (docs/design.md section 2d): a
// model of one q is backend.Prepare(point) itself; a model of several is one pass
// prepared on the backend per ring, over that ring's matrices (in angle order) at the ring's
// one-q evaluation (ModelEvaluation::Ring), whose per-batch sums the result puts back in the
// point's angle order. Each ring's sums are then those of a data set of that ring's matrices
// alone; a batch's sum of e^2 adds the rings' in ring order. The backends see one-q points only.
std::unique_ptr<PreparedPass> PrepareByRing(PassBackend& backend, const PassPoint& point);

// A PassColumns::kScaling pass made from a prepared kAll pass at the same point (a backend
// without a kernel of its own for the scaling columns: the device backends): ComputeGrams
// computes the full Gram matrices and keeps their 3 x 3 sub-blocks of the contrast, offset and e
// columns, so the sums are those of the full pass; ComputeSquaredResiduals is the full pass's.
std::unique_ptr<PreparedPass> ScalingPassFromFullPass(std::unique_ptr<PreparedPass> full_pass);

}  // namespace homodyne
