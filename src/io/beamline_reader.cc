// The reads of beamline two-time correlation files (docs/design.md section 8, Input): the
// BatchSource over an inspected file (io/dataset_inspection.h says what the inspection checks).
// Matrix values are only read here, by three paths: hyperslabs of row ranges through HDF5 (row
// blocks of whole chunk rows), directly with preadv for uncompressed float32
// (io/direct_reads.h), and compressed chunks decoded by this project's decoder in the prefetch
// and the corrected reads (io/chunk_decoder.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <omp.h>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/chunk_decoder.h"
#include "io/dataset_inspection.h"
#include "io/direct_reads.h"
#include "io/hdf5_util.h"
#include "io/read_paths.h"
#include "model/diagonal_correction.h"

namespace homodyne {

using io_internal::DatasetHid;
using io_internal::Hdf5ErrorText;
using io_internal::Hid;
using io_internal::OpenedDataset;
using io_internal::PlistHid;
using io_internal::ReadRectangle;

namespace {

// Temporary buffer of one hyperslab read of rows (ReadCorrectedMatrix).
constexpr size_t kReadBufferBytes = size_t{16} << 20;
// The row blocks of the upper-triangle reads (HdfBatchSource::ReadRows): at most this much for
// all angles together (one block per angle), whatever the data size.
constexpr size_t kBlockCacheBytes = size_t{16} << 20;
// A block's target size per angle: whole chunk rows up to this (at least one chunk row when it
// fits the cache's share of the angle).
constexpr size_t kBlockTargetBytes = size_t{1} << 20;

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  io_internal::FailOnFile(path, what);
}

class HdfBatchSource final : public BatchSource {
 public:
  // Decides here, once, which angles' float32 reads are direct (PlanDirectReads).
  HdfBatchSource(OpenedDataset opened, bool allow_direct_reads,
                 DiagonalCorrectionOptions diagonal_correction = {})
      : info_(std::move(opened.info)),
        file_(std::move(opened.file)),
        diagonal_correction_(std::move(diagonal_correction)) {
    datasets_.resize(info_.angles.size());
    diagonal_overrides_.resize(info_.angles.size());
    PlanDirectReadsOfEveryAngle(allow_direct_reads);
    PlanChunkDecodingOfEveryAngle(allow_direct_reads);
  }

  const DatasetInfo& info() const override { return info_; }
  // Float32ReadPaths (read_paths.h).
  const std::vector<std::string>& float32_read_paths() const { return why_not_direct_; }
  // RowsDecodedByPrefetch (read_paths.h).
  int64_t rows_decoded_by_prefetch() const { return rows_decoded_by_prefetch_; }
  // RowsDecodedForCorrectedReads (read_paths.h).
  int64_t rows_decoded_for_corrected_reads() const { return rows_decoded_for_corrected_reads_; }

