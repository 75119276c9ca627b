// nlsq/fitted_data.h5: data, fit and residuals per angle on the fitted grid
// (docs/design.md section 8).
//
// Streams bands of rows (BatchSource::ReadCorrectedUpperRows: each band from the diagonal on) and
// writes each band's square tiles and, by symmetry of the data and the model, their mirror images
// below the diagonal (transposed: TransposeTile), so the input is read once (after an in-memory fit
// one value per angle: the fit's data in memory, lent to the source, io/read_paths.h
// LendHeldUpperTriangles) and memory stays bounded by the band and the tiles in flight, not N^2.
// HDF5 writes the temporary file of a DurableFileSet (io/durable_file.h), which publishes it, alone
// (WriteFittedData) or with the JSON files (WriteAllResultFiles, results_json.cc).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "homodyne/results.h"
#include "io/direct_reads.h"
#include "io/durable_file.h"
#include "io/hdf5_util.h"
#include "io/result_files.h"
#include "model/pass_kernel.h"

namespace homodyne {
namespace {

using io_internal::Hid;

// The side of the matrices' square chunks and of the writer's tiles: as many rows as a band of
// kBandValues values holds (the read buffer, 8 MB of doubles), from kMinTileSide to kMaxTileSide
// (chunks of 8 KB to 512 KB), and at most N (HDF5 needs chunks within fixed dimensions).
constexpr int64_t kBandValues = int64_t{1} << 20;
constexpr int64_t kMinTileSide = 32;
constexpr int64_t kMaxTileSide = 256;

int64_t TileSide(int64_t n) {
  const int64_t side =
      std::clamp<int64_t>(kBandValues / std::max<int64_t>(n, 1), kMinTileSide, kMaxTileSide);
  return std::min(side, std::max<int64_t>(n, 1));
}

std::string AngleGroupName(size_t k) {
  char name[32];
  std::snprintf(name, sizeof(name), "phi_%03zu", k);
  return name;
}

void WriteScalar(hid_t location, const std::string& name, double value) {
  Hid space = io_internal::SpaceHid(H5Screate(H5S_SCALAR));
  Hid dataset = io_internal::DatasetHid(H5Dcreate2(
      location, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!space.valid() || !dataset.valid() ||
      H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0 ||
      dataset.Close() < 0) {
    throw std::runtime_error("cannot write dataset " + name + ": " + io_internal::Hdf5ErrorText());
  }
}

// An N x N float64 dataset in square chunks of `side`, uncompressed: noisy data and residuals
// barely compress (3 x 2000 x 2000: 288 MB raw, 200 MB with deflate) while deflate took 5-7 s,
// more than the fit itself. Square chunks, so that a tile and its mirror image are whole chunks.
// `allocate_early`: every chunk allocated now and never filled (DirectChunkWriter writes them).
Hid CreateMatrix(hid_t group, const std::string& name, int64_t n, int64_t side,
                 bool allocate_early) {
  const hsize_t dims[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(n)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(side), static_cast<hsize_t>(side)};
  Hid space = io_internal::SpaceHid(H5Screate_simple(2, dims, nullptr));
  Hid create = io_internal::PlistHid(H5Pcreate(H5P_DATASET_CREATE));
  if (!space.valid() || !create.valid() || H5Pset_chunk(create.get(), 2, chunk) < 0 ||
      (allocate_early && (H5Pset_alloc_time(create.get(), H5D_ALLOC_TIME_EARLY) < 0 ||
                          H5Pset_fill_time(create.get(), H5D_FILL_TIME_NEVER) < 0))) {
    throw std::runtime_error("cannot set up dataset " + name + ": " + io_internal::Hdf5ErrorText());
  }
  // No chunk cache: the writer writes whole chunks (a tile is one chunk), which HDF5 then writes
  // straight from the tile's buffer instead of copying each into its cache first. The chunks and
  // their values are the same; only a copy of every written byte is saved.
  Hid access = io_internal::PlistHid(H5Pcreate(H5P_DATASET_ACCESS));
  if (!access.valid() || H5Pset_chunk_cache(access.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0,
                                            H5D_CHUNK_CACHE_W0_DEFAULT) < 0) {
    throw std::runtime_error("cannot set up dataset " + name + ": " + io_internal::Hdf5ErrorText());
  }
  Hid dataset = io_internal::DatasetHid(H5Dcreate2(group, name.c_str(), H5T_IEEE_F64LE, space.get(),
                                                   H5P_DEFAULT, create.get(), access.get()));
  if (!dataset.valid()) {
    throw std::runtime_error("cannot create dataset " + name + ": " + io_internal::Hdf5ErrorText());
  }
  return dataset;
}

// Writes the tile rows [row, row + rows) x columns [col, col + cols) of a dataset from `values`
// (row-major, rows x cols).
void WriteTile(hid_t dataset, const std::string& name, int64_t row, int64_t rows, int64_t col,
               int64_t cols, const double* values) {
  const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
  Hid file_space = io_internal::SpaceHid(H5Dget_space(dataset));
  Hid memory_space = io_internal::SpaceHid(H5Screate_simple(2, count, nullptr));
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dwrite(dataset, H5T_NATIVE_DOUBLE, memory_space.get(), file_space.get(), H5P_DEFAULT,
               values) < 0) {
    throw std::runtime_error("cannot write rows " + std::to_string(row) + ".." +
                             std::to_string(row + rows - 1) + ", columns " + std::to_string(col) +
                             ".." + std::to_string(col + cols - 1) + " of " + name + ": " +
                             io_internal::Hdf5ErrorText());
  }
}

// One angle's three matrices.
struct AngleMatrices {
  std::string name;  // the angle's group, for messages
  Hid data;
  Hid fit;
  Hid residuals;
};

// Where a tile of the matrices lies (rows [row, row + rows) x columns [col, col + cols)) and where
// its data come from: the band of rows [band_row, band_row + side) read from the diagonal on,
// straight (mirror false: the tile's rows are the band's) or transposed (mirror true: the tile lies
// below the diagonal, its columns are the band's rows; the data are symmetric, C = H + H^T).
struct TilePlace {
  int64_t row = 0, rows = 0, col = 0, cols = 0;
  int64_t band_row = 0;
  bool mirror = false;
};

// An angle's tiles in the order the writer makes them: band by band, each band's tiles from the
// diagonal rightwards, each followed by its mirror image (the diagonal tile is its own). One
// place at a time (an N of 1e5 has about 1e7 tiles): FirstTilePlace, then NextTilePlace.
TilePlace FirstTilePlace(int64_t n, int64_t side) {
  const int64_t rows = std::min(side, n);
  return {0, rows, 0, rows, 0, false};
}

// Moves `place` to the next tile; false after the last one.
bool NextTilePlace(int64_t n, int64_t side, TilePlace* place) {
  if (!place->mirror && place->col != place->band_row) {
    *place = {place->col, place->cols, place->row, place->rows, place->band_row, true};
    return true;
  }
  int64_t row = place->band_row;
  int64_t col = (place->mirror ? place->row : place->col) + side;  // the band's next tile
  if (col >= n) {
    // The next band's diagonal tile.
    row += side;
    col = row;
    if (row >= n) return false;
  }
  *place = {row, std::min(side, n - row), col, std::min(side, n - col), row, false};
  return true;
}

// Direct writes (DirectChunkWriter): file offsets, sizes and buffers in multiples of this, and
// chunks of at least kMinDirectChunkBytes (side 128; the 8 KB chunks of N > 32768 would each be a
// synchronous write to the device, where the page cache gathers them).
constexpr int64_t kDirectAlignment = 4096;
constexpr int64_t kMinDirectChunkBytes = int64_t{128} * 128 * 8;

// Memory aligned to kDirectAlignment, for buffers written with O_DIRECT.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  explicit AlignedAllocator(const AlignedAllocator<U>& /*other*/) {}
  T* allocate(size_t count) {
    const size_t bytes = (count * sizeof(T) + kDirectAlignment - 1) / kDirectAlignment *
                         static_cast<size_t>(kDirectAlignment);
    void* memory = std::aligned_alloc(static_cast<size_t>(kDirectAlignment), bytes);
    if (memory == nullptr) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* memory, size_t /*count*/) { std::free(memory); }
  template <class U>
  bool operator==(const AlignedAllocator<U>& /*other*/) const {
    return true;
  }
};
using AlignedDoubles = std::vector<double, AlignedAllocator<double>>;

// A tile's values, row-major: the data, the fit and the residuals data - fit.
struct TileValues {
  TilePlace place;
  AlignedDoubles data;
  AlignedDoubles fit;
  AlignedDoubles residuals;
};

// out (r, c) = in (c, r) for r < rows, c < cols: `in` has cols rows of `in_stride` values, `out`
// rows rows of `cols` values. In blocks of kTransposeBlock x kTransposeBlock, so that both sides
// stay in the cache (a tile's column is 256 rows of 2 KB apart).
constexpr int64_t kTransposeBlock = 16;
void Transpose(const double* in, int64_t in_stride, int64_t rows, int64_t cols, double* out) {
  for (int64_t c0 = 0; c0 < cols; c0 += kTransposeBlock) {
    const int64_t c1 = std::min(cols, c0 + kTransposeBlock);
    for (int64_t r0 = 0; r0 < rows; r0 += kTransposeBlock) {
      const int64_t r1 = std::min(rows, r0 + kTransposeBlock);
      for (int64_t c = c0; c < c1; ++c) {
        const double* from = in + c * in_stride;
        for (int64_t r = r0; r < r1; ++r) out[r * cols + c] = from[r];
      }
    }
  }
}

// The data of a tile on or above the diagonal from its band (`band`: rows [place.band_row, + side)
// from column band_row on, `width` = N - band_row values a row).
void CopyTileData(const std::vector<double>& band, int64_t width, const TilePlace& place,
                  TileValues& tile) {
  HOMODYNE_CHECK(!place.mirror);  // a mirror tile is its tile transposed (TransposeTile)
  tile.place = place;
  tile.data.resize(static_cast<size_t>(place.rows * place.cols));
  for (int64_t r = 0; r < place.rows; ++r) {
    std::copy_n(band.data() + r * width + (place.col - place.band_row), place.cols,
                tile.data.begin() + r * place.cols);
  }
}

// A mirror tile's values from its tile above the diagonal (`upper`, complete), transposed: the data
// are symmetric (C = H + H^T), and so are the fit and the residuals (TileEvaluation: the model of
// every mode is symmetric in (i, j)).
// `tile.place` is set.
void TransposeTile(const TileValues& upper, TileValues& tile) {
  const TilePlace& place = tile.place;
  const size_t size = static_cast<size_t>(place.rows * place.cols);
  for (AlignedDoubles* values : {&tile.data, &tile.fit, &tile.residuals}) {
    values->resize(size);
  }
  // Tile (r, c) is upper (c, r); upper has place.cols rows of place.rows values.
  Transpose(upper.data.data(), place.rows, place.rows, place.cols, tile.data.data());
  Transpose(upper.fit.data(), place.rows, place.rows, place.cols, tile.fit.data());
  Transpose(upper.residuals.data(), place.rows, place.rows, place.cols, tile.residuals.data());
}

// The fit and residuals of a tile on or above the diagonal, row by row, shared by the threads that
// call EvaluateRows: each takes the next row not yet taken. A row's values depend only on the row
// and the tile's columns, not on the thread or the thread count. Right of the diagonal the fit is
// the pass kernel's model (PassKernel::EvaluateUpperSegment: vectorised, within a few ulp of the
// scalar model), on it the scalar model (ComputeC2RowSegment). The model of every mode is
// symmetric in (i, j): the homodyne modes' c2 depends on (i, j) only through the smooth absolute
// values sqrt((C_i - C_j)^2 + 1e-12) of the time integrals (docs/model.md, The time integrals: a
// cumulative trapezoid in steps), the two-component mode's also through the cosine of a phase
// odd in (i, j) and products of the fractions at i and j (docs/model.md, Two-component mode). So
// a tile below the diagonal is its mirror transposed (TransposeTile), and a diagonal tile is
// evaluated on and right of its diagonal only, CompleteDiagonalTile mirroring that fit below it:
// the same values, evaluated once.
class TileEvaluation {
 public:
  TileEvaluation(const ModelEvaluation& evaluation, double phi, double contrast, double offset)
      : evaluation_(evaluation),
        kernel_(evaluation, std::span<const double>(&phi, 1), std::span<const double>(&contrast, 1),
                std::span<const double>(&offset, 1)),
        phi_(phi),
        contrast_(contrast),
        offset_(offset) {}

