// The checkpoint file format (checkpoint_file.h).
//
// File layout, format_version 4, or 5 when the profile intervals' points are stored
// (docs/checkpoints.md has the field-by-field table):
//   /             attributes format_version, global_batch, config_sha256, data_fingerprint,
//                 engine_version, timestamp_utc, content_sha256
//   /lm           LevenbergMarquardtState: datasets theta [P], jtj [P,P], jtr [P],
//                 chi2_history [K]; the scalars as attributes, solver as text
//   /pass         PassState, only when Checkpoint::pass is set: datasets theta, jtj, jtr; the
//                 scalars as attributes (full_pass as 0/1)
//   /statistics   BatchStatistics as attributes
//   /global_search  GlobalSearchTrail: datasets evaluations [E], projection_state [L],
//                 minimum_points [M, R] (reduced points, row-major), minimum_chi2 [M],
//                 minimum_counts [M, 3] (start, iterations, passes as exact doubles); attribute
//                 minimum_statuses (the M statuses, one per line). Always present; M = 0 and
//                 E = 0 when the phase did not run.
//   /profile_intervals  ProfileTrail, format_version 5 only (a file without profile points is
//                 written as version 4, byte for byte what earlier builds wrote): datasets
//                 parameters [K] (physical parameter indices as exact doubles), values [K],
//                 chi2 [K].
// Doubles are IEEE float64 little endian and integers int64 little endian, whatever their C++
// width, so values round-trip bit for bit (NaN payloads included). Matrices are stored row-major
// with their C++ (rows, cols) as the dataset shape. Strings are fixed-length, NUL-padded string
// attributes (text without trailing NUL characters). With compression on, every non-empty array
// dataset is chunked (chunks <= 1 MiB) with the shuffle and deflate (level kDeflateLevel) filters;
// empty ones stay contiguous (HDF5 cannot chunk a zero-length dimension).
//
// content_sha256 is the SHA-256 (hex) of the canonical serialisation of every field (see
// CanonicalSerializer): it is recomputed from the values read back, so it catches any change to
// any stored value whatever HDF5 layout carries it.
#include "checkpoint_file.h"

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/hdf5_util.h"

