// Chunks of compressed float32 matrices decoded on several threads (chunk_decoder.h).
#include "io/chunk_decoder.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "io/hdf5_util.h"
#include "io/lzf_decode.h"

namespace homodyne::io_internal {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the decoded chunks are little-endian float32, used as they are");

// The stored bytes of one chunk a rectangle needs, read through HDF5.
struct StoredChunk {
  size_t rectangle = 0;
  int64_t first_row = 0;     // the chunk's first file row and column
  int64_t first_column = 0;  //
  uint32_t filter_mask = 0;  // bit i set: filter i of the pipeline was skipped for this chunk
  std::vector<unsigned char> bytes;
};

// Decompresses (and unshuffles) `chunk` into `values` (chunk_rows * chunk_columns floats);
// `scratch` is a buffer of the same size for the shuffle. Returns false with `why_not` set when
// the stored bytes do not decode to exactly one chunk.
bool DecodeChunk(const ChunkPlan& plan, const StoredChunk& chunk, std::vector<float>& values,
                 std::vector<unsigned char>& scratch, std::string* why_not) {
  const size_t value_count = static_cast<size_t>(plan.chunk_rows * plan.chunk_columns);
  const size_t chunk_bytes = value_count * sizeof(float);
  values.resize(value_count);
  // Pipeline order: shuffle (filter 0, when present), then the codec; decoding runs backwards.
  const unsigned codec_index = plan.shuffle ? 1u : 0u;
  const bool codec_skipped = (chunk.filter_mask & (1u << codec_index)) != 0;
  const bool unshuffle = plan.shuffle && (chunk.filter_mask & 1u) == 0;
  unsigned char* decompressed = unshuffle ? (scratch.resize(chunk_bytes), scratch.data())
                                          : reinterpret_cast<unsigned char*>(values.data());
  if (codec_skipped) {
    if (chunk.bytes.size() != chunk_bytes) {
      *why_not = "a chunk stored without compression has " + std::to_string(chunk.bytes.size()) +
                 " bytes, not " + std::to_string(chunk_bytes);
      return false;
    }
    std::memcpy(decompressed, chunk.bytes.data(), chunk_bytes);
  } else if (plan.codec == ChunkPlan::Codec::kLzf) {
    const size_t produced =
        LzfDecompress(chunk.bytes.data(), chunk.bytes.size(), decompressed, chunk_bytes);
    if (produced != chunk_bytes) {
      *why_not = "an LZF chunk does not decompress to " + std::to_string(chunk_bytes) + " bytes";
      return false;
    }
  } else {
    uLongf produced = static_cast<uLongf>(chunk_bytes);
    if (uncompress(decompressed, &produced, chunk.bytes.data(),
                   static_cast<uLong>(chunk.bytes.size())) != Z_OK ||
        produced != chunk_bytes) {
      *why_not = "a deflate chunk does not decompress to " + std::to_string(chunk_bytes) + " bytes";
      return false;
    }
  }
  if (unshuffle) {
    // HDF5's shuffle stores byte b of every value together: byte b of value v at b * count + v.
    auto* out = reinterpret_cast<unsigned char*>(values.data());
    for (size_t b = 0; b < sizeof(float); ++b) {
      const unsigned char* plane = decompressed + b * value_count;
      for (size_t v = 0; v < value_count; ++v) out[v * sizeof(float) + b] = plane[v];
    }
  }
  return true;
}

// Copies the part of the decoded chunk that lies in the rectangle into its output.
void CopyIntoRectangle(const ChunkPlan& plan, const StoredChunk& chunk,
                       const std::vector<float>& values, const ChunkRectangle& rectangle) {
  const int64_t row_begin = std::max(rectangle.row, chunk.first_row);
  const int64_t row_end =
      std::min(rectangle.row + rectangle.rows, chunk.first_row + plan.chunk_rows);
  const int64_t column_begin = std::max(rectangle.column, chunk.first_column);
  const int64_t column_end =
      std::min(rectangle.column + rectangle.columns, chunk.first_column + plan.chunk_columns);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* from = values.data() + (r - chunk.first_row) * plan.chunk_columns +
                        (column_begin - chunk.first_column);
    float* to =
        rectangle.out + (r - rectangle.row) * rectangle.columns + (column_begin - rectangle.column);
    std::memcpy(to, from, static_cast<size_t>(column_end - column_begin) * sizeof(float));
  }
}

