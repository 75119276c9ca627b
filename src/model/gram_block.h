// What every mode's pass kernel body shares (mode_point.h): the tile of points and the Gram
// updates of one angle's tile of [J | e]: 4 x 4 register-blocked products per tile (AddTileGram:
// robust losses) and the lane Gram (AddTileToLaneGram: the linear loss).
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

// The tiles of rows row_begin, row_begin + row_stride, ... (below row_end) of the strict upper
// triangle of an n-point grid, in the packed order of dataset.h: for each row i, the segments
// j = i+1.. of at most kPoints points. Calls tile(i, j_begin, count, point) for each, point being
// the segment's offset in the rows' data (the rows' points one after the other). The walk every
// mode's pass body makes.
template <int kPoints = kTilePoints, typename Tile>
inline void ForEachTile(int n, int row_begin, int row_end, int row_stride, Tile tile) {
  int64_t point = 0;
  for (int i = row_begin; i < row_end; i += row_stride) {
    for (int j = i + 1; j < n; j += kPoints) {
      const int count = n - j < kPoints ? n - j : kPoints;
      tile(i, j, count, point);
      point += count;
    }
  }
}

// Asks the cache for the kPoints float32 values from `next` on: the angle's data of the next
// tile, which every mode's walk (ForEachTile's callers) asks for before the angle's tile (the
// packed data of a batch's rows is contiguous; a prefetch never faults, also past the end of the
// data). The data is the passes' only stream from memory, a cache line per 16 points, and each
// angle's tile reads 1 KiB of it before the walk goes on to the next angle's array: the
// hardware's prefetch did not keep up (the laminar cost pass waited on these loads for about
// 40 % of its time: docs/history/performance-notebook.md, Cost and scaling passes).
template <int kPoints = kTilePoints>
inline void PrefetchNextTile(const float* next) {
  constexpr int kFloatsPerLine = 16;
  for (int t = 0; t < kPoints; t += kFloatsPerLine) __builtin_prefetch(next + t, 0, 3);
}

// gram += tile^T tile (lower triangle and diagonal) over the tile's first `count` points.
inline void AddTileGram(const double* tile, int count, int gram_size, double* gram) {
  const int padded = PaddedTileColumns(gram_size);
  for (int a0 = 0; a0 < padded; a0 += 4) {
    for (int c0 = 0; c0 <= a0; c0 += 4) AddGramBlock(tile, count, a0, c0, gram_size, gram);
  }
}

// The lane Gram (the linear loss's Gram update): one angle's Gram entries, lower
// triangle and diagonal, each held as kGramLanes partial sums (lane l sums the tile points
// t = l mod kGramLanes) in vector registers while a tile is added, and in memory between tiles;
// the lanes are added up once per batch (FlushLaneGram), not once per tile, and only the
// g (g + 1) / 2 entries of the Gram are computed (the 4 x 4 blocks of AddTileGram compute the
// padding and the diagonal blocks' upper halves too: 96 FMA per point for g = 10 instead of 55).
// Written with the compiler's vector extension (GCC, Clang), whose width is the level's
// register: kGramLanes doubles. The order of every addition depends only on the batch's rows
// (the tiles and lanes of ForEachTile's walk), so the sums are deterministic.
#if defined(__AVX512F__)
constexpr int kGramLanes = 8;
#elif defined(__AVX__)
constexpr int kGramLanes = 4;
#else
constexpr int kGramLanes = 2;
#endif
static_assert(kGramLanes <= kMaxGramLanes && kTilePoints % kGramLanes == 0);
typedef double GramLanes __attribute__((vector_size(8 * kGramLanes)));

inline GramLanes LoadLanes(const double* values) {
  GramLanes lanes;
  __builtin_memcpy(&lanes, values, sizeof lanes);
  return lanes;
}

inline void StoreLanes(GramLanes lanes, double* values) {
  __builtin_memcpy(values, &lanes, sizeof lanes);
}

