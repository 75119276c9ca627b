// ScalingPassFromFullPass (src/objective/pass_backend.h): the scaling pass of a backend without a
// kernel of its own for it, as the 3 x 3 sub-blocks of the full pass's Gram matrices.
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "objective/pass_backend.h"

namespace homodyne {
namespace {

class ScalingFromFullPass final : public PreparedPass {
 public:
  explicit ScalingFromFullPass(std::unique_ptr<PreparedPass> full_pass)
      : full_pass_(std::move(full_pass)) {
    HOMODYNE_CHECK(full_pass_ != nullptr && full_pass_->gram_size() >= 3);
  }

  int gram_size() const override { return 3; }

  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
    HOMODYNE_CHECK(grams.size() == finite_points.size());
    const int g = full_pass_->gram_size();
    if (full_grams_.size() < grams.size()) full_grams_.resize(grams.size());
    for (Eigen::MatrixXd& gram : full_grams_) gram.resize(g, g);
    const std::span<Eigen::MatrixXd> full(full_grams_.data(), grams.size());
    full_pass_->ComputeGrams(batches, data, full, finite_points);
    // The contrast, offset and e columns are the full Gram's last three (batched_objective.h
    // AngleGrams).
    for (size_t slot = 0; slot < grams.size(); ++slot) {
      HOMODYNE_CHECK(grams[slot].rows() == 3 && grams[slot].cols() == 3);
      grams[slot] = full[slot].bottomRightCorner(3, 3);
    }
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    full_pass_->ComputeSquaredResiduals(batches, data, squared_residuals);
  }

 private:
  const std::unique_ptr<PreparedPass> full_pass_;
  std::vector<Eigen::MatrixXd> full_grams_;  // the last call's full Gram matrices
};

}  // namespace

std::unique_ptr<PreparedPass> ScalingPassFromFullPass(std::unique_ptr<PreparedPass> full_pass) {
  return std::make_unique<ScalingFromFullPass>(std::move(full_pass));
}

}  // namespace homodyne