namespace homodyne::checkpoint_internal {
namespace {

using io_internal::Hid;

// Deflate level for the array datasets. Checkpoint arrays are full-mantissa doubles, which deflate
// compresses little beyond what shuffle exposes (sign and exponent bytes). Measured for P = 100
// (bench/checkpoint_benchmark.cc): levels 4 and 9 make the file 0.6 % and 1.0 % smaller than level
// 1 for up to 2.5x its CPU time, so level 1.
constexpr unsigned kDeflateLevel = 1;
// Upper bound of one chunk, in doubles (1 MiB): the default HDF5 chunk cache size.
constexpr hsize_t kMaxChunkElements = hsize_t{1} << 17;
// Largest array a checkpoint file may declare, in doubles (1 GiB; P = 11585 for J^T J): a corrupt
// dataspace must not make the reader allocate without bound.
constexpr hsize_t kMaxArrayElements = hsize_t{1} << 27;
// A file of a different layout: a field was added to a checkpointed struct. Add it to
// VisitCheckpointFields (and docs/checkpoints.md), then update the size here. Only checked where
// the sizes below were measured (LP64 with libstdc++).
#if defined(__LP64__) && defined(__GLIBCXX__)
static_assert(sizeof(LevenbergMarquardtState) == 168,
              "LevenbergMarquardtState changed: store the new field in checkpoint_file.cc");
static_assert(sizeof(PassState) == 80,
              "PassState changed: store the new field in checkpoint_file.cc");
static_assert(sizeof(BatchStatistics) == 32,
              "BatchStatistics changed: store the new field in checkpoint_file.cc");
// GlobalMinimum::reached_by is not stored: the replay recounts it.
static_assert(sizeof(GlobalMinimum) == 80,
              "GlobalMinimum changed: store the new field in checkpoint_file.cc");
static_assert(sizeof(GlobalSearchTrail) == 64,
              "GlobalSearchTrail changed: store the new field in checkpoint_file.cc");
static_assert(sizeof(ProfilePointRecord) == 24,
              "ProfilePointRecord changed: store the new field in checkpoint_file.cc");
static_assert(sizeof(ProfileTrail) == 24,
              "ProfileTrail changed: store the new field in checkpoint_file.cc");
static_assert(sizeof(Checkpoint) == 168 + 88 + 64 + 24 + 32 + 8 + 4 * 32,
              "Checkpoint changed: store the new field in checkpoint_file.cc");
#endif

// ---------------------------------------------------------------------------------------------
// The field list, shared by the writer, the reader and the checksum.

// The global phase's minima as columns: what the file stores.
struct MinimaColumns {
  Eigen::MatrixXd points;  // [M, R] reduced points
  Eigen::VectorXd chi2;    // [M]
  Eigen::MatrixXd counts;  // [M, 3] start, iterations, passes (integers, exact as doubles)
  std::string statuses;    // M lines
};

// Writing and hashing: the minima to columns.
template <typename Visitor>
void VisitMinima(const std::vector<GlobalMinimum>& minima, Visitor& visitor) {
  MinimaColumns columns;
  const auto m = static_cast<Eigen::Index>(minima.size());
  const Eigen::Index r = minima.empty() ? 0 : minima.front().reduced.size();
  columns.points.resize(m, r);
  columns.chi2.resize(m);
  columns.counts.resize(m, 3);
  for (Eigen::Index i = 0; i < m; ++i) {
    const GlobalMinimum& minimum = minima[static_cast<size_t>(i)];
    if (minimum.reduced.size() != r) {
      throw std::invalid_argument("global search minima of different lengths");
    }
    columns.points.row(i) = minimum.reduced.transpose();
    columns.chi2[i] = minimum.chi2;
    columns.counts.row(i) << static_cast<double>(minimum.start),
        static_cast<double>(minimum.iterations), static_cast<double>(minimum.passes);
    columns.statuses += (i == 0 ? "" : "\n") + minimum.status;
  }
  visitor.Matrix("minimum_points", columns.points);
  visitor.Vector("minimum_chi2", columns.chi2);
  visitor.Matrix("minimum_counts", columns.counts);
  visitor.Text("minimum_statuses", columns.statuses);
}

// Reading: the columns back to minima, checking that their shapes agree.
template <typename Visitor>
void VisitMinima(std::vector<GlobalMinimum>& minima, Visitor& visitor) {
  MinimaColumns columns;
  visitor.Matrix("minimum_points", columns.points);
  visitor.Vector("minimum_chi2", columns.chi2);
  visitor.Matrix("minimum_counts", columns.counts);
  visitor.Text("minimum_statuses", columns.statuses);
  const Eigen::Index m = columns.points.rows();
  std::vector<std::string> statuses;
  if (m > 0) {
    size_t begin = 0;
    while (true) {
      const size_t end = columns.statuses.find('\n', begin);
      statuses.push_back(columns.statuses.substr(begin, end - begin));
      if (end == std::string::npos) break;
      begin = end + 1;
    }
  }
  if (columns.chi2.size() != m || columns.counts.rows() != m || columns.counts.cols() != 3 ||
      static_cast<Eigen::Index>(statuses.size()) != m) {
    throw std::runtime_error(
        "/global_search: minimum_points, minimum_chi2, minimum_counts and "
        "minimum_statuses disagree in length");
  }
  minima.assign(static_cast<size_t>(m), GlobalMinimum{});
  for (Eigen::Index i = 0; i < m; ++i) {
    GlobalMinimum& minimum = minima[static_cast<size_t>(i)];
    minimum.reduced = columns.points.row(i).transpose();
    minimum.chi2 = columns.chi2[i];
    minimum.start = static_cast<int>(columns.counts(i, 0));
    minimum.iterations = static_cast<int>(columns.counts(i, 1));
    minimum.passes = static_cast<int64_t>(columns.counts(i, 2));
    minimum.status = std::move(statuses[static_cast<size_t>(i)]);
  }
}

// The profile points as columns (parameter indices as exact doubles): what the file stores.
struct ProfileColumns {
  std::vector<double> parameters;  // [K]
  std::vector<double> values;      // [K]
  std::vector<double> chi2;        // [K]
};

// Writing and hashing: the points to columns.
template <typename Visitor>
void VisitProfilePoints(const std::vector<ProfilePointRecord>& points, Visitor& visitor) {
  ProfileColumns columns;
  for (const ProfilePointRecord& point : points) {
    columns.parameters.push_back(static_cast<double>(point.parameter));
    columns.values.push_back(point.value);
    columns.chi2.push_back(point.chi2);
  }
  visitor.Vector("parameters", columns.parameters);
  visitor.Vector("values", columns.values);
  visitor.Vector("chi2", columns.chi2);
}

// Reading: the columns back to points, checking their lengths and the indices.
template <typename Visitor>
void VisitProfilePoints(std::vector<ProfilePointRecord>& points, Visitor& visitor) {
  ProfileColumns columns;
  visitor.Vector("parameters", columns.parameters);
  visitor.Vector("values", columns.values);
  visitor.Vector("chi2", columns.chi2);
  if (columns.values.size() != columns.parameters.size() ||
      columns.chi2.size() != columns.parameters.size()) {
    throw std::runtime_error("/profile_intervals: parameters, values and chi2 disagree in length");
  }
  points.assign(columns.parameters.size(), ProfilePointRecord{});
  for (size_t k = 0; k < points.size(); ++k) {
    const double index = columns.parameters[k];
    if (!(index >= 0.0 && index < 1024.0) ||
        index != static_cast<double>(static_cast<int>(index))) {
      throw std::runtime_error("/profile_intervals: parameter index " + std::to_string(index) +
                               " is not a parameter's");
    }
    points[k] = {static_cast<int>(index), columns.values[k], columns.chi2[k]};
  }
}

// /lm/solver as text: "lm" (the LM core) or "ceres" (the Ceres standard fit), the names
// optimization.nlsq.solver takes (docs/checkpoints.md, Format (format_version 4)); anything else
// is a malformed file. The text, not the enum's value, is the format: it enters the content
// checksum.
constexpr std::string_view kLmCoreSolverText = "lm";
constexpr std::string_view kCeresSolverText = "ceres";

template <typename Visitor>
void VisitSolver(const StateSolver& solver, Visitor& visitor) {
  visitor.Text("solver",
               std::string(solver == StateSolver::kCeres ? kCeresSolverText : kLmCoreSolverText));
}
template <typename Visitor>
void VisitSolver(StateSolver& solver, Visitor& visitor) {
  std::string text;
  visitor.Text("solver", text);
  if (text == kLmCoreSolverText) {
    solver = StateSolver::kLmCore;
  } else if (text == kCeresSolverText) {
    solver = StateSolver::kCeres;
  } else {
    throw std::runtime_error("/lm/solver = '" + text + "' is neither lm nor ceres");
  }
}

// Calls `visitor` for every stored field of `checkpoint` in the canonical order of the content
// checksum. CheckpointType is `const Checkpoint` (writing, hashing) or `Checkpoint` (reading). One
// list for the three, so no field can be written without being read back and hashed.
// version: the file's format_version (FormatVersionOf when writing and hashing); 5 adds
// /profile_intervals.
template <typename CheckpointType, typename Visitor>
void VisitCheckpointFields(CheckpointType& checkpoint, int64_t version, Visitor& visitor) {
  visitor.Group("/");
  visitor.Integer("global_batch", checkpoint.global_batch);
  visitor.Text("config_sha256", checkpoint.config_sha256);
  visitor.Text("data_fingerprint", checkpoint.data_fingerprint);
  visitor.Text("engine_version", checkpoint.engine_version);
  visitor.Text("timestamp_utc", checkpoint.timestamp_utc);

  auto& lm = checkpoint.lm;
  visitor.Group("/lm");
  VisitSolver(lm.solver, visitor);
  visitor.Vector("theta", lm.theta);
  visitor.Matrix("jtj", lm.jtj);
  visitor.Vector("jtr", lm.jtr);
  visitor.Real("chi2", lm.chi2);
  visitor.Integer("num_points", lm.num_points);
  visitor.Real("damping_mu", lm.damping_mu);
  visitor.Real("damping_nu", lm.damping_nu);
  visitor.Real("trust_region_radius", lm.trust_region_radius);
  visitor.Integer("consecutive_rejections", lm.consecutive_rejections);
  visitor.Integer("iterations", lm.iterations);
  visitor.Integer("accepted_steps", lm.accepted_steps);
  visitor.Integer("rejected_steps", lm.rejected_steps);
  visitor.Integer("passes", lm.passes);
  visitor.Integer("cost_passes", lm.cost_passes);
  visitor.Real("initial_chi2", lm.initial_chi2);
  visitor.Vector("chi2_history", lm.chi2_history);

  if (visitor.OptionalGroup("/pass", checkpoint.pass)) {
    auto& pass = *checkpoint.pass;
    visitor.Vector("theta", pass.theta);
    visitor.Flag("full_pass", pass.full_pass);
    visitor.Integer("next_batch", pass.next_batch);
    visitor.Matrix("jtj", pass.jtj);
    visitor.Vector("jtr", pass.jtr);
    visitor.Real("chi2", pass.chi2);
    visitor.Integer("finite_points", pass.finite_points);
  }

  auto& statistics = checkpoint.statistics;
  visitor.Group("/statistics");
  visitor.Integer("batches", statistics.batches);
  visitor.Integer("retries", statistics.retries);
  visitor.Integer("read_failures", statistics.read_failures);
  visitor.Integer("checkpoint_failures", statistics.checkpoint_failures);

  auto& trail = checkpoint.global_search;
  visitor.Group("/global_search");
  visitor.Vector("evaluations", trail.evaluations);
  visitor.Vector("projection_state", trail.projection_state);
  VisitMinima(trail.minima, visitor);

  if (version >= kProfileFormatVersion) {
    visitor.Group("/profile_intervals");
    VisitProfilePoints(checkpoint.profile_intervals.points, visitor);
  }
}

// The canonical serialisation hashed into content_sha256 (format_version 2):
//   "homodyne-checkpoint" u64(format_version), then for every field in VisitCheckpointFields order
//   a record  u64(length of NAME) NAME TAG PAYLOAD  where NAME is the HDF5 path ("/lm/theta",
//   "/global_batch") and TAG one byte:
//     'i' integer  PAYLOAD int64
//     'r' real     PAYLOAD the 8 bytes of the IEEE double
//     'f' flag     PAYLOAD one byte 0 or 1
//     't' text     PAYLOAD u64(length) bytes
//     'v' vector   PAYLOAD u64(n) n doubles
//     'm' matrix   PAYLOAD u64(rows) u64(cols) rows*cols doubles, row-major
//     'g' optional group  PAYLOAD one byte: 1 present (its fields follow), 0 absent
// All integers and doubles little endian. Lengths make the encoding unambiguous.
class CanonicalSerializer {
 public:
  explicit CanonicalSerializer(int64_t version) {
    bytes_ += "homodyne-checkpoint";
    AppendU64(static_cast<uint64_t>(version));
  }