  // Reads may come from another thread than the open (streaming's prefetch thread).
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end,
                             std::span<double> out) override {
    io_internal::InitializeHdf5();
    ReadRows(angle, row_begin, row_end, out);
  }
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end, std::span<float> out) override {
    HOMODYNE_CHECK(angle >= 0 && angle < info_.num_angles());
    if (direct_layouts_[static_cast<size_t>(angle)]) {
      ReadRowsDirectly(angle, row_begin, row_end, out);
      return;
    }
    io_internal::InitializeHdf5();
    ReadRows(angle, row_begin, row_end, out);
  }

  int PrefetchRows(int row_begin, int row_end, int threads) override;

  void ReadCorrectedMatrix(int angle, std::span<double> out) override;
  // For the options that are not the basic rule (apply false: the stored diagonal; statistical:
  // the estimate from each raw diagonal point's `window` neighbours on each side, its row's and
  // its column's, NaN where none is finite), the value of each raw diagonal point of `angle`
  // (N_raw values, raw frame 0's included), read once (a band of window + 1 diagonals; every
  // chunk on the diagonal) and kept; empty for basic and interpolation (basic on the symmetric
  // matrix).
  const std::vector<double>& DiagonalOverride(int angle);
  void ReadCorrectedRows(int angle, int row_begin, int row_end, std::span<double> out) override;
  void ReadCorrectedUpperRows(int angle, int row_begin, int row_end,
                              std::span<double> out) override;
  // LendHeldUpperTriangles (read_paths.h).
  bool LendHeldUpperTriangles(std::shared_ptr<const std::vector<std::vector<float>>> values);
  void ReleaseReadBuffers() override {
    decoded_floats_ = {};
    float_blocks_ = {};
    double_blocks_ = {};
    direct_reader_.ReleaseBuffers();
    segments_ = {};
  }

 private:
  // The dataset of an angle, opened on first use, without a chunk cache (the row blocks below
  // keep whole chunk rows instead).
  hid_t Dataset(int angle);

  // Copies the requested rows out of whole row blocks (BlockWithRow): each block is read once
  // for all the batches it holds, as one rectangle of whole rows (whole HDF5 chunks when the
  // chunks span the rows: one decompression per chunk per pass, one read per block).
  template <typename T>
  void ReadRows(int angle, int row_begin, int row_end, std::span<T> out);

  // The direct path of ReadRows<float> (io/direct_reads.h): each fitted row's segment read with
  // preadv straight into `out`, one call per run of rows. The same values, bit for bit.
  void ReadRowsDirectly(int angle, int row_begin, int row_end, std::span<float> out);
  // Fills direct_layouts_ and why_not_direct_ (every angle through HDF5 when not allowed).
  void PlanDirectReadsOfEveryAngle(bool allowed);
  // Fills chunk_plans_ for the angles without direct reads (none when not allowed).
  void PlanChunkDecodingOfEveryAngle(bool allowed);

  // Reads a rectangle of file rows/columns relative to the window origin (raw grid indices).
  template <typename T>
  void ReadRaw(int angle, int64_t raw_row, int64_t rows, int64_t raw_col, int64_t cols, T* out) {
    try {
      ReadRectangle(Dataset(angle), info_.first_frame + raw_row, rows, info_.first_frame + raw_col,
                    cols, out);
    } catch (const std::runtime_error& failure) {
      Fail(info_.file_path, "cannot read rows " + std::to_string(info_.first_frame + raw_row) +
                                ".." + std::to_string(info_.first_frame + raw_row + rows - 1) +
                                " of " + info_.angles[static_cast<size_t>(angle)].dataset_path +
                                " (" + failure.what() + ")");
    }
  }

  // Raw rows [raw_begin, raw_end) of one angle, every raw column of the frame window (row-major,
  // num_raw_frames values per row), as read from the file: the block ReadRows copies batches from.
  template <typename T>
  struct RowBlock {
    int64_t raw_begin = 0;
    int64_t raw_end = 0;  // empty when raw_end == raw_begin
    std::vector<T> values;
  };
  template <typename T>
  std::vector<RowBlock<T>>& Blocks();
  // The blocks of value type T, one per angle: one value type at a time, so the first use of a
  // type releases the other type's blocks and the cache stays within kBlockCacheBytes.
  template <typename T>
  std::vector<RowBlock<T>>& BlocksInUse();
  // The block of `angle` that holds raw row `raw_row`: the one held, or the aligned block read now
  // (replacing it).
  template <typename T>
  const RowBlock<T>& BlockWithRow(int angle, int64_t raw_row);
  // Raw rows per block (BlockRows, once per source, from the first selected dataset's layout).
  int64_t BlockRows();
  // The float64 block of `angle` from the block boundary at or before raw row `raw_row`, as tall
  // as PrefetchRows' blocks (the blocks' memory over the angles), decoded by this project's
  // chunk decoder on OpenMP's thread count (io/chunk_decoder.h) and widened to double (exactly
  // what H5Dread's conversion gives). False, with the block left empty, when the angle has no
  // chunk plan or the decoder declines (the caller then reads through HDF5, which reports a
  // corrupt chunk). The corrected reads' blocks (ReadCorrectedUpperRows: the fitted data's
  // writer) so decompress on every thread, as the streaming reads do.
  bool DecodeDoubleBlock(int angle, int64_t raw_row, RowBlock<double>& block);

  DatasetInfo info_;
  Hid file_;
  std::vector<Hid> datasets_;
  std::vector<double> double_buffer_;
  // The diagonal correction of the corrected reads (docs/model.md, Diagonal correction) and, per
  // angle, the raw diagonal that replaces the basic one (DiagonalOverride).
  DiagonalCorrectionOptions diagonal_correction_;
  std::vector<std::vector<double>> diagonal_overrides_;
  int64_t block_rows_ = 0;                       // 0 until BlockRows() has looked at the layout
  std::vector<RowBlock<float>> float_blocks_;    // one per angle
  std::vector<RowBlock<double>> double_blocks_;  // one per angle
  // The direct float32 reads: our descriptor of the file, per angle its layout (nullopt: reads
  // through HDF5) and why not (empty when direct), the reader's buffers.
  io_internal::FileDescriptor file_descriptor_;
  std::vector<std::optional<io_internal::DirectLayout>> direct_layouts_;
  std::vector<std::string> why_not_direct_;
  io_internal::DirectReader direct_reader_;
  std::vector<io_internal::RowSegment> segments_;
  // Per angle, how PrefetchRows decodes its compressed chunks (nullopt: it leaves the angle to
  // the reads through HDF5).
  std::vector<std::optional<io_internal::ChunkPlan>> chunk_plans_;
  int64_t rows_decoded_by_prefetch_ = 0;
  int64_t rows_decoded_for_corrected_reads_ = 0;
  std::vector<float> decoded_floats_;  // DecodeDoubleBlock's float32 values before widening
  // The fit's data in memory, lent (LendHeldUpperTriangles) while the corrected reads take the
  // values off the diagonal from them; null otherwise.
  std::shared_ptr<const std::vector<std::vector<float>>> held_;
};