  // Starts on `tile`, whose place and data are set: sizes its fit and residuals. With `band` (a
  // tile above the diagonal, its data sized only): EvaluateRows copies each row's data first,
  // from band[r * band_width + c] (the tile's row r, column c).
  void Reset(TileValues& tile, const double* band = nullptr, int64_t band_width = 0) {
    tile.fit.resize(tile.data.size());
    tile.residuals.resize(tile.data.size());
    tile_ = &tile;
    band_ = band;
    band_width_ = band_width;
    HOMODYNE_CHECK(!tile.place.mirror);  // transposed, not evaluated
    upper_only_ = tile.place.row == tile.place.col;
    next_row_.store(0);
  }

  // Leaves nothing to evaluate: `tile` is complete (a transposed mirror tile).
  void SetDone(TileValues& tile) {
    tile_ = &tile;
    band_ = nullptr;
    upper_only_ = false;
    next_row_.store(tile.place.rows);  // the place is set before TransposeTile starts
  }

  // Evaluates rows until none is left.
  void EvaluateRows() {
    const TilePlace& place = tile_->place;
    PassKernel::Workspace workspace(kernel_.gram_size());
    for (int64_t r = next_row_.fetch_add(1); r < place.rows; r = next_row_.fetch_add(1)) {
      if (band_ != nullptr) {
        std::copy_n(band_ + r * band_width_, place.cols, tile_->data.data() + r * place.cols);
      }
      const int64_t first = upper_only_ ? r : 0;  // the row's first column evaluated
      const size_t origin = static_cast<size_t>(r * place.cols + first);
      const int64_t count = place.cols - first;
      double* fit = tile_->fit.data() + origin;
      EvaluateRowSegment(static_cast<int>(place.row + r), static_cast<int>(place.col + first),
                         static_cast<int>(place.col + place.cols), fit, workspace);
      const double* data = tile_->data.data() + origin;
      double* residuals = tile_->residuals.data() + origin;
      for (int64_t c = 0; c < count; ++c) residuals[c] = data[c] - fit[c];
    }
  }