  void Group(const char* path) { group_ = std::string_view(path) == "/" ? "" : path; }
  template <typename T>
  void Integer(const char* name, const T& value) {
    Record(name, 'i');
    AppendU64(static_cast<uint64_t>(static_cast<int64_t>(value)));
  }
  void Real(const char* name, double value) {
    Record(name, 'r');
    AppendDouble(value);
  }
  void Flag(const char* name, bool value) {
    Record(name, 'f');
    bytes_.push_back(value ? '\1' : '\0');
  }
  void Text(const char* name, const std::string& value) {
    Record(name, 't');
    AppendU64(value.size());
    bytes_ += value;
  }
  void Vector(const char* name, const Eigen::VectorXd& value) {
    Doubles(name, value.data(), static_cast<size_t>(value.size()));
  }
  void Vector(const char* name, const std::vector<double>& value) {
    Doubles(name, value.data(), value.size());
  }
  void Matrix(const char* name, const Eigen::MatrixXd& value) {
    Record(name, 'm');
    AppendU64(static_cast<uint64_t>(value.rows()));
    AppendU64(static_cast<uint64_t>(value.cols()));
    for (Eigen::Index i = 0; i < value.rows(); ++i) {
      for (Eigen::Index j = 0; j < value.cols(); ++j) AppendDouble(value(i, j));
    }
  }
  bool OptionalGroup(const char* path, const std::optional<PassState>& pass) {
    RecordNamed(path, 'g');
    bytes_.push_back(pass.has_value() ? '\1' : '\0');
    group_ = path;
    return pass.has_value();
  }