// The entries of rows [a0, a0 + kRows) and columns [c0, c0 + 4) (kDiagonal: c0 = a0 and the
// lower triangle of the kRows x kRows block) over points [0, padded_count) of the tile; their
// lanes are consecutive in `lanes`, row by row, kGramLanes doubles each.
template <int kRows, bool kDiagonal>
inline void AddLaneBlock(const double* tile, int padded_count, int a0, int c0, double* lanes) {
  constexpr int kTile = kTilePoints;
  constexpr int kCols = kDiagonal ? kRows : 4;
  constexpr int kEntries = kDiagonal ? kRows * (kRows + 1) / 2 : kRows * 4;
  GramLanes sums[kEntries];
#pragma GCC unroll 16
  for (int e = 0; e < kEntries; ++e) sums[e] = LoadLanes(lanes + e * kGramLanes);
  const double* rows = tile + a0 * kTile;
  const double* cols = tile + c0 * kTile;
  for (int t = 0; t < padded_count; t += kGramLanes) {
    GramLanes x[kRows];
    GramLanes y[kCols];
#pragma GCC unroll 4
    for (int a = 0; a < kRows; ++a) x[a] = LoadLanes(rows + a * kTile + t);
#pragma GCC unroll 4
    for (int c = 0; c < kCols; ++c) y[c] = kDiagonal ? x[c] : LoadLanes(cols + c * kTile + t);
    int e = 0;
#pragma GCC unroll 4
    for (int a = 0; a < kRows; ++a) {
#pragma GCC unroll 4
      for (int c = 0; c < (kDiagonal ? a + 1 : kCols); ++c) {
        sums[e] += x[a] * y[c];
        ++e;
      }
    }
  }
#pragma GCC unroll 16
  for (int e = 0; e < kEntries; ++e) StoreLanes(sums[e], lanes + e * kGramLanes);
}

// The block of `rows` rows at (a0, c0) (AddLaneBlock). A full off-diagonal block has 16
// accumulators and 8 loaded vectors; where vector registers are 16 (AVX2 and below: kGramLanes
// < 8) it is done as two blocks of 2 rows (8 accumulators each: no spills; the 4 x 4 block spilled
// 2 of its accumulators every step). The sums are the same: each entry's lanes add the same
// products in the same order whichever block computes them.
template <bool kDiagonal>
inline void AddLaneBlockOfRows(int rows, const double* tile, int padded_count, int a0, int c0,
                               double* lanes) {
  if constexpr (!kDiagonal && kGramLanes < 8) {
    if (rows == 4) {
      AddLaneBlock<2, false>(tile, padded_count, a0, c0, lanes);
      AddLaneBlock<2, false>(tile, padded_count, a0 + 2, c0, lanes + 2 * 4 * kGramLanes);
      return;
    }
  }
  switch (rows) {
    case 1:
      return AddLaneBlock<1, kDiagonal>(tile, padded_count, a0, c0, lanes);
    case 2:
      return AddLaneBlock<2, kDiagonal>(tile, padded_count, a0, c0, lanes);
    case 3:
      return AddLaneBlock<3, kDiagonal>(tile, padded_count, a0, c0, lanes);
    default:
      return AddLaneBlock<4, kDiagonal>(tile, padded_count, a0, c0, lanes);
  }
}

// The most columns AddLaneRow takes in one loop: two accumulators per column (the entry and the
// column's sum) plus the row's and one column's loaded vectors fit the level's vector registers
// (32 at AVX-512, 16 below).
inline constexpr int kMaxLaneRowColumns = kGramLanes == 8 ? 12 : 6;

// Row a of the tile against columns [c0, c0 + kCols) over points [0, padded_count): the kCols
// entries' lanes (consecutive in `lanes`, kGramLanes doubles each) += x_a x_c and the columns'
// sums (column_sums, laid out alike) += x_c. 2 kCols independent sums per vector step.
template <int kCols>
inline void AddLaneRowColumns(const double* tile, int padded_count, int a, int c0, double* lanes,
                              double* column_sums) {
  constexpr int kTile = kTilePoints;
  GramLanes sums[kCols];
  GramLanes column_lanes[kCols];
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) {
    sums[c] = LoadLanes(lanes + c * kGramLanes);
    column_lanes[c] = LoadLanes(column_sums + c * kGramLanes);
  }
  const double* row = tile + a * kTile;
  const double* cols = tile + c0 * kTile;
  for (int t = 0; t < padded_count; t += kGramLanes) {
    const GramLanes x = LoadLanes(row + t);
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c) {
      GramLanes y = LoadLanes(cols + c * kTile + t);
      // y in a register: left to itself the compiler loads it twice, as a memory operand of the
      // FMA and of the add, and the loop is bound by its loads (2 kCols + 1 a step).
      __asm__("" : "+v"(y));
      sums[c] += x * y;
      column_lanes[c] += y;
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) {
    StoreLanes(sums[c], lanes + c * kGramLanes);
    StoreLanes(column_lanes[c], column_sums + c * kGramLanes);
  }
}

