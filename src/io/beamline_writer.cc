// Beamline-layout writer (see beamline_writer.h; layouts: docs/design.md section 8).
#include "io/beamline_writer.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "homodyne/errors.h"

namespace homodyne::io_internal {
namespace {

constexpr const char* kApsUMatrixGroup = "/xpcs/twotime/correlation_map";
constexpr const char* kApsOldMatrixGroup = "/exchange/C2T_all";
constexpr size_t kTargetChunkBytes = size_t{1} << 20;

}  // namespace

std::string MatrixDatasetName(int index) {
  char name[32];
  std::snprintf(name, sizeof(name), "c2_%05d", index + 1);
  return name;
}

MatrixWriter::MatrixWriter(std::string file_path, std::string dataset_path, Hid dataset, int frames)
    : file_path_(std::move(file_path)),
      dataset_path_(std::move(dataset_path)),
      dataset_(std::move(dataset)),
      frames_(frames) {}

void MatrixWriter::WriteRows(int row_begin, int row_count, std::span<const double> rows) {
  HOMODYNE_CHECK(row_begin >= 0 && row_count >= 0 && row_begin + row_count <= frames_);
  HOMODYNE_CHECK(rows.size() == static_cast<size_t>(row_count) * static_cast<size_t>(frames_));
  if (row_count == 0) return;
  const hsize_t start[2] = {static_cast<hsize_t>(row_begin), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(row_count), static_cast<hsize_t>(frames_)};
  Hid file_space = SpaceHid(H5Dget_space(dataset_.get()));
  Hid memory_space = SpaceHid(H5Screate_simple(2, count, nullptr));
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dwrite(dataset_.get(), H5T_NATIVE_DOUBLE, memory_space.get(), file_space.get(), H5P_DEFAULT,
               rows.data()) < 0) {
    throw DataError(file_path_ + ": cannot write rows " + std::to_string(row_begin) + ".." +
                    std::to_string(row_begin + row_count - 1) + " of " + dataset_path_ + " (" +
                    Hdf5ErrorText() + ")");
  }
}

void MatrixWriter::Close() {
  if (dataset_.valid() && dataset_.Close() < 0) {
    throw DataError(file_path_ + ": cannot close " + dataset_path_ + " (" + Hdf5ErrorText() + ")");
  }
}

BeamlineWriter::BeamlineWriter(std::string path, BeamlineWriterOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  InitializeHdf5();
  if (options_.frames < 1) {
    throw InputError(path_ + ": frames = " + std::to_string(options_.frames) + ": must be >= 1");
  }
  if (options_.dtype != "float32" && options_.dtype != "float64") {
    throw InputError(path_ + ": dtype = " + options_.dtype + ": must be float32 or float64");
  }
  if (options_.compression != "none" && options_.compression != "gzip" &&
      options_.compression != "lzf") {
    throw InputError(path_ + ": compression = " + options_.compression +
                     ": must be none, gzip or lzf");
  }
  const int chunk_cols =
      options_.chunk_cols > 0 ? std::min(options_.chunk_cols, options_.frames) : options_.frames;
  const size_t value_bytes = options_.dtype == "float32" ? 4 : 8;
  chunk_rows_ = options_.chunk_rows > 0
                    ? options_.chunk_rows
                    : static_cast<int>(kTargetChunkBytes / (value_bytes * chunk_cols));
  chunk_rows_ = std::clamp(chunk_rows_, 1, options_.frames);
  options_.chunk_cols = chunk_cols;

  file_ = FileHid(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!file_.valid()) Fail("cannot create the file");
}

void BeamlineWriter::Fail(const std::string& what) const {
  const std::string detail = Hdf5ErrorText();
  throw DataError(path_ + ": " + what + (detail.empty() ? "" : " (" + detail + ")"));
}