  const std::string& bytes() const { return bytes_; }

 private:
  // A field `name` of the current group.
  void Record(const char* name, char tag) { RecordNamed(group_ + "/" + name, tag); }
  void RecordNamed(const std::string& full_name, char tag) {
    AppendU64(full_name.size());
    bytes_ += full_name;
    bytes_.push_back(tag);
  }
  void Doubles(const char* name, const double* values, size_t count) {
    Record(name, 'v');
    AppendU64(count);
    for (size_t k = 0; k < count; ++k) AppendDouble(values[k]);
  }
  void AppendU64(uint64_t value) {
    for (int k = 0; k < 8; ++k) bytes_.push_back(static_cast<char>((value >> (8 * k)) & 0xff));
  }
  void AppendDouble(double value) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    AppendU64(bits);
  }

  std::string bytes_;
  std::string group_;
};

// ---------------------------------------------------------------------------------------------
// HDF5 writing.

// Collects the memory image of a core-driver file when HDF5 closes it (file image callbacks): the
// image is complete and consistent only then (H5Fget_file_image on the open file gives an image
// whose metadata checksums fail with the 1.10 format, HDF5 1.10.8).
struct ImageCapture {
  size_t allocated = 0;     // bytes of the driver's buffer (a multiple of its growth step)
  std::vector<char> bytes;  // the buffer as it was when the file was closed
};

void* ImageMalloc(size_t size, H5FD_file_image_op_t /*operation*/, void* capture) {
  static_cast<ImageCapture*>(capture)->allocated = size;
  return std::malloc(size);
}
void* ImageMemcpy(void* destination, const void* source, size_t size,
                  H5FD_file_image_op_t /*operation*/, void* /*capture*/) {
  return std::memcpy(destination, source, size);
}
void* ImageRealloc(void* buffer, size_t size, H5FD_file_image_op_t /*operation*/, void* capture) {
  void* grown = std::realloc(buffer, size);
  if (grown != nullptr) static_cast<ImageCapture*>(capture)->allocated = size;
  return grown;
}
herr_t ImageFree(void* buffer, H5FD_file_image_op_t operation, void* capture) {
  herr_t status = 0;
  if (operation == H5FD_FILE_IMAGE_OP_FILE_CLOSE && buffer != nullptr) {
    auto* image = static_cast<ImageCapture*>(capture);
    try {
      const char* begin = static_cast<const char*>(buffer);
      image->bytes.assign(begin, begin + image->allocated);
    } catch (const std::bad_alloc&) {  // no exception may cross HDF5's C frames
      status = -1;
    }
  }
  std::free(buffer);
  return status;
}
// The capture outlives the file, so property list copies share it.
void* ShareCapture(void* capture) { return capture; }
herr_t KeepCapture(void* /*capture*/) { return 0; }

// File access for building a file in memory (core driver, no backing store, the image handed to
// `capture` on close) in the 1.10 format (checksummed metadata, single-chunk indexes without a
// B-tree). HDF5 itself never writes a checkpoint to disk: in HDF5 1.10.8 a failed write (full
// disk, quota) leaves its file object half closed, and the library's exit handler then crashes
// the process. Save writes the image with write(2), whose errors are plain errno values.
Hid ImageFileAccess(ImageCapture* capture) {
  constexpr size_t kGrowthBytes = size_t{1} << 16;  // the in-memory image grows in 64 KiB steps
  H5FD_file_image_callbacks_t callbacks = {ImageMalloc,  ImageMemcpy, ImageRealloc, ImageFree,
                                           ShareCapture, KeepCapture, capture};
  Hid access = io_internal::PlistHid(H5Pcreate(H5P_FILE_ACCESS));
  if (!access.valid() || H5Pset_fapl_core(access.get(), kGrowthBytes, false) < 0 ||
      H5Pset_file_image_callbacks(access.get(), &callbacks) < 0 ||
      H5Pset_meta_block_size(access.get(), 0) < 0 ||
      H5Pset_small_data_block_size(access.get(), 0) < 0 ||
      H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
    throw std::runtime_error("cannot set up HDF5 file access: " + Hdf5Reason());
  }
  return access;
}

// The end of the file in a captured image: the end-of-file address of its version 2/3 superblock
// (signature, version, sizes of offsets and lengths, flags, base, extension and end-of-file
// addresses: HDF5 file format specification, section II.A), so the file is written without the
// unused tail of the driver's buffer. The whole buffer if the superblock is not as expected
// (HDF5 accepts files longer than their end-of-file address).
size_t ImageFileSize(const std::vector<char>& image) {
  constexpr std::string_view kSignature("\x89HDF\r\n\x1a\n", 8);
  constexpr size_t kEndOfFileOffset = 28;
  if (image.size() < kEndOfFileOffset + 8 ||
      std::string_view(image.data(), kSignature.size()) != kSignature ||
      (image[8] != 2 && image[8] != 3) || image[9] != 8) {
    return image.size();
  }
  uint64_t end = 0;
  for (int k = 7; k >= 0; --k) {
    end = (end << 8) | static_cast<unsigned char>(image[kEndOfFileOffset + static_cast<size_t>(k)]);
  }
  return end > 0 && end <= image.size() ? static_cast<size_t>(end) : image.size();
}

// Creation properties of the root group (a file creation list) or of a group: attributes stay in
// the object header (compact storage, covered by its metadata checksum) however many there are,
// instead of moving to a fractal heap at 9, whose unused bytes no checksum covers.
Hid CompactAttributeCreation(hid_t property_class) {
  constexpr unsigned kMaxCompactAttributes = 1000;  // well above the 15 of /lm
  Hid creation = io_internal::PlistHid(H5Pcreate(property_class));
  if (!creation.valid() ||
      H5Pset_attr_phase_change(creation.get(), kMaxCompactAttributes, kMaxCompactAttributes) < 0) {
    throw std::runtime_error("cannot set up HDF5 object creation: " + Hdf5Reason());
  }
  return creation;
}

// File access for reading a checkpoint file: no HDF5 file locks (finished files are never
// modified, and locks fail on some parallel file systems).
Hid ReadFileAccess() {
  Hid access = io_internal::PlistHid(H5Pcreate(H5P_FILE_ACCESS));
  if (!access.valid() || H5Pset_file_locking(access.get(), false, true) < 0) {
    throw std::runtime_error("cannot set up HDF5 file access: " + Hdf5Reason());
  }
  return access;
}

// Writes the fields into an open file (the visitor of VisitCheckpointFields). Throws
// std::runtime_error with the HDF5 or OS reason.
class Hdf5FieldWriter {
 public:
  Hdf5FieldWriter(hid_t file, bool compression) : file_(file), compression_(compression) {}

