// The schedule of the device passes (docs/design.md section 5), written once for nvcc and the
// host compiler (contract of device_point.h: contraction off in every including file):
//   - a launch covers a chunk of jobs, one job per (batch, angle);
//   - each job is computed by blocks_per_job blocks of threads_per_block threads; thread t of
//     block b is global thread g = b threads_per_block + t of the job and takes the job's points
//     p = g, g + T, g + 2 T, ... (T = blocks_per_job threads_per_block) in that order, into its
//     own partial sums (lower-triangle Gram of [J | e] and the finite count, or the cost);
//   - a block adds its threads' partial sums by a fixed tree: for stride = threads_per_block / 2,
//     / 4, ..., 1, value[t] += value[t + stride] for every t < stride (threads_per_block is a power
//     of two);
//   - the host adds a job's block sums in block order (BlockOrderSum).
// The CUDA kernels (cuda/pass_kernels.cu) run it with one CUDA thread per thread; the host
// emulation (src/objective/emulated_pass_backend.cc) runs the same threads one after the other and
// the same tree and block order, so both compute every sum in the same order. It is written once
// for every mode: its templates take a device mode's traits (device_modes.h), whose Row and Cost
// give a point's row of [J | e] and its cost term.
#pragma once

#include <cstdint>

#include "model/device/device_point.h"