// AddLaneRowColumns<columns> for columns in [kCols, kMaxLaneRowColumns].
template <int kCols = 1>
inline void AddLaneRowColumnsOf(int columns, const double* tile, int padded_count, int a, int c0,
                                double* lanes, double* column_sums) {
  if constexpr (kCols < kMaxLaneRowColumns) {
    if (columns != kCols) {
      return AddLaneRowColumnsOf<kCols + 1>(columns, tile, padded_count, a, c0, lanes, column_sums);
    }
  }
  AddLaneRowColumns<kCols>(tile, padded_count, a, c0, lanes, column_sums);
}

// The last row of an offset lane Gram (AddTileColumnsToLaneGram<true>,
// AddTileToLastRowApartOffsetLaneGram): row a against columns [0, columns) (its entries' lanes
// consecutive in `lanes`, column c's sum at column_sums + c kGramLanes), in as few loops of at
// most kMaxLaneRowColumns columns as possible, of near-equal widths. Each loop keeps 2 x its
// width sums in flight: the single-row blocks of 4 columns this replaced waited on their FMAs'
// latency (docs/history/performance-notebook.md, "Cache-line-aligned scratch, and the last row in
// one loop"). Each entry's and column's lanes add the same terms in the same order as those blocks:
// the sums are bitwise the same.
inline void AddLaneRow(const double* tile, int padded_count, int a, int columns, double* lanes,
                       double* column_sums) {
  const int loops = (columns + kMaxLaneRowColumns - 1) / kMaxLaneRowColumns;
  int c0 = 0;
  for (int loop = 0; loop < loops; ++loop) {
    const int width = (columns - c0) / (loops - loop);
    AddLaneRowColumnsOf(width, tile, padded_count, a, c0, lanes + c0 * kGramLanes,
                        column_sums + c0 * kGramLanes);
    c0 += width;
  }
}

// Calls entry(row, column, lane_offset) for each Gram entry of the lower triangle and diagonal in
// the lane Gram's order: blocks of 4 rows (the last one shorter), in each the blocks of 4 columns
// left of the diagonal, then the diagonal block's lower triangle, row by row.
template <typename Entry>
inline void ForEachLaneGramEntry(int gram_size, Entry entry) {
  int offset = 0;
  for (int a0 = 0; a0 < gram_size; a0 += 4) {
    const int rows = gram_size - a0 < 4 ? gram_size - a0 : 4;
    for (int c0 = 0; c0 <= a0; c0 += 4) {
      for (int a = 0; a < rows; ++a) {
        const int cols = c0 == a0 ? a + 1 : 4;
        for (int c = 0; c < cols; ++c) {
          entry(a0 + a, c0 + c, offset);
          offset += kGramLanes;
        }
      }
    }
  }
}

// A tile's `count` rounded up to whole vectors of kGramLanes points: the points the lane Gram's
// blocks read (ZeroTilePadding zeroes the ones past count).
inline int PaddedCount(int count) { return (count + kGramLanes - 1) / kGramLanes * kGramLanes; }

// Zeroes the points [count, PaddedCount(count)) of the tile's columns [column_begin, column_end).
inline void ZeroTilePadding(double* tile, int column_begin, int column_end, int count) {
  constexpr int kTile = kTilePoints;
  const int padded_count = PaddedCount(count);
  for (int c = column_begin; c < column_end; ++c) {
    for (int t = count; t < padded_count; ++t) tile[c * kTile + t] = 0.0;
  }
}

