// The per-row separable form of a transport factor exp(-w M), M = sqrt((C[j] - C[i])^2 + eps),
// for an integral C that does not decrease along the time grid (docs/design.md section
// 2): the homodyne modes' g1 of diffusion and the two-component transports H_r, H_s.
//
// With C[j] >= C[i] for j > i, |C[j] - C[i]| = C[j] - C[i], and
//   exp(-w (C[j] - C[i])) = E[j] F,  E[j] = exp(-w (C[j] - C[b])),  F = exp(-w (C[b] - C[i]))
// with b the start of j's block of kSeparableExpBlock columns: E is built once per pass
// (BuildSeparableExpFactors), F once per row and block, so a point costs one product instead of
// a square root and an exp. Both come from libm with the argument's rounding carried
// (vector_math::ExpOfScaledDifference), within a few ulp of exact at any argument size. A tile
// (row i, one row segment of at most kSeparableExpBlock columns, so at most two blocks) takes the
// form only where (SeparableExpApplies)
//   - the smoothing is negligible: M - |diff| <= eps / (2 d0) (d0 the tile's smallest |diff|, at
//     its first column) changes exp(-w M) by w (M - |diff|) and diff / M (taken as -1 for
//     diff = C[i] - C[j]) by (M - |diff|) / d0, both at most kSeparableExpNegligible;
//   - every factor stays a normal number and a clip at -700 does not bind:
//     w (C[last] - C[min(i, b)]) <= kSeparableExpMaxExponent;
// callers keep their direct form elsewhere (the tiles next to the diagonal where C grows slowly,
// the clipped tiles).
//
// Internal linkage (static), like vector_math.h: the pass kernel's variants, compiled once per
// instruction-set level, include it and must define no symbol outside their own namespace
// (homodyne/homodyne_pass_variant.h); the scalar code builds the tables with it.
#pragma once

#include "model/tile.h"
#include "model/vector_math.h"

namespace homodyne::pass_kernel {

// The longest row segment of any pass (tile.h), so that a segment lies in at most two blocks;
// blocks as short as the full pass's tiles would double the row factors, each a libm exp.
inline constexpr int kSeparableExpBlock = kCostTilePoints;
static_assert(kTilePoints <= kSeparableExpBlock, "a tile lies in at most two blocks");
inline constexpr double kSeparableExpNegligible = 1e-16;
inline constexpr double kSeparableExpMaxExponent = 690.0;

// One tile's factors: the point t of the tile has exp(-w M) = factors_j[t] (t < split ?
// factor_low : factor_high).
struct SeparableExpTile {
  const double* factors_j = nullptr;  // E[j_begin + t]
  double factor_low = 0.0;            // F of the tile's first block
  double factor_high = 0.0;           // F of the next block
  int split = 0;                      // points [0, split) lie in the first block
};

// The last two row factors computed (the tiles of a row go left to right, each in one or two
// consecutive blocks: its blocks are among the previous tile's and the next one).
struct SeparableExpRowCache {
  int row[2] = {-1, -1};
  int block[2] = {-1, -1};
  double factor[2] = {0.0, 0.0};
  int next = 0;  // the entry the next miss replaces (the older one)
};

// factors[j] = exp(-w (C[j] - C[b])) for j in [0, n), b = j rounded down to a multiple of
// kSeparableExpBlock (0 where it underflows, never read then).
static inline void BuildSeparableExpFactors(const double* cumulative, int n, double w,
                                            double* factors) {
  for (int j = 0; j < n; ++j) {
    const int block = j - j % kSeparableExpBlock;
    factors[j] = vector_math::ExpOfScaledDifference(w, cumulative[j], cumulative[block]);
  }
}

static inline double SeparableExpRowFactor(const double* cumulative, double w, int i, int block,
                                           SeparableExpRowCache* cache) {
  for (int e = 0; e < 2; ++e) {
    if (cache->row[e] == i && cache->block[e] == block) return cache->factor[e];
  }
  const int e = cache->next;
  cache->next = 1 - e;
  cache->row[e] = i;
  cache->block[e] = block;
  cache->factor[e] = vector_math::ExpOfScaledDifference(w, cumulative[block], cumulative[i]);
  return cache->factor[e];
}

// True, with the tile's factors in *tile, where the separable form applies to row i, columns
// [j_begin, j_begin + count) (the conditions above). factors: BuildSeparableExpFactors' table
// (null: never applies). eps: the smoothing constant of M.
static inline bool SeparableExpApplies(const double* cumulative, const double* factors, double w,
                                       double eps, int i, int j_begin, int count,
                                       SeparableExpRowCache* cache, SeparableExpTile* tile) {
  if (factors == nullptr) return false;
  const int block = j_begin - j_begin % kSeparableExpBlock;
  const double d0 = cumulative[j_begin] - cumulative[i];
  const double base = cumulative[block < i ? block : i];
  // Written so that NaN fails.
  const bool applies = d0 > 0.0 &&
                       w * (cumulative[j_begin + count - 1] - base) <= kSeparableExpMaxExponent &&
                       eps <= 2.0 * kSeparableExpNegligible * d0 * d0 &&
                       eps * w <= 2.0 * kSeparableExpNegligible * d0;
  if (!applies) return false;
  tile->factors_j = factors + j_begin;
  tile->split = block + kSeparableExpBlock - j_begin;
  tile->factor_low = SeparableExpRowFactor(cumulative, w, i, block, cache);
  const int next_block = block + kSeparableExpBlock;
  tile->factor_high = tile->split < count
                          ? SeparableExpRowFactor(cumulative, w, i, next_block, cache)
                          : tile->factor_low;
  return true;
}

}  // namespace homodyne::pass_kernel
