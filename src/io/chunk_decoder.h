// Chunks of compressed float32 matrices decoded by this project's code, on several threads
// (docs/design.md section 8, Input): HDF5 runs a dataset's filters inside H5Dread, one chunk
// after the other on the calling thread, and the library is not thread-safe, so a read of LZF
// or deflate data is bound by one core (docs/history/performance-notebook.md, Streaming passes).
// Here HDF5 only hands out each chunk's stored bytes (H5Dread_chunk, serially), and the chunks are
// decompressed and copied into place by up to `threads` threads. Private to src/io.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace homodyne::io_internal {

// How the chunks of one 2-D dataset are stored, when this decoder can read them: little-endian
// IEEE float32 in chunks of chunk_rows x chunk_columns, through the filter pipeline [shuffle]
// then LZF (h5py's, id 32000) or deflate, and nothing else (no Fletcher32, no other filter).
struct ChunkPlan {
  enum class Codec { kLzf, kDeflate };
  Codec codec = Codec::kLzf;
  bool shuffle = false;
  int64_t chunk_rows = 0;
  int64_t chunk_columns = 0;
  int64_t rows = 0;     // the dataset's extent
  int64_t columns = 0;  //
};

// The plan of `dataset`, or nullopt with `why_not` saying which condition failed (HDF5 errors on
// the way are cleared and mean nullopt).
std::optional<ChunkPlan> PlanChunkDecoding(hid_t dataset, std::string* why_not);

// One rectangle of a dataset to read: file rows [row, row + rows) and columns [column, column +
// columns), row-major into `out` (rows * columns values).
struct ChunkRectangle {
  hid_t dataset = -1;
  const ChunkPlan* plan = nullptr;
  int64_t row = 0;
  int64_t rows = 0;
  int64_t column = 0;
  int64_t columns = 0;
  float* out = nullptr;
};

// Reads every rectangle: the stored bytes of each chunk they touch through HDF5 on the calling
// thread, then decompression and copies on up to `threads` threads (a chunk once per call, for
// all the rectangles it serves). Returns true when every value was decoded: the values are then
// bitwise those H5Dread gives. Returns false, with `why_not` set, on anything unexpected (a chunk
// not allocated, a stored size that does not decompress to the chunk, an HDF5 error): `out` then
// holds partial values, and the caller reads the rectangles through H5Dread, which reports a
// corrupt chunk in HDF5's words.
bool DecodeChunkRectangles(std::span<const ChunkRectangle> rectangles, int threads,
                           std::string* why_not);

}  // namespace homodyne::io_internal