// Doubles of one angle's lane Gram at this level: kGramLanes partial sums per entry of the lower
// triangle and diagonal (at most LaneGramDoubles(gram_size), tile.h, which sizes the scratch for
// the widest level). The offset lane Grams' column sums and count fit in it too
// (OffsetColumnSumsAt, OffsetCountAt).
constexpr int LevelLaneGramDoubles(int gram_size) {
  return gram_size * (gram_size + 1) / 2 * kGramLanes;
}

// Zeroes the lane Gram of one angle (LevelLaneGramDoubles(gram_size) doubles; at avx2 half of
// LaneGramDoubles: the two-component fit spent 2 % of its time clearing 8 lanes per entry).
inline void ClearLaneGram(int gram_size, double* lanes) {
  for (int k = 0; k < LevelLaneGramDoubles(gram_size); ++k) lanes[k] = 0.0;
}

// lanes += tile^T tile over the tile's first `count` points, tile columns [0, columns), in the
// lane Gram's order (ForEachLaneGramEntry). Zeroes the tile's points [count, count rounded up to
// kGramLanes) first (the vector steps read them). kColumnSums: also column_sums (columns entries
// of kGramLanes lanes) += the sum of each column, in the last row's loop (AddLaneRow), which needs
// columns % 4 == 1 (a single last row).
template <bool kColumnSums>
inline void AddTileColumnsToLaneGram(double* tile, int count, int columns, double* lanes,
                                     double* column_sums) {
  const int padded_count = PaddedCount(count);
  ZeroTilePadding(tile, 0, columns, count);
  int offset = 0;
  for (int a0 = 0; a0 < columns; a0 += 4) {
    const int rows = columns - a0 < 4 ? columns - a0 : 4;
    if (kColumnSums && a0 + rows == columns) {
      // The last row, a single one: its entries are consecutive in the lane Gram's order.
      AddLaneRow(tile, padded_count, a0, columns, lanes + offset, column_sums);
      offset += columns * kGramLanes;
      continue;
    }
    for (int c0 = 0; c0 < a0; c0 += 4) {
      AddLaneBlockOfRows<false>(rows, tile, padded_count, a0, c0, lanes + offset);
      offset += rows * 4 * kGramLanes;
    }
    AddLaneBlockOfRows<true>(rows, tile, padded_count, a0, a0, lanes + offset);
    offset += rows * (rows + 1) / 2 * kGramLanes;
  }
}

// lanes += tile^T tile over the tile's first `count` points, [J | e] in columns [0, gram_size).
inline void AddTileToLaneGram(double* tile, int count, int gram_size, double* lanes) {
  AddTileColumnsToLaneGram<false>(tile, count, gram_size, lanes, nullptr);
}

// The full pass's Gram under the linear loss (AccumulateRows), whose column of d c2 / d offset is
// 1 at every finite point and 0 elsewhere: the tile holds [J_phys, d c2 / d contrast, e]
// (gram_size - 1 columns, the Gram's without the offset column; gram_size - 1 = 4 m + 1, as 5
// for static and 9 for laminar flow), their lane Gram is kept as AddTileToLaneGram's, and the
// offset column's Gram row, (offset, c) = the sum of column c over the finite points and
// (offset, offset) = their count, comes from the last row's loop (AddLaneRow in
// AddTileColumnsToLaneGram<true>): 2 (gram_size - 1) FMA per point fewer (55 -> 45 laminar,
// 21 -> 15 static). The angle's lanes: the lane Gram (LevelLaneGramDoubles(gram_size - 1)),
// then the column sums' lanes (gram_size - 1 entries of kGramLanes), then the count:
// LevelLaneGramDoubles(gram_size) holds them. finite: the tile's finite points.
inline int OffsetColumnSumsAt(int gram_size) { return LevelLaneGramDoubles(gram_size - 1); }
inline int OffsetCountAt(int gram_size) {
  return OffsetColumnSumsAt(gram_size) + (gram_size - 1) * kGramLanes;
}

inline void AddTileToOffsetLaneGram(double* tile, int count, int64_t finite, int gram_size,
                                    double* lanes) {
  AddTileColumnsToLaneGram<true>(tile, count, gram_size - 1, lanes,
                                 lanes + OffsetColumnSumsAt(gram_size));
  lanes[OffsetCountAt(gram_size)] += static_cast<double>(finite);
}

