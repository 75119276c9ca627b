// Direct reads of float32 matrix values (direct_reads.h).
#include "io/direct_reads.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "homodyne/errors.h"
#include "io/hdf5_util.h"

namespace homodyne::io_internal {
namespace {

constexpr int64_t kValueBytes = static_cast<int64_t>(sizeof(float));
static_assert(sizeof(float) == 4);

// Reads the `total` bytes that `iovecs` describe from `offset` on, retrying interrupted and
// partial reads. Throws std::runtime_error on an I/O error or at the end of the file.
void ReadFully(int fd, std::span<iovec> iovecs, int64_t offset, int64_t total) {
  size_t first = 0;
  while (total > 0) {
    const int count = static_cast<int>(std::min<size_t>(iovecs.size() - first, IOV_MAX));
    const ssize_t got = preadv(fd, iovecs.data() + first, count, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("read of " + std::to_string(total) + " bytes at byte " +
                               std::to_string(offset) + " failed: " + std::strerror(errno));
    }
    if (got == 0) {
      throw std::runtime_error("short read: the file ends before byte " +
                               std::to_string(offset + total) + " (" + std::to_string(total) +
                               " bytes needed from byte " + std::to_string(offset) +
                               " on; truncated?)");
    }
    offset += got;
    total -= got;
    size_t left = static_cast<size_t>(got);
    while (first < iovecs.size() && left >= iovecs[first].iov_len) {
      left -= iovecs[first].iov_len;
      ++first;
    }
    if (left > 0) {
      iovecs[first].iov_base = static_cast<char*>(iovecs[first].iov_base) + left;
      iovecs[first].iov_len -= left;
    }
  }
}

// `count` values of file row `row` from column `column` on, as HDF5 reads them (native float).
bool ReadRowWithHdf5(hid_t dataset, int64_t row, int64_t column, int64_t count, float* out) {
  const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(column)};
  const hsize_t shape[2] = {1, static_cast<hsize_t>(count)};
  Hid file_space = SpaceHid(H5Dget_space(dataset));
  Hid memory_space = SpaceHid(H5Screate_simple(2, shape, nullptr));
  return file_space.valid() && memory_space.valid() &&
         H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, shape, nullptr) >=
             0 &&
         H5Dread(dataset, H5T_NATIVE_FLOAT, memory_space.get(), file_space.get(), H5P_DEFAULT,
                 out) >= 0;
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) close(fd_);
}

FileDescriptor DuplicateHdf5FileDescriptor(hid_t file, std::string* why_not) {
  Hid access = PlistHid(H5Fget_access_plist(file));
  if (!access.valid() || H5Pget_driver(access.get()) != H5FD_SEC2) {
    Hdf5ErrorText();
    *why_not = "the file is not open through HDF5's sec2 driver";
    return FileDescriptor();
  }
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, access.get(), &handle) < 0 || handle == nullptr) {
    *why_not = "HDF5 gives no file handle (" + Hdf5ErrorText() + ")";
    return FileDescriptor();
  }
  const int fd = fcntl(*static_cast<int*>(handle), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    *why_not = std::string("cannot duplicate the file descriptor: ") + std::strerror(errno);
  }
  return FileDescriptor(fd);
}

DirectLayout::Run DirectLayout::RunAt(int64_t row, int64_t column) const {
  const int64_t chunk_row = row / chunk_rows_;
  const int64_t chunk_column = column / chunk_columns_;
  const int64_t grid_row = chunk_row - first_chunk_row_;
  const int64_t grid_column = chunk_column - first_chunk_column_;
  HOMODYNE_CHECK(row >= 0 && column >= 0 && grid_row >= 0 && grid_column >= 0 &&
                 grid_column < chunk_grid_columns_);
  const size_t index = static_cast<size_t>(grid_row * chunk_grid_columns_ + grid_column);
  HOMODYNE_CHECK(index < chunk_offsets_.size() && chunk_offsets_[index] >= 0);
  const int64_t within =
      (row - chunk_row * chunk_rows_) * chunk_columns_ + (column - chunk_column * chunk_columns_);
  return {chunk_offsets_[index] + within * kValueBytes,
          (chunk_column + 1) * chunk_columns_ - column};
}

