// The tile of points every mode's pass body works on (mode_point.h, gram_block.h).
#pragma once

namespace homodyne::pass_kernel {

// Points per tile (one row segment); the vector loops run over a tile. A full pass's tile of
// [J | e] and its angle-independent factor columns are kTilePoints doubles each: at 128 points the
// laminar ones (9 + 10 columns, 19 KiB) stay in a 32 KiB L1 data cache, at 256 they did not
// (docs/history/performance-notebook.md, "Tiles of 128 points").
inline constexpr int kTilePoints = 128;

// Points per row segment of the homodyne cost and scaling passes, which build no tile of [J | e]
// and read 4 factor columns (homodyne_pass_variant.cc, ForEachAngleTile): their per-segment
// set-up (the factors' forms, each angle's form) paid twice as often at 128 points made the
// static cost pass about 20 % slower (docs/history/performance-notebook.md, "Tiles of 128 points").
inline constexpr int kCostTilePoints = 256;

// Columns of a tile of [J | e]: the Gram side padded with zero columns to a multiple of 4.
constexpr int PaddedTileColumns(int gram_size) { return (gram_size + 3) / 4 * 4; }

// The most doubles in one vector register of any level (AVX-512: 8); the lane Gram of one angle
// (gram_block.h) holds at most this many partial sums per Gram entry.
inline constexpr int kMaxGramLanes = 8;

// Doubles of one angle's lane Gram (gram_block.h) for any level: one partial sum per lane of each
// entry of the lower triangle and diagonal.
constexpr int LaneGramDoubles(int gram_size) {
  return gram_size * (gram_size + 1) / 2 * kMaxGramLanes;
}

}  // namespace homodyne::pass_kernel
