// nlsq/fitted_data.h5: data, fit and residuals per angle on the fitted grid
// (docs/design.md section 8).
//
// Streams blocks of rows (BatchSource::ReadCorrectedRows and ModelEvaluation::ComputeC2RowSegment)
// so memory stays bounded by the block, not N^2. HDF5 writes the temporary file of a
// DurableFileSet (io/durable_file.h), which publishes it, alone (WriteFittedData) or with the JSON
// files (WriteAllResultFiles, results_json.cc).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/results.h"
#include "io/durable_file.h"
#include "io/hdf5_util.h"
#include "io/result_files.h"

namespace homodyne {
namespace {

using io_internal::Hid;

// Values per row block (and per chunk): about 8 MB of doubles.
constexpr int64_t kBlockValues = int64_t{1} << 20;

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

// An N x N float64 dataset chunked by `block_rows` rows, uncompressed: noisy data and residuals
// barely compress (3 x 2000 x 2000: 288 MB raw, 200 MB with deflate) while deflate took 5-7 s,
// more than the fit itself.
Hid CreateMatrix(hid_t group, const std::string& name, int64_t n, int64_t block_rows) {
  const hsize_t dims[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(n)};
  const hsize_t chunk[2] = {static_cast<hsize_t>(block_rows), static_cast<hsize_t>(n)};
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

// Writes rows [row, row + rows) of an N x N dataset.
void WriteRows(hid_t dataset, const std::string& name, int64_t n, int64_t row, int64_t rows,
               const double* values) {
  const hsize_t start[2] = {static_cast<hsize_t>(row), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(n)};
  Hid file_space = io_internal::SpaceHid(H5Dget_space(dataset));
  Hid memory_space = io_internal::SpaceHid(H5Screate_simple(2, count, nullptr));
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dwrite(dataset, H5T_NATIVE_DOUBLE, memory_space.get(), file_space.get(), H5P_DEFAULT,
               values) < 0) {
    throw std::runtime_error("cannot write rows " + std::to_string(row) + ".." +
                             std::to_string(row + rows - 1) + " of " + name + ": " +
                             io_internal::Hdf5ErrorText());
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
  for (size_t k = 0; k < n_angles; ++k) {
    phi[k] = per_angle[k].phi_degrees;
    contrast[k] = per_angle[k].contrast.value;
    offset[k] = per_angle[k].offset.value;
  }
  io_internal::WriteDoubles(file, "t", {static_cast<hsize_t>(n)}, info.FittedTimes());
  io_internal::WriteDoubles(file, "phi", {n_angles}, phi);
  WriteScalar(file, "q", info.q_inv_angstrom);
  io_internal::WriteDoubles(file, "contrast", {n_angles}, contrast);
  io_internal::WriteDoubles(file, "offset", {n_angles}, offset);

  Hid angles =
      io_internal::GroupHid(H5Gcreate2(file, "angles", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!angles.valid()) {
    throw std::runtime_error("cannot create group /angles: " + io_internal::Hdf5ErrorText());
  }
  const int64_t block_rows =
      std::clamp<int64_t>(kBlockValues / std::max<int64_t>(n, 1), 1, std::max<int64_t>(n, 1));
  std::vector<double> data(static_cast<size_t>(block_rows * n));
  std::vector<double> fit(data.size());
  std::vector<double> residuals(data.size());
  for (size_t k = 0; k < n_angles; ++k) {
    const std::string name = AngleGroupName(k);
    Hid group = io_internal::GroupHid(
        H5Gcreate2(angles.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!group.valid()) {
      throw std::runtime_error("cannot create group /angles/" + name + ": " +
                               io_internal::Hdf5ErrorText());
    }
    io_internal::WriteAttribute(group.get(), "phi", phi[k]);
    io_internal::WriteAttribute(group.get(), "contrast", contrast[k]);
    io_internal::WriteAttribute(group.get(), "offset", offset[k]);
    if (n == 0) continue;
    Hid data_set = CreateMatrix(group.get(), "data", n, block_rows);
    Hid fit_set = CreateMatrix(group.get(), "fit", n, block_rows);
    Hid residual_set = CreateMatrix(group.get(), "residuals", n, block_rows);
    for (int64_t row = 0; row < n; row += block_rows) {
      const int64_t rows = std::min(block_rows, n - row);
      const size_t size = static_cast<size_t>(rows * n);
      source.ReadCorrectedRows(static_cast<int>(k), static_cast<int>(row),
                               static_cast<int>(row + rows), std::span<double>(data.data(), size));
      for (int64_t i = row; i < row + rows; ++i) {
        const size_t origin = static_cast<size_t>((i - row) * n);
        evaluation.ComputeC2RowSegment(
            phi[k], contrast[k], offset[k], static_cast<int>(i), 0, static_cast<int>(n),
            std::span<double>(fit.data() + origin, static_cast<size_t>(n)));
      }
      for (size_t p = 0; p < size; ++p) residuals[p] = data[p] - fit[p];
      WriteRows(data_set.get(), name + "/data", n, row, rows, data.data());
      WriteRows(fit_set.get(), name + "/fit", n, row, rows, fit.data());
      WriteRows(residual_set.get(), name + "/residuals", n, row, rows, residuals.data());
    }
    if (data_set.Close() < 0 || fit_set.Close() < 0 || residual_set.Close() < 0) {
      throw std::runtime_error("cannot close the datasets of /angles/" + name + ": " +
                               io_internal::Hdf5ErrorText());
    }
  }
}

}  // namespace

namespace io_internal {

void AddFittedData(DurableFileSet& set, BatchSource& source, const ModelEvaluation& evaluation,
                   const std::vector<AngleScaling>& per_angle) {
  HOMODYNE_CHECK(static_cast<int>(per_angle.size()) == source.info().num_angles());
  HOMODYNE_CHECK(evaluation.model().num_times() == source.info().num_times());
  const DurableFile& file = set.Add(std::string(kFittedDataFileName));
  try {
    InitializeHdf5();
    const std::string temporary = file.temporary_path().string();
    Hid hdf5_file =
        FileHid(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
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
