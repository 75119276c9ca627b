// PrepareByRing (src/objective/pass_backend.h): the passes of a model whose matrices have several
// q, one one-q pass per ring on any backend (docs/design.md section 2d). The mode
// code and the backends know one q; the angles are grouped by q here, above them.
#include <algorithm>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "objective/pass_backend.h"

namespace homodyne {
namespace {

class RingSplitPass final : public PreparedPass {
 public:
  RingSplitPass(PassBackend& backend, const PassPoint& point)
      : num_angles_(static_cast<int>(point.phi_degrees.size())) {
    const ModelEvaluation& evaluation = *point.evaluation;
    const HomodyneModel& model = evaluation.model();
    HOMODYNE_CHECK(static_cast<int>(model.angle_q_inv_angstrom().size()) == num_angles_);
    rings_.resize(static_cast<size_t>(model.num_rings()));
    for (int k = 0; k < num_angles_; ++k) {
      Ring& ring = rings_[static_cast<size_t>(model.RingOfAngle(k))];
      const size_t at = static_cast<size_t>(k);
      ring.angles.push_back(k);
      ring.phi.push_back(point.phi_degrees[at]);
      ring.contrast.push_back(point.contrast[at]);
      ring.offset.push_back(point.offset[at]);
    }
    for (size_t r = 0; r < rings_.size(); ++r) {
      Ring& ring = rings_[r];
      HOMODYNE_CHECK(!ring.angles.empty());  // a ring is a q some matrix has
      PassPoint ring_point = point;
      ring_point.evaluation = &evaluation.Ring(static_cast<int>(r));
      ring_point.phi_degrees = ring.phi;
      ring_point.contrast = ring.contrast;
      ring_point.offset = ring.offset;
      ring.pass = backend.Prepare(ring_point);
    }
    gram_size_ = rings_.front().pass->gram_size();
  }

  int gram_size() const override { return gram_size_; }

  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
    const size_t n = static_cast<size_t>(num_angles_);
    const size_t batch_count = batches.size();
    HOMODYNE_CHECK(data.size() == batch_count * n && grams.size() == batch_count * n &&
                   finite_points.size() == batch_count * n);
    for (Ring& ring : rings_) {
      const size_t n_ring = ring.angles.size();
      const size_t entries = batch_count * n_ring;
      ring.data.resize(entries);
      ring.finite.resize(entries);
      if (ring.grams.size() < entries) ring.grams.resize(entries);
      for (size_t i = 0; i < batch_count; ++i) {
        for (size_t k = 0; k < n_ring; ++k) {
          const size_t slot = i * n + static_cast<size_t>(ring.angles[k]);
          ring.data[i * n_ring + k] = data[slot];
          // The caller's matrices are sized for the pass: exchanged, not copied.
          ring.grams[i * n_ring + k].swap(grams[slot]);
        }
      }
      ring.pass->ComputeGrams(batches, ring.data,
                              std::span<Eigen::MatrixXd>(ring.grams.data(), entries), ring.finite);
      for (size_t i = 0; i < batch_count; ++i) {
        for (size_t k = 0; k < n_ring; ++k) {
          const size_t slot = i * n + static_cast<size_t>(ring.angles[k]);
          grams[slot].swap(ring.grams[i * n_ring + k]);
          finite_points[slot] = ring.finite[i * n_ring + k];
        }
      }
    }
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    const size_t n = static_cast<size_t>(num_angles_);
    const size_t batch_count = batches.size();
    HOMODYNE_CHECK(data.size() == batch_count * n && squared_residuals.size() == batch_count);
    std::fill(squared_residuals.begin(), squared_residuals.end(), 0.0);
    for (Ring& ring : rings_) {
      const size_t n_ring = ring.angles.size();
      ring.data.resize(batch_count * n_ring);
      ring.sums.resize(batch_count);
      for (size_t i = 0; i < batch_count; ++i) {
        for (size_t k = 0; k < n_ring; ++k) {
          ring.data[i * n_ring + k] = data[i * n + static_cast<size_t>(ring.angles[k])];
        }
      }
      ring.pass->ComputeSquaredResiduals(batches, ring.data, ring.sums);
      for (size_t i = 0; i < batch_count; ++i) squared_residuals[i] += ring.sums[i];
    }
  }

 private:
  // One ring's matrices, their point values, its prepared pass and the scratch of its calls.
  struct Ring {
    std::vector<int> angles;  // the point's angle indices, ascending
    std::vector<double> phi, contrast, offset;
    std::unique_ptr<PreparedPass> pass;
    std::vector<const float*> data;
    std::vector<Eigen::MatrixXd> grams;
    std::vector<int64_t> finite;
    std::vector<double> sums;
  };
  int num_angles_;
  int gram_size_ = 0;
  std::vector<Ring> rings_;
};

}  // namespace

std::unique_ptr<PreparedPass> PrepareByRing(PassBackend& backend, const PassPoint& point) {
  HOMODYNE_CHECK(point.evaluation != nullptr);
  if (point.evaluation->num_rings() == 1) return backend.Prepare(point);
  return std::make_unique<RingSplitPass>(backend, point);
}

}  // namespace homodyne