void DirectLayout::Shift(int64_t bytes) {
  for (int64_t& offset : chunk_offsets_) {
    if (offset >= 0) offset += bytes;
  }
}

std::optional<DirectLayout> PlanDirectReads(hid_t file, hid_t dataset, int fd,
                                            const DirectReadWindow& window, std::string* why_not) {
  auto refuse = [why_not](const std::string& reason) -> std::optional<DirectLayout> {
    Hdf5ErrorText();  // clears what the failed query left on the stack
    *why_not = reason;
    return std::nullopt;
  };
  if (fd < 0) return refuse("no file descriptor");
  Hid type = TypeHid(H5Dget_type(dataset));
  if (!type.valid() || H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) {
    return refuse("not stored as little-endian IEEE float32");
  }
  if (H5Tequal(H5T_NATIVE_FLOAT, H5T_IEEE_F32LE) <= 0) {
    return refuse("this machine's float is not little-endian IEEE float32");
  }
  Hid create = PlistHid(H5Dget_create_plist(dataset));
  if (!create.valid()) return refuse("its creation properties cannot be read");
  if (H5Pget_nfilters(create.get()) != 0) return refuse("stored with a filter");
  if (H5Pget_external_count(create.get()) != 0) return refuse("stored in an external file");
  Hid space = SpaceHid(H5Dget_space(dataset));
  hsize_t dims[2] = {0, 0};
  if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != 2 ||
      H5Sget_simple_extent_dims(space.get(), dims, nullptr) != 2) {
    return refuse("not a 2-D dataset");
  }
  const auto rows = static_cast<int64_t>(dims[0]);
  const auto columns = static_cast<int64_t>(dims[1]);
  // Needed: file rows first+1 .. last-1, each from the column after it to column `last`.
  const int64_t first = window.first_frame;
  const int64_t last = window.first_frame + window.frames - 1;
  if (window.frames < 3 || first < 0 || last >= rows || last >= columns) {
    return refuse("the frame window does not fit the matrix");
  }

  std::optional<DirectLayout> layout;
  const H5D_layout_t storage = H5Pget_layout(create.get());
  if (storage == H5D_CONTIGUOUS) {
    const haddr_t offset = H5Dget_offset(dataset);
    if (offset == HADDR_UNDEF) return refuse("contiguous storage not allocated");
    if (H5Dget_storage_size(dataset) != static_cast<hsize_t>(rows * columns * kValueBytes)) {
      return refuse("contiguous storage of an unexpected size");
    }
    // H5Dget_offset counts the user block (an absolute offset, as its documentation says).
    layout.emplace(rows, columns, 0, 0, 1, std::vector<int64_t>{static_cast<int64_t>(offset)});
  } else if (storage == H5D_CHUNKED) {
    hsize_t chunk[2] = {0, 0};
    if (H5Pget_chunk(create.get(), 2, chunk) != 2 || chunk[0] == 0 || chunk[1] == 0) {
      return refuse("the chunk shape cannot be read");
    }
    const auto chunk_rows = static_cast<int64_t>(chunk[0]);
    const auto chunk_columns = static_cast<int64_t>(chunk[1]);
    const int64_t first_chunk_row = (first + 1) / chunk_rows;
    const int64_t last_chunk_row = (last - 1) / chunk_rows;
    const int64_t first_chunk_column = (first + 2) / chunk_columns;
    const int64_t last_chunk_column = last / chunk_columns;
    const int64_t grid_columns = last_chunk_column - first_chunk_column + 1;
    const int64_t grid_rows = last_chunk_row - first_chunk_row + 1;
    if (grid_rows * grid_columns > kMaxDirectChunks) {
      return refuse("more than " + std::to_string(kMaxDirectChunks) + " chunks");
    }
    std::vector<int64_t> offsets(static_cast<size_t>(grid_rows * grid_columns), -1);
    for (int64_t cr = first_chunk_row; cr <= last_chunk_row; ++cr) {
      // The chunk's first needed row; a chunk is needed when a column after it lies in the
      // chunk and the window.
      const int64_t top = std::max(cr * chunk_rows, first + 1);
      for (int64_t cc = first_chunk_column; cc <= last_chunk_column; ++cc) {
        const int64_t right = std::min((cc + 1) * chunk_columns - 1, last);
        if (right < top + 1) continue;  // below the diagonal: not needed
        const hsize_t origin[2] = {static_cast<hsize_t>(cr * chunk_rows),
                                   static_cast<hsize_t>(cc * chunk_columns)};
        unsigned filter_mask = 0;
        haddr_t address = HADDR_UNDEF;
        hsize_t size = 0;
        const std::string name =
            "chunk at (" + std::to_string(origin[0]) + ", " + std::to_string(origin[1]) + ")";
        if (H5Dget_chunk_info_by_coord(dataset, origin, &filter_mask, &address, &size) < 0) {
          return refuse(name + " cannot be looked up");
        }
        if (address == HADDR_UNDEF || size == 0) return refuse(name + " not allocated");
        if (filter_mask != 0) return refuse(name + " filtered");
        if (size != static_cast<hsize_t>(chunk_rows * chunk_columns * kValueBytes)) {
          return refuse(name + " of an unexpected size");
        }
        offsets[static_cast<size_t>((cr - first_chunk_row) * grid_columns +
                                    (cc - first_chunk_column))] = static_cast<int64_t>(address);
      }
    }
    layout.emplace(chunk_rows, chunk_columns, first_chunk_row, first_chunk_column, grid_columns,
                   std::move(offsets));
  } else {
    return refuse("neither contiguous nor chunked storage");
  }

  // Sample rows, read through `fd` and by HDF5: the plan stands only if exactly one placement of
  // the addresses (as reported, or shifted by the user block, which HDF5 1.10's chunk queries
  // leave out) gives HDF5's bytes.
  hsize_t user_block = 0;
  Hid file_create = PlistHid(H5Fget_create_plist(file));
  if (!file_create.valid() || H5Pget_userblock(file_create.get(), &user_block) < 0) {
    return refuse("the user block size cannot be read");
  }
  const int64_t n = window.frames - 1;  // fitted rows i = 0..n-1; row i has n-1-i values
  std::vector<RowSegment> samples;
  std::vector<float> expected;
  std::vector<int64_t> sample_rows = {0, n / 2, n - 2};
  sample_rows.erase(std::unique(sample_rows.begin(), sample_rows.end()), sample_rows.end());
  for (int64_t i : sample_rows) {
    samples.push_back({first + i + 1, first + i + 2, n - 1 - i, nullptr});
  }
  size_t total = 0;
  for (const RowSegment& segment : samples) total += static_cast<size_t>(segment.count);
  expected.resize(total);
  std::vector<float> direct(total);
  size_t at = 0;
  for (RowSegment& segment : samples) {
    if (!ReadRowWithHdf5(dataset, segment.row, segment.column, segment.count,
                         expected.data() + at)) {
      return refuse("HDF5 cannot read the sample rows");
    }
    segment.out = direct.data() + at;
    at += static_cast<size_t>(segment.count);
  }
  std::vector<int64_t> shifts = {0};
  if (user_block > 0) shifts.push_back(static_cast<int64_t>(user_block));
  std::optional<DirectLayout> found;
  int matches = 0;
  DirectReader reader;
  for (int64_t shift : shifts) {
    DirectLayout shifted = *layout;
    shifted.Shift(shift);
    try {
      reader.Read(fd, shifted, samples);
    } catch (const std::runtime_error&) {
      continue;
    }
    if (std::memcmp(direct.data(), expected.data(), total * sizeof(float)) == 0) {
      ++matches;
      found = std::move(shifted);
    }
  }
  if (matches == 0) return refuse("sample rows read directly differ from HDF5's read");
  if (matches > 1) return refuse("the sample rows cannot tell where the user block ends");
  return found;
}

