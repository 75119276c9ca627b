// The machine-limit probes of bench/roofline_benchmark.cc, compiled once per vector level in
// roofline_kernels.cc (bench/CMakeLists.txt): avx2 (x86-64-v3, 4-lane vectors) and avx512
// (x86-64-v4, 8 lanes). Call a level's probes only on a CPU that has it (BestProbes).
#pragma once

#include <cstdint>

namespace homodyne::roofline {

struct Probes {
  const char* level;  // "avx2" or "avx512"
  int lanes;          // doubles per vector register at this level

  // `chains` (1, 2, 4, 8 or 10) independent chains of `lanes`-lane double FMAs, `iterations` FMAs
  // per chain: chains * iterations * lanes double FMAs. Returns a value that depends on every
  // chain.
  double (*fma_chains)(int chains, int64_t iterations);

  // The sum of `count` float32 values (vector accumulators; one pass, read-only).
  double (*sum_floats)(const float* values, int64_t count);

  // `repeats` Gram updates of one tile (model/gram_block.h, AddTileGram) of `count` points with
  // gram_size columns into gram (gram_size^2 doubles); tile: kTilePoints * padded columns.
  void (*repeat_tile_gram)(const double* tile, int count, int gram_size, int repeats, double* gram);

  // The same with the lane Gram (gram_block.h, AddTileToLaneGram; FlushLaneGram once at the
  // end), the linear loss's Gram update. tile is written (its padding points
  // zeroed).
  void (*repeat_lane_gram)(double* tile, int count, int gram_size, int repeats, double* lanes,
                           double* gram);

  // The same with the offset lane Gram (gram_block.h, AddTileToOffsetLaneGram;
  // FlushOffsetLaneGram once at the end), the full pass's Gram update under the linear loss since
  // the offset column left the tile: the tile's gram_size - 1 columns, all points finite.
  void (*repeat_offset_lane_gram)(double* tile, int count, int gram_size, int repeats,
                                  double* lanes, double* gram);
};

// The probes of the widest level the CPU runs (avx512, else avx2), or null when it runs neither
// or the build has neither (roofline_benchmark.cc).
const Probes* BestProbes();

}  // namespace homodyne::roofline