bool HdfBatchSource::LendHeldUpperTriangles(
    std::shared_ptr<const std::vector<std::vector<float>>> values) {
  held_ = nullptr;
  if (values == nullptr || values->size() != info_.angles.size()) return false;
  const int64_t size = UpperTriangleSize(info_.num_times());
  for (size_t k = 0; k < values->size(); ++k) {
    if (static_cast<int64_t>((*values)[k].size()) != size) return false;
    // float32 in the file: widened, the floats are exactly what the file's reads give.
    Hid type = io_internal::TypeHid(H5Dget_type(Dataset(static_cast<int>(k))));
    if (!type.valid() || H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != 4) {
      Hdf5ErrorText();  // clears HDF5's error stack
      return false;
    }
  }
  held_ = std::move(values);
  return true;
}

void HdfBatchSource::PlanChunkDecodingOfEveryAngle(bool allowed) {
  chunk_plans_.assign(info_.angles.size(), std::nullopt);
  if (!allowed) return;
  for (size_t k = 0; k < info_.angles.size(); ++k) {
    if (direct_layouts_[k]) continue;
    std::string why_not;
    chunk_plans_[k] = io_internal::PlanChunkDecoding(Dataset(static_cast<int>(k)), &why_not);
  }
}

int HdfBatchSource::PrefetchRows(int row_begin, int row_end, int threads) {
  const int64_t n = info_.num_times();
  if (row_begin < 0 || row_begin >= row_end || row_end > n) return row_end;
  bool any_plan = false;
  for (const auto& plan : chunk_plans_) any_plan = any_plan || plan.has_value();
  if (!any_plan) return row_end;
  try {
    io_internal::InitializeHdf5();
    // Fitted rows [row_begin, row_end) are raw rows [row_begin + 1, row_end + 1): per angle a
    // block from the block boundary at or before the first, as tall as the blocks' memory
    // allows (kBlockCacheBytes over the angles, counted in doubles as BlockRows does: the blocks'
    // float32 values stay within half of it), and no taller than the rows need.
    const int64_t block_rows = BlockRows();
    const int64_t width = info_.num_raw_frames;
    const int64_t first = info_.first_frame;
    const int64_t raw_first = row_begin + 1;
    const int64_t raw_end = int64_t{row_end} + 1;  // past the last raw row needed
    const int64_t begin =
        std::max<int64_t>((first + raw_first) / block_rows * block_rows - first, 0);
    const int64_t budget_rows =
        static_cast<int64_t>(kBlockCacheBytes) /
        (std::max<int64_t>(info_.num_angles(), 1) * width * static_cast<int64_t>(sizeof(double)));
    const int64_t max_rows = std::max<int64_t>(block_rows, budget_rows / block_rows * block_rows);
    const int64_t end = std::min(begin + max_rows, int64_t{info_.num_raw_frames});
    std::vector<RowBlock<float>>& blocks = BlocksInUse<float>();
    // The prepared fitted rows end where the shortest angle block ends (raw row r is fitted row
    // r - 1); angles without a plan are read through HDF5 in any case.
    int64_t prepared_end = row_end;
    std::vector<io_internal::ChunkRectangle> rectangles;
    std::vector<size_t> angles;  // the angles whose blocks are decoded to [begin, end)
    for (size_t k = 0; k < chunk_plans_.size(); ++k) {
      if (!chunk_plans_[k]) continue;
      RowBlock<float>& block = blocks[k];
      // Held from the first row and as far as a new block would go: kept.
      if (block.raw_begin <= raw_first && raw_first < block.raw_end &&
          block.raw_end >= std::min(end, raw_end)) {
        prepared_end = std::min(prepared_end, block.raw_end - 1);
        continue;
      }
      // Rows the held block has from `begin` on move to the front and are not decoded again
      // (the previous piece's last chunk row is usually this one's first).
      int64_t decode_from = begin;
      if (block.raw_begin <= begin && begin < block.raw_end) {
        decode_from = std::min(block.raw_end, end);
        std::memmove(block.values.data(), block.values.data() + (begin - block.raw_begin) * width,
                     static_cast<size_t>((decode_from - begin) * width) * sizeof(float));
      }
      block.raw_begin = block.raw_end = 0;  // empty until decoded
      block.values.resize(static_cast<size_t>((end - begin) * width));
      if (decode_from < end) {
        rectangles.push_back({Dataset(static_cast<int>(k)), &*chunk_plans_[k], first + decode_from,
                              end - decode_from, first, width,
                              block.values.data() + (decode_from - begin) * width});
      }
      angles.push_back(k);
    }
    if (angles.empty()) return static_cast<int>(std::max<int64_t>(prepared_end, row_begin + 1));
    std::string why_not;
    if (!rectangles.empty() && !io_internal::DecodeChunkRectangles(rectangles, threads, &why_not)) {
      return row_end;  // the blocks stay empty: the reads go through HDF5, which reports the fault
    }
    for (size_t k : angles) {
      blocks[k].raw_begin = begin;
      blocks[k].raw_end = end;
    }
    for (const io_internal::ChunkRectangle& rectangle : rectangles) {
      rows_decoded_by_prefetch_ += rectangle.rows;
    }
    prepared_end = std::min(prepared_end, end - 1);
    return static_cast<int>(std::max<int64_t>(prepared_end, row_begin + 1));
  } catch (const std::exception&) {
    return row_end;  // nothing prepared: the reads that follow read and report as usual
  }
}