// AddTileToOffsetLaneGram for tiles whose gram_size - 1 columns are a multiple of 4 (the
// two-component mode's 16: [J_phys (14), d c2 / d contrast, e]), whose blocks of 4 rows leave no
// single row for the column sums: the tile's last row (e) is walked apart against columns
// [0, gram_size - 1) (AddLaneRow; the last entry is its diagonal), after the lane Gram of the
// other gram_size - 2 = 4 m + 3 columns (AddTileColumnsToLaneGram<false>): 136 FMA per point for
// the two-component tile instead of 153, and the column sums' adds ride on the last row's loads.
// Measured on avx2 for a 256-point tile (gram_size 17), with the last row as single-row blocks of
// 4 columns: 2.8 us, against 3.1 us for the 17-column lane Gram, 2.9 us for a separate sum loop
// after the 16-column lane Gram, and 3.3 us for the sums riding on the 4 x 4 diagonal blocks (18
// vector registers: spilled accumulators). The angle's lanes: the lane Gram of the first
// gram_size - 2 columns (ForEachLaneGramEntry order), then the last row's gram_size - 1 entries
// (OffsetLastRowAt), then the column sums and the count as AddTileToOffsetLaneGram's (at
// OffsetColumnSumsAt and OffsetCountAt: the same number of entries as the lane Gram of
// gram_size - 1 columns). FlushLastRowApartOffsetLaneGram adds them up.
inline int OffsetLastRowAt(int gram_size) {
  return (gram_size - 2) * (gram_size - 1) / 2 * kGramLanes;
}

inline void AddTileToLastRowApartOffsetLaneGram(double* tile, int count, int64_t finite,
                                                int gram_size, double* lanes) {
  const int columns = gram_size - 1;
  const int last = columns - 1;
  const int padded_count = PaddedCount(count);
  // AddTileColumnsToLaneGram zeroes the padding of the other columns.
  ZeroTilePadding(tile, last, columns, count);
  AddTileColumnsToLaneGram<false>(tile, count, last, lanes, nullptr);
  AddLaneRow(tile, padded_count, last, columns, lanes + OffsetLastRowAt(gram_size),
             lanes + OffsetColumnSumsAt(gram_size));
  lanes[OffsetCountAt(gram_size)] += static_cast<double>(finite);
}

// The sum of one entry's kGramLanes partial sums, in lane order.
inline double LaneSum(const double* lanes) {
  double sum = 0.0;
  for (int l = 0; l < kGramLanes; ++l) sum += lanes[l];
  return sum;
}

// gram += the lane Gram's sums (LaneSum), lower triangle and diagonal; gram is column major with
// side gram_size.
inline void FlushLaneGram(const double* lanes, int gram_size, double* gram) {
  ForEachLaneGramEntry(gram_size, [&](int row, int column, int offset) {
    gram[row + column * gram_size] += LaneSum(lanes + offset);
  });
}

// The Gram column of a tile column under the offset lane Grams (AddTileToOffsetLaneGram,
// AddTileToLastRowApartOffsetLaneGram), whose tiles hold [J_phys, contrast, e]: the Gram's
// columns are [J_phys, contrast, offset, e], so the tile's last column (gram_size - 2) is e's.
inline int OffsetTileGramColumn(int tile_column, int gram_size) {
  return tile_column < gram_size - 2 ? tile_column : gram_size - 1;
}

// gram += the offset column's Gram row of AddTileToOffsetLaneGram's lanes (the column sums and
// the count; LaneSum), gram column major with side gram_size, its columns [J_phys, contrast,
// offset, e].
inline void FlushOffsetColumnSums(const double* lanes, int gram_size, double* gram) {
  const int offset_column = gram_size - 2;
  const int e_column = gram_size - 1;
  const double* column_sums = lanes + OffsetColumnSumsAt(gram_size);
  for (int c = 0; c < gram_size - 1; ++c) {
    const double sum = LaneSum(column_sums + c * kGramLanes);
    if (c < offset_column) {
      gram[offset_column + c * gram_size] += sum;  // (offset, c)
    } else {
      gram[e_column + offset_column * gram_size] += sum;  // (e, offset)
    }
  }
  gram[offset_column + offset_column * gram_size] += lanes[OffsetCountAt(gram_size)];
}

