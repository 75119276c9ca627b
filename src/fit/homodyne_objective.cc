// PackedDataObjective (include/homodyne/objective.h): chi2 and normal equations on in-memory packed
// upper-triangle data, OpenMP over a fixed batch list, reduced in batch order.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/objective.h"

namespace homodyne {
namespace {

// Runs of whole rows [row_begin, row_end) of the packed strict upper triangle of n times, each
// closed once it holds >= min_points points (the last may hold fewer). Used for the fixed batch
// list and for loading, so both split the triangle the same way.
struct RowRun {
  int row_begin = 0;
  int row_end = 0;
  int64_t points = 0;
};
std::vector<RowRun> SplitIntoRowRuns(int n, int64_t min_points) {
  std::vector<RowRun> runs;
  int row_begin = 0;
  while (row_begin < n - 1) {
    RowRun run{row_begin, row_begin, 0};
    while (run.row_end < n - 1 && run.points < min_points) {
      run.points += n - 1 - run.row_end;
      ++run.row_end;
    }
    runs.push_back(run);
    row_begin = run.row_end;
  }
  return runs;
}

}  // namespace

PackedDataObjective::PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                         double sigma, PackedData data, int64_t batch_points)
    : model_(std::move(model)),
      phi_degrees_(std::move(phi_degrees)),
      sigma_(sigma),
      data_(std::move(data)),
      num_physical_(model_.num_physical()) {
  if (!(sigma_ > 0.0) || !std::isfinite(sigma_)) {
    throw std::invalid_argument("PackedDataObjective: sigma = " + std::to_string(sigma_) +
                                ": must be finite and > 0");
  }
  if (batch_points < 1) {
    throw std::invalid_argument(
        "PackedDataObjective: batch_points = " + std::to_string(batch_points) + ": must be >= 1");
  }
  if (phi_degrees_.empty() || phi_degrees_.size() != data_.size()) {
    throw std::invalid_argument("PackedDataObjective: " + std::to_string(phi_degrees_.size()) +
                                " angles for " + std::to_string(data_.size()) +
                                " data arrays: need the same number, >= 1");
  }
  const int n = model_.num_times();
  const int64_t per_angle = UpperTriangleSize(n);
  for (size_t k = 0; k < data_.size(); ++k) {
    if (static_cast<int64_t>(data_[k].size()) != per_angle) {
      throw std::invalid_argument("PackedDataObjective: angle " + std::to_string(k) + " has " +
                                  std::to_string(data_[k].size()) + " points, expected " +
                                  std::to_string(per_angle) + " (N = " + std::to_string(n) + ")");
    }
    for (float value : data_[k]) {
      if (std::isfinite(value)) ++num_finite_points_;
    }
    num_points_ += per_angle;
  }
  // Fixed batch list: whole rows of one angle, closed once they hold >= batch_points points.
  const std::vector<RowRun> runs = SplitIntoRowRuns(n, batch_points);
  for (int k = 0; k < num_angles(); ++k) {
    for (const RowRun& run : runs) {
      batches_.push_back(
          {k, run.row_begin, run.row_end, UpperTriangleRowOffset(n, run.row_begin), run.points});
      max_batch_size_ = std::max(max_batch_size_, run.points);
    }
  }
}

PackedDataObjective::PackedData PackedDataObjective::LoadPackedData(BatchSource& source,
                                                                    int64_t rows_block_points) {
  const int n = source.info().num_times();
  const int64_t block_points = std::max<int64_t>(rows_block_points, 1);
  PackedData data(static_cast<size_t>(source.info().num_angles()));
  const std::vector<RowRun> runs = SplitIntoRowRuns(n, block_points);
  for (int k = 0; k < source.info().num_angles(); ++k) {
    std::vector<float>& values = data[static_cast<size_t>(k)];
    values.resize(static_cast<size_t>(UpperTriangleSize(n)));
    for (const RowRun& run : runs) {
      source.ReadUpperTriangleRows(
          k, run.row_begin, run.row_end,
          std::span<float>(values.data() + UpperTriangleRowOffset(n, run.row_begin),
                           static_cast<size_t>(run.points)));
    }
  }
  return data;
}

void PackedDataObjective::CheckTheta(const Eigen::VectorXd& theta) const {
  if (theta.size() != num_parameters()) {
    throw std::invalid_argument("PackedDataObjective: theta has " + std::to_string(theta.size()) +
                                " values, expected " + std::to_string(num_parameters()));
  }
}