// Reads the stored bytes of every chunk the rectangles touch (HDF5, this thread).
bool ReadStoredChunks(std::span<const ChunkRectangle> rectangles, std::vector<StoredChunk>* chunks,
                      std::string* why_not) {
  for (size_t index = 0; index < rectangles.size(); ++index) {
    const ChunkRectangle& rectangle = rectangles[index];
    const ChunkPlan& plan = *rectangle.plan;
    if (rectangle.rows <= 0 || rectangle.columns <= 0) continue;
    const int64_t last_row = rectangle.row + rectangle.rows - 1;
    const int64_t last_column = rectangle.column + rectangle.columns - 1;
    for (int64_t cr = rectangle.row / plan.chunk_rows; cr <= last_row / plan.chunk_rows; ++cr) {
      for (int64_t cc = rectangle.column / plan.chunk_columns;
           cc <= last_column / plan.chunk_columns; ++cc) {
        StoredChunk chunk;
        chunk.rectangle = index;
        chunk.first_row = cr * plan.chunk_rows;
        chunk.first_column = cc * plan.chunk_columns;
        const hsize_t offset[2] = {static_cast<hsize_t>(chunk.first_row),
                                   static_cast<hsize_t>(chunk.first_column)};
        hsize_t stored_bytes = 0;
        if (H5Dget_chunk_storage_size(rectangle.dataset, offset, &stored_bytes) < 0 ||
            stored_bytes == 0) {
          *why_not = "the chunk at file row " + std::to_string(chunk.first_row) + ", column " +
                     std::to_string(chunk.first_column) + " is not allocated or not found";
          H5Eclear2(H5E_DEFAULT);
          return false;
        }
        chunk.bytes.resize(static_cast<size_t>(stored_bytes));
        if (H5Dread_chunk(rectangle.dataset, H5P_DEFAULT, offset, &chunk.filter_mask,
                          chunk.bytes.data()) < 0) {
          *why_not = "H5Dread_chunk failed (" + Hdf5ErrorText() + ")";
          return false;
        }
        chunks->push_back(std::move(chunk));
      }
    }
  }
  return true;
}

}  // namespace

std::optional<ChunkPlan> PlanChunkDecoding(hid_t dataset, std::string* why_not) {
  auto refuse = [&](const std::string& reason) -> std::optional<ChunkPlan> {
    *why_not = reason;
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  };
  ChunkPlan plan;
  Hid create = PlistHid(H5Dget_create_plist(dataset));
  if (!create.valid() || H5Pget_layout(create.get()) != H5D_CHUNKED) return refuse("not chunked");
  hsize_t chunk[2] = {0, 0};
  if (H5Pget_chunk(create.get(), 2, chunk) != 2) return refuse("not a 2-D chunked dataset");
  plan.chunk_rows = static_cast<int64_t>(chunk[0]);
  plan.chunk_columns = static_cast<int64_t>(chunk[1]);
  Hid type = TypeHid(H5Dget_type(dataset));
  if (!type.valid() || H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) {
    return refuse("not little-endian IEEE float32");
  }
  Hid space = SpaceHid(H5Dget_space(dataset));
  hsize_t extent[2] = {0, 0};
  if (!space.valid() || H5Sget_simple_extent_dims(space.get(), extent, nullptr) != 2) {
    return refuse("not a 2-D dataset");
  }
  plan.rows = static_cast<int64_t>(extent[0]);
  plan.columns = static_cast<int64_t>(extent[1]);
  const int filters = H5Pget_nfilters(create.get());
  bool codec_found = false;
  for (int f = 0; f < filters; ++f) {
    unsigned flags = 0;
    size_t values = 0;
    const H5Z_filter_t id = H5Pget_filter2(create.get(), static_cast<unsigned>(f), &flags, &values,
                                           nullptr, 0, nullptr, nullptr);
    if (id == H5Z_FILTER_SHUFFLE && f == 0 && filters == 2) {
      plan.shuffle = true;
    } else if ((id == kLzfFilterId || id == H5Z_FILTER_DEFLATE) && f == filters - 1) {
      plan.codec = id == kLzfFilterId ? ChunkPlan::Codec::kLzf : ChunkPlan::Codec::kDeflate;
      codec_found = true;
    } else {
      return refuse("filter pipeline other than [shuffle] + lzf or deflate");
    }
  }
  if (!codec_found) return refuse("no lzf or deflate filter");
  return plan;
}

bool DecodeChunkRectangles(std::span<const ChunkRectangle> rectangles, int threads,
                           std::string* why_not) {
  std::vector<StoredChunk> chunks;
  if (!ReadStoredChunks(rectangles, &chunks, why_not)) return false;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  auto work = [&] {
    std::vector<float> values;
    std::vector<unsigned char> scratch;
    std::string reason;
    try {
      for (size_t c = next++; c < chunks.size() && !failed; c = next++) {
        const StoredChunk& chunk = chunks[c];
        const ChunkRectangle& rectangle = rectangles[chunk.rectangle];
        if (!DecodeChunk(*rectangle.plan, chunk, values, scratch, &reason)) {
          const std::lock_guard<std::mutex> lock(failure_mutex);
          if (!failed.exchange(true)) *why_not = reason;
          return;
        }
        CopyIntoRectangle(*rectangle.plan, chunk, values, rectangle);
      }
    } catch (const std::exception& error) {  // std::bad_alloc of the buffers
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failed.exchange(true)) *why_not = error.what();
    }
  };
  const size_t helpers =
      std::min(chunks.size(), static_cast<size_t>(std::max(threads, 1))) - (chunks.empty() ? 0 : 1);
  std::vector<std::thread> pool;
  pool.reserve(helpers);
  try {
    for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads: the ones started and this thread share the chunks.
  }
  work();
  for (std::thread& thread : pool) thread.join();
  return !failed;
}

}  // namespace homodyne::io_internal