void HdfBatchSource::PlanDirectReadsOfEveryAngle(bool allowed) {
  const size_t angles = info_.angles.size();
  direct_layouts_.assign(angles, std::nullopt);
  why_not_direct_.assign(angles, allowed ? "" : "direct reads not allowed");
  if (!allowed) return;
  std::string why_not;
  file_descriptor_ = io_internal::DuplicateHdf5FileDescriptor(file_.get(), &why_not);
  const io_internal::DirectReadWindow window{info_.first_frame, info_.num_raw_frames};
  for (size_t k = 0; k < angles; ++k) {
    if (file_descriptor_.valid()) {
      why_not.clear();
      direct_layouts_[k] = io_internal::PlanDirectReads(file_.get(), Dataset(static_cast<int>(k)),
                                                        file_descriptor_.get(), window, &why_not);
    }
    why_not_direct_[k] = direct_layouts_[k] ? "" : why_not;
  }
}

void HdfBatchSource::ReadRowsDirectly(int angle, int row_begin, int row_end, std::span<float> out) {
  const int64_t n = info_.num_times();
  HOMODYNE_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= n);
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == UpperTriangleRowsSize(n, row_begin, row_end));
  // Fitted (i, j), j = i+1..n-1, is raw (i+1, j+1): file row first+i+1 from column first+i+2 on.
  const int64_t first = info_.first_frame;
  segments_.clear();
  float* next = out.data();
  for (int64_t i = row_begin; i < row_end && i < n - 1; ++i) {
    segments_.push_back({first + i + 1, first + i + 2, n - 1 - i, next});
    next += n - 1 - i;
  }
  try {
    direct_reader_.Read(file_descriptor_.get(), *direct_layouts_[static_cast<size_t>(angle)],
                        segments_);
  } catch (const std::runtime_error& failure) {
    Fail(info_.file_path, "cannot read rows " + std::to_string(first + row_begin + 1) + ".." +
                              std::to_string(first + row_end) + " of " +
                              info_.angles[static_cast<size_t>(angle)].dataset_path + " (" +
                              failure.what() + ")");
  }
}

hid_t HdfBatchSource::Dataset(int angle) {
  HOMODYNE_CHECK(angle >= 0 && angle < info_.num_angles());
  Hid& dataset = datasets_[static_cast<size_t>(angle)];
  if (dataset.valid()) return dataset.get();
  const std::string& dataset_path = info_.angles[static_cast<size_t>(angle)].dataset_path;
  // No chunk cache. Upper-triangle reads copy from row blocks of whole chunk rows (ReadRows), so
  // a chunk is decompressed once per pass when its chunk row fits the block budget. With
  // HDF5 1.10's chunk cache the resident memory grew with the data read (836 MB RSS after scanning
  // an 800 MB file, whatever the cache size), which would break streaming's constant memory;
  // without it: 70 MB, 3x faster.
  Hid access = PlistHid(H5Pcreate(H5P_DATASET_ACCESS));
  H5Pset_chunk_cache(access.get(), 0, 0, 1.0);
  dataset = DatasetHid(H5Dopen2(file_.get(), dataset_path.c_str(), access.get()));
  if (!dataset.valid()) {
    Fail(info_.file_path, "cannot open dataset " + dataset_path + " (" + Hdf5ErrorText() + ")");
  }
  return dataset.get();
}

