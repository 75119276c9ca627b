// nlsq/fitted_data.npz (homodyne --output-format npz): the successor's (xpcsjax) fitted-data
// arrays, for scripts written for it (docs/results.md, fitted_data.npz).
//
// An NPZ file is a zip archive of .npy files. This writer stores them uncompressed (zip method 0:
// noisy data barely compress, as fitted_data_writer.cc measured for deflate), each .npy a version
// 1.0 header (magic, a Python dict literal of dtype, order and shape, padded to 64 bytes) and the
// little-endian float64 values. The sizes are known before a byte is written; each entry's CRC-32
// (zlib) is computed while its values are written and patched into its local header afterwards
// (pwrite: the file offset is left at the end). The matrices come from fitted_data.h5, already
// written into its temporary file (read back band by band, so memory stays bounded), except the
// model at contrast 1 and offset 1, evaluated row by row as the .h5's fit is.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "homodyne/model.h"
#include "homodyne/results.h"
#include "io/durable_file.h"
#include "io/hdf5_util.h"
#include "io/result_files.h"

namespace homodyne {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the .npy writer stores the host's doubles as '<f8'");

using io_internal::Hid;

// Values read or written at a time: 8 MB of doubles.
constexpr int64_t kBufferValues = int64_t{1} << 20;
// Without ZIP64 every size and offset of the archive must fit in 32 bits.
constexpr uint64_t kZipLimit = 0xFFFFFFFFull;

// The .npy header of a C-order float64 array of `shape`: magic, version 1.0, the header length,
// the dict, spaces and a newline to a multiple of 64 bytes in all.
std::string NpyHeader(const std::vector<int64_t>& shape) {
  std::string dims;
  for (const int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (3,) but (3, 4)
  if (shape.size() == 1) dims.pop_back();
  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xFF);
  header += static_cast<char>((dict.size() >> 8) & 0xFF);
  return header + dict;
}

void Put16(std::string& out, uint32_t value) {
  out += static_cast<char>(value & 0xFF);
  out += static_cast<char>((value >> 8) & 0xFF);
}
void Put32(std::string& out, uint32_t value) {
  Put16(out, value & 0xFFFF);
  Put16(out, value >> 16);
}

// One array of the archive: its name (".npy" added), shape, and what writes its values.
struct NpzEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t values() const {
    int64_t count = 1;
    for (const int64_t d : shape) count *= d;
    return count;
  }
};

// Appends to a DurableFile through a buffer, keeping the offset and the CRC of the current entry.
class ZipOutput {
 public:
  explicit ZipOutput(io_internal::DurableFile& file) : file_(file) {}

  uint64_t offset() const { return offset_ + buffer_.size(); }

  void Write(std::string_view bytes, bool in_entry) {
    if (in_entry) {
      crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(bytes.data()),
                   static_cast<uInt>(bytes.size()));
    }
    buffer_.append(bytes);
    if (buffer_.size() >= kBufferValues * sizeof(double)) Flush();
  }
  void WriteDoubles(std::span<const double> values) {
    Write(std::string_view(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(double)),
          true);
  }
  void StartEntry() { crc_ = crc32(0L, Z_NULL, 0); }
  uint32_t crc() const { return static_cast<uint32_t>(crc_); }

  void Flush() {
    file_.Write(buffer_);
    offset_ += buffer_.size();
    buffer_.clear();
  }
  // Writes `bytes` at `at`, before the current end (after Flush).
  void Patch(uint64_t at, const std::string& bytes) {
    Flush();
    const ssize_t written = pwrite(file_.fd(), bytes.data(), bytes.size(), static_cast<off_t>(at));
    if (written != static_cast<ssize_t>(bytes.size())) {
      throw std::runtime_error("cannot write " + file_.temporary_path().string() + ": " +
                               std::strerror(errno));
    }
  }

 private:
  io_internal::DurableFile& file_;
  std::string buffer_;
  uint64_t offset_ = 0;
  uLong crc_ = 0;
};