  void Group(const char* path) {
    // Into a local first: closing the previous group would clear the HDF5 error stack.
    Hid group = io_internal::GroupHid(
        std::string_view(path) == "/"
            ? H5Gopen2(file_, "/", H5P_DEFAULT)
            : H5Gcreate2(file_, path, H5P_DEFAULT, CompactAttributeCreation(H5P_GROUP_CREATE).get(),
                         H5P_DEFAULT));
    if (!group.valid()) {
      throw std::runtime_error(std::string("cannot create group ") + path + ": " + Hdf5Reason());
    }
    group_ = std::move(group);
  }
  template <typename T>
  void Integer(const char* name, const T& value) {
    io_internal::WriteAttribute(group_.get(), name, static_cast<int64_t>(value));
  }
  void Real(const char* name, double value) {
    io_internal::WriteAttribute(group_.get(), name, value);
  }
  void Flag(const char* name, bool value) {
    io_internal::WriteAttribute(group_.get(), name, int64_t{value ? 1 : 0});
  }
  void Text(const char* name, const std::string& value) {
    io_internal::WriteAttribute(group_.get(), name, value);
  }
  void Vector(const char* name, const Eigen::VectorXd& value) {
    WriteDataset(name, {static_cast<hsize_t>(value.size())}, value.data());
  }
  void Vector(const char* name, const std::vector<double>& value) {
    WriteDataset(name, {value.size()}, value.data());
  }
  void Matrix(const char* name, const Eigen::MatrixXd& value) {
    const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row_major = value;
    WriteDataset(name, {static_cast<hsize_t>(value.rows()), static_cast<hsize_t>(value.cols())},
                 row_major.data());
  }
  bool OptionalGroup(const char* path, const std::optional<PassState>& pass) {
    if (pass.has_value()) Group(path);
    return pass.has_value();
  }

