// What every mode's pass kernel body shares (mode_point.h): the tile of points and the
// register-blocked Gram update of one angle's tile of [J | e].
//
// Included only by the per-level kernel sources (homodyne/homodyne_pass_variant.cc,
// two_component/two_component_pass_variant.cc), through their headers. The functions have internal
// linkage (unnamed namespace), so each level's object keeps its own copy compiled for its own
// -march and no copy crosses levels (homodyne/homodyne_pass_variant.h).
#pragma once

#include <cstdint>

#include "model/tile.h"

namespace homodyne::pass_kernel {
namespace {

// gram(a0 + a, c0 + c) += sum_t x_{a0+a}[t] x_{c0+c}[t] for a, c < 4 (lower triangle only, padding
// skipped); gram is column major with side g; column c of the tile at tile + c kTilePoints. Sixteen
// named accumulators: the compiler keeps them in vector registers, which makes this about four
// times faster than Eigen's general product for these thin matrices.
inline void AddGramBlock(const double* tile, int count, int a0, int c0, int g, double* gram) {
  constexpr int kTile = kTilePoints;
  const double* a_0 = tile + (a0 + 0) * kTile;
  const double* a_1 = tile + (a0 + 1) * kTile;
  const double* a_2 = tile + (a0 + 2) * kTile;
  const double* a_3 = tile + (a0 + 3) * kTile;
  const double* c_0 = tile + (c0 + 0) * kTile;
  const double* c_1 = tile + (c0 + 1) * kTile;
  const double* c_2 = tile + (c0 + 2) * kTile;
  const double* c_3 = tile + (c0 + 3) * kTile;
  double s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
  double s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
#pragma omp simd reduction(+ : s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, \
                               s31, s32, s33)
  for (int t = 0; t < count; ++t) {
    const double x0 = a_0[t], x1 = a_1[t], x2 = a_2[t], x3 = a_3[t];
    const double y0 = c_0[t], y1 = c_1[t], y2 = c_2[t], y3 = c_3[t];
    s00 += x0 * y0, s01 += x0 * y1, s02 += x0 * y2, s03 += x0 * y3;
    s10 += x1 * y0, s11 += x1 * y1, s12 += x1 * y2, s13 += x1 * y3;
    s20 += x2 * y0, s21 += x2 * y1, s22 += x2 * y2, s23 += x2 * y3;
    s30 += x3 * y0, s31 += x3 * y1, s32 += x3 * y2, s33 += x3 * y3;
  }
  const double sums[4][4] = {
      {s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23}, {s30, s31, s32, s33}};
  for (int a = 0; a < 4 && a0 + a < g; ++a) {
    for (int c = 0; c < 4 && c0 + c <= a0 + a; ++c) gram[(a0 + a) + (c0 + c) * g] += sums[a][c];
  }
}

// The tiles of rows [row_begin, row_end) of the strict upper triangle of an n-point grid, in the
// packed order of dataset.h: for each row i, the segments j = i+1.. of at most kTilePoints points.
// Calls tile(i, j_begin, count, point) for each, point being the segment's offset in the rows'
// packed data. The walk every mode's pass body makes.
template <typename Tile>
inline void ForEachTile(int n, int row_begin, int row_end, Tile tile) {
  int64_t point = 0;
  for (int i = row_begin; i < row_end; ++i) {
    for (int j = i + 1; j < n; j += kTilePoints) {
      const int count = n - j < kTilePoints ? n - j : kTilePoints;
      tile(i, j, count, point);
      point += count;
    }
  }
}

// gram += tile^T tile (lower triangle and diagonal) over the tile's first `count` points.
inline void AddTileGram(const double* tile, int count, int gram_size, double* gram) {
  const int padded = PaddedTileColumns(gram_size);
  for (int a0 = 0; a0 < padded; a0 += 4) {
    for (int c0 = 0; c0 <= a0; c0 += 4) AddGramBlock(tile, count, a0, c0, gram_size, gram);
  }
}

}  // namespace
}  // namespace homodyne::pass_kernel
