// HomodyneModel and ModelEvaluation (include/homodyne/model.h): the mode-independent wrapper around
// the mode's ModePoint (mode_point.h), which the mode catalog builds (mode_catalog.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
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

HomodyneModel::HomodyneModel(AnalysisMode mode, ScatteringGeometry geometry,
                             std::vector<double> times_seconds,
                             std::vector<double> angle_q_inv_angstrom)
    : HomodyneModel(mode, geometry, std::move(times_seconds)) {
  if (angle_q_inv_angstrom.empty()) {
    throw std::invalid_argument("model: no matrix q (angle_q_inv_angstrom is empty)");
  }
  for (size_t k = 0; k < angle_q_inv_angstrom.size(); ++k) {
    const double q = angle_q_inv_angstrom[k];
    if (!(std::isfinite(q) && q > 0.0)) {
      throw std::invalid_argument("model: matrix " + std::to_string(k) + " has q = " +
                                  std::to_string(q) + " 1/A; q must be finite and > 0");
    }
  }
  angle_q_ = std::move(angle_q_inv_angstrom);
  geometry_.q_inv_angstrom = angle_q_.front();
  std::vector<double> distinct = angle_q_;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() == 1) return;  // one q: the one-q model (no rings)
  auto rings = std::make_shared<std::vector<HomodyneModel>>();
  rings->reserve(distinct.size());
  for (double q : distinct) {
    ScatteringGeometry ring_geometry = geometry_;
    ring_geometry.q_inv_angstrom = q;
    rings->emplace_back(mode_, ring_geometry, times_seconds_);
  }
  angle_ring_.reserve(angle_q_.size());
  for (double q : angle_q_) {
    angle_ring_.push_back(
        static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), q) - distinct.begin()));
  }
  rings_ = std::move(rings);
}

double HomodyneModel::AngleQ(int angle) const {
  if (angle_q_.empty()) return geometry_.q_inv_angstrom;
  HOMODYNE_CHECK(0 <= angle && angle < static_cast<int>(angle_q_.size()));
  return angle_q_[static_cast<size_t>(angle)];
}

int HomodyneModel::RingOfAngle(int angle) const {
  if (rings_ == nullptr) return 0;
  HOMODYNE_CHECK(0 <= angle && angle < static_cast<int>(angle_ring_.size()));
  return angle_ring_[static_cast<size_t>(angle)];
}

const HomodyneModel& HomodyneModel::Ring(int ring) const {
  HOMODYNE_CHECK(0 <= ring && ring < num_rings());
  return rings_ == nullptr ? *this : (*rings_)[static_cast<size_t>(ring)];
}

ModelEvaluation::ModelEvaluation(const HomodyneModel& model,
                                 std::span<const double> physical_parameters)
    : model_(model), parameters_(physical_parameters.begin(), physical_parameters.end()) {
  HOMODYNE_CHECK(static_cast<int>(parameters_.size()) == model.num_physical());
  if (model.num_rings() == 1) {
    point_ = DefinitionOf(model.mode()).evaluate(model, parameters_);
    return;
  }
  // One evaluation per ring, each the one-q model's (docs/design.md section 2d).
  rings_.reserve(static_cast<size_t>(model.num_rings()));
  for (int r = 0; r < model.num_rings(); ++r) {
    rings_.push_back(std::make_unique<ModelEvaluation>(model.Ring(r), parameters_));
  }
}

const ModePoint& ModelEvaluation::point() const {
  HOMODYNE_CHECK(point_ != nullptr);  // a model of several rings: Ring(r).point()
  return *point_;
}

const ModelEvaluation& ModelEvaluation::Ring(int ring) const {
  HOMODYNE_CHECK(0 <= ring && ring < num_rings());
  return rings_.empty() ? *this : *rings_[static_cast<size_t>(ring)];
}

ModelEvaluation::~ModelEvaluation() = default;
ModelEvaluation::ModelEvaluation(ModelEvaluation&&) noexcept = default;

void ModelEvaluation::ComputeC2RowSegment(double phi_degrees, double contrast, double offset, int i,
                                          int j_begin, int j_end, std::span<double> c2_out) const {
  const int n = model_.num_times();
  HOMODYNE_CHECK(0 <= i && i < n);
  HOMODYNE_CHECK(0 <= j_begin && j_begin <= j_end && j_end <= n);
  HOMODYNE_CHECK(c2_out.size() >= static_cast<std::size_t>(j_end - j_begin));
  point().EvaluateSegment(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out.data(), nullptr);
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
    this->point().EvaluateSegment(phi_degrees, contrast, offset, i, i + 1, n, c2, jac);
    point += static_cast<std::size_t>(n - 1 - i);
  }
}

}  // namespace homodyne
