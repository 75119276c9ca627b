// The chi2 objective of DESIGN section 1 on in-memory packed data: the "large" strategy data path
// (DESIGN section 3) with individual per-angle scaling (one contrast and one offset per angle).
//
// Parameter vector layout (P = P_phys + 2 n_angles):
//   theta = [physical_0 .. physical_{P_phys-1},             PhysicalParameterNames order
//            contrast_0 .. contrast_{n-1},                   one per angle, angle order
//            offset_0   .. offset_{n-1}]                     one per angle, angle order
// (the reference orders contrasts, offsets, physical; callers map to results by these indices).
//
// Residuals follow lm.h: r = (data - model) / sigma, J = dr/dtheta. Only the strict upper
// triangle is evaluated; every point counts twice (chi2, J^T J, J^T r are doubled and
// num_residuals() is twice the number of finite points), which equals the fit of the full
// symmetric matrices without the diagonal. Non-finite data points are skipped and counted.
//
// A pass: one ModelEvaluation (O(N)), then OpenMP over a fixed list of batches (a batch is a run of
// whole rows of one angle, about batch_points points). Each batch accumulates a dense
// (P_phys + 2)^2 block (its angle's scaling parameters only), stored per batch; the blocks are
// scattered into the P x P matrix in batch order, so the result is bitwise independent of the
// thread count and of scheduling.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/dataset.h"
#include "homodyne/lm.h"
#include "homodyne/model.h"

namespace homodyne {

class PackedDataObjective : public LeastSquaresProblem {
 public:
  // One packed strict upper triangle per angle (dataset.h order, UpperTriangleSize(N) values).
  using PackedData = std::vector<std::vector<float>>;

  // Default batch size in points (DESIGN section 3 clamps the automatic size to [1e3, 1e5]).
  static constexpr int64_t kDefaultBatchPoints = 10000;

  // model: the fitted grid (N = model.num_times()). phi_degrees: one angle per data entry.
  // sigma > 0: the per-point noise (optimization.nlsq.sigma). batch_points >= 1.
  // Throws std::invalid_argument on inconsistent sizes or values.
  PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees, double sigma,
                      PackedData data, int64_t batch_points = kDefaultBatchPoints);

  // Every angle's packed strict upper triangle from the source, read as float in blocks of whole
  // rows (about rows_block_points points per read). Propagates the source's DataError.
  static PackedData LoadPackedData(BatchSource& source, int64_t rows_block_points = 1 << 20);

  int num_parameters() const override { return num_physical_ + 2 * num_angles(); }
  // 2 * (finite upper-triangle points).
  int64_t num_residuals() const override { return 2 * num_finite_points_; }
  NormalEquations Accumulate(const Eigen::VectorXd& theta) override;
  double Cost(const Eigen::VectorXd& theta) override;

  int num_physical() const { return num_physical_; }
  int num_angles() const { return static_cast<int>(phi_degrees_.size()); }
  int ContrastIndex(int angle) const { return num_physical_ + angle; }
  int OffsetIndex(int angle) const { return num_physical_ + num_angles() + angle; }
  // Upper-triangle points of all angles, finite or not.
  int64_t num_points() const { return num_points_; }
  // Upper-triangle data points skipped because they are NaN or +-inf.
  int64_t num_nonfinite_points() const { return num_points_ - num_finite_points_; }
  int num_batches() const { return static_cast<int>(batches_.size()); }
  const HomodyneModel& model() const { return model_; }

 private:
  struct Batch {
    int angle = 0;
    int row_begin = 0;
    int row_end = 0;
    int64_t offset = 0;  // first point in the angle's packed data
    int64_t size = 0;    // points
  };

  void CheckTheta(const Eigen::VectorXd& theta) const;
  template <int kM>
  void AccumulateBatches(const Eigen::VectorXd& theta, std::vector<double>& partials) const;

  HomodyneModel model_;
  std::vector<double> phi_degrees_;
  double sigma_;
  PackedData data_;
  int num_physical_;
  int64_t num_points_ = 0;
  int64_t num_finite_points_ = 0;
  int64_t max_batch_size_ = 0;
  std::vector<Batch> batches_;
};

}  // namespace homodyne