// gram += the sums of AddTileToOffsetLaneGram (LaneSum; lower triangle and diagonal); gram is
// column major with side gram_size, its columns [J_phys, contrast, offset, e].
inline void FlushOffsetLaneGram(const double* lanes, int gram_size, double* gram) {
  ForEachLaneGramEntry(gram_size - 1, [&](int row, int column, int offset) {
    gram[OffsetTileGramColumn(row, gram_size) +
         OffsetTileGramColumn(column, gram_size) * gram_size] += LaneSum(lanes + offset);
  });
  FlushOffsetColumnSums(lanes, gram_size, gram);
}

// gram += the sums of AddTileToLastRowApartOffsetLaneGram (LaneSum; lower triangle and diagonal);
// gram is column major with side gram_size, its columns [J_phys, contrast, offset, e].
inline void FlushLastRowApartOffsetLaneGram(const double* lanes, int gram_size, double* gram) {
  const int offset_column = gram_size - 2;
  const int e_column = gram_size - 1;
  // The tile's columns [0, offset_column) are the Gram's; its last, offset_column, is e.
  ForEachLaneGramEntry(offset_column, [&](int row, int column, int offset) {
    gram[row + column * gram_size] += LaneSum(lanes + offset);
  });
  const double* last_row = lanes + OffsetLastRowAt(gram_size);
  for (int c = 0; c <= offset_column; ++c) {
    gram[e_column + OffsetTileGramColumn(c, gram_size) * gram_size] +=
        LaneSum(last_row + c * kGramLanes);  // (e, c)
  }
  FlushOffsetColumnSums(lanes, gram_size, gram);
}

// The per-thread sums of the cost and scaling passes under the linear loss, kept like the lane
// Grams: kGramLanes partial sums each (lane l sums a row segment's points t = l mod kGramLanes),
// in the scratch between segments, added up once per batch (LaneSum). The vector loops that
// compute the model store their per-point values in the scratch (a column of kCostTilePoints per
// value) and a second loop adds them to the lanes: before, each segment's vector loop ended in a
// horizontal sum per value (16 dependent adds at AVX-512, 6 values in a scaling pass) and a
// scalar loop for its last count mod 16 points, about a fifth of a laminar cost pass
// (docs/history/performance-notebook.md, "Lane sums for the cost and scaling passes").

// Zeroes `doubles` lane sums.
inline void ClearLaneSums(int doubles, double* sums) {
  for (int k = 0; k < doubles; ++k) sums[k] = 0.0;
}

// values[count, count rounded up to kGramLanes) = 0: the points a lane loop reads past count.
inline void ZeroLanePadding(double* values, int count) {
  for (int t = count; t < PaddedCount(count); ++t) values[t] = 0.0;
}

// A cost pass's sum of e^2 for one angle: kCostSumsDoubles doubles (its lanes).
inline constexpr int kCostSumsDoubles = kMaxGramLanes;

// lanes += values[t]^2 over t < count (zeroes the padding first, ZeroLanePadding).
inline void AddSquaresToLanes(double* values, int count, double* lanes) {
  ZeroLanePadding(values, count);
  const int padded_count = PaddedCount(count);
  // Two sums in flight (the adds' latency), added together at the end of the segment.
  GramLanes even = LoadLanes(lanes), odd = {};
  int t = 0;
  for (; t + 2 * kGramLanes <= padded_count; t += 2 * kGramLanes) {
    const GramLanes x = LoadLanes(values + t), y = LoadLanes(values + t + kGramLanes);
    even += x * x;
    odd += y * y;
  }
  if (t < padded_count) {
    const GramLanes x = LoadLanes(values + t);
    even += x * x;
  }
  StoreLanes(even + odd, lanes);
}

// The sums of a scaling pass (PassColumns::kScaling, src/objective/pass_backend.h) for one angle
// of one batch: the 3 x 3 Gram matrix of [g, 1, e] (column major; lower triangle and diagonal),
// g = d c2 / d contrast, 1 = d c2 / d offset, e = data - c2, each 0 at non-finite data points.
// The (1, 1) entry, the sum of 1 over the finite points, is their count (exact). Kept as lane
// sums, in this order: (g, g), (1, g), (e, g), (1, 1), (e, 1), (e, e); kScalingSumsDoubles per
// angle. Flushed into the caller's Gram matrix once per batch (the Gram matrices of batches that
// other threads compute may share a cache line with this one's).
inline constexpr int kScalingSums = 6;
inline constexpr int kScalingSumsDoubles = kScalingSums * kMaxGramLanes;