int64_t HdfBatchSource::BlockRows() {
  if (block_rows_ > 0) return block_rows_;
  const int64_t row_bytes = int64_t{info_.num_raw_frames} * static_cast<int64_t>(sizeof(double));
  const int64_t per_angle =
      static_cast<int64_t>(kBlockCacheBytes) / std::max<int64_t>(info_.num_angles(), 1);
  const int64_t fitting = std::max<int64_t>(1, per_angle / std::max<int64_t>(row_bytes, 1));
  int64_t chunk_rows = 0;
  Hid create = PlistHid(H5Dget_create_plist(Dataset(0)));
  if (create.valid() && H5Pget_layout(create.get()) == H5D_CHUNKED) {
    hsize_t chunk[2] = {0, 0};
    if (H5Pget_chunk(create.get(), 2, chunk) == 2) chunk_rows = static_cast<int64_t>(chunk[0]);
  }
  if (chunk_rows > 0 && chunk_rows <= fitting) {
    // Whole chunk rows: as many as the target size holds, at least one.
    const int64_t target = std::max<int64_t>(1, int64_t{kBlockTargetBytes} / row_bytes);
    block_rows_ = std::max<int64_t>(1, std::min(target, fitting) / chunk_rows) * chunk_rows;
  } else {
    // Contiguous data, or chunks taller than the budget allows (each chunk is then decompressed
    // once per block it overlaps).
    block_rows_ = std::min(fitting, std::max<int64_t>(1, int64_t{kBlockTargetBytes} / row_bytes));
  }
  return block_rows_;
}

template <>
std::vector<HdfBatchSource::RowBlock<float>>& HdfBatchSource::Blocks<float>() {
  return float_blocks_;
}
template <>
std::vector<HdfBatchSource::RowBlock<double>>& HdfBatchSource::Blocks<double>() {
  return double_blocks_;
}

template <typename T>
std::vector<HdfBatchSource::RowBlock<T>>& HdfBatchSource::BlocksInUse() {
  std::vector<RowBlock<T>>& blocks = Blocks<T>();
  if (blocks.empty()) {
    float_blocks_.clear();
    float_blocks_.shrink_to_fit();
    double_blocks_.clear();
    double_blocks_.shrink_to_fit();
    blocks.resize(static_cast<size_t>(info_.num_angles()));
  }
  return blocks;
}

bool HdfBatchSource::DecodeDoubleBlock(int angle, int64_t raw_row, RowBlock<double>& block) {
  const std::optional<io_internal::ChunkPlan>& plan = chunk_plans_[static_cast<size_t>(angle)];
  if (!plan) return false;
  const int64_t block_rows = BlockRows();
  const int64_t width = info_.num_raw_frames;
  const int64_t first = info_.first_frame;
  const int64_t begin = std::max<int64_t>((first + raw_row) / block_rows * block_rows - first, 0);
  const int64_t budget_rows =
      static_cast<int64_t>(kBlockCacheBytes) /
      (std::max<int64_t>(info_.num_angles(), 1) * width * static_cast<int64_t>(sizeof(double)));
  const int64_t max_rows = std::max<int64_t>(block_rows, budget_rows / block_rows * block_rows);
  const int64_t end = std::min(begin + max_rows, width);
  if (raw_row < begin || raw_row >= end) return false;
  block.raw_begin = block.raw_end = 0;  // empty while (and if) the decoding fails
  decoded_floats_.resize(static_cast<size_t>((end - begin) * width));
  const io_internal::ChunkRectangle rectangle{
      Dataset(angle), &*plan, first + begin, end - begin, first, width, decoded_floats_.data()};
  std::string why_not;
  if (!io_internal::DecodeChunkRectangles({&rectangle, 1}, omp_get_max_threads(), &why_not)) {
    return false;
  }
  block.values.resize(decoded_floats_.size());
  std::copy(decoded_floats_.begin(), decoded_floats_.end(), block.values.begin());
  block.raw_begin = begin;
  block.raw_end = end;
  rows_decoded_for_corrected_reads_ += end - begin;
  return true;
}

template <typename T>
const HdfBatchSource::RowBlock<T>& HdfBatchSource::BlockWithRow(int angle, int64_t raw_row) {
  RowBlock<T>& block = BlocksInUse<T>()[static_cast<size_t>(angle)];
  if (raw_row >= block.raw_begin && raw_row < block.raw_end) return block;
  if constexpr (std::is_same_v<T, double>) {
    if (DecodeDoubleBlock(angle, raw_row, block)) return block;
  }
  // Aligned in file rows, so a block of whole chunk rows starts at a chunk boundary.
  const int64_t rows = BlockRows();
  const int64_t file_row = info_.first_frame + raw_row;
  const int64_t begin = std::max<int64_t>(file_row / rows * rows - info_.first_frame, 0);
  const int64_t end =
      std::min<int64_t>(file_row / rows * rows + rows - info_.first_frame, info_.num_raw_frames);
  const int64_t width = info_.num_raw_frames;
  block.raw_begin = block.raw_end = 0;  // empty while (and if) the read fails
  block.values.resize(static_cast<size_t>((end - begin) * width));
  ReadRaw(angle, begin, end - begin, 0, width, block.values.data());
  block.raw_begin = begin;
  block.raw_end = end;
  return block;
}