 private:
  // A float64 dataset of shape `dims` holding `values` (row-major); chunked and deflated when
  // compression is on and it is not empty.
  void WriteDataset(const char* name, const std::vector<hsize_t>& dims, const double* values) {
    hsize_t count = 1;
    for (hsize_t d : dims) count *= d;
    Hid creation = io_internal::PlistHid(H5Pcreate(H5P_DATASET_CREATE));
    bool ok = creation.valid();
    if (ok && compression_ && count > 0) {
      std::vector<hsize_t> chunk = dims;
      if (dims.size() == 1) {
        chunk[0] = std::min(dims[0], kMaxChunkElements);
      } else {  // whole rows, at most kMaxChunkElements in a chunk
        chunk[0] = std::clamp<hsize_t>(kMaxChunkElements / dims[1], 1, dims[0]);
      }
      ok = H5Pset_chunk(creation.get(), static_cast<int>(chunk.size()), chunk.data()) >= 0 &&
           H5Pset_shuffle(creation.get()) >= 0 &&
           H5Pset_deflate(creation.get(), kDeflateLevel) >= 0;
    }
    Hid space = io_internal::SpaceHid(
        ok ? H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr) : -1);
    Hid dataset = io_internal::DatasetHid(
        space.valid() ? H5Dcreate2(group_.get(), name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT,
                                   creation.get(), H5P_DEFAULT)
                      : -1);
    if (!dataset.valid() ||
        (count > 0 &&
         H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0) ||
        dataset.Close() < 0) {
      throw std::runtime_error(std::string("cannot write dataset ") + name + ": " + Hdf5Reason());
    }
  }

  hid_t file_;
  bool compression_;
  Hid group_;
};

// The bytes of a complete checkpoint file holding `checkpoint`, built in memory. Throws
// std::runtime_error with the HDF5 reason.

// ---------------------------------------------------------------------------------------------
// HDF5 reading. Every failure throws std::runtime_error with what is wrong ("missing attribute
// /lm/chi2", "/lm/jtj is not float64", ...), which LoadNewestValid turns into a warning.

std::string ObjectName(const std::string& group, const char* name) {
  return (group == "/" ? "" : group) + "/" + name;
}

Hid OpenAttribute(hid_t object, const std::string& group, const char* name) {
  if (H5Aexists(object, name) <= 0) {
    io_internal::Hdf5ErrorText();  // clear the stack
    throw std::runtime_error("missing attribute " + ObjectName(group, name));
  }
  Hid attribute = io_internal::AttributeHid(H5Aopen(object, name, H5P_DEFAULT));
  if (!attribute.valid()) {
    throw std::runtime_error("cannot open attribute " + ObjectName(group, name) + ": " +
                             Hdf5Reason());
  }
  return attribute;
}

// Throws unless the attribute or dataset type is of `type_class` (and `size` bytes when > 0).
void CheckType(hid_t type, H5T_class_t type_class, size_t size, const std::string& what,
               const char* expected) {
  if (type < 0 || H5Tget_class(type) != type_class || (size > 0 && H5Tget_size(type) != size)) {
    io_internal::Hdf5ErrorText();
    throw std::runtime_error(what + " is not " + expected);
  }
}

int64_t ReadInt64Attribute(hid_t object, const std::string& group, const char* name) {
  Hid attribute = OpenAttribute(object, group, name);
  Hid type = io_internal::TypeHid(H5Aget_type(attribute.get()));
  CheckType(type.get(), H5T_INTEGER, 0, ObjectName(group, name), "an integer");
  int64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
    throw std::runtime_error("cannot read " + ObjectName(group, name) + ": " + Hdf5Reason());
  }
  return value;
}