// partials: per batch, kM*kM (J^T J block, upper triangle filled) + kM (J^T r block) + 1 (chi2),
// already doubled and divided by sigma^2. Block index a < P_phys is physical parameter a; kM - 2
// is the batch angle's contrast, kM - 1 its offset.
template <int kM>
void PackedDataObjective::AccumulateBatches(const Eigen::VectorXd& theta,
                                            std::vector<double>& partials) const {
  constexpr int kStride = kM * kM + kM + 1;
  const int num_batches = static_cast<int>(batches_.size());
  partials.assign(static_cast<size_t>(num_batches) * kStride, 0.0);
  const ModelEvaluation evaluation(
      model_, std::span<const double>(theta.data(), static_cast<size_t>(num_physical_)));
  const double scale = 2.0 / (sigma_ * sigma_);
#pragma omp parallel
  {
    std::vector<double> c2(static_cast<size_t>(max_batch_size_));
    std::vector<double> jac(static_cast<size_t>(max_batch_size_) * kM);
#pragma omp for schedule(dynamic)
    for (int b = 0; b < num_batches; ++b) {
      const Batch& batch = batches_[static_cast<size_t>(b)];
      const size_t size = static_cast<size_t>(batch.size);
      evaluation.EvaluateUpperTriangleRows(
          phi_degrees_[static_cast<size_t>(batch.angle)], theta[ContrastIndex(batch.angle)],
          theta[OffsetIndex(batch.angle)], batch.row_begin, batch.row_end,
          std::span<double>(c2.data(), size), std::span<double>(jac.data(), size * kM));
      const float* data = data_[static_cast<size_t>(batch.angle)].data() + batch.offset;
      std::array<double, kM * kM> s{};
      std::array<double, kM> v{};
      double chi2 = 0.0;
      for (size_t p = 0; p < size; ++p) {
        const double d = static_cast<double>(data[p]);
        if (!std::isfinite(d)) continue;
        const double e = d - c2[p];
        const double* jp = jac.data() + p * kM;
        chi2 += e * e;
        for (int a = 0; a < kM; ++a) {
          v[static_cast<size_t>(a)] += jp[a] * e;
          for (int c = a; c < kM; ++c) s[static_cast<size_t>(a * kM + c)] += jp[a] * jp[c];
        }
      }
      // r = e / sigma, J = -jac / sigma; each point counts twice.
      double* out = partials.data() + static_cast<size_t>(b) * kStride;
      for (int a = 0; a < kM * kM; ++a) out[a] = scale * s[static_cast<size_t>(a)];
      for (int a = 0; a < kM; ++a) out[kM * kM + a] = -scale * v[static_cast<size_t>(a)];
      out[kM * kM + kM] = scale * chi2;
    }
  }
}

NormalEquations PackedDataObjective::Accumulate(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  const int m = num_physical_ + 2;
  std::vector<double> partials;
  if (m == 5) {
    AccumulateBatches<5>(theta, partials);
  } else {
    AccumulateBatches<9>(theta, partials);
  }
  const int p_total = num_parameters();
  NormalEquations result;
  result.jtj = Eigen::MatrixXd::Zero(p_total, p_total);
  result.jtr = Eigen::VectorXd::Zero(p_total);
  result.num_points = 2 * num_finite_points_;
  const size_t stride = static_cast<size_t>(m * m + m + 1);
  std::vector<int> index(static_cast<size_t>(m));
  for (int a = 0; a < num_physical_; ++a) index[static_cast<size_t>(a)] = a;
  // Scatter in batch order (upper triangle of the global matrix), then mirror.
  for (size_t b = 0; b < batches_.size(); ++b) {
    const int angle = batches_[b].angle;
    index[static_cast<size_t>(m - 2)] = ContrastIndex(angle);
    index[static_cast<size_t>(m - 1)] = OffsetIndex(angle);
    const double* part = partials.data() + b * stride;
    for (int a = 0; a < m; ++a) {
      const int ga = index[static_cast<size_t>(a)];
      for (int c = a; c < m; ++c) {
        const int gc = index[static_cast<size_t>(c)];
        // Block indices map monotonically to global ones, so (ga, gc) stays in the upper triangle.
        result.jtj(ga, gc) += part[a * m + c];
      }
      result.jtr[ga] += part[m * m + a];
    }
    result.chi2 += part[m * m + m];
  }
  for (int a = 0; a < p_total; ++a) {
    for (int c = a + 1; c < p_total; ++c) result.jtj(c, a) = result.jtj(a, c);
  }
  return result;
}

double PackedDataObjective::Cost(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  const int num_batches = static_cast<int>(batches_.size());
  std::vector<double> partials(static_cast<size_t>(num_batches), 0.0);
  const ModelEvaluation evaluation(
      model_, std::span<const double>(theta.data(), static_cast<size_t>(num_physical_)));
#pragma omp parallel
  {
    std::vector<double> c2(static_cast<size_t>(max_batch_size_));
#pragma omp for schedule(dynamic)
    for (int b = 0; b < num_batches; ++b) {
      const Batch& batch = batches_[static_cast<size_t>(b)];
      const size_t size = static_cast<size_t>(batch.size);
      evaluation.EvaluateUpperTriangleRows(phi_degrees_[static_cast<size_t>(batch.angle)],
                                           theta[ContrastIndex(batch.angle)],
                                           theta[OffsetIndex(batch.angle)], batch.row_begin,
                                           batch.row_end, std::span<double>(c2.data(), size), {});
      const float* data = data_[static_cast<size_t>(batch.angle)].data() + batch.offset;
      double chi2 = 0.0;
      for (size_t p = 0; p < size; ++p) {
        const double d = static_cast<double>(data[p]);
        if (!std::isfinite(d)) continue;
        const double e = d - c2[p];
        chi2 += e * e;
      }
      partials[static_cast<size_t>(b)] = chi2;
    }
  }
  const double scale = 2.0 / (sigma_ * sigma_);
  double chi2 = 0.0;
  for (double part : partials) chi2 += scale * part;
  return chi2;
}

}  // namespace homodyne