void BeamlineWriter::WriteApsUBins(std::span<const double> q_values,
                                   std::span<const double> phi_values,
                                   std::span<const int64_t> processed_bins) {
  try {
    CreateGroups(file_.get(), "/xpcs/qmap");
    CreateGroups(file_.get(), kApsUMatrixGroup);
    WriteDoubles(file_.get(), "/xpcs/qmap/dynamic_v_list_dim0", {q_values.size()}, q_values);
    WriteDoubles(file_.get(), "/xpcs/qmap/dynamic_v_list_dim1", {phi_values.size()}, phi_values);
    WriteInt64s(file_.get(), "/xpcs/twotime/processed_bins", {processed_bins.size()},
                processed_bins);
  } catch (const std::runtime_error& error) {
    Fail(error.what());
  }
}

void BeamlineWriter::WriteApsOldBins(std::span<const double> q_per_matrix,
                                     std::span<const double> phi_per_matrix) {
  try {
    CreateGroups(file_.get(), "/xpcs");
    CreateGroups(file_.get(), kApsOldMatrixGroup);
    WriteDoubles(file_.get(), "/xpcs/dqlist", {1, q_per_matrix.size()}, q_per_matrix);
    WriteDoubles(file_.get(), "/xpcs/dphilist", {1, phi_per_matrix.size()}, phi_per_matrix);
  } catch (const std::runtime_error& error) {
    Fail(error.what());
  }
}

MatrixWriter BeamlineWriter::CreateMatrix(int index) {
  const std::string group =
      options_.layout == FileLayout::kApsU ? kApsUMatrixGroup : kApsOldMatrixGroup;
  const std::string dataset_path = group + "/" + MatrixDatasetName(index);
  try {
    CreateGroups(file_.get(), group);
  } catch (const std::runtime_error& error) {
    Fail(error.what());
  }
  const hsize_t dims[2] = {static_cast<hsize_t>(options_.frames),
                           static_cast<hsize_t>(options_.frames)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(chunk_rows_),
                            static_cast<hsize_t>(options_.chunk_cols)};
  Hid space = SpaceHid(H5Screate_simple(2, dims, nullptr));
  Hid create = PlistHid(H5Pcreate(H5P_DATASET_CREATE));
  if (!space.valid() || !create.valid() || H5Pset_chunk(create.get(), 2, chunk) < 0) {
    Fail("cannot set up " + dataset_path);
  }
  const double zero = 0.0;
  H5Pset_fill_value(create.get(), H5T_NATIVE_DOUBLE, &zero);
  if (options_.compression == "gzip") {
    if (H5Pset_deflate(create.get(), static_cast<unsigned>(options_.gzip_level)) < 0) {
      Fail("cannot enable gzip for " + dataset_path);
    }
  } else if (options_.compression == "lzf") {
    // Optional, as h5py sets it: a chunk LZF cannot shrink is stored as is.
    if (H5Pset_filter(create.get(), kLzfFilterId, H5Z_FLAG_OPTIONAL, 0, nullptr) < 0) {
      Fail("cannot enable lzf for " + dataset_path);
    }
  }
  // Room for one block of chunk rows so partial-chunk writes do not re-read chunks.
  Hid access = PlistHid(H5Pcreate(H5P_DATASET_ACCESS));
  const size_t value_bytes = options_.dtype == "float32" ? 4 : 8;
  const size_t chunk_row_bytes =
      value_bytes * static_cast<size_t>(chunk_rows_) * static_cast<size_t>(options_.frames);
  H5Pset_chunk_cache(access.get(), 10007, std::max<size_t>(chunk_row_bytes + 4096, 1 << 20), 1.0);
  const hid_t file_type = options_.dtype == "float32" ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
  Hid dataset = DatasetHid(H5Dcreate2(file_.get(), dataset_path.c_str(), file_type, space.get(),
                                      H5P_DEFAULT, create.get(), access.get()));
  if (!dataset.valid()) Fail("cannot create dataset " + dataset_path);
  return MatrixWriter(path_, dataset_path, std::move(dataset), options_.frames);
}

void BeamlineWriter::Close() {
  if (!file_.valid()) return;
  if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) Fail("cannot flush the file");
  if (file_.Close() < 0) Fail("cannot close the file");
}

}  // namespace homodyne::io_internal
