// The tile of points every mode's pass body works on (mode_point.h, gram_block.h).
#pragma once

namespace homodyne::pass_kernel {

// Points per tile (one row segment); the vector loops run over a tile.
inline constexpr int kTilePoints = 256;

// Columns of a tile of [J | e]: the Gram side padded with zero columns to a multiple of 4.
constexpr int PaddedTileColumns(int gram_size) { return (gram_size + 3) / 4 * 4; }

}  // namespace homodyne::pass_kernel