  // Once every row is evaluated: a diagonal tile evaluated on and right of its diagonal only gets
  // its fit below the diagonal by symmetry, and the residuals there (data - fit: the data below
  // the diagonal are those the source gave, symmetric or not).
  void CompleteDiagonalTile() {
    if (!upper_only_) return;
    const int64_t side = tile_->place.rows;
    double* fit = tile_->fit.data();
    const double* data = tile_->data.data();
    double* residuals = tile_->residuals.data();
    for (int64_t r = 1; r < side; ++r) {
      for (int64_t c = 0; c < r; ++c) {
        fit[r * side + c] = fit[c * side + r];
        residuals[r * side + c] = data[r * side + c] - fit[r * side + c];
      }
    }
  }

 private:
  // The fit at row i, columns [j_begin, j_end) with i <= j_begin: the scalar model on the
  // diagonal, the pass kernel's right of it.
  void EvaluateRowSegment(int i, int j_begin, int j_end, double* fit,
                          PassKernel::Workspace& workspace) const {
    HOMODYNE_CHECK(i <= j_begin && j_begin < j_end);
    if (j_begin == i) {
      evaluation_.ComputeC2RowSegment(phi_, contrast_, offset_, i, i, i + 1,
                                      std::span<double>(fit, 1));
      ++j_begin;
      ++fit;
    }
    kernel_.EvaluateUpperSegment(0, i, j_begin, j_end,
                                 std::span<double>(fit, static_cast<size_t>(j_end - j_begin)),
                                 workspace);
  }