template <typename T>
void HdfBatchSource::ReadRows(int angle, int row_begin, int row_end, std::span<T> out) {
  const int64_t n = info_.num_times();
  HOMODYNE_CHECK(angle >= 0 && angle < info_.num_angles());
  HOMODYNE_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= n);
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == UpperTriangleRowsSize(n, row_begin, row_end));
  const int64_t out_origin = UpperTriangleRowOffset(n, row_begin);
  const int64_t width = info_.num_raw_frames;
  for (int64_t i = row_begin; i < row_end; ++i) {
    if (n - 1 - i <= 0) break;  // the last row has no point
    // Fitted (i, j), j = i+1..n-1, is raw (i+1, j+1): raw row i+1 from raw column i+2 on.
    const RowBlock<T>& block = BlockWithRow<T>(angle, i + 1);
    const T* source = block.values.data() + (i + 1 - block.raw_begin) * width + (i + 2);
    std::copy(source, source + (n - 1 - i),
              out.begin() + (UpperTriangleRowOffset(n, i) - out_origin));
  }
}

void HdfBatchSource::ReadCorrectedMatrix(int angle, std::span<double> out) {
  io_internal::InitializeHdf5();
  const int64_t n = info_.num_times();
  const int64_t n_raw = info_.num_raw_frames;
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == n * n);
  // Raw super-diagonal s_r = C[r, r+1] (raw frame 0 included; docs/model.md, Diagonal correction).
  std::vector<double> super_diagonal(static_cast<size_t>(n_raw - 1));
  std::vector<double>& buffer = double_buffer_;
  int64_t raw_row = 0;
  while (raw_row < n_raw) {
    const int64_t width = n_raw - raw_row;  // raw columns raw_row..n_raw-1
    const int64_t rows = std::min<int64_t>(
        n_raw - raw_row,
        std::max<int64_t>(1, static_cast<int64_t>(kReadBufferBytes / sizeof(double)) / width));
    buffer.resize(static_cast<size_t>(rows * width));
    ReadRaw(angle, raw_row, rows, raw_row, width, buffer.data());
    for (int64_t r = raw_row; r < raw_row + rows; ++r) {
      // Raw column c of raw row r.
      auto value = [&](int64_t c) {
        return buffer[static_cast<size_t>((r - raw_row) * width + (c - raw_row))];
      };
      if (r + 1 < n_raw) super_diagonal[static_cast<size_t>(r)] = value(r + 1);
      if (r == 0) continue;
      const int64_t i = r - 1;
      for (int64_t c = r + 1; c < n_raw; ++c) {
        const int64_t j = c - 1;
        out[static_cast<size_t>(i * n + j)] = value(c);
        out[static_cast<size_t>(j * n + i)] = value(c);
      }
    }
    raw_row += rows;
  }
  // Corrected on the raw grid (its row 0 is dropped), as the reference does.
  for (int64_t r = 1; r < n_raw; ++r) {
    const double s_after = r < n_raw - 1 ? super_diagonal[static_cast<size_t>(r)] : 0.0;
    out[static_cast<size_t>((r - 1) * n + (r - 1))] = model_internal::CorrectedDiagonalValue(
        r, n_raw, super_diagonal[static_cast<size_t>(r - 1)], s_after);
  }
  // Another method than basic (DiagonalOverride): its value where it has one.
  const std::vector<double>& override_values = DiagonalOverride(angle);
  for (int64_t r = 1; r < static_cast<int64_t>(override_values.size()); ++r) {
    const double value = override_values[static_cast<size_t>(r)];
    if (std::isfinite(value)) out[static_cast<size_t>((r - 1) * n + (r - 1))] = value;
  }
}

const std::vector<double>& HdfBatchSource::DiagonalOverride(int angle) {
  std::vector<double>& override_values = diagonal_overrides_[static_cast<size_t>(angle)];
  const DiagonalCorrectionOptions& options = diagonal_correction_;
  if (options.apply && options.method != "statistical") return override_values;  // empty
  if (!override_values.empty()) return override_values;
  const int64_t n_raw = info_.num_raw_frames;
  const int64_t window = options.apply ? options.window : 0;
  // band[r * window + k - 1] = C[r, r + k] (NaN beyond the matrix); stored[r] = C[r, r].
  std::vector<double> band(static_cast<size_t>(n_raw * window),
                           std::numeric_limits<double>::quiet_NaN());
  std::vector<double> stored(static_cast<size_t>(n_raw));
  constexpr int64_t kBlockRows = 512;
  std::vector<double> block;
  for (int64_t r0 = 0; r0 < n_raw; r0 += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, n_raw - r0);
    const int64_t cols = std::min(rows + window, n_raw - r0);
    block.resize(static_cast<size_t>(rows * cols));
    ReadRaw(angle, r0, rows, r0, cols, block.data());
    for (int64_t r = r0; r < r0 + rows; ++r) {
      const double* row = block.data() + (r - r0) * cols;  // row[c - r0] = C[r, c]
      stored[static_cast<size_t>(r)] = row[r - r0];
      for (int64_t k = 1; k <= window && r + k < n_raw; ++k) {
        band[static_cast<size_t>(r * window + k - 1)] = row[r + k - r0];
      }
    }
  }
  if (!options.apply) {
    override_values = std::move(stored);
    return override_values;
  }
  override_values.assign(static_cast<size_t>(n_raw), std::numeric_limits<double>::quiet_NaN());
  std::vector<double> neighbours;
  for (int64_t r = 0; r < n_raw; ++r) {
    neighbours.clear();
    for (int64_t k = 1; k <= window; ++k) {
      if (r + k < n_raw) neighbours.push_back(band[static_cast<size_t>(r * window + k - 1)]);
      if (r - k >= 0) neighbours.push_back(band[static_cast<size_t>((r - k) * window + k - 1)]);
    }
    override_values[static_cast<size_t>(r)] = model_internal::StatisticalDiagonalValue(
        neighbours, options.estimator, options.trim_fraction);
  }
  return override_values;
}

