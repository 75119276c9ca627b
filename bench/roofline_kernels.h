// The machine-limit probes of bench/roofline_benchmark.cc, compiled for x86-64-v4 (AVX-512) in
// roofline_kernels.cc: call them only when the CPU has AVX-512 (CpuHasAvx512).
#pragma once

#include <cstdint>

namespace homodyne::roofline {

bool CpuHasAvx512();

// `chains` (1..10) independent chains of 8-lane double FMAs, `iterations` FMAs per chain and lane
// step: chains * iterations * 8 double FMAs. Returns a value that depends on every chain.
double FmaChains(int chains, int64_t iterations);

// The sum of `count` float32 values (8 double accumulators; one pass, read-only).
double SumFloats(const float* values, int64_t count);

// `repeats` Gram updates of one tile (model/gram_block.h, AddTileGram) of `count` points with
// gram_size columns into gram (gram_size^2 doubles); tile: kTilePoints * padded columns.
void RepeatTileGram(const double* tile, int count, int gram_size, int repeats, double* gram);

// The same with the lane Gram (gram_block.h, AddTileToLaneGram; FlushLaneGram once at the end),
// the linear loss's Gram update since issue 24. tile is written (its padding points zeroed).
void RepeatLaneGram(double* tile, int count, int gram_size, int repeats, double* lanes,
                    double* gram);

}  // namespace homodyne::roofline