  const ModelEvaluation& evaluation_;
  const PassKernel kernel_;  // angle 0: this tile's angle
  const double phi_, contrast_, offset_;
  TileValues* tile_ = nullptr;
  const double* band_ = nullptr;  // where the rows' data are copied from (Reset), or null
  int64_t band_width_ = 0;
  bool upper_only_ = false;  // a diagonal tile
  std::atomic<int64_t> next_row_{0};
};

// Set by io_internal::SetDirectChunkWritesForTesting; the count of the last file's direct writes.
std::atomic<bool> g_direct_writes_enabled{true};
std::atomic<int64_t> g_last_direct_chunks{0};

// Whole chunks of the matrices written straight to the file, past the page cache (O_DIRECT), where
// the file system allows it: copying the written bytes into fresh page-cache pages was the largest
// part of the writing's CPU (docs/performance.md, Writing fitted_data.h5), and the file is fsynced
// before it is published anyway. The matrices' datasets are then created with every chunk
// allocated at once (H5D_ALLOC_TIME_EARLY, no fill: every chunk is written here), at a multiple of
// kDirectAlignment (H5Pset_alignment), so that HDF5 knows where each chunk lies
// (H5Dget_chunk_info_by_coord) and never writes those bytes itself. Chunks of a size that is not
// a multiple of kDirectAlignment or below kMinDirectChunkBytes, a chunk placed otherwise, and every
// chunk where the file system refuses O_DIRECT (at the open, or at the first write: EINVAL) are
// written through H5Dwrite, as without: the values, chunks and datasets are the same either way.
class DirectChunkWriter {
 public:
  // `path`: the file HDF5 is about to create (it exists: the durable set's temporary file);
  // `side`: the side of the chunks.
  DirectChunkWriter(const std::string& path, int64_t side) : side_(side) {
    const int64_t bytes = side * side * static_cast<int64_t>(sizeof(double));
    if (!g_direct_writes_enabled.load() || bytes % kDirectAlignment != 0 ||
        bytes < kMinDirectChunkBytes) {
      return;
    }
    fd_ = io_internal::FileDescriptor(open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
  }

  // Whether the chunks may go this way (the file and dataset properties above are then needed).
  bool usable() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  int64_t chunk_bytes() const { return side_ * side_ * static_cast<int64_t>(sizeof(double)); }
  int64_t chunks_written() const { return chunks_written_; }

  // Where the chunk of `dataset` at (place.row, place.col) lies in the file, when it can be
  // written directly (allocated, whole, aligned); nullopt otherwise: the caller writes it through
  // HDF5. An HDF5 call: from the thread that writes through HDF5.
  std::optional<int64_t> Locate(hid_t dataset, const TilePlace& place) const {
    if (!fd_.valid()) return std::nullopt;
    const hsize_t origin[2] = {static_cast<hsize_t>(place.row), static_cast<hsize_t>(place.col)};
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(dataset, origin, &filter_mask, &address, &size) < 0) {
      io_internal::Hdf5ErrorText();  // clears HDF5's error stack; H5Dwrite reports any error
      return std::nullopt;
    }
    if (address == HADDR_UNDEF || static_cast<int64_t>(size) != chunk_bytes() ||
        address % static_cast<haddr_t>(kDirectAlignment) != 0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(address);
  }

  // The tile's chunk (`values`: place.rows x place.cols, row-major, aligned to kDirectAlignment):
  // `values` itself for a whole tile, else the tile in `padded` (a tile at the matrix's edge: its
  // chunk's other values lie outside the matrix, zero).
  const double* ChunkOf(const TilePlace& place, const double* values,
                        AlignedDoubles& padded) const {
    if (IsWholeChunk(place)) return values;
    padded.resize(static_cast<size_t>(side_ * side_));
    for (int64_t r = 0; r < side_; ++r) PadChunkRow(place, values, padded.data(), r);
    return padded.data();
  }
  bool IsWholeChunk(const TilePlace& place) const {
    return place.rows == side_ && place.cols == side_;
  }
  // Row r (< side) of an edge tile's chunk in `padded` (side x side values): the tile's row
  // (`values` as ChunkOf's), then zeros.
  void PadChunkRow(const TilePlace& place, const double* values, double* padded, int64_t r) const {
    double* row = padded + r * side_;
    const int64_t cols = r < place.rows ? place.cols : 0;
    if (cols > 0) std::copy_n(values + r * place.cols, cols, row);
    std::fill(row + cols, row + side_, 0.0);
  }

  // Writes `chunk` (chunk_bytes(), aligned) at `address` now. False, having written nothing, when
  // the file system refuses the first such write (EINVAL): no chunk goes this way then, the caller
  // writes every chunk through HDF5. Throws std::runtime_error naming `what` (the dataset, rows
  // and columns) and the OS reason when a write fails otherwise.
  bool WriteNow(int64_t address, const double* chunk, const std::string& what) {
    if (!fd_.valid()) return false;
    const int error = WriteFully(fd_.get(), chunk, chunk_bytes(), address);
    if (error == EINVAL && chunks_written_ == 0) {
      fd_ = io_internal::FileDescriptor();  // refused: HDF5 writes every chunk
      return false;
    }
    if (error != 0) throw std::runtime_error(what + ": " + ErrorText(error));
    ++chunks_written_;
    return true;
  }

  // The file's blocks of bytes [offset, offset + bytes), allocated now (fallocate), where the
  // file system does it: the direct writes then fill allocated blocks instead of holes, which the
  // file system allocates one write at a time (docs/performance.md, Writing fitted_data.h5). The
  // bytes read as zeros until written, as a hole's; nothing happens where fallocate fails.
  void Reserve(int64_t offset, int64_t bytes) const {
    if (fd_.valid() && bytes > 0) {
      static_cast<void>(
          fallocate(fd_.get(), 0, static_cast<off_t>(offset), static_cast<off_t>(bytes)));
    }
  }

  // Counts a chunk written elsewhere (ChunkWriteQueue) with this writer's descriptor.
  void CountQueuedWrite() { ++chunks_written_; }

  // Writes the tile as the chunk of `dataset` at (place.row, place.col) now (Locate, ChunkOf,
  // WriteNow). False, having written nothing, when that chunk cannot be written directly.
  bool Write(hid_t dataset, const std::string& name, const TilePlace& place, const double* values) {
    const std::optional<int64_t> address = Locate(dataset, place);
    if (!address) return false;
    return WriteNow(*address, ChunkOf(place, values, padded_), ChunkText(name, place));
  }

  // "rows a..b, columns c..d of NAME", for messages.
  static std::string ChunkText(const std::string& name, const TilePlace& place) {
    return "cannot write rows " + std::to_string(place.row) + ".." +
           std::to_string(place.row + place.rows - 1) + ", columns " + std::to_string(place.col) +
           ".." + std::to_string(place.col + place.cols - 1) + " of " + name;
  }

  // Writes `bytes` bytes from `from` at file offset `address` of `fd`, whole (retried on EINTR and
  // short writes). Returns 0, or the errno of the failed write (EIO where nothing was written).
  static int WriteFully(int fd, const void* from, int64_t bytes, int64_t address) {
    const char* next = static_cast<const char*>(from);
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t written = pwrite(fd, next + done, static_cast<size_t>(bytes - done),
                                     static_cast<off_t>(address + done));
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) return errno;
      if (written == 0) return EIO;
      done += written;
    }
    return 0;
  }