void DirectReader::Read(int fd, const DirectLayout& layout, std::span<const RowSegment> segments) {
  pieces_.clear();
  for (const RowSegment& segment : segments) {
    int64_t column = segment.column;
    int64_t left = segment.count;
    float* out = segment.out;
    while (left > 0) {
      const DirectLayout::Run run = layout.RunAt(segment.row, column);
      const int64_t take = std::min(run.values, left);
      pieces_.push_back({run.offset, take * kValueBytes, out});
      column += take;
      out += take;
      left -= take;
    }
  }
  // In file order, so that one call reads a run of pieces (chunks split across columns put a
  // row's pieces far apart and the next row's first piece before them).
  auto by_offset = [](const Piece& a, const Piece& b) { return a.offset < b.offset; };
  if (!std::is_sorted(pieces_.begin(), pieces_.end(), by_offset)) {
    std::sort(pieces_.begin(), pieces_.end(), by_offset);
  }
  int64_t output_bytes = 0;
  for (const Piece& piece : pieces_) output_bytes += piece.bytes;
  if (output_bytes > bounce_above_bytes_) {
    ReadThroughBounceBuffer(fd);
  } else {
    ReadInPlace(fd);
  }
}

void DirectReader::ReadInPlace(int fd) {
  if (scratch_.empty()) scratch_.resize(static_cast<size_t>(kMaxGapBytes));
  size_t next = 0;
  while (next < pieces_.size()) {
    iovecs_.clear();
    const int64_t start = pieces_[next].offset;
    int64_t position = start;
    while (next < pieces_.size()) {
      const Piece& piece = pieces_[next];
      const int64_t gap = piece.offset - position;
      if (!iovecs_.empty() &&
          (gap < 0 || gap > kMaxGapBytes || iovecs_.size() + 2 > static_cast<size_t>(IOV_MAX))) {
        break;
      }
      if (gap > 0) iovecs_.push_back({scratch_.data(), static_cast<size_t>(gap)});
      iovecs_.push_back({piece.out, static_cast<size_t>(piece.bytes)});
      position = piece.offset + piece.bytes;
      ++next;
    }
    ReadFully(fd, iovecs_, start, position - start);
  }
}