// The scaling pass's per-point values of a row segment in the scratch: g, e and the finite
// indicator (1 at finite data, 0 elsewhere), kScalingColumns columns of kCostTilePoints.
inline constexpr int kScalingColumns = 3;

// Stores the scaling values of the segment's points [t_begin, t_end) in its columns: data[t] the
// point's data value, c2 = offset + contrast g with g_at(t) = g (a mode body's inline model,
// inlined into the simd loop; capture the model's columns by value: a lambda capturing them by
// reference measured 1.3 to 2x slower, its loop not vectorised).
template <typename GAt>
inline void StoreScalingColumns(const float* data, int t_begin, int t_end, double contrast,
                                double offset, GAt g_at, double* columns) {
  double* g_column = columns;
  double* e_column = columns + kCostTilePoints;
  double* finite_column = columns + 2 * kCostTilePoints;
#pragma omp simd
  for (int t = t_begin; t < t_end; ++t) {
    const double d = static_cast<double>(data[t]);
    const bool is_finite = (d - d) == 0.0;
    const double g_model = g_at(t);
    g_column[t] = is_finite ? g_model : 0.0;
    // d - c2 would be NaN for non-finite d.
    e_column[t] = is_finite ? d - (offset + contrast * g_model) : 0.0;
    finite_column[t] = is_finite ? 1.0 : 0.0;
  }
}

// sums (kScalingSums lane sums) += the segment's columns (StoreScalingColumns) over its points
// [0, count).
inline void AddScalingColumns(double* columns, int count, double* sums) {
  double* g_column = columns;
  double* e_column = columns + kCostTilePoints;
  double* finite_column = columns + 2 * kCostTilePoints;
  ZeroLanePadding(g_column, count);
  ZeroLanePadding(e_column, count);
  ZeroLanePadding(finite_column, count);
  GramLanes gg = LoadLanes(sums + 0 * kGramLanes), g1 = LoadLanes(sums + 1 * kGramLanes);
  GramLanes eg = LoadLanes(sums + 2 * kGramLanes), ones = LoadLanes(sums + 3 * kGramLanes);
  GramLanes e1 = LoadLanes(sums + 4 * kGramLanes), ee = LoadLanes(sums + 5 * kGramLanes);
  for (int t = 0; t < PaddedCount(count); t += kGramLanes) {
    const GramLanes g = LoadLanes(g_column + t);
    const GramLanes e = LoadLanes(e_column + t);
    gg += g * g;
    g1 += g;
    eg += e * g;
    ones += LoadLanes(finite_column + t);
    e1 += e;
    ee += e * e;
  }
  StoreLanes(gg, sums + 0 * kGramLanes);
  StoreLanes(g1, sums + 1 * kGramLanes);
  StoreLanes(eg, sums + 2 * kGramLanes);
  StoreLanes(ones, sums + 3 * kGramLanes);
  StoreLanes(e1, sums + 4 * kGramLanes);
  StoreLanes(ee, sums + 5 * kGramLanes);
}

// gram += the sums (lower triangle and diagonal), finite_points += their count.
inline void FlushScalingSums(const double* sums, double* gram, int64_t& finite_points) {
  gram[0] += LaneSum(sums + 0 * kGramLanes);  // (g, g)
  gram[1] += LaneSum(sums + 1 * kGramLanes);  // (1, g)
  gram[2] += LaneSum(sums + 2 * kGramLanes);  // (e, g)
  const double finite = LaneSum(sums + 3 * kGramLanes);
  gram[4] += finite;                          // (1, 1)
  gram[5] += LaneSum(sums + 4 * kGramLanes);  // (e, 1)
  gram[8] += LaneSum(sums + 5 * kGramLanes);  // (e, e)
  finite_points += static_cast<int64_t>(finite);
}

}  // namespace
}  // namespace homodyne::pass_kernel