  static std::string ErrorText(int error) {
    return error == EIO ? std::string("nothing written (") + std::strerror(error) + ")"
                        : std::strerror(error);
  }

 private:
  const int64_t side_;
  io_internal::FileDescriptor fd_;
  AlignedDoubles padded_;  // an edge tile's chunk (Write)
  int64_t chunks_written_ = 0;
};

// Chunk writes queued to kWriteThreads threads (DirectChunkWriter's descriptor): each pwrite with
// O_DIRECT waits for the device, mostly without the CPU, and the device writes several at once
// faster than one after another (docs/performance.md, Writing fitted_data.h5). A queued chunk's
// buffer must stay unchanged until its slot's count (Submit's `pending`) is back to 0 (Wait).
// The destructor drops the chunks not started and waits for those being written.
constexpr int kWriteThreads = 3;
class ChunkWriteQueue {
 public:
  explicit ChunkWriteQueue(int fd) : fd_(fd) {
    for (int t = 0; t < kWriteThreads; ++t) workers_.emplace_back([this] { Work(); });
  }
  ChunkWriteQueue(const ChunkWriteQueue&) = delete;
  ChunkWriteQueue& operator=(const ChunkWriteQueue&) = delete;
  ~ChunkWriteQueue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      jobs_.clear();
    }
    work_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  // Queues `bytes` bytes of `chunk` for file offset `address`; `pending` (guarded by this queue)
  // counts it until it is written. `what` names the chunk in a failure's message.
  void Submit(const double* chunk, int64_t bytes, int64_t address, int* pending, std::string what) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++*pending;
      jobs_.push_back({chunk, bytes, address, pending, std::move(what)});
    }
    work_.notify_one();
  }

  // Waits until `pending` is 0. Throws std::runtime_error with the first failed write's message
  // (the chunk and the OS reason).
  void Wait(const int* pending) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return *pending == 0 || !failure_.empty(); });
    if (!failure_.empty()) throw std::runtime_error(failure_);
  }

 private:
  struct Job {
    const double* chunk = nullptr;
    int64_t bytes = 0;
    int64_t address = 0;
    int* pending = nullptr;
    std::string what;
  };

  void Work() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      const int error = DirectChunkWriter::WriteFully(fd_, job.chunk, job.bytes, job.address);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error != 0 && failure_.empty()) {
          failure_ = job.what + ": " + DirectChunkWriter::ErrorText(error);
        }
        --*job.pending;
      }
      done_.notify_all();
    }
  }

  const int fd_;
  std::mutex mutex_;
  std::condition_variable work_;  // a job queued, or stop
  std::condition_variable done_;  // a job done
  std::deque<Job> jobs_;
  std::string failure_;
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last: started once the rest exists
};

void WriteTileValues(const AngleMatrices& matrices, const TileValues& tile,
                     DirectChunkWriter& direct) {
  const TilePlace& place = tile.place;
  const std::pair<hid_t, const char*> datasets[3] = {{matrices.data.get(), "/data"},
                                                     {matrices.fit.get(), "/fit"},
                                                     {matrices.residuals.get(), "/residuals"}};
  const double* values[3] = {tile.data.data(), tile.fit.data(), tile.residuals.data()};
  for (int m = 0; m < 3; ++m) {
    const std::string name = matrices.name + datasets[m].second;
    if (direct.Write(datasets[m].first, name, place, values[m])) continue;
    WriteTile(datasets[m].first, name, place.row, place.rows, place.col, place.cols, values[m]);
  }
}

// Helper threads per tile at most: with three, the evaluation of a tile takes less than its
// writes (one thread), which then bound the time. Tiles of fewer points than kMinHelpedPoints (the
// 32 x 32 tiles of N > 32768) are evaluated by one thread alone: starting a thread would cost
// about what evaluating them does.
constexpr int kMaxHelpers = 3;
constexpr int64_t kMinHelpedPoints = int64_t{1} << 14;