// Columns from row_begin on as ReadCorrectedUpperRows; the columns before it (fitted (i, j) =
// H[j, i], j < row_begin <= i) from the file's rows above the block.
void HdfBatchSource::ReadCorrectedRows(int angle, int row_begin, int row_end,
                                       std::span<double> out) {
  io_internal::InitializeHdf5();
  const int64_t n = info_.num_times();
  HOMODYNE_CHECK(angle >= 0 && angle < info_.num_angles());
  HOMODYNE_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= n);
  const int64_t r0 = row_begin;
  const int64_t rows = row_end - row_begin;
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == rows * n);
  if (rows == 0) return;
  const int64_t width = n - r0;
  std::vector<double> right(static_cast<size_t>(rows * width));
  ReadCorrectedUpperRows(angle, row_begin, row_end, right);
  // above: fitted rows 0..r0-1 x fitted columns r0..r0+rows-1 (raw (j + 1, i + 1)), at
  // above[j * rows + (i - r0)].
  std::vector<double> above(static_cast<size_t>(r0 * rows));
  if (r0 > 0) ReadRaw(angle, 1, r0, r0 + 1, rows, above.data());
  for (int64_t i = r0; i < row_end; ++i) {
    double* row = out.data() + (i - r0) * n;
    for (int64_t j = 0; j < r0; ++j) row[j] = above[static_cast<size_t>(j * rows + (i - r0))];
    std::copy_n(right.begin() + (i - r0) * width, width, row + r0);
  }
}

// From the row blocks (BlockWithRow), which read each chunk row of the file once when the rows
// come in order. The diagonal as ReadCorrectedMatrix corrects it.
void HdfBatchSource::ReadCorrectedUpperRows(int angle, int row_begin, int row_end,
                                            std::span<double> out) {
  io_internal::InitializeHdf5();
  const int64_t n = info_.num_times();
  HOMODYNE_CHECK(angle >= 0 && angle < info_.num_angles());
  HOMODYNE_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= n);
  const int64_t r0 = row_begin;
  const int64_t width = n - r0;
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == (row_end - r0) * width);
  if (row_end == r0) return;
  const int64_t raw_width = info_.num_raw_frames;
  // Raw row r of the window (every raw column); fitted (i, j) is raw (i + 1, j + 1).
  auto raw_row = [&](int64_t r) {
    const RowBlock<double>& block = BlockWithRow<double>(angle, r);
    return block.values.data() + (r - block.raw_begin) * raw_width;
  };
  // The fit's data in memory where lent (LendHeldUpperTriangles): fitted (i, j), j > i, at
  // held[UpperTriangleRowOffset(n, i) + j - i - 1], the file's float32 value.
  const float* held = held_ ? (*held_)[static_cast<size_t>(angle)].data() : nullptr;
  // The super-diagonal values around each diagonal point (docs/model.md, Diagonal correction):
  // s_before of row i is raw C[i, i + 1] (fitted (i - 1, i); raw frame 0's when i = 0), s_after
  // fitted (i, i + 1).
  double s_before = 0.0;
  if (held == nullptr) {
    s_before = raw_row(r0)[r0 + 1];
  } else if (r0 > 0) {
    s_before = held[UpperTriangleRowOffset(n, r0 - 1)];
  } else {
    ReadRaw(angle, 0, 1, 1, 1, &s_before);  // raw frame 0's, not among the fitted data
  }
  for (int64_t i = r0; i < row_end; ++i) {
    double* row = out.data() + (i - r0) * width;  // row[j - r0] is fitted (i, j)
    // Below the diagonal: the rows of this band above row i, mirrored.
    for (int64_t j = r0; j < i; ++j) {
      row[j - r0] = out[static_cast<size_t>((j - r0) * width + (i - r0))];
    }
    double s_after = 0.0;
    if (held != nullptr) {
      const float* values = held + UpperTriangleRowOffset(n, i);  // values[j - i - 1]: (i, j)
      double* right = row + (i + 1 - r0);
      for (int64_t k = 0; k < n - 1 - i; ++k) right[k] = values[k];
      if (i < n - 1) s_after = values[0];
    } else {
      const double* raw = raw_row(i + 1);
      for (int64_t j = i + 1; j < n; ++j) row[j - r0] = raw[j + 1];
      if (i < n - 1) s_after = raw[i + 2];
    }
    row[i - r0] = model_internal::CorrectedDiagonalValue(i + 1, n + 1, s_before, s_after);
    s_before = s_after;
  }
  // Another method than basic (DiagonalOverride): its value where it has one.
  const std::vector<double>& override_values = DiagonalOverride(angle);
  if (override_values.empty()) return;
  for (int64_t i = r0; i < row_end; ++i) {
    const double value = override_values[static_cast<size_t>(i + 1)];
    if (std::isfinite(value)) out[static_cast<size_t>((i - r0) * width + (i - r0))] = value;
  }
}

}  // namespace

