// The interface every analysis mode implements (docs/design.md section 2c): its model at one
// physical parameter vector. ModelEvaluation (model.h) and PassKernel (pass_kernel.h) are thin
// wrappers around it; mode_catalog.cc holds the builder of each mode's ModePoint.
//
// A mode's folder (src/model/homodyne/, src/model/two_component/) holds:
//   - its ModePoint: the O(N) tables built from the parameters and the time grid, and the scalar
//     per-point c2 and Jacobian with libm (the readable reference every faster form is tested
//     against);
//   - its ModePass: the vectorised pass kernel's body, compiled once per instruction-set level
//     (isa_level.h, pass_variants.h), which fills one angle's tile of [J | e] and adds its Gram
//     matrix with the shared Gram updates (gram_block.h);
//   - its device arithmetic and device traits (device/device_modes.h), from which the device
//     passes are instantiated.
// docs/adding-a-mode.md is the checklist for a new mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "model/isa_level.h"
#include "model/robust_loss.h"

namespace homodyne {

// std::allocator's storage on 64-byte boundaries: a cache line, and an AVX-512 vector. The pass
// kernels' vector loads and stores of the scratch's columns (each a multiple of 64 bytes from the
// start) then never cross a cache line; from glibc's 16-byte-aligned storage three in four
// AVX-512 loads of a column did (docs/history/performance-notebook.md, "Cache-line-aligned
// scratch").
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t count) {
    return static_cast<T*>(::operator new(count * sizeof(T), kAlignment));
  }
  void deallocate(T* values, size_t) { ::operator delete(values, kAlignment); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
using CacheLineDoubles = std::vector<double, CacheLineAllocator<double>>;

// Per-thread scratch of a pass (PassKernel::Workspace owns one per thread): one angle's tile of
// [J | e] (column c at c kTilePoints, columns padded with zeros to a multiple of 4) and the
// angle-independent per-point factors of one tile, kFactorColumns columns of kTilePoints; and the
// lane Grams of a batch's angles (gram_block.h: LaneGramDoubles(gram_size) per angle), which a
// mode's pass sizes for its angles before each call (the static full pass keeps its column sums
// after them: Scratch::column_sums, src/model/homodyne/homodyne_pass_variant.h).
struct PassScratch {
  static constexpr int kFactorColumns = 32;
  explicit PassScratch(int gram_size);
  int gram_size;
  CacheLineDoubles tile;
  CacheLineDoubles factors;
  CacheLineDoubles lane_grams;
};

// The pass kernel's body at one point for one set of angles (contracts: PassKernel).
class ModePass {
 public:
  virtual ~ModePass() = default;
  // For every angle k, adds [J | e]^T [J | e] over rows row_begin, row_begin + row_stride, ...
  // (below row_end) of the strict upper triangle to grams[k] (column major, gram_size square;
  // lower triangle and diagonal) and the number of finite data points to finite_points[k].
  // data[k]: angle k's values of the rows, one row after the other (dataset.h order).
  virtual void AccumulateRows(int row_begin, int row_end, int row_stride, const float* const* data,
                              double* const* grams, int64_t* finite_points,
                              PassScratch& scratch) const = 0;
  // For every angle k, adds the sum of e^2 over the rows' finite data points to
  // squared_residuals[k].
  virtual void SumSquaredResiduals(int row_begin, int row_end, int row_stride,
                                   const float* const* data, double* squared_residuals,
                                   PassScratch& scratch) const = 0;
  // For every angle k, adds the 3 x 3 Gram matrix of [d c2 / d contrast_k, d c2 / d offset_k, e]
  // over the rows' finite data points to grams[k] (column major; lower triangle and diagonal)
  // and their number to finite_points[k]: the entries of AccumulateRows' Gram at the contrast,
  // offset and e columns, without the Jacobian's physical columns (about a cost pass's work).
  // Linear loss only (the caller checks).
  virtual void AccumulateScalingRows(int row_begin, int row_end, int row_stride,
                                     const float* const* data, double* const* grams,
                                     int64_t* finite_points, PassScratch& scratch) const = 0;
  // AccumulateRows with the physical block summed over the angles (PassColumns::kSummedPhysical,
  // src/objective/batched_objective.h): the sum over k of grams[k]'s physical blocks is that of
  // AccumulateRows (to rounding), wherever a body puts it; every other entry is AccumulateRows'.
  // The default is AccumulateRows itself; the two-component body sums in the pass under the
  // linear loss (docs/design.md section 2, The two-component physical block summed over the
  // angles).
  virtual void AccumulateSummedPhysicalRows(int row_begin, int row_end, int row_stride,
                                            const float* const* data, double* const* grams,
                                            int64_t* finite_points, PassScratch& scratch) const {
    AccumulateRows(row_begin, row_end, row_stride, data, grams, finite_points, scratch);
  }
  // True when AccumulateRows adds J^T J from per-frame sums and reads the points only for J^T e
  // and e^T e (the static mode, docs/design.md section 2, The static full pass through per-frame
  // sums); false when it builds the Gram point by point.
  virtual bool PerFrameGram() const { return false; }
  // c2 of angle k at row i, columns [j_begin, j_end) with i < j_begin <= j_end <= N (the strict
  // upper triangle), into c2_out: the passes' model, vectorised, to rounding (a few ulp) the
  // scalar ModePoint::EvaluateSegment's (the fitted_data.h5 writer's model).
  virtual void EvaluateUpperSegment(int k, int i, int j_begin, int j_end, double* c2_out,
                                    PassScratch& scratch) const = 0;
};

// One mode's model at one physical parameter vector. Immutable; safe to share between threads.
// Holds a reference to the HomodyneModel it was built from, which must outlive it.
class ModePoint {
 public:
  virtual ~ModePoint() = default;
  // c2 at (i, j) for j in [j_begin, j_end) of one angle (any i, j of the grid, diagonal included)
  // and, when jacobian_out is not null, num_point_derivatives() values per point (point-major):
  // d c2 / d(physical parameters..., contrast, offset), zero where a floor or clip of the reference
  // binds (as its autodiff).
  virtual void EvaluateSegment(double phi_degrees, double contrast, double offset, int i,
                               int j_begin, int j_end, double* c2_out,
                               double* jacobian_out) const = 0;
  // The pass kernel's body at this point for these angles (one value each), computed at `level`
  // (one the build has and the CPU supports), under `loss` (robust_loss.h: linear gives [J | e]
  // and e^2 as they are; another rescales them per point and sums the loss instead of e^2).
  virtual std::unique_ptr<const ModePass> PreparePass(std::span<const double> phi_degrees,
                                                      std::span<const double> contrast,
                                                      std::span<const double> offset,
                                                      IsaLevel level,
                                                      const PassLoss& loss) const = 0;
};

}  // namespace homodyne