// One angle's matrices through HDF5 (H5Dwrite), tile by tile (FirstTilePlace, NextTilePlace),
// two tiles in flight: while this thread writes one (HDF5, which takes one thread at a time),
// helper threads evaluate the next (or transpose it: a mirror tile), and this thread joins them
// when its writes are done. Threads: OpenMP's count (the fit's while a fit
// writes its results), this one included, at most kMaxHelpers + 1.
void WriteAngleMatricesThroughHdf5(BatchSource& source, int angle,
                                   const ModelEvaluation& evaluation, double phi, double contrast,
                                   double offset, int64_t side, const AngleMatrices& matrices,
                                   DirectChunkWriter& direct) {
  const int64_t n = source.info().num_times();
  if (n == 0) return;
  const int threads = omp_get_max_threads();
  const int helper_count = std::clamp(threads - 1, 0, kMaxHelpers);
  std::vector<double> band;  // rows [band_row, band_row + side) from column band_row on
  int64_t band_row = -1;
  TileValues tiles[2];
  TileEvaluation evaluations[2] = {{evaluation, phi, contrast, offset},
                                   {evaluation, phi, contrast, offset}};
  // Declared after the tiles and evaluations: their destructors wait for the helpers first.
  std::vector<std::future<void>> helpers;
  auto start = [&](const TilePlace& place, int slot) {  // the tile's data, and helpers on it
    helpers.clear();
    if (place.mirror) {  // the other slot holds its tile above the diagonal, done
      TileValues& tile = tiles[slot];
      const TileValues& upper = tiles[slot ^ 1];  // written meanwhile, unchanged
      tile.place = place;
      evaluations[slot].SetDone(tile);
      if (helper_count == 0) {
        TransposeTile(upper, tile);
      } else {
        helpers.push_back(
            std::async(std::launch::async, [&upper, &tile] { TransposeTile(upper, tile); }));
      }
      return;
    }
    if (place.band_row != band_row) {
      const int64_t rows = std::min(side, n - place.band_row);
      band.resize(static_cast<size_t>(rows * (n - place.band_row)));
      source.ReadCorrectedUpperRows(angle, static_cast<int>(place.band_row),
                                    static_cast<int>(place.band_row + rows), band);
      band_row = place.band_row;
    }
    CopyTileData(band, n - band_row, place, tiles[slot]);
    TileEvaluation& tile_evaluation = evaluations[slot];
    tile_evaluation.Reset(tiles[slot]);
    if (place.rows * place.cols < kMinHelpedPoints) return;
    for (int h = 0; h < helper_count; ++h) {
      helpers.push_back(
          std::async(std::launch::async, [&tile_evaluation] { tile_evaluation.EvaluateRows(); }));
    }
  };
  auto finish = [&](int slot) {  // joins the helpers until the tile's rows are done
    evaluations[slot].EvaluateRows();
    for (std::future<void>& helper : helpers) helper.get();
    evaluations[slot].CompleteDiagonalTile();
  };
  TilePlace place = FirstTilePlace(n, side);
  start(place, 0);
  finish(0);
  for (int slot = 0;; slot ^= 1) {
    const bool more = NextTilePlace(n, side, &place);
    if (more) start(place, slot ^ 1);  // evaluated while this slot's tile is written
    WriteTileValues(matrices, tiles[slot], direct);
    if (!more) break;
    finish(slot ^ 1);
  }
}

