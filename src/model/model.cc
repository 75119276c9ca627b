// HomodyneModel and ModelEvaluation (include/homodyne/model.h): the mode-independent wrapper around
// the mode's ModePoint (mode_point.h), which the mode catalog builds (mode_catalog.h).
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/mode_catalog.h"
#include "model/mode_point.h"

namespace homodyne {

HomodyneModel::HomodyneModel(AnalysisMode mode, ScatteringGeometry geometry,
                             std::vector<double> times_seconds)
    : mode_(mode), geometry_(geometry), times_seconds_(std::move(times_seconds)) {
  HOMODYNE_CHECK(!times_seconds_.empty());
}

ModelEvaluation::ModelEvaluation(const HomodyneModel& model,
                                 std::span<const double> physical_parameters)
    : model_(model), parameters_(physical_parameters.begin(), physical_parameters.end()) {
  HOMODYNE_CHECK(static_cast<int>(parameters_.size()) == model.num_physical());
  point_ = DefinitionOf(model.mode()).evaluate(model, parameters_);
}

ModelEvaluation::~ModelEvaluation() = default;
ModelEvaluation::ModelEvaluation(ModelEvaluation&&) noexcept = default;

void ModelEvaluation::ComputeC2RowSegment(double phi_degrees, double contrast, double offset, int i,
                                          int j_begin, int j_end, std::span<double> c2_out) const {
  const int n = model_.num_times();
  HOMODYNE_CHECK(0 <= i && i < n);
  HOMODYNE_CHECK(0 <= j_begin && j_begin <= j_end && j_end <= n);
  HOMODYNE_CHECK(c2_out.size() >= static_cast<std::size_t>(j_end - j_begin));
  point_->EvaluateSegment(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out.data(),
                          nullptr);
}

void ModelEvaluation::ComputeC2Matrix(double phi_degrees, double contrast, double offset,
                                      std::span<double> c2_out) const {
  const int n = model_.num_times();
  const std::size_t row_size = static_cast<std::size_t>(n);
  HOMODYNE_CHECK(c2_out.size() >= row_size * row_size);
  for (int i = 0; i < n; ++i) {
    ComputeC2RowSegment(phi_degrees, contrast, offset, i, 0, n,
                        c2_out.subspan(static_cast<std::size_t>(i) * row_size, row_size));
  }
}

void ModelEvaluation::EvaluateUpperTriangleRows(double phi_degrees, double contrast, double offset,
                                                int row_begin, int row_end,
                                                std::span<double> c2_out,
                                                std::span<double> jacobian_out) const {
  const int n = model_.num_times();
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= n);
  // Points in rows [row_begin, row_end): sum of (N - 1 - i).
  std::size_t num_points = 0;
  for (int i = row_begin; i < row_end; ++i) num_points += static_cast<std::size_t>(n - 1 - i);
  const std::size_t stride = static_cast<std::size_t>(model_.num_point_derivatives());
  const bool with_jacobian = !jacobian_out.empty();
  HOMODYNE_CHECK(c2_out.size() >= num_points);
  HOMODYNE_CHECK(!with_jacobian || jacobian_out.size() >= num_points * stride);

  std::size_t point = 0;
  for (int i = row_begin; i < row_end; ++i) {
    double* c2 = c2_out.data() + point;
    double* jac = with_jacobian ? jacobian_out.data() + point * stride : nullptr;
    point_->EvaluateSegment(phi_degrees, contrast, offset, i, i + 1, n, c2, jac);
    point += static_cast<std::size_t>(n - 1 - i);
  }
}

}  // namespace homodyne
