// Reads of float32 matrix values straight from the file, without HDF5 (docs/design.md section 8,
// Input): for a matrix stored with no filter as little-endian IEEE float32, chunked or contiguous,
// the reader finds where every needed value lies in the file once, when the source opens, and
// then reads the upper-triangle segments of a block of rows with preadv on a file descriptor of
// its own, straight into the caller's buffer: one copy from the page cache, of the needed bytes
// (and of the short gaps between them), no HDF5 read and no row block. Private to src/io.
#pragma once

#include <hdf5.h>
#include <sys/uio.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace homodyne::io_internal {

// A file descriptor owned by one object: closed by the destructor. Move-only.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  ~FileDescriptor();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A descriptor of the very file HDF5 opened as `file` (a duplicate of its sec2 driver's
// descriptor, so a file renamed or replaced since is not confused with it), or an invalid one
// with `why_not` set when the file was opened through another driver.
FileDescriptor DuplicateHdf5FileDescriptor(hid_t file, std::string* why_not);

// One piece of a direct read: `count` values of file row `row` from file column `column` on,
// into `out`.
struct RowSegment {
  int64_t row = 0;
  int64_t column = 0;
  int64_t count = 0;
  float* out = nullptr;
};

// Where the values of one matrix lie in the file: the byte offset of every chunk that holds a
// value the reads need (a contiguous matrix is one chunk of the whole matrix). Values of one
// chunk row are contiguous in the file within their chunk; edge chunks are stored whole.
class DirectLayout {
 public:
  DirectLayout(int64_t chunk_rows, int64_t chunk_columns, int64_t first_chunk_row,
               int64_t first_chunk_column, int64_t chunk_grid_columns,
               std::vector<int64_t> chunk_offsets)
      : chunk_rows_(chunk_rows),
        chunk_columns_(chunk_columns),
        first_chunk_row_(first_chunk_row),
        first_chunk_column_(first_chunk_column),
        chunk_grid_columns_(chunk_grid_columns),
        chunk_offsets_(std::move(chunk_offsets)) {}

  // Byte offset in the file of value (row, column), and how many values from it on lie next to
  // each other in the file (to the end of its chunk's row). The value must be one the plan
  // covers (HOMODYNE_CHECK).
  struct Run {
    int64_t offset = 0;
    int64_t values = 0;
  };
  Run RunAt(int64_t row, int64_t column) const;

  // Adds `bytes` to every offset (the base address of a file with a user block).
  void Shift(int64_t bytes);

 private:
  int64_t chunk_rows_;
  int64_t chunk_columns_;
  int64_t first_chunk_row_;             // chunk grid indices of chunk_offsets_[0]
  int64_t first_chunk_column_;          //
  int64_t chunk_grid_columns_;          // chunk columns per row of chunk_offsets_
  std::vector<int64_t> chunk_offsets_;  // -1: not needed
};

// What the direct reads of one matrix must cover: the strict upper triangle of the frame window
// [first_frame, first_frame + frames) (file rows and columns), without its last row.
struct DirectReadWindow {
  int64_t first_frame = 0;
  int64_t frames = 0;
};

// The layout of `dataset` (an open frames x frames matrix of `file`, read through `fd`) when its
// window can be read directly: stored with no filter, in no external file, as little-endian IEEE
// float32 (the native float), contiguous or chunked, with every chunk that holds a value of the
// window allocated, at most kMaxDirectChunks such chunks, and a sample of rows read through `fd`
// bitwise equal to HDF5's read of them (which also settles whether the reported addresses count
// the file's user block). Otherwise nullopt, with `why_not` saying which condition failed; HDF5
// errors met on the way are cleared and mean nullopt, never an exception.
std::optional<DirectLayout> PlanDirectReads(hid_t file, hid_t dataset, int fd,
                                            const DirectReadWindow& window, std::string* why_not);

// Chunks per matrix beyond which the plan is not made (each costs one index lookup at open).
inline constexpr int64_t kMaxDirectChunks = int64_t{1} << 16;

// Reads segments with preadv on one descriptor. Segments are sorted by file offset and read with
// one call per run of them whose gaps are at most kMaxGapBytes (gaps are read into a scratch
// buffer and dropped) and at most IOV_MAX pieces long; large reads go through a bounce buffer
// (kBounceAboveBytes). Not thread-safe (one reader per object).
class DirectReader {
 public:
  // Gaps up to this many bytes are read rather than skipped by another call: on the 2-core test
  // machine (a virtual machine with page-table isolation) a preadv costs about 5 us, the time
  // to copy about 40 KB from the page cache (docs/history/performance-notebook.md, Direct reads).
  static constexpr int64_t kMaxGapBytes = int64_t{32} << 10;
  // A read of more than this many bytes of values is copied through a bounce buffer of
  // kBounceBytes (the file span of a run of pieces read into it, then each piece copied out):
  // its destination is likely out of the caches (the in-memory strategies' load, 4 MB reads
  // into a 50 MB array), and the kernel's copy into it was measured slower than a copy into a
  // buffer the cache holds plus a memcpy out (docs/history/performance-notebook.md, Direct reads).
  // Smaller reads (streaming's chunk of batches of one angle, about 640 KB at 2 threads, into
  // buffers reused every fetch) are read in place.
  static constexpr int64_t kBounceAboveBytes = int64_t{1} << 20;
  static constexpr int64_t kBounceBytes = int64_t{1} << 20;

  // The thresholds may be lowered (tests: every path on small data).
  explicit DirectReader(int64_t bounce_above_bytes = kBounceAboveBytes,
                        int64_t bounce_bytes = kBounceBytes)
      : bounce_above_bytes_(bounce_above_bytes), bounce_bytes_(bounce_bytes) {}

  // Frees the scratch and bounce buffers (allocated again by the next Read that needs them).
  void ReleaseBuffers() {
    pieces_ = {};
    scratch_ = {};
    bounce_ = {};
    iovecs_ = {};
  }

  // Reads every segment through `layout` from `fd`. Throws std::runtime_error naming the
  // cause on an I/O error or when the file ends before a needed byte (a truncated file); `out`
  // then holds partial values.
  void Read(int fd, const DirectLayout& layout, std::span<const RowSegment> segments);

 private:
  // The pieces of one Read, in file order.
  struct Piece {
    int64_t offset = 0;
    int64_t bytes = 0;
    float* out = nullptr;
  };
  // Reads pieces_ with preadv straight into their outputs, gaps into scratch_.
  void ReadInPlace(int fd);
  // Reads pieces_ through bounce_; a piece larger than it is read in place.
  void ReadThroughBounceBuffer(int fd);

  int64_t bounce_above_bytes_;
  int64_t bounce_bytes_;
  std::vector<Piece> pieces_;
  std::vector<char> scratch_;
  std::vector<char> bounce_;
  std::vector<iovec> iovecs_;
};

}  // namespace homodyne::io_internal
