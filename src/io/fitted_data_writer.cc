// nlsq/fitted_data.h5: data, fit and residuals per angle on the fitted grid
// (docs/design.md section 8).
//
// Streams bands of rows (BatchSource::ReadCorrectedUpperRows: each band from the diagonal on) and
// writes each band's square tiles and, by symmetry of the data, their mirror images below the
// diagonal (the model evaluated there: ModelEvaluation::ComputeC2RowSegment), so the input is read
// once and memory stays bounded by the band, not N^2. HDF5 writes the temporary file of a
// DurableFileSet (io/durable_file.h), which publishes it, alone (WriteFittedData) or with the JSON
// files (WriteAllResultFiles, results_json.cc).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <future>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <omp.h>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/results.h"
#include "io/durable_file.h"
#include "io/hdf5_util.h"
#include "io/result_files.h"

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
Hid CreateMatrix(hid_t group, const std::string& name, int64_t n, int64_t side) {
  const hsize_t dims[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(n)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(side), static_cast<hsize_t>(side)};
  Hid space = io_internal::SpaceHid(H5Screate_simple(2, dims, nullptr));
  Hid create = io_internal::PlistHid(H5Pcreate(H5P_DATASET_CREATE));
  if (!space.valid() || !create.valid() || H5Pset_chunk(create.get(), 2, chunk) < 0) {
    throw std::runtime_error("cannot set up dataset " + name + ": " + io_internal::Hdf5ErrorText());
  }
  Hid dataset = io_internal::DatasetHid(H5Dcreate2(group, name.c_str(), H5T_IEEE_F64LE, space.get(),
                                                   H5P_DEFAULT, create.get(), H5P_DEFAULT));
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

// A tile's values, row-major: the data, the fit and the residuals data - fit.
struct TileValues {
  TilePlace place;
  std::vector<double> data;
  std::vector<double> fit;
  std::vector<double> residuals;
};

// The tile's data from its band (`band`: rows [place.band_row, + side) from column band_row on,
// `width` = N - band_row values a row).
void CopyTileData(const std::vector<double>& band, int64_t width, const TilePlace& place,
                  TileValues& tile) {
  tile.place = place;
  tile.data.resize(static_cast<size_t>(place.rows * place.cols));
  const double* origin = band.data();
  if (!place.mirror) {
    for (int64_t r = 0; r < place.rows; ++r) {
      std::copy_n(origin + r * width + (place.col - place.band_row), place.cols,
                  tile.data.begin() + r * place.cols);
    }
    return;
  }
  // Tile (r, c) is band row c, band column place.row + r.
  for (int64_t c = 0; c < place.cols; ++c) {
    const double* band_row = origin + c * width + (place.row - place.band_row);
    for (int64_t r = 0; r < place.rows; ++r) tile.data[r * place.cols + c] = band_row[r];
  }
}

// The tile's fit and residuals, row by row, shared by the threads that call EvaluateRows: each
// takes the next row not yet taken. A row's values depend only on the row (ComputeC2RowSegment
// evaluates each point on its own), not on the thread, the tiling or the thread count.
class TileEvaluation {
 public:
  TileEvaluation(const ModelEvaluation& evaluation, double phi, double contrast, double offset)
      : evaluation_(evaluation), phi_(phi), contrast_(contrast), offset_(offset) {}

  // Starts on `tile`, whose place and data are set: sizes its fit and residuals.
  void Reset(TileValues& tile) {
    tile.fit.resize(tile.data.size());
    tile.residuals.resize(tile.data.size());
    tile_ = &tile;
    next_row_.store(0);
  }

  // Evaluates rows until none is left.
  void EvaluateRows() {
    const TilePlace& place = tile_->place;
    for (int64_t r = next_row_.fetch_add(1); r < place.rows; r = next_row_.fetch_add(1)) {
      const size_t origin = static_cast<size_t>(r * place.cols);
      double* fit = tile_->fit.data() + origin;
      evaluation_.ComputeC2RowSegment(phi_, contrast_, offset_, static_cast<int>(place.row + r),
                                      static_cast<int>(place.col),
                                      static_cast<int>(place.col + place.cols),
                                      std::span<double>(fit, static_cast<size_t>(place.cols)));
      const double* data = tile_->data.data() + origin;
      double* residuals = tile_->residuals.data() + origin;
      for (int64_t c = 0; c < place.cols; ++c) residuals[c] = data[c] - fit[c];
    }
  }

 private:
  const ModelEvaluation& evaluation_;
  const double phi_, contrast_, offset_;
  TileValues* tile_ = nullptr;
  std::atomic<int64_t> next_row_{0};
};

void WriteTileValues(const AngleMatrices& matrices, const TileValues& tile) {
  const TilePlace& place = tile.place;
  WriteTile(matrices.data.get(), matrices.name + "/data", place.row, place.rows, place.col,
            place.cols, tile.data.data());
  WriteTile(matrices.fit.get(), matrices.name + "/fit", place.row, place.rows, place.col,
            place.cols, tile.fit.data());
  WriteTile(matrices.residuals.get(), matrices.name + "/residuals", place.row, place.rows,
            place.col, place.cols, tile.residuals.data());
}

// Helper threads per tile at most: with three, the evaluation of a tile takes less than its
// writes (one thread), which then bound the time. Tiles of fewer points than kMinHelpedPoints
// (the 32 x 32 tiles of N > 32768) are evaluated by the writing thread alone: starting a thread
// would cost about what evaluating them does.
constexpr int kMaxHelpers = 3;
constexpr int64_t kMinHelpedPoints = int64_t{1} << 14;

// One angle's matrices, tile by tile (FirstTilePlace, NextTilePlace), two tiles in flight:
// while this thread writes one (HDF5, which takes one thread at a time), helper threads evaluate
// the next, and this thread joins them when its writes are done. Threads: OpenMP's count (the
// fit's while a fit writes its results), this one included, at most kMaxHelpers + 1.
void WriteAngleMatrices(BatchSource& source, int angle, const ModelEvaluation& evaluation,
                        double phi, double contrast, double offset, int64_t side,
                        const AngleMatrices& matrices) {
  const int64_t n = source.info().num_times();
  if (n == 0) return;
  const int helper_count = std::clamp(omp_get_max_threads() - 1, 0, kMaxHelpers);
  std::vector<double> band;  // rows [band_row, band_row + side) from column band_row on
  int64_t band_row = -1;
  TileValues tiles[2];
  TileEvaluation evaluations[2] = {{evaluation, phi, contrast, offset},
                                   {evaluation, phi, contrast, offset}};
  // Declared after the tiles and evaluations: their destructors wait for the helpers first.
  std::vector<std::future<void>> helpers;
  auto start = [&](const TilePlace& place, int slot) {  // the tile's data, and helpers on it
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
    helpers.clear();
    if (place.rows * place.cols < kMinHelpedPoints) return;
    for (int h = 0; h < helper_count; ++h) {
      helpers.push_back(
          std::async(std::launch::async, [&tile_evaluation] { tile_evaluation.EvaluateRows(); }));
    }
  };
  auto finish = [&](int slot) {  // joins the helpers until the tile's rows are done
    evaluations[slot].EvaluateRows();
    for (std::future<void>& helper : helpers) helper.get();
  };
  TilePlace place = FirstTilePlace(n, side);
  start(place, 0);
  finish(0);
  for (int slot = 0;; slot ^= 1) {
    const bool more = NextTilePlace(n, side, &place);
    if (more) start(place, slot ^ 1);  // evaluated while this slot's tile is written
    WriteTileValues(matrices, tiles[slot]);
    if (!more) break;
    finish(slot ^ 1);
  }
}

void WriteContents(hid_t file, BatchSource& source, const ModelEvaluation& evaluation,
                   const std::vector<AngleScaling>& per_angle) {
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
    AngleMatrices matrices{name, CreateMatrix(group.get(), "data", n, side),
                           CreateMatrix(group.get(), "fit", n, side),
                           CreateMatrix(group.get(), "residuals", n, side)};
    WriteAngleMatrices(source, static_cast<int>(k), evaluation.OfAngle(static_cast<int>(k)), phi[k],
                       contrast[k], offset[k], side, matrices);
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
    Hid hdf5_file = FileHid(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!hdf5_file.valid()) {
      throw std::runtime_error("cannot create " + temporary + ": " + Hdf5ErrorText());
    }
    WriteContents(hdf5_file.get(), source, evaluation, per_angle);
    if (H5Fflush(hdf5_file.get(), H5F_SCOPE_LOCAL) < 0 || hdf5_file.Close() < 0) {
      throw std::runtime_error("cannot close " + temporary + ": " + Hdf5ErrorText());
    }
  } catch (const std::runtime_error& failure) {
    throw std::runtime_error(file.final_path().string() + ": cannot write the fitted data (" +
                             failure.what() + ")" + set.NothingPublished());
  }
  return file.temporary_path();
}

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