// A header of the archive: the local one (central false) or the central directory's.
std::string ZipHeader(bool central, const std::string& name, uint32_t crc, uint32_t size,
                      uint32_t local_offset) {
  std::string out;
  Put32(out, central ? 0x02014b50 : 0x04034b50);
  if (central) Put16(out, 20);          // version made by: 2.0
  Put16(out, 20);                       // version needed: 2.0
  Put16(out, 0);                        // flags
  Put16(out, 0);                        // method: stored
  Put16(out, 0);                        // time 00:00
  Put16(out, (0 << 9) | (1 << 5) | 1);  // date 1980-01-01: the files are reproducible
  Put32(out, crc);
  Put32(out, size);  // compressed
  Put32(out, size);  // uncompressed
  Put16(out, static_cast<uint32_t>(name.size()));
  Put16(out, 0);  // extra field
  if (central) {
    Put16(out, 0);  // comment
    Put16(out, 0);  // disk
    Put16(out, 0);  // internal attributes
    Put32(out, 0);  // external attributes
    Put32(out, local_offset);
  }
  return out + name;
}

// Reads rows [row, row + rows) of an N x N dataset of fitted_data.h5.
void ReadRows(hid_t dataset, const std::string& name, int64_t n, int64_t row, int64_t rows,
              std::vector<double>& out) {
  out.resize(static_cast<size_t>(rows * n));
  const hsize_t start[2] = {static_cast<hsize_t>(row), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(n)};
  Hid file_space = io_internal::SpaceHid(H5Dget_space(dataset));
  Hid memory_space = io_internal::SpaceHid(H5Screate_simple(2, count, nullptr));
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dread(dataset, H5T_NATIVE_DOUBLE, memory_space.get(), file_space.get(), H5P_DEFAULT,
              out.data()) < 0) {
    throw std::runtime_error("cannot read rows " + std::to_string(row) + ".." +
                             std::to_string(row + rows - 1) + " of " + name + ": " +
                             io_internal::Hdf5ErrorText());
  }
}

Hid OpenDataset(hid_t file, const std::string& path) {
  Hid dataset = io_internal::DatasetHid(H5Dopen2(file, path.c_str(), H5P_DEFAULT));
  if (!dataset.valid()) {
    throw std::runtime_error("cannot open " + path + ": " + io_internal::Hdf5ErrorText());
  }
  return dataset;
}

// What a matrix entry holds, per angle and row band.
enum class Matrix { kData, kRaw, kFit, kResiduals, kNormalizedResiduals };

}  // namespace