// Threads that run a job together with the thread that asks (Run), started once: waiting
// between jobs they sleep, where OpenMP's threads would spin and take the cores from the writes'
// threads and from the band's decoding between tiles.
class HelperThreads {
 public:
  explicit HelperThreads(int count) {
    for (int h = 0; h < count; ++h) threads_.emplace_back([this] { Serve(); });
  }
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;
  ~HelperThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  // Runs `job` on every helper and on this thread; returns when all have returned. `job` must
  // not throw.
  void Run(const std::function<void()>& job) {
    if (threads_.empty()) {
      job();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      running_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    start_.notify_all();
    job();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
  }

 private:
  void Serve() {
    int64_t seen = 0;
    for (;;) {
      const std::function<void()>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --running_;
      }
      done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_;  // a job, or stop
  std::condition_variable done_;   // a helper done with the job
  const std::function<void()>* job_ = nullptr;
  int running_ = 0;  // helpers still in the job
  int64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started once the rest exists
};

// One angle's matrices with direct writes (DirectChunkWriter), tile by tile: this thread and up
// to kMaxHelpers helper threads (HelperThreads, OpenMP's count) evaluate a tile (or transpose it: a
// mirror tile), then its three chunks are queued to ChunkWriteQueue's threads, and the next tile is
// evaluated while they are written; kSlots tiles in flight at most. A chunk that cannot go directly
// is written through HDF5 by this thread, and after a refused first direct write (WriteNow) every
// chunk is. The same values and chunks as WriteAngleMatricesThroughHdf5.
constexpr int kSlots = 4;
// What WriteAngleMatricesDirectly keeps from one angle to the next: the buffers (so that each
// angle does not fault in fresh pages) and the threads.
struct DirectWriteState {
  struct Slot {
    TileValues tile;
    AlignedDoubles padded[3];  // the chunks of an edge tile (DirectChunkWriter::ChunkOf)
    int pending = 0;           // its chunks queued and not yet written (ChunkWriteQueue)
  };
  explicit DirectWriteState(int threads) : slots(kSlots), helpers(threads - 1) {}
  std::vector<double> band;  // rows [band_row, band_row + side) from column band_row on
  std::vector<Slot> slots;
  HelperThreads helpers;
  // Declared after the slots: its destructor waits for the writes of their buffers first.
  std::optional<ChunkWriteQueue> queue;  // once a direct write has been taken (WriteNow)
};
void WriteAngleMatricesDirectly(BatchSource& source, int angle, const ModelEvaluation& evaluation,
                                double phi, double contrast, double offset, int64_t side,
                                const AngleMatrices& matrices, DirectChunkWriter& direct,
                                DirectWriteState& state) {
  const int64_t n = source.info().num_times();
  if (n == 0) return;
  std::vector<double>& band = state.band;
  int64_t band_row = -1;
  std::vector<DirectWriteState::Slot>& slots = state.slots;
  HelperThreads& helpers = state.helpers;
  std::optional<ChunkWriteQueue>& queue = state.queue;
  TileEvaluation tile_evaluation(evaluation, phi, contrast, offset);
  const std::pair<hid_t, const char*> datasets[3] = {{matrices.data.get(), "/data"},
                                                     {matrices.fit.get(), "/fit"},
                                                     {matrices.residuals.get(), "/residuals"}};
  TilePlace place = FirstTilePlace(n, side);
  for (int64_t t = 0;; ++t) {
    DirectWriteState::Slot& slot = slots[static_cast<size_t>(t % kSlots)];
    if (queue) queue->Wait(&slot.pending);
    TileValues& tile = slot.tile;
    if (place.mirror) {
      // The tile before holds its tile above the diagonal, complete (being written: read only).
      const TileValues& upper = slots[static_cast<size_t>((t + kSlots - 1) % kSlots)].tile;
      tile.place = place;
      for (AlignedDoubles* values : {&tile.data, &tile.fit, &tile.residuals}) {
        values->resize(static_cast<size_t>(place.rows * place.cols));
      }
      // Rows [r0, r0 + kTransposeBlock) of the tile are those columns of `upper` (Transpose).
      const int64_t blocks = (place.rows + kTransposeBlock - 1) / kTransposeBlock;
      std::atomic<int64_t> next_block{0};
      helpers.Run([&] {
        for (int64_t b = next_block.fetch_add(1); b < blocks; b = next_block.fetch_add(1)) {
          const int64_t r0 = b * kTransposeBlock;
          const int64_t rows = std::min(kTransposeBlock, place.rows - r0);
          const int64_t out = r0 * place.cols;
          Transpose(upper.data.data() + r0, place.rows, rows, place.cols, tile.data.data() + out);
          Transpose(upper.fit.data() + r0, place.rows, rows, place.cols, tile.fit.data() + out);
          Transpose(upper.residuals.data() + r0, place.rows, rows, place.cols,
                    tile.residuals.data() + out);
        }
      });
    } else {
      if (place.band_row != band_row) {
        const int64_t rows = std::min(side, n - place.band_row);
        band.resize(static_cast<size_t>(rows * (n - place.band_row)));
        source.ReadCorrectedUpperRows(angle, static_cast<int>(place.band_row),
                                      static_cast<int>(place.band_row + rows), band);
        band_row = place.band_row;
      }
      // Its data copied row by row as the rows are evaluated.
      tile.place = place;
      tile.data.resize(static_cast<size_t>(place.rows * place.cols));
      tile_evaluation.Reset(tile, band.data() + (place.col - band_row), n - band_row);
      if (place.rows * place.cols >= kMinHelpedPoints) {
        helpers.Run([&] { tile_evaluation.EvaluateRows(); });
      } else {
        tile_evaluation.EvaluateRows();
      }
      tile_evaluation.CompleteDiagonalTile();
    }
    const double* values[3] = {tile.data.data(), tile.fit.data(), tile.residuals.data()};
    // An edge tile's chunks, padded on every thread (DirectChunkWriter::PadChunkRow).
    const bool whole = direct.IsWholeChunk(place);
    if (!whole && direct.usable()) {
      for (AlignedDoubles& padded : slot.padded) padded.resize(static_cast<size_t>(side * side));
      std::atomic<int64_t> next_row{0};
      helpers.Run([&] {
        for (int64_t k = next_row.fetch_add(1); k < 3 * side; k = next_row.fetch_add(1)) {
          const size_t m = static_cast<size_t>(k / side);
          direct.PadChunkRow(place, values[m], slot.padded[m].data(), k % side);
        }
      });
    }
    for (int m = 0; m < 3; ++m) {
      const std::string name = matrices.name + datasets[m].second;
      const std::optional<int64_t> address = direct.Locate(datasets[m].first, place);
      if (address) {
        const double* chunk = whole ? values[m] : slot.padded[m].data();
        if (queue) {
          queue->Submit(chunk, direct.chunk_bytes(), *address, &slot.pending,
                        DirectChunkWriter::ChunkText(name, place));
          direct.CountQueuedWrite();
          continue;
        }
        // The first direct write, now: whether the file system takes them.
        if (direct.WriteNow(*address, chunk, DirectChunkWriter::ChunkText(name, place))) {
          queue.emplace(direct.fd());
          continue;
        }
      }
      WriteTile(datasets[m].first, name, place.row, place.rows, place.col, place.cols, values[m]);
    }
    if (!NextTilePlace(n, side, &place)) break;
  }
  if (queue) {
    for (const DirectWriteState::Slot& slot : slots) queue->Wait(&slot.pending);
  }
}

void WriteContents(hid_t file, BatchSource& source, const ModelEvaluation& evaluation,
                   const std::vector<AngleScaling>& per_angle, DirectChunkWriter& direct) {
  const DatasetInfo& info = source.info();
  const int64_t n = info.num_times();
  const size_t n_angles = per_angle.size();
  std::vector<double> phi(n_angles);
  std::vector<double> contrast(n_angles);
  std::vector<double> offset(n_angles);
  std::vector<double> q(n_angles);
  for (size_t k = 0; k < n_angles; ++k) {
    phi[k] = per_angle[k].phi_degrees;
    // Each matrix's own q (several in a joint fit of q rings: docs/results.md, fitted_data.h5).
    q[k] = evaluation.model().AngleQ(static_cast<int>(k));
    contrast[k] = per_angle[k].contrast.value;
    offset[k] = per_angle[k].offset.value;
  }
  io_internal::WriteDoubles(file, "t", {static_cast<hsize_t>(n)}, info.FittedTimes());
  io_internal::WriteDoubles(file, "phi", {n_angles}, phi);
  WriteScalar(file, "q", info.q_inv_angstrom);
  // Matrices of several q (a joint fit): each one's q beside the first's; one q: the file as ever.
  if (evaluation.num_rings() > 1) io_internal::WriteDoubles(file, "q_per_angle", {n_angles}, q);
  io_internal::WriteDoubles(file, "contrast", {n_angles}, contrast);
  io_internal::WriteDoubles(file, "offset", {n_angles}, offset);

  Hid angles =
      io_internal::GroupHid(H5Gcreate2(file, "angles", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!angles.valid()) {
    throw std::runtime_error("cannot create group /angles: " + io_internal::Hdf5ErrorText());
  }
  const int64_t side = TileSide(n);
  std::optional<DirectWriteState> direct_state;  // with direct writes, from the first angle on
  for (size_t k = 0; k < n_angles; ++k) {
    const std::string name = AngleGroupName(k);
    Hid group = io_internal::GroupHid(
        H5Gcreate2(angles.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!group.valid()) {
      throw std::runtime_error("cannot create group /angles/" + name + ": " +
                               io_internal::Hdf5ErrorText());
    }
    io_internal::WriteAttribute(group.get(), "phi", phi[k]);
    io_internal::WriteAttribute(group.get(), "q", q[k]);
    io_internal::WriteAttribute(group.get(), "contrast", contrast[k]);
    io_internal::WriteAttribute(group.get(), "offset", offset[k]);
    if (n == 0) continue;
    const bool early = direct.usable();
    hsize_t size_before = 0;
    if (early && H5Fget_filesize(file, &size_before) < 0) size_before = 0;
    AngleMatrices matrices{name, CreateMatrix(group.get(), "data", n, side, early),
                           CreateMatrix(group.get(), "fit", n, side, early),
                           CreateMatrix(group.get(), "residuals", n, side, early)};
    hsize_t size_after = 0;
    if (early && size_before > 0 && H5Fget_filesize(file, &size_after) >= 0 &&
        size_after > size_before) {
      direct.Reserve(static_cast<int64_t>(size_before),
                     static_cast<int64_t>(size_after - size_before));
    }
    if (direct.usable()) {
      if (!direct_state) {
        direct_state.emplace(std::clamp(omp_get_max_threads(), 1, kMaxHelpers + 1));
      }
      WriteAngleMatricesDirectly(source, static_cast<int>(k),
                                 evaluation.OfAngle(static_cast<int>(k)), phi[k], contrast[k],
                                 offset[k], side, matrices, direct, *direct_state);
    } else {
      WriteAngleMatricesThroughHdf5(source, static_cast<int>(k),
                                    evaluation.OfAngle(static_cast<int>(k)), phi[k], contrast[k],
                                    offset[k], side, matrices, direct);
    }
    if (matrices.data.Close() < 0 || matrices.fit.Close() < 0 || matrices.residuals.Close() < 0) {
      throw std::runtime_error("cannot close the datasets of /angles/" + name + ": " +
                               io_internal::Hdf5ErrorText());
    }
  }
}

}  // namespace

namespace io_internal {

std::filesystem::path AddFittedData(DurableFileSet& set, BatchSource& source,
                                    const ModelEvaluation& evaluation,
                                    const std::vector<AngleScaling>& per_angle) {
  HOMODYNE_CHECK(static_cast<int>(per_angle.size()) == source.info().num_angles());
  HOMODYNE_CHECK(evaluation.model().num_times() == source.info().num_times());
  const DurableFile& file = set.Add(std::string(kFittedDataFileName));
  try {
    InitializeHdf5();
    const std::string temporary = file.temporary_path().string();
    DirectChunkWriter direct(temporary, TileSide(source.info().num_times()));
    Hid access = PlistHid(H5Pcreate(H5P_FILE_ACCESS));
    if (!access.valid() || (direct.usable() && H5Pset_alignment(access.get(), kDirectAlignment,
                                                                kDirectAlignment) < 0)) {
      throw std::runtime_error("cannot set up " + temporary + ": " + Hdf5ErrorText());
    }
    Hid hdf5_file = FileHid(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()));
    if (!hdf5_file.valid()) {
      throw std::runtime_error("cannot create " + temporary + ": " + Hdf5ErrorText());
    }
    g_last_direct_chunks.store(0);
    WriteContents(hdf5_file.get(), source, evaluation, per_angle, direct);
    g_last_direct_chunks.store(direct.chunks_written());
    if (H5Fflush(hdf5_file.get(), H5F_SCOPE_LOCAL) < 0 || hdf5_file.Close() < 0) {
      throw std::runtime_error("cannot close " + temporary + ": " + Hdf5ErrorText());
    }
  } catch (const std::runtime_error& failure) {
    throw std::runtime_error(file.final_path().string() + ": cannot write the fitted data (" +
                             failure.what() + ")" + set.NothingPublished());
  }
  return file.temporary_path();
}

void SetDirectChunkWritesForTesting(bool enabled) { g_direct_writes_enabled.store(enabled); }

int64_t DirectChunkWritesOfLastFittedData() { return g_last_direct_chunks.load(); }

}  // namespace io_internal

void WriteFittedData(BatchSource& source, const ModelEvaluation& evaluation,
                     const std::vector<AngleScaling>& per_angle, const std::string& output_dir) {
  const std::filesystem::path folder = io_internal::CreateResultsFolder(output_dir);
  try {
    io_internal::DurableFileSet set(folder, {});
    io_internal::AddFittedData(set, source, evaluation, per_angle);
    set.Commit();
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& failure) {
    throw InputError(failure.what());
  }
}

}  // namespace homodyne
