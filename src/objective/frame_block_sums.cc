// The frame-block sums of the uncertainties (frame_block_sums.h) and the pass that collects them
// (BatchedObjective::AccumulateFrameBlockSums).
//
// Each batch's sums are computed apart (per-batch buffers over the worker pool's threads, or over
// the ranks of a distributed pass) and added to the totals in batch order, so the totals do not
// depend on the thread or rank count. A batch's buffer holds the cells of the row blocks its rows
// fall in (every column block), then its lag sums.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/mode_point.h"
#include "objective/batched_objective.h"
#include "objective/worker_pool.h"

namespace homodyne {

int FrameBlockSums::BlockOf(int frame) const {
  const auto after = std::upper_bound(block_begin.begin(), block_begin.end(), frame);
  return static_cast<int>(after - block_begin.begin()) - 1;
}

FrameBlockSums MakeFrameBlockSums(int n_frames, int num_blocks, int num_angles, int num_local) {
  if (num_blocks < 1 || num_blocks > std::max(n_frames, 1) || num_angles < 1 || num_local < 1) {
    throw std::invalid_argument("MakeFrameBlockSums: inconsistent sizes");
  }
  FrameBlockSums sums;
  sums.num_angles = num_angles;
  sums.num_local = num_local;
  for (int g = 0; g <= num_blocks; ++g) {
    sums.block_begin.push_back(static_cast<int>(
        std::llround(static_cast<double>(g) * n_frames / static_cast<double>(num_blocks))));
  }
  const size_t cells = static_cast<size_t>(num_blocks) * static_cast<size_t>(num_blocks) *
                       static_cast<size_t>(num_angles);
  sums.gradient.assign(cells * static_cast<size_t>(num_local), 0.0);
  sums.gram.assign(cells * static_cast<size_t>(num_local) * static_cast<size_t>(num_local), 0.0);
  for (int lag = 1; lag < n_frames - 1; lag *= 2) sums.lags.push_back(lag);
  sums.lag_products.assign(sums.lags.size(), 0.0);
  sums.lag_left.assign(sums.lags.size(), 0.0);
  sums.lag_right.assign(sums.lags.size(), 0.0);
  return sums;
}

int FineFrameBlocks(int n_frames, int num_angles, int num_local) {
  constexpr double kMaxGramDoubles = 33554432.0;  // 2^25
  int blocks = 64;
  while (blocks > 1 && static_cast<double>(blocks) * blocks * num_angles * num_local * num_local >
                           kMaxGramDoubles) {
    blocks /= 2;
  }
  return std::max(1, std::min(blocks, n_frames / 2));
}

namespace {

// Where batch b's buffer keeps its cells: the row blocks of its first and last rows.
struct BatchCells {
  int first_block = 0;
  int row_blocks = 0;
};

BatchCells CellsOf(const RowBatch& batch, const FrameBlockSums& sums) {
  const int first = sums.BlockOf(batch.row_begin);
  const int last = sums.BlockOf(std::max(batch.row_begin, batch.row_end - 1));
  return {first, last - first + 1};
}

// A batch buffer's size: its cells' gradients and Grams, then the three lag sums.
size_t BufferSize(const BatchCells& cells, const FrameBlockSums& sums) {
  const size_t local = static_cast<size_t>(sums.num_local);
  return static_cast<size_t>(cells.row_blocks) * static_cast<size_t>(sums.num_blocks()) *
             static_cast<size_t>(sums.num_angles) * (local + local * local) +
         3 * sums.lags.size();
}

// Fills `buffer` (BufferSize values) with one batch's sums. data[k]: angle k's values of the batch.
void ComputeBatch(const ModelEvaluation& evaluation, std::span<const double> phi_degrees,
                  std::span<const double> contrast, std::span<const double> offset,
                  const RowBatch& batch, const float* const* data, const FrameBlockSums& sums,
                  double* buffer) {
  const int n = sums.num_frames();
  const int local = sums.num_local;
  const int blocks = sums.num_blocks();
  const int angles = sums.num_angles;
  const BatchCells cells = CellsOf(batch, sums);
  const size_t cell_values = static_cast<size_t>(local) + static_cast<size_t>(local) * local;
  const size_t lag_base = BufferSize(cells, sums) - 3 * sums.lags.size();
  std::fill(buffer, buffer + lag_base + 3 * sums.lags.size(), 0.0);
  std::vector<double> c2(static_cast<size_t>(n));
  std::vector<double> jacobian(static_cast<size_t>(n) * static_cast<size_t>(local));
  std::vector<double> residual(static_cast<size_t>(n));
  std::vector<unsigned char> finite(static_cast<size_t>(n));
  ForEachRowOf(batch, n, [&](int i, int64_t first_point, int64_t points) {
    if (points <= 0) return;
    const int a = sums.BlockOf(i);
    for (int k = 0; k < angles; ++k) {
      const float* row = data[k] + first_point;
      const size_t len = static_cast<size_t>(points);
      // The matrix's own q (a model of several rings: docs/design.md section 2d).
      evaluation.OfAngle(k).point().EvaluateSegment(
          phi_degrees[static_cast<size_t>(k)], contrast[static_cast<size_t>(k)],
          offset[static_cast<size_t>(k)], i, i + 1, n, c2.data(), jacobian.data());
      for (size_t m = 0; m < len; ++m) {
        const double value = row[m];
        finite[m] = std::isfinite(value) ? 1 : 0;
        residual[m] = finite[m] ? value - c2[m] : 0.0;
        if (!finite[m]) {
          std::fill_n(jacobian.data() + m * static_cast<size_t>(local), local, 0.0);
        }
      }
      // The row's points by column block.
      for (int b = sums.BlockOf(i + 1); b < blocks; ++b) {
        const int j_begin = std::max(i + 1, sums.block_begin[static_cast<size_t>(b)]);
        const int j_end = sums.block_begin[static_cast<size_t>(b) + 1];
        if (j_end <= j_begin) continue;
        const size_t first = static_cast<size_t>(j_begin - i - 1);
        const Eigen::Index count = j_end - j_begin;
        const Eigen::Map<const Eigen::MatrixXd> j_rows(
            jacobian.data() + first * static_cast<size_t>(local), local, count);
        const Eigen::Map<const Eigen::VectorXd> e(residual.data() + first, count);
        double* cell =
            buffer +
            ((static_cast<size_t>(a - cells.first_block) * blocks + static_cast<size_t>(b)) *
                 static_cast<size_t>(angles) +
             static_cast<size_t>(k)) *
                cell_values;
        Eigen::Map<Eigen::VectorXd>(cell, local).noalias() += j_rows * e;
        Eigen::Map<Eigen::MatrixXd>(cell + local, local, local).noalias() +=
            j_rows * j_rows.transpose();
      }
      // The lag sums of this row.
      for (size_t l = 0; l < sums.lags.size(); ++l) {
        const size_t d = static_cast<size_t>(sums.lags[l]);
        if (d >= len) break;
        double xy = 0.0, xx = 0.0, yy = 0.0;
        for (size_t m = 0; m + d < len; ++m) {
          if (!finite[m] || !finite[m + d]) continue;
          xy += residual[m] * residual[m + d];
          xx += residual[m] * residual[m];
          yy += residual[m + d] * residual[m + d];
        }
        buffer[lag_base + 3 * l] += xy;
        buffer[lag_base + 3 * l + 1] += xx;
        buffer[lag_base + 3 * l + 2] += yy;
      }
    }
  });
}

// Adds a batch's buffer to the totals.
void AddBatch(const RowBatch& batch, const double* buffer, FrameBlockSums& sums) {
  const BatchCells cells = CellsOf(batch, sums);
  const int local = sums.num_local;
  const size_t cell_values = static_cast<size_t>(local) + static_cast<size_t>(local) * local;
  for (int r = 0; r < cells.row_blocks; ++r) {
    const int a = cells.first_block + r;
    for (int b = 0; b < sums.num_blocks(); ++b) {
      for (int k = 0; k < sums.num_angles; ++k) {
        const double* cell =
            buffer + ((static_cast<size_t>(r) * sums.num_blocks() + static_cast<size_t>(b)) *
                          static_cast<size_t>(sums.num_angles) +
                      static_cast<size_t>(k)) *
                         cell_values;
        double* gradient = sums.gradient.data() + sums.GradientOffset(a, b, k);
        double* gram = sums.gram.data() + sums.GramOffset(a, b, k);
        for (int v = 0; v < local; ++v) gradient[v] += cell[v];
        for (int v = 0; v < local * local; ++v) gram[v] += cell[local + v];
      }
    }
  }
  const size_t lag_base = BufferSize(cells, sums) - 3 * sums.lags.size();
  for (size_t l = 0; l < sums.lags.size(); ++l) {
    sums.lag_products[l] += buffer[lag_base + 3 * l];
    sums.lag_left[l] += buffer[lag_base + 3 * l + 1];
    sums.lag_right[l] += buffer[lag_base + 3 * l + 2];
  }
}

}  // namespace

FrameBlockSums BatchedObjective::AccumulateFrameBlockSums(const Eigen::VectorXd& theta,
                                                          int num_blocks) {
  CheckTheta(theta);
  ++passes_;
  const int n = model_.num_times();
  const int angles = num_angles();
  FrameBlockSums sums = MakeFrameBlockSums(n, num_blocks, angles, model_.num_point_derivatives());
  const ModelEvaluation evaluation(
      model_, std::span<const double>(theta.data(), static_cast<size_t>(num_physical_)));
  const std::span<const double> contrast(theta.data() + ContrastIndex(0),
                                         static_cast<size_t>(angles));
  const std::span<const double> offset(theta.data() + OffsetIndex(0), static_cast<size_t>(angles));
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk = PassChunkBatches();
  const int threads = std::max(1, omp_get_max_threads());
  // Buffers of the batches [from, to) of the fetched range starting at `fetched`, one after the
  // other from buffers[0], computed over the threads.
  std::vector<double> buffers;
  std::vector<size_t> starts;
  const auto compute = [&](int from, int to, int fetched) {
    starts.assign(1, 0);
    for (int b = from; b < to; ++b) {
      starts.push_back(starts.back() +
                       BufferSize(CellsOf(batches_[static_cast<size_t>(b)], sums), sums));
    }
    buffers.resize(starts.back());
    ParallelFor(to - from, threads, [&](int index, int) {
      const int b = from + index;
      ComputeBatch(evaluation, phi_degrees_, contrast, offset, batches_[static_cast<size_t>(b)],
                   pointers_.data() + static_cast<size_t>(b - fetched) * angles, sums,
                   buffers.data() + starts[static_cast<size_t>(index)]);
    });
  };
  for (int first = 0; first < num_batches; first += chunk) {
    if (first > 0) StopIfRequested();
    const int last = std::min(first + chunk, num_batches);
    if (!distributed()) {
      data_->Fetch(batches_, first, last, angles, pointers_);
      compute(first, last, first);
      for (int b = first; b < last; ++b) {
        AddBatch(batches_[static_cast<size_t>(b)],
                 buffers.data() + starts[static_cast<size_t>(b - first)], sums);
      }
      continue;
    }
    // Several ranks: each computes its share, and every rank reduces every batch in order.
    ProcessGroup& group = *options_.group;
    FiniteValueRange unused = range_;
    const auto [mine_first, mine_last] = FetchOwnShare(first, last, unused);
    if (mine_last > mine_first) {
      compute(mine_first, mine_last, mine_first);
    } else {
      buffers.clear();
    }
    std::vector<int> counts(static_cast<size_t>(group.size()));
    std::vector<size_t> batch_start(1, 0);
    for (int b = first; b < last; ++b) {
      batch_start.push_back(batch_start.back() +
                            BufferSize(CellsOf(batches_[static_cast<size_t>(b)], sums), sums));
    }
    for (int r = 0; r < group.size(); ++r) {
      const size_t begin = batch_start[static_cast<size_t>(ShareBegin(r) - first)];
      const size_t end = batch_start[static_cast<size_t>(ShareBegin(r + 1) - first)];
      counts[static_cast<size_t>(r)] = static_cast<int>(end - begin);
    }
    std::vector<double> all(batch_start.back());
    group.AllGather(std::span<const double>(buffers.data(), buffers.size()), counts, all);
    for (int b = first; b < last; ++b) {
      AddBatch(batches_[static_cast<size_t>(b)],
               all.data() + batch_start[static_cast<size_t>(b - first)], sums);
    }
  }
  return sums;
}

}  // namespace homodyne