void DirectReader::ReadThroughBounceBuffer(int fd) {
  if (bounce_.empty()) bounce_.resize(static_cast<size_t>(bounce_bytes_));
  size_t next = 0;
  while (next < pieces_.size()) {
    const size_t group = next;
    const int64_t start = pieces_[next].offset;
    int64_t end = start;
    while (next < pieces_.size()) {
      const Piece& piece = pieces_[next];
      if (piece.offset < end || piece.offset - end > kMaxGapBytes ||
          piece.offset + piece.bytes - start > bounce_bytes_) {
        break;
      }
      end = piece.offset + piece.bytes;
      ++next;
    }
    if (next == group) {  // one piece larger than the bounce buffer: read in place
      iovec whole{pieces_[next].out, static_cast<size_t>(pieces_[next].bytes)};
      ReadFully(fd, std::span<iovec>(&whole, 1), pieces_[next].offset, pieces_[next].bytes);
      ++next;
      continue;
    }
    iovec span{bounce_.data(), static_cast<size_t>(end - start)};
    ReadFully(fd, std::span<iovec>(&span, 1), start, end - start);
    for (size_t k = group; k < next; ++k) {
      std::memcpy(pieces_[k].out, bounce_.data() + (pieces_[k].offset - start),
                  static_cast<size_t>(pieces_[k].bytes));
    }
  }
}

}  // namespace homodyne::io_internal