namespace io_internal {

bool AddFittedDataNpz(DurableFileSet& set, const std::filesystem::path& fitted_data_h5,
                      const ModelEvaluation& evaluation, const std::vector<AngleScaling>& per_angle,
                      const std::vector<double>& times, double q_inv_angstrom, double sigma) {
  const int64_t n = static_cast<int64_t>(times.size());
  const int64_t n_angles = static_cast<int64_t>(per_angle.size());
  struct Planned {
    NpzEntry entry;
    Matrix matrix = Matrix::kData;  // for the (n_angles, N, N) entries
    std::vector<double> values;     // the small entries' values
  };
  std::vector<double> phi, scaling, angle_q;
  for (const AngleScaling& angle : per_angle) {
    phi.push_back(angle.phi_degrees);
    angle_q.push_back(evaluation.model().AngleQ(static_cast<int>(angle_q.size())));
    scaling.push_back(angle.contrast.value);
    scaling.push_back(angle.offset.value);
  }
  const std::vector<int64_t> cube = {n_angles, n, n};
  // The successor's names and order (xpcsjax's save_nlsq_npz_file).
  std::vector<Planned> planned = {
      {{"phi_angles", {n_angles}}, Matrix::kData, phi},
      {{"c2_exp", cube}, Matrix::kData, {}},
      {{"c2_theoretical_raw", cube}, Matrix::kRaw, {}},
      {{"c2_theoretical_scaled", cube}, Matrix::kFit, {}},
      {{"per_angle_scaling", {n_angles, 2}}, Matrix::kData, scaling},
      {{"per_angle_scaling_solver", {n_angles, 2}}, Matrix::kData, scaling},
      {{"residuals", cube}, Matrix::kResiduals, {}},
      {{"residuals_normalized", cube}, Matrix::kNormalizedResiduals, {}},
      {{"t1", {n}}, Matrix::kData, times},
      {{"t2", {n}}, Matrix::kData, times},
      {{"q", {1}}, Matrix::kData, {q_inv_angstrom}},
  };
  // Each matrix's q when they differ (a joint fit of q rings): not one of the successor's names,
  // so written only then.
  if (evaluation.num_rings() > 1) {
    planned.push_back({{"q_per_angle", {n_angles}}, Matrix::kData, angle_q});
  }
  // The archive's size, to refuse what needs ZIP64 before anything is written.
  uint64_t total = 22;  // end of central directory
  for (const Planned& p : planned) {
    const uint64_t name = p.entry.name.size() + 4;
    const uint64_t data =
        NpyHeader(p.entry.shape).size() + static_cast<uint64_t>(p.entry.values()) * 8;
    total += 30 + name + data + 46 + name;
  }
  if (total > kZipLimit) {
    spdlog::warn(
        "{} not written: its {:.1f} GB need ZIP64, which this writer does not write; "
        "{} holds the same matrices",
        kFittedDataNpzFileName, static_cast<double>(total) / 1e9, kFittedDataFileName);
    return false;
  }

  DurableFile& file = set.Add(std::string(kFittedDataNpzFileName));
  try {
    InitializeHdf5();
    Hid h5 = FileHid(H5Fopen(fitted_data_h5.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    if (!h5.valid()) {
      throw std::runtime_error("cannot open " + fitted_data_h5.string() + ": " + Hdf5ErrorText());
    }
    ZipOutput out(file);
    std::string central;
    const int64_t band = std::max<int64_t>(1, kBufferValues / std::max<int64_t>(n, 1));
    std::vector<double> values, raw_row(static_cast<size_t>(n));
    for (const Planned& p : planned) {
      const std::string name = p.entry.name + ".npy";
      const std::string header = NpyHeader(p.entry.shape);
      const uint64_t size = header.size() + static_cast<uint64_t>(p.entry.values()) * 8;
      const uint64_t local = out.offset();
      out.Write(ZipHeader(false, name, 0, static_cast<uint32_t>(size), 0), false);
      out.StartEntry();
      out.Write(header, true);
      if (p.entry.shape.size() < 3) {
        out.WriteDoubles(p.values);
      } else {
        for (int64_t k = 0; k < n_angles; ++k) {
          char group[48];
          std::snprintf(group, sizeof(group), "/angles/phi_%03lld/", static_cast<long long>(k));
          const AngleScaling& angle = per_angle[static_cast<size_t>(k)];
          if (p.matrix == Matrix::kRaw) {
            // The model at contrast 1 and offset 1 (the successor's c2_theoretical_raw).
            for (int64_t r = 0; r < n; ++r) {
              evaluation.OfAngle(static_cast<int>(k))
                  .ComputeC2RowSegment(angle.phi_degrees, 1.0, 1.0, static_cast<int>(r), 0,
                                       static_cast<int>(n), raw_row);
              out.WriteDoubles(raw_row);
            }
            continue;
          }
          const std::string source =
              std::string(group) + (p.matrix == Matrix::kData  ? "data"
                                    : p.matrix == Matrix::kFit ? "fit"
                                                               : "residuals");
          Hid dataset = OpenDataset(h5.get(), source);
          for (int64_t row = 0; row < n; row += band) {
            const int64_t rows = std::min(band, n - row);
            ReadRows(dataset.get(), source, n, row, rows, values);
            if (p.matrix == Matrix::kNormalizedResiduals) {
              for (double& value : values) value /= sigma;
            }
            out.WriteDoubles(values);
          }
        }
      }
      const uint32_t crc = out.crc();
      out.Patch(local, ZipHeader(false, name, crc, static_cast<uint32_t>(size), 0));
      central +=
          ZipHeader(true, name, crc, static_cast<uint32_t>(size), static_cast<uint32_t>(local));
    }
    const uint64_t central_offset = out.offset();
    std::string end;
    Put32(end, 0x06054b50);
    Put16(end, 0);
    Put16(end, 0);
    Put16(end, static_cast<uint32_t>(planned.size()));
    Put16(end, static_cast<uint32_t>(planned.size()));
    Put32(end, static_cast<uint32_t>(central.size()));
    Put32(end, static_cast<uint32_t>(central_offset));
    Put16(end, 0);  // comment
    out.Write(central + end, false);
    out.Flush();
  } catch (const std::runtime_error& failure) {
    throw std::runtime_error(file.final_path().string() + ": cannot write the fitted data (" +
                             failure.what() + ")" + set.NothingPublished());
  }
  return true;
}

}  // namespace io_internal
}  // namespace homodyne
