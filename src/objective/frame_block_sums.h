// The sums of the frame-block clusters of a two-time fit, at one point: what the frame-block
// jackknife of the uncertainties needs (docs/results.md, What the uncertainties mean;
// docs/design.md section 4d). A correlator's c2 carries each frame's intensity fluctuation into its
// whole row and column, so data points that share a frame, or lie close in time, have correlated
// noise; the frames are cut into blocks, and the sums below are kept per cell (row block, column
// block) so that the jackknife can delete every point that touches one block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace homodyne {

struct FrameBlockSums {
  // Frame blocks of the fitted grid: block g holds frames [block_begin[g], block_begin[g + 1]).
  std::vector<int> block_begin;
  int num_angles = 0;
  // Per-point derivatives: d c2 / d(physical..., contrast_k, offset_k) of the point's angle k.
  int num_local = 0;
  // Cell (a, b), a <= b: the finite upper-triangle points (i, j), i < j, with frame i in block a
  // and frame j in block b. Per cell and angle, at CellOffset(a, b, k):
  //   gradient: sum of e J over the cell's points (num_local values), e = data - c2;
  //   gram:     sum of J J^T (num_local^2 values, column major, both triangles).
  // Cells with a > b stay zero.
  std::vector<double> gradient;
  std::vector<double> gram;
  // The residuals' correlation along rows: for each lag d in `lags` (1, 2, 4, ..., below N - 1),
  // over every angle and row i, the sums over pairs of finite points (i, j), (i, j + d):
  // e_j e_{j+d} (lag_products), e_j^2 (lag_left), e_{j+d}^2 (lag_right).
  std::vector<int> lags;
  std::vector<double> lag_products;
  std::vector<double> lag_left;
  std::vector<double> lag_right;

  int num_blocks() const { return static_cast<int>(block_begin.size()) - 1; }
  int num_frames() const { return block_begin.empty() ? 0 : block_begin.back(); }
  // The block of a frame of the grid.
  int BlockOf(int frame) const;
  size_t CellIndex(int a, int b, int angle) const {
    return (static_cast<size_t>(a) * static_cast<size_t>(num_blocks()) + static_cast<size_t>(b)) *
               static_cast<size_t>(num_angles) +
           static_cast<size_t>(angle);
  }
  size_t GradientOffset(int a, int b, int angle) const {
    return CellIndex(a, b, angle) * static_cast<size_t>(num_local);
  }
  size_t GramOffset(int a, int b, int angle) const {
    return CellIndex(a, b, angle) * static_cast<size_t>(num_local) * static_cast<size_t>(num_local);
  }
};

// Empty sums (zeros) for n_frames frames in num_blocks blocks of about equal frames
// (block g starts at round(g n_frames / num_blocks)); 1 <= num_blocks <= n_frames.
FrameBlockSums MakeFrameBlockSums(int n_frames, int num_blocks, int num_angles, int num_local);

// The number of blocks a pass keeps (before the jackknife merges them): 64, halved while the
// cells' Gram matrices would exceed 2^25 doubles (256 MiB) for this many angles and local
// derivatives, and at most n_frames / 2 (at least 1).
int FineFrameBlocks(int n_frames, int num_angles, int num_local);

}  // namespace homodyne