namespace homodyne::device_pass {

// The launch geometry: plain parameters of the schedule (not of the results' meaning: any
// geometry gives the same sums up to rounding; a given one gives bitwise the same sums on every
// chunking of the batches).
struct LaunchGeometry {
  int blocks_per_job = 4;       // >= 1
  int threads_per_block = 128;  // a power of two in [1, kMaxThreadsPerBlock]
};

inline constexpr int kMaxThreadsPerBlock = 1024;

// True when the geometry is one the schedule accepts.
inline bool IsValidGeometry(const LaunchGeometry& geometry) {
  const int t = geometry.threads_per_block;
  return geometry.blocks_per_job >= 1 && t >= 1 && t <= kMaxThreadsPerBlock && (t & (t - 1)) == 0;
}

// One job: the points of rows [row_begin, row_end) of the strict upper triangle of one angle, in
// the packed order of dataset.h, whose `points` values start at data.
struct PassJob {
  int row_begin = 0;
  int row_end = 0;
  int angle = 0;       // index into the launch's AngleTerms
  int64_t points = 0;  // UpperTriangleRowsSize(N, row_begin, row_end)
  const float* data = nullptr;
};

// Offset of row i's first point in the packed strict upper triangle of n times (dataset.h
// UpperTriangleRowOffset).
HOMODYNE_HOST_DEVICE inline int64_t RowOffset(int64_t n, int64_t i) {
  return i * (n - 1) - i * (i - 1) / 2;
}

// The (i, j) of the job's point p (0 <= p < job.points): the row by bisection over the rows'
// offsets, the column from the row's first point.
HOMODYNE_HOST_DEVICE inline void LocatePoint(int n, const PassJob& job, int64_t p, int* i, int* j) {
  const int64_t base = RowOffset(n, job.row_begin);
  int low = job.row_begin;  // RowOffset(low) - base <= p
  int high = job.row_end;   // RowOffset(high) - base > p
  while (high - low > 1) {
    const int middle = low + (high - low) / 2;
    if (RowOffset(n, middle) - base <= p) {
      low = middle;
    } else {
      high = middle;
    }
  }
  *i = low;
  *j = low + 1 + static_cast<int>(p - (RowOffset(n, low) - base));
}

// Thread `global_thread` of a job's full pass: partial[0, kTriangle) += the lower triangle of
// [J | e]^T [J | e] (row by row, TriangleEntries) over its points, each product added with one
// fused multiply-add; partial[kTriangle] += the number of finite points. Under a robust loss the
// rows are rescaled (RescaleRowForLoss) and the (e, e) entry sums s^2 rho(z) instead of e^2, as
// the CPU kernel's Gram (robust_loss_tile.h AddRobustTileGram).
template <class Mode>
HOMODYNE_HOST_DEVICE inline void ThreadGramPartial(const typename Mode::Tables& tables,
                                                   const typename Mode::Angle& angle,
                                                   const LossTerms& loss, const PassJob& job,
                                                   int64_t global_thread, int64_t thread_stride,
                                                   double* partial) {
  using Shape = typename Mode::Shape;
  constexpr int g = Shape::kGramSize;
  for (int64_t p = global_thread; p < job.points; p += thread_stride) {
    int i, j;
    LocatePoint(tables.num_times, job, p, &i, &j);
    const double data = static_cast<double>(job.data[p]);
    double row[g];
    Mode::Row(tables, angle, i, j, data, row);
    double loss_term = 0.0;
    if (loss.function != 0) loss_term = RescaleRowForLoss(loss, g, row);
    // Every entry but (e, e), then (e, e): e^2, or under a robust loss the loss sum (not the
    // rescaled e^2, which nothing reads).
    int entry = 0;
    for (int a = 0; a < g; ++a) {
      for (int c = 0; c <= a && entry < Shape::kTriangle - 1; ++c, ++entry) {
        partial[entry] = DeviceFma(row[a], row[c], partial[entry]);
      }
    }
    if (loss.function == 0) {
      partial[Shape::kTriangle - 1] =
          DeviceFma(row[g - 1], row[g - 1], partial[Shape::kTriangle - 1]);
    } else {
      partial[Shape::kTriangle - 1] += loss_term;
    }
    partial[Shape::kTriangle] += IsFiniteValue(data) ? 1.0 : 0.0;
  }
}

// Thread `global_thread` of a job's full pass through per-frame sums (a mode with kDataSums,
// device_modes.h; linear loss only): partial[0, Mode::kDataSums) += the data terms of its points
// (Mode::DataTerms), the data-free part of the Gram being the host's (Mode::GramFromDataSums).
template <class Mode>
HOMODYNE_HOST_DEVICE inline void ThreadDataPartial(const typename Mode::Tables& tables,
                                                   const typename Mode::Angle& angle,
                                                   const PassJob& job, int64_t global_thread,
                                                   int64_t thread_stride, double* partial) {
  for (int64_t p = global_thread; p < job.points; p += thread_stride) {
    int i, j;
    LocatePoint(tables.num_times, job, p, &i, &j);
    Mode::DataTerms(tables, angle, i, j, static_cast<double>(job.data[p]), partial);
  }
}

// Thread `global_thread` of a job's cost pass: *partial += the cost terms of its points
// (Mode::Cost).
template <class Mode>
HOMODYNE_HOST_DEVICE inline void ThreadCostPartial(const typename Mode::Tables& tables,
                                                   const typename Mode::Angle& angle,
                                                   const LossTerms& loss, const PassJob& job,
                                                   int64_t global_thread, int64_t thread_stride,
                                                   double* partial) {
  for (int64_t p = global_thread; p < job.points; p += thread_stride) {
    int i, j;
    LocatePoint(tables.num_times, job, p, &i, &j);
    *partial += Mode::Cost(tables, angle, loss, i, j, static_cast<double>(job.data[p]));
  }
}

// One step of the block's reduction tree: values[t] += values[t + stride].
HOMODYNE_HOST_DEVICE inline void TreeStep(double* values, int t, int stride) {
  values[t] += values[t + stride];
}

// A job's sum of `blocks` block sums, stored at block_sums[b * stride] for block b, added in block
// order (host only: the device writes the block sums, the host adds them).
inline double BlockOrderSum(const double* block_sums, int blocks, int stride) {
  double sum = 0.0;
  for (int b = 0; b < blocks; ++b) sum += block_sums[static_cast<int64_t>(b) * stride];
  return sum;
}

}  // namespace homodyne::device_pass