void BatchSource::ReadCorrectedUpperRows(int angle, int row_begin, int row_end,
                                         std::span<double> out) {
  const int64_t n = info().num_times();
  HOMODYNE_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= n);
  const int64_t width = n - row_begin;
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == (row_end - row_begin) * width);
  std::vector<double> rows(static_cast<size_t>((row_end - row_begin) * n));
  ReadCorrectedRows(angle, row_begin, row_end, rows);
  for (int64_t r = 0; r < row_end - row_begin; ++r) {
    std::copy_n(rows.begin() + r * n + row_begin, width, out.begin() + r * width);
  }
}

void BatchSource::ReadCorrectedRows(int angle, int row_begin, int row_end, std::span<double> out) {
  const int64_t n = info().num_times();
  HOMODYNE_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= n);
  HOMODYNE_CHECK(static_cast<int64_t>(out.size()) == (row_end - row_begin) * n);
  std::vector<double> matrix(static_cast<size_t>(n * n));
  ReadCorrectedMatrix(angle, matrix);
  std::copy(matrix.begin() + row_begin * n, matrix.begin() + row_end * n, out.begin());
}

std::unique_ptr<BatchSource> OpenBatchSource(const DataSelection& selection) {
  return std::make_unique<HdfBatchSource>(io_internal::OpenAndInspect(selection),
                                          /*allow_direct_reads=*/true,
                                          selection.diagonal_correction);
}

std::unique_ptr<BatchSource> io_internal::OpenHdfBatchSource(const DataSelection& selection,
                                                             bool allow_direct_reads) {
  return std::make_unique<HdfBatchSource>(io_internal::OpenAndInspect(selection),
                                          allow_direct_reads, selection.diagonal_correction);
}

std::vector<std::string> io_internal::Float32ReadPaths(const BatchSource& source) {
  const auto* hdf_source = dynamic_cast<const HdfBatchSource*>(&source);
  return hdf_source != nullptr ? hdf_source->float32_read_paths() : std::vector<std::string>{};
}

bool io_internal::LendHeldUpperTriangles(
    BatchSource& source, std::shared_ptr<const std::vector<std::vector<float>>> values) {
  auto* hdf = dynamic_cast<HdfBatchSource*>(&source);
  return hdf != nullptr && hdf->LendHeldUpperTriangles(std::move(values));
}

int64_t io_internal::RowsDecodedForCorrectedReads(const BatchSource& source) {
  const auto* hdf = dynamic_cast<const HdfBatchSource*>(&source);
  return hdf != nullptr ? hdf->rows_decoded_for_corrected_reads() : 0;
}

int64_t io_internal::RowsDecodedByPrefetch(const BatchSource& source) {
  const auto* hdf_source = dynamic_cast<const HdfBatchSource*>(&source);
  return hdf_source != nullptr ? hdf_source->rows_decoded_by_prefetch() : 0;
}

NonFiniteCount CountNonFinite(BatchSource& source, int rows_per_batch) {
  const DatasetInfo& info = source.info();
  const int n = info.num_times();
  const int step = std::max(rows_per_batch, 1);
  NonFiniteCount count;
  std::vector<double> values;
  for (int angle = 0; angle < info.num_angles(); ++angle) {
    for (int row = 0; row < n; row += step) {
      const int row_end = std::min(n, row + step);
      values.resize(static_cast<size_t>(UpperTriangleRowsSize(n, row, row_end)));
      source.ReadUpperTriangleRows(angle, row, row_end, std::span<double>(values));
      for (double value : values) {
        count.nan += std::isnan(value) ? 1 : 0;
        count.inf += std::isinf(value) ? 1 : 0;
      }
      count.points_scanned += static_cast<int64_t>(values.size());
    }
  }
  return count;
}

}  // namespace homodyne