double ReadDoubleAttribute(hid_t object, const std::string& group, const char* name) {
  Hid attribute = OpenAttribute(object, group, name);
  Hid type = io_internal::TypeHid(H5Aget_type(attribute.get()));
  CheckType(type.get(), H5T_FLOAT, sizeof(double), ObjectName(group, name), "float64");
  double value = 0.0;
  if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    throw std::runtime_error("cannot read " + ObjectName(group, name) + ": " + Hdf5Reason());
  }
  return value;
}

std::string ReadStringAttribute(hid_t object, const std::string& group, const char* name) {
  Hid attribute = OpenAttribute(object, group, name);
  Hid type = io_internal::TypeHid(H5Aget_type(attribute.get()));
  CheckType(type.get(), H5T_STRING, 0, ObjectName(group, name), "a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    char* text = nullptr;
    if (H5Aread(attribute.get(), type.get(), &text) < 0 || text == nullptr) {
      throw std::runtime_error("cannot read " + ObjectName(group, name) + ": " + Hdf5Reason());
    }
    std::string value(text);
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(type.get()), '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0) {
    throw std::runtime_error("cannot read " + ObjectName(group, name) + ": " + Hdf5Reason());
  }
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

// A float64 dataset of rank `rank`: its dims and values (row-major).
std::pair<std::vector<hsize_t>, std::vector<double>> ReadDoubleDataset(hid_t group_id,
                                                                       const std::string& group,
                                                                       const char* name, int rank) {
  const std::string what = ObjectName(group, name);
  if (H5Lexists(group_id, name, H5P_DEFAULT) <= 0) {
    io_internal::Hdf5ErrorText();
    throw std::runtime_error("missing dataset " + what);
  }
  Hid dataset = io_internal::DatasetHid(H5Dopen2(group_id, name, H5P_DEFAULT));
  if (!dataset.valid()) throw std::runtime_error("cannot open " + what + ": " + Hdf5Reason());
  Hid type = io_internal::TypeHid(H5Dget_type(dataset.get()));
  CheckType(type.get(), H5T_FLOAT, sizeof(double), what, "float64");
  const std::vector<hsize_t> dims = io_internal::DatasetDims(dataset.get());
  if (static_cast<int>(dims.size()) != rank) {
    throw std::runtime_error(what + " has rank " + std::to_string(dims.size()) + ", expected " +
                             std::to_string(rank));
  }
  hsize_t count = 1;
  for (hsize_t d : dims) {
    if (d > kMaxArrayElements || count * d > kMaxArrayElements) {
      throw std::runtime_error(what + " is implausibly large");
    }
    count *= d;
  }
  std::vector<double> values(count);
  if (count > 0 &&
      H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
    throw std::runtime_error("cannot read " + what + ": " + Hdf5Reason());
  }
  return {dims, std::move(values)};
}

// Reads the fields from an open file (the visitor of VisitCheckpointFields).
class Hdf5FieldReader {
 public:
  explicit Hdf5FieldReader(hid_t file) : file_(file) {}

  void Group(const char* path) {
    group_path_ = path;
    if (group_path_ != "/" && H5Lexists(file_, path, H5P_DEFAULT) <= 0) {
      io_internal::Hdf5ErrorText();
      throw std::runtime_error(std::string("missing group ") + path);
    }
    // Into a local first: closing the previous group would clear the HDF5 error stack.
    Hid group = io_internal::GroupHid(H5Gopen2(file_, path, H5P_DEFAULT));
    if (!group.valid()) {
      throw std::runtime_error(std::string("cannot open group ") + path + ": " + Hdf5Reason());
    }
    group_ = std::move(group);
  }
  template <typename T>
  void Integer(const char* name, T& value) {
    const int64_t stored = ReadInt64Attribute(group_.get(), group_path_, name);
    if (stored < std::numeric_limits<T>::min() || stored > std::numeric_limits<T>::max()) {
      throw std::runtime_error(ObjectName(group_path_, name) + " = " + std::to_string(stored) +
                               " is out of range");
    }
    value = static_cast<T>(stored);
  }
  void Real(const char* name, double& value) {
    value = ReadDoubleAttribute(group_.get(), group_path_, name);
  }
  void Flag(const char* name, bool& value) {
    const int64_t stored = ReadInt64Attribute(group_.get(), group_path_, name);
    if (stored != 0 && stored != 1) {
      throw std::runtime_error(ObjectName(group_path_, name) + " = " + std::to_string(stored) +
                               " is not 0 or 1");
    }
    value = stored == 1;
  }
  void Text(const char* name, std::string& value) {
    value = ReadStringAttribute(group_.get(), group_path_, name);
  }
  void Vector(const char* name, Eigen::VectorXd& value) {
    auto [dims, values] = ReadDoubleDataset(group_.get(), group_path_, name, 1);
    value = Eigen::Map<const Eigen::VectorXd>(values.data(), static_cast<Eigen::Index>(dims[0]));
  }
  void Vector(const char* name, std::vector<double>& value) {
    value = ReadDoubleDataset(group_.get(), group_path_, name, 1).second;
  }
  void Matrix(const char* name, Eigen::MatrixXd& value) {
    auto [dims, values] = ReadDoubleDataset(group_.get(), group_path_, name, 2);
    using RowMajorMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    value = Eigen::Map<const RowMajorMatrix>(values.data(), static_cast<Eigen::Index>(dims[0]),
                                             static_cast<Eigen::Index>(dims[1]));
  }
  bool OptionalGroup(const char* path, std::optional<PassState>& pass) {
    if (H5Lexists(file_, path, H5P_DEFAULT) <= 0) {
      io_internal::Hdf5ErrorText();
      pass.reset();
      return false;
    }
    pass.emplace();
    Group(path);
    return true;
  }

 private:
  hid_t file_;
  std::string group_path_;
  Hid group_;
};

}  // namespace

int64_t FormatVersionOf(const Checkpoint& checkpoint) {
  return checkpoint.profile_intervals.empty() ? kFormatVersion : kProfileFormatVersion;
}

std::string ContentSha256(const Checkpoint& checkpoint) {
  const int64_t version = FormatVersionOf(checkpoint);
  CanonicalSerializer serializer(version);
  VisitCheckpointFields(checkpoint, version, serializer);
  return Sha256Hex(serializer.bytes());
}

std::vector<char> BuildCheckpointImage(const Checkpoint& checkpoint, bool compression) {
  // The core driver still registers files by name: a unique one per image.
  static std::atomic<uint64_t> images{0};
  const std::string name = "homodyne_checkpoint_image_" + std::to_string(::getpid()) + "_" +
                           std::to_string(images.fetch_add(1)) + ".h5";
  ImageCapture capture;
  {
    Hid access = ImageFileAccess(&capture);
    Hid file = io_internal::FileHid(H5Fcreate(name.c_str(), H5F_ACC_TRUNC,
                                              CompactAttributeCreation(H5P_FILE_CREATE).get(),
                                              access.get()));
    if (!file.valid()) throw std::runtime_error("cannot create the HDF5 image: " + Hdf5Reason());
    const int64_t version = FormatVersionOf(checkpoint);
    io_internal::WriteAttribute(file.get(), "format_version", version);
    {
      Hdf5FieldWriter writer(file.get(), compression);
      VisitCheckpointFields(checkpoint, version, writer);
    }
    io_internal::WriteAttribute(file.get(), "content_sha256", ContentSha256(checkpoint));
    if (file.Close() < 0 || capture.bytes.empty()) {
      throw std::runtime_error("cannot close the HDF5 image: " + Hdf5Reason());
    }
  }
  capture.bytes.resize(ImageFileSize(capture.bytes));
  return std::move(capture.bytes);
}

StoredCheckpoint ReadCheckpointFile(const std::string& path) {
  Hid access = ReadFileAccess();
  Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()));
  if (!file.valid()) throw std::runtime_error(Hdf5Reason());
  const int64_t version = ReadInt64Attribute(file.get(), "/", "format_version");
  if (version != kFormatVersion && version != kProfileFormatVersion) {
    throw std::runtime_error("format_version " + std::to_string(version) + ", this build reads " +
                             std::to_string(kFormatVersion) + " and " +
                             std::to_string(kProfileFormatVersion));
  }
  StoredCheckpoint stored;
  Hdf5FieldReader reader(file.get());
  VisitCheckpointFields(stored.checkpoint, version, reader);
  if (version == kProfileFormatVersion && stored.checkpoint.profile_intervals.empty()) {
    // Never written so (FormatVersionOf): the checksum, hashed as version 4, would not match.
    throw std::runtime_error("format_version 5 without profile points");
  }
  stored.content_sha256 = ReadStringAttribute(file.get(), "/", "content_sha256");
  return stored;
}

// The reason of the last HDF5 failure: the OS error text when HDF5 reports one (e.g. "No space
// left on device"), else HDF5's own innermost descriptions. Clears the HDF5 error stack.
std::string Hdf5Reason() {
  const std::string text = io_internal::Hdf5ErrorText();
  constexpr std::string_view kMarker = "error message = '";
  if (const size_t start = text.find(kMarker); start != std::string::npos) {
    const size_t begin = start + kMarker.size();
    const size_t end = text.find('\'', begin);
    if (end != std::string::npos) return text.substr(begin, end - begin);
  }
  return text.empty() ? std::string("unknown HDF5 error") : text;
}

}  // namespace homodyne::checkpoint_internal
