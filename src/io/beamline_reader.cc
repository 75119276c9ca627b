// Reader of beamline two-time correlation files (docs/design.md section 8, Input).
//
// InspectDataset follows the reference loader: layout detection, APS-U and APS-old selection,
// frame slicing, phi normalisation and phi_filtering, as docs/design.md section 8 describes them.
// Where the reference silently truncates or guesses, this reader stops with a DataError whose
// message starts with the file path (a count mismatch between bins and matrices, a target q far
// from every ring). Matrix values are only read by the BatchSource: as hyperslabs of row ranges
// through HDF5, or, for uncompressed float32, directly with preadv (io/direct_reads.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <omp.h>

#include "config/path_checks.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/chunk_decoder.h"
#include "io/dataset_validation.h"
#include "io/direct_reads.h"
#include "io/hdf5_util.h"
#include "io/read_paths.h"
#include "model/diagonal_correction.h"

namespace homodyne {

using io_internal::DatasetHid;
using io_internal::Hdf5ErrorText;
using io_internal::Hid;
using io_internal::PlistHid;
using io_internal::SpaceHid;
using io_internal::TypeHid;

std::string_view ToString(FileLayout layout) {
  return layout == FileLayout::kApsU ? "aps_u" : "aps_old";
}

double NormalizePhiDegrees(double phi_degrees) {
  // A non-finite angle stays as it is, so that the message refusing it shows it (fmod made an inf
  // a NaN).
  if (!std::isfinite(phi_degrees)) return phi_degrees;
  // Python's `phi % 360` (result in [0, 360)), then (180, 360) -> (-180, 0), as the reference.
  double wrapped = std::fmod(phi_degrees, 360.0);
  if (wrapped < 0.0) wrapped += 360.0;
  if (wrapped >= 360.0) wrapped -= 360.0;
  if (wrapped > 180.0) wrapped -= 360.0;
  return wrapped;
}

bool PhiInRange(double phi_degrees, const PhiRange& range) {
  // A range spanning a full turn before normalisation (e.g. [-180, 180]) keeps every angle; the
  // reference would normalise it to [180, 180]. Other ranges follow the reference exactly
  // (docs/design.md section 8).
  if (range.max_angle_degrees - range.min_angle_degrees >= 360.0) return true;
  const double phi = NormalizePhiDegrees(phi_degrees);
  const double low = NormalizePhiDegrees(range.min_angle_degrees);
  const double high = NormalizePhiDegrees(range.max_angle_degrees);
  if (low <= high) return low <= phi && phi <= high;
  return phi >= low || phi <= high;  // wrapped range
}

int64_t RingInfo::num_fit_points() const {
  const int64_t n = num_raw_frames - 1;
  return static_cast<int64_t>(phi_degrees.size()) * n * (n - 1);
}

int64_t DatasetInfo::num_fit_points() const {
  const int64_t n = num_times();
  return static_cast<int64_t>(num_angles()) * n * (n - 1);
}

std::vector<double> DatasetInfo::FittedTimes() const {
  std::vector<double> times(static_cast<size_t>(std::max(num_times(), 0)));
  for (size_t i = 0; i < times.size(); ++i) times[i] = static_cast<double>(i + 1) * dt_seconds;
  return times;
}

namespace {

constexpr const char* kApsUQList = "/xpcs/qmap/dynamic_v_list_dim0";
constexpr const char* kApsUPhiList = "/xpcs/qmap/dynamic_v_list_dim1";
constexpr const char* kApsUBins = "/xpcs/twotime/processed_bins";
constexpr const char* kApsUMatrices = "/xpcs/twotime/correlation_map";
constexpr const char* kApsOldQList = "/xpcs/dqlist";
constexpr const char* kApsOldPhiList = "/xpcs/dphilist";
constexpr const char* kApsOldMatrices = "/exchange/C2T_all";

// Exact-match tolerance of APS-U q rings (docs/design.md section 8).
constexpr double kApsUSameQ = 1e-10;
// Temporary buffer of one hyperslab read of rows (ReadCorrectedMatrix).
constexpr size_t kReadBufferBytes = size_t{16} << 20;
// The row blocks of the upper-triangle reads (HdfBatchSource::ReadRows): at most this much for
// all angles together (one block per angle), whatever the data size.
constexpr size_t kBlockCacheBytes = size_t{16} << 20;
// A block's target size per angle: whole chunk rows up to this (at least one chunk row when it
// fits the cache's share of the angle).
constexpr size_t kBlockTargetBytes = size_t{1} << 20;

std::string FormatDouble(double value) {
  std::ostringstream text;
  text.precision(10);
  text << value;
  return text.str();
}

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

// Every value of a q or phi list must be finite: the selection sorts by the distance to the target
// q and normalises phi, neither of which means anything for NaN or inf.
void RequireFinite(const std::string& path, const char* list_path,
                   const std::vector<double>& values) {
  for (size_t k = 0; k < values.size(); ++k) {
    if (!std::isfinite(values[k])) {
      Fail(path, std::string(list_path) + "[" + std::to_string(k) + "] = " +
                     (std::isnan(values[k]) ? "nan" : values[k] > 0 ? "inf" : "-inf") +
                     ": q and phi values must be finite");
    }
  }
}

// One matrix of the file with its bin's q and phi (phi as stored).
struct Candidate {
  double q = 0.0;
  double phi_degrees = 0.0;
  std::string dataset_path;
};

std::vector<std::string> MemberNames(hid_t file, const std::string& file_path,
                                     const std::string& group_path) {
  Hid group = io_internal::GroupHid(H5Gopen2(file, group_path.c_str(), H5P_DEFAULT));
  if (!group.valid()) Fail(file_path, group_path + " is not a group (" + Hdf5ErrorText() + ")");
  try {
    return io_internal::GroupMemberNames(group.get());
  } catch (const std::runtime_error& error) {
    Fail(file_path, group_path + ": " + error.what());
  }
}

std::vector<double> ReadDoubles(hid_t file, const std::string& file_path,
                                const std::string& dataset_path) {
  try {
    return io_internal::ReadAllDoubles(file, dataset_path);
  } catch (const std::runtime_error& error) {
    Fail(file_path, error.what());
  }
}

std::string ListTopLevel(hid_t file) {
  std::vector<std::string> names;
  try {
    names = io_internal::GroupMemberNames(file);
  } catch (const std::runtime_error&) {
    return "(unreadable)";
  }
  if (names.empty()) return "(nothing)";
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "/" : ", /") + name;
  return text;
}

// APS-U (docs/design.md section 8): bins -> (q index, phi index) -> pairs matched by position with
// the alphabetically sorted correlation_map members.
std::vector<Candidate> ApsUCandidates(hid_t file, const std::string& path,
                                      std::vector<std::string>& warnings) {
  const std::vector<double> q_list = ReadDoubles(file, path, kApsUQList);
  if (!io_internal::PathExists(file, kApsUPhiList)) {
    Fail(path, std::string("APS-U layout without ") + kApsUPhiList);
  }
  if (!io_internal::PathExists(file, kApsUBins)) {
    Fail(path, std::string("APS-U layout without ") + kApsUBins);
  }
  const std::vector<double> phi_list = ReadDoubles(file, path, kApsUPhiList);
  RequireFinite(path, kApsUQList, q_list);
  RequireFinite(path, kApsUPhiList, phi_list);
  std::vector<int64_t> bins;
  try {
    bins = io_internal::ReadAllInt64(file, kApsUBins);
  } catch (const std::runtime_error& error) {
    Fail(path, error.what());
  }
  const std::vector<std::string> names = MemberNames(file, path, kApsUMatrices);
  if (q_list.empty() || phi_list.empty()) {
    Fail(path, std::string(kApsUQList) + " or " + kApsUPhiList + " is empty");
  }
  const int64_t n_q = static_cast<int64_t>(q_list.size());
  const int64_t n_phi = static_cast<int64_t>(phi_list.size());
  std::vector<Candidate> candidates;
  int invalid = 0;
  for (int64_t bin : bins) {
    const int64_t index = bin - 1;
    if (index < 0 || index / n_phi >= n_q) {
      ++invalid;
      continue;
    }
    candidates.push_back({q_list[static_cast<size_t>(index / n_phi)],
                          phi_list[static_cast<size_t>(index % n_phi)], ""});
  }
  if (invalid > 0) {
    warnings.push_back(path + ": skipped " + std::to_string(invalid) +
                       " processed bin(s) outside " + "the q/phi lists (" + std::to_string(n_q) +
                       " q x " + std::to_string(n_phi) + " phi)");
  }
  if (candidates.size() != names.size()) {
    Fail(path, "count mismatch: " + std::to_string(candidates.size()) + " valid bins in " +
                   kApsUBins + " but " + std::to_string(names.size()) + " matrices in " +
                   kApsUMatrices);
  }
  for (size_t k = 0; k < names.size(); ++k) {
    candidates[k].dataset_path = std::string(kApsUMatrices) + "/" + names[k];
  }
  return candidates;
}

// APS-old (docs/design.md section 8): (1, M) q and phi lists matched by position with the sorted
// C2T_all members.
std::vector<Candidate> ApsOldCandidates(hid_t file, const std::string& path) {
  const std::vector<double> q_list = ReadDoubles(file, path, kApsOldQList);
  const std::vector<double> phi_list = ReadDoubles(file, path, kApsOldPhiList);
  RequireFinite(path, kApsOldQList, q_list);
  RequireFinite(path, kApsOldPhiList, phi_list);
  const std::vector<std::string> names = MemberNames(file, path, kApsOldMatrices);
  if (q_list.size() != phi_list.size()) {
    Fail(path, "count mismatch: " + std::to_string(q_list.size()) + " values in " + kApsOldQList +
                   " but " + std::to_string(phi_list.size()) + " in " + kApsOldPhiList);
  }
  if (q_list.size() != names.size()) {
    Fail(path, "count mismatch: " + std::to_string(q_list.size()) + " bins in " + kApsOldQList +
                   " but " + std::to_string(names.size()) + " matrices in " + kApsOldMatrices);
  }
  std::vector<Candidate> candidates;
  for (size_t k = 0; k < names.size(); ++k) {
    candidates.push_back({q_list[k], phi_list[k], std::string(kApsOldMatrices) + "/" + names[k]});
  }
  return candidates;
}

// Index of the candidate whose q is closest to the target (first on ties). Throws if the closest
// ring is further than the tolerance from the target: "q not present".
size_t ClosestQ(const std::vector<Candidate>& candidates, const DataSelection& selection) {
  size_t best = 0;
  for (size_t k = 1; k < candidates.size(); ++k) {
    if (std::abs(candidates[k].q - selection.wavevector_q_target) <
        std::abs(candidates[best].q - selection.wavevector_q_target)) {
      best = k;
    }
  }
  const double target = selection.wavevector_q_target;
  const double distance = std::abs(candidates[best].q - target);
  if (!(distance <= selection.q_tolerance_fraction * std::abs(target))) {
    Fail(selection.file_path, "wavevector q = " + FormatDouble(target) +
                                  " 1/A is not present: the closest available q " + "is " +
                                  FormatDouble(candidates[best].q) + " 1/A (allowed distance " +
                                  FormatDouble(selection.q_tolerance_fraction) + " x q)");
  }
  return best;
}

std::vector<Candidate> SelectApsU(const std::vector<Candidate>& candidates,
                                  const DataSelection& selection) {
  const double q_star = candidates[ClosestQ(candidates, selection)].q;
  std::vector<Candidate> kept;
  for (const Candidate& candidate : candidates) {
    if (std::abs(candidate.q - q_star) < kApsUSameQ) kept.push_back(candidate);
  }
  return kept;
}

std::vector<Candidate> SelectApsOld(const std::vector<Candidate>& candidates,
                                    const DataSelection& selection,
                                    std::vector<std::string>& warnings) {
  const double q_star = candidates[ClosestQ(candidates, selection)].q;
  std::vector<size_t> indices;
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (std::abs(candidates[k].q - q_star) <= selection.q_tolerance_fraction * q_star) {
      indices.push_back(k);
    }
  }
  if (indices.size() < 5) {
    // Fewer than 5 bins in the window: the 10 (or all, if fewer) bins closest in q, kept in file
    // order.
    indices.resize(candidates.size());
    for (size_t k = 0; k < indices.size(); ++k) indices[k] = k;
    std::stable_sort(indices.begin(), indices.end(), [&](size_t a, size_t b) {
      return std::abs(candidates[a].q - q_star) < std::abs(candidates[b].q - q_star);
    });
    indices.resize(std::min<size_t>(10, indices.size()));
    std::sort(indices.begin(), indices.end());
  }
  std::vector<Candidate> kept;
  bool mixed = false;
  for (size_t k : indices) {
    kept.push_back(candidates[k]);
    mixed = mixed || std::abs(candidates[k].q - kept.front().q) > kApsUSameQ;
  }
  if (mixed) {
    warnings.push_back(selection.file_path + ": the APS-old q window mixes several q rings; the " +
                       "model uses the first kept matrix's q (docs/design.md section 8)");
  }
  return kept;
}

constexpr const char* kQKey = "analyzer_parameters.scattering.wavevector_q";

bool InQRange(double q, const DataSelection& selection) {
  return !selection.data_q_range ||
         (selection.data_q_range->first <= q && q <= selection.data_q_range->second);
}

// The distinct ring q's of the file, ascending (a ring: the matrices of one q, kApsUSameQ).
std::vector<double> DistinctRings(const std::vector<Candidate>& candidates) {
  std::vector<double> rings;
  for (const Candidate& candidate : candidates) {
    const bool known = std::any_of(rings.begin(), rings.end(), [&](double q) {
      return std::abs(q - candidate.q) < kApsUSameQ;
    });
    if (!known) rings.push_back(candidate.q);
  }
  std::sort(rings.begin(), rings.end());
  return rings;
}

std::string ListOfRings(const std::vector<double>& rings) {
  std::string text;
  for (double q : rings) text += (text.empty() ? "" : ", ") + FormatDouble(q);
  return text;
}

// The file q's of the rings a multi-ring selection names (docs/configuration.md, Several q
// rings): `all` (ascending), or each listed target's closest ring within q_tolerance_fraction,
// in the list's order; then data_filtering.q_range.
std::vector<double> SelectedRingQs(const std::vector<Candidate>& candidates,
                                   const DataSelection& selection,
                                   std::vector<std::string>& warnings) {
  const std::string& path = selection.file_path;
  const std::vector<double> file_rings = DistinctRings(candidates);
  std::vector<double> rings;
  if (selection.all_q_rings) {
    rings = file_rings;
  } else {
    for (size_t i = 0; i < selection.wavevector_q_list.size(); ++i) {
      const double target = selection.wavevector_q_list[i];
      size_t best = 0;
      for (size_t k = 1; k < file_rings.size(); ++k) {
        if (std::abs(file_rings[k] - target) < std::abs(file_rings[best] - target)) best = k;
      }
      const std::string key = std::string(kQKey) + "[" + std::to_string(i) + "]";
      if (!(std::abs(file_rings[best] - target) <= selection.q_tolerance_fraction * target)) {
        Fail(path, key + ": wavevector q = " + FormatDouble(target) +
                       " 1/A is not present: the closest available q is " +
                       FormatDouble(file_rings[best]) + " 1/A (allowed distance " +
                       FormatDouble(selection.q_tolerance_fraction) + " x q; the file's rings: " +
                       ListOfRings(file_rings) + ")");
      }
      for (size_t j = 0; j < rings.size(); ++j) {
        if (std::abs(rings[j] - file_rings[best]) < kApsUSameQ) {
          Fail(path, key + " = " + FormatDouble(target) + " and " + kQKey + "[" +
                         std::to_string(j) + "] select the same ring, q = " +
                         FormatDouble(file_rings[best]) + " 1/A; list each ring once");
        }
      }
      rings.push_back(file_rings[best]);
    }
  }
  if (selection.data_q_range) {
    std::vector<double> in_range;
    for (double q : rings) {
      if (InQRange(q, selection)) in_range.push_back(q);
    }
    const std::string range = "[" + FormatDouble(selection.data_q_range->first) + ", " +
                              FormatDouble(selection.data_q_range->second) + "]";
    if (in_range.empty()) {
      if (!selection.data_filtering_fallback_on_empty) {
        Fail(path, "data_filtering.q_range = " + range + " keeps none of the rings " +
                       ListOfRings(rings) + " 1/A (data_filtering.fallback_on_empty = false)");
      }
      warnings.push_back(path + ": data_filtering.q_range = " + range + " keeps none of the rings " +
                         ListOfRings(rings) + " 1/A; using them all (fallback_on_empty, as the " +
                         "reference does)");
    } else {
      rings = std::move(in_range);
    }
  }
  return rings;
}

// The matrices of the rings, ring after ring in the rings' order, file order within a ring.
std::vector<Candidate> SelectRings(const std::vector<Candidate>& candidates,
                                   const std::vector<double>& rings) {
  std::vector<Candidate> kept;
  for (double q : rings) {
    for (const Candidate& candidate : candidates) {
      if (std::abs(candidate.q - q) < kApsUSameQ) kept.push_back(candidate);
    }
  }
  return kept;
}

// data_filtering (docs/configuration.md, Several q rings): the kept matrices whose q is in
// q_range (unless the rings were already chosen by it: rings_filtered) and whose phi is in
// phi_range; none: all of them (a warning) or, without fallback_on_empty, a DataError.
std::vector<Candidate> ApplyDataFiltering(std::vector<Candidate> kept,
                                          const DataSelection& selection, bool rings_filtered,
                                          std::vector<double>& filtered_out,
                                          std::vector<std::string>& warnings) {
  const bool q_range = selection.data_q_range && !rings_filtered;
  if (!q_range && !selection.data_phi_range) return kept;
  std::vector<Candidate> in_range;
  std::vector<double> out_of_range;
  for (const Candidate& candidate : kept) {
    const bool keep = (!q_range || InQRange(candidate.q, selection)) &&
                      (!selection.data_phi_range ||
                       PhiInRange(candidate.phi_degrees, *selection.data_phi_range));
    if (keep) {
      in_range.push_back(candidate);
    } else {
      out_of_range.push_back(NormalizePhiDegrees(candidate.phi_degrees));
    }
  }
  if (!in_range.empty()) {
    filtered_out.insert(filtered_out.end(), out_of_range.begin(), out_of_range.end());
    return in_range;
  }
  const std::string what = "data_filtering (q_range, phi_range) keeps none of the " +
                           std::to_string(kept.size()) + " selected matrices";
  if (!selection.data_filtering_fallback_on_empty) {
    Fail(selection.file_path, what + " (data_filtering.fallback_on_empty = false)");
  }
  warnings.push_back(selection.file_path + ": " + what +
                     "; using them all (fallback_on_empty, as the reference does)");
  return kept;
}

std::string TypeName(hid_t type) {
  if (H5Tget_class(type) == H5T_FLOAT) {
    if (H5Tget_size(type) == 4) return "float32";
    if (H5Tget_size(type) == 8) return "float64";
  }
  return "";
}

// "none", "gzip", "lzf" or "filter <id>"; throws when a filter cannot be decoded here.
std::string Compression(hid_t dataset, const std::string& file_path,
                        const std::string& dataset_path) {
  Hid create = PlistHid(H5Dget_create_plist(dataset));
  const int count = create.valid() ? H5Pget_nfilters(create.get()) : -1;
  if (count < 0) Fail(file_path, "cannot read the filters of " + dataset_path);
  std::string compression = "none";
  for (int k = 0; k < count; ++k) {
    unsigned flags = 0;
    size_t num_values = 0;
    char name[64] = {0};
    unsigned config = 0;
    const H5Z_filter_t id = H5Pget_filter2(create.get(), static_cast<unsigned>(k), &flags,
                                           &num_values, nullptr, sizeof(name), name, &config);
    if (id < 0) Fail(file_path, "cannot read the filters of " + dataset_path);
    if (H5Zfilter_avail(id) <= 0) {
      Fail(file_path, dataset_path + " uses HDF5 filter " + std::to_string(id) + " (" + name +
                          "), which this build cannot decode (supported: gzip, lzf)");
    }
    if (id == H5Z_FILTER_DEFLATE) {
      compression = "gzip";
    } else if (id == io_internal::kLzfFilterId) {
      compression = "lzf";
    } else if (id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32) {
      compression = "filter " + std::to_string(id);
    }
  }
  return compression;
}

// Reads `rows` x `cols` values at (row, col) of a 2-D dataset into `out` (row-major), converted
// to T by HDF5.
template <typename T>
void ReadRectangle(hid_t dataset, int64_t row, int64_t rows, int64_t col, int64_t cols, T* out) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  const hid_t memory_type = std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
  Hid file_space = SpaceHid(H5Dget_space(dataset));
  Hid memory_space = SpaceHid(H5Screate_simple(2, count, nullptr));
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out) < 0) {
    throw std::runtime_error(Hdf5ErrorText());
  }
  // Return HDF5's freed conversion buffers (one free list per block size, and every row range
  // has its own size) so memory stays constant over a whole pass.
  H5garbage_collect();
}

// Samples a few rows below the diagonal: true when most sampled lower-triangle values are
// non-zero, i.e. the matrix stores both triangles rather than the APS convention
// (docs/design.md section 8).
bool StoresBothTriangles(hid_t dataset, int frames) {
  int64_t sampled = 0;
  int64_t non_zero = 0;
  std::vector<double> row;
  for (int64_t r :
       {int64_t{frames} / 4, int64_t{frames} / 2, 3 * int64_t{frames} / 4, int64_t{frames} - 1}) {
    if (r < 1) continue;
    const int64_t width = std::min<int64_t>(r, 4096);  // the values just left of the diagonal
    row.resize(static_cast<size_t>(width));
    ReadRectangle(dataset, r, 1, r - width, width, row.data());
    for (double value : row) non_zero += (std::isfinite(value) && value != 0.0) ? 1 : 0;
    sampled += width;
  }
  return sampled > 0 && 2 * non_zero > sampled;
}

// A matrix holds its declared values only where the file stores them: HDF5 returns the fill
// value for chunks never written (an unfinished or damaged file, or one made to look huge). Real
// data never compress beyond what deflate (about 1032:1) or LZF (under 100:1) can reach, so a
// matrix stored in fewer than 1 / kMaxStorageRatio of its declared bytes is refused here, before
// a fit plans passes over values that are not there (docs/design.md section 8).
constexpr double kMaxStorageRatio = 2000.0;

void RequireStoredValues(hid_t dataset, const std::string& path, const std::string& dataset_path,
                         hsize_t frames, const std::string& type_name) {
  const double value_bytes = type_name == "float64" ? 8.0 : 4.0;
  const double declared = static_cast<double>(frames) * static_cast<double>(frames) * value_bytes;
  const double stored = static_cast<double>(H5Dget_storage_size(dataset));
  if (declared <= kMaxStorageRatio * stored) return;
  char sizes[160];
  std::snprintf(sizes, sizeof(sizes), "%.3g bytes", declared);
  Fail(path, "matrix " + dataset_path + " declares " + std::to_string(frames) + " x " +
                 std::to_string(frames) + " " + type_name + " values (" + sizes +
                 ") but the file stores " + std::to_string(static_cast<int64_t>(stored)) +
                 " bytes of it: most of the matrix was never written (HDF5 reads its fill value "
                 "there); an unfinished or damaged file?");
}

struct OpenedDataset {
  DatasetInfo info;
  Hid file;
};

OpenedDataset Inspect(const DataSelection& selection) {
  io_internal::InitializeHdf5();
  const std::string& path = selection.file_path;
  std::error_code error;
  if (path.empty()) Fail("(empty path)", "no data file given");
  // The system reads a path up to its first NUL: "a\0b" would open "a". YAML ("\0") and Python
  // strings can hold one.
  if (HasNul(path)) {
    Fail(ShowNuls(path), "the data file's path contains a NUL character (\\0) at position " +
                             std::to_string(path.find('\0')));
  }
  if (!std::filesystem::exists(path, error)) Fail(path, "no such file");
  if (std::filesystem::is_directory(path, error)) Fail(path, "is a directory, not an HDF5 file");
  // A FIFO or a device would block the open (or read forever): only regular files are read.
  if (!std::filesystem::is_regular_file(path, error)) {
    Fail(path, "is not a regular file (a FIFO, socket or device?); give the HDF5 file itself");
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    Hdf5ErrorText();
    Fail(path, "not an HDF5 file");
  }
  OpenedDataset opened;
  opened.file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!opened.file.valid()) Fail(path, "cannot open the HDF5 file (" + Hdf5ErrorText() + ")");
  const hid_t file = opened.file.get();
  DatasetInfo& info = opened.info;
  info.file_path = path;
  info.dt_seconds = selection.dt_seconds;
  info.q_target_inv_angstrom = selection.wavevector_q_target;

  // Layout detection, first match wins (docs/design.md section 8).
  std::vector<Candidate> candidates;
  if (io_internal::PathExists(file, kApsUQList) && io_internal::PathExists(file, kApsUMatrices)) {
    info.layout = FileLayout::kApsU;
    candidates = ApsUCandidates(file, path, info.warnings);
  } else if (io_internal::PathExists(file, kApsOldQList) &&
             io_internal::PathExists(file, kApsOldPhiList) &&
             io_internal::PathExists(file, kApsOldMatrices)) {
    info.layout = FileLayout::kApsOld;
    candidates = ApsOldCandidates(file, path);
  } else {
    Fail(path, std::string("neither APS-U layout (") + kApsUQList + " and " + kApsUMatrices +
                   ") nor APS-old layout (" + kApsOldQList + ", " + kApsOldPhiList + " and " +
                   kApsOldMatrices + "); the file's top level holds: " + ListTopLevel(file));
  }
  if (candidates.empty()) {
    Fail(path, std::string("no correlation matrix to select: every angle was filtered out (") +
                   (info.layout == FileLayout::kApsU ? "no valid processed bin" : "no q bin") +
                   ")");
  }

  const bool several_rings = selection.all_q_rings || !selection.wavevector_q_list.empty();
  std::vector<Candidate> kept;
  if (several_rings) {
    kept = SelectRings(candidates, SelectedRingQs(candidates, selection, info.warnings));
  } else {
    kept = info.layout == FileLayout::kApsU ? SelectApsU(candidates, selection)
                                            : SelectApsOld(candidates, selection, info.warnings);
  }
  kept = ApplyDataFiltering(std::move(kept), selection, several_rings, info.phi_filtered_out,
                            info.warnings);
  info.q_inv_angstrom = kept.front().q;
  if (!several_rings && std::abs(info.q_inv_angstrom - selection.wavevector_q_target) >
                            1e-6 * std::abs(selection.wavevector_q_target)) {
    info.warnings.push_back(path + ": target q " + FormatDouble(selection.wavevector_q_target) +
                            " 1/A not in the file; using the closest ring, q = " +
                            FormatDouble(info.q_inv_angstrom) + " 1/A");
  }

  // Shapes and types of the selected matrices: square, all the same size, float.
  for (const Candidate& candidate : kept) {
    Hid dataset = DatasetHid(H5Dopen2(file, candidate.dataset_path.c_str(), H5P_DEFAULT));
    if (!dataset.valid()) Fail(path, "cannot open dataset " + candidate.dataset_path);
    std::vector<hsize_t> dims;
    try {
      dims = io_internal::DatasetDims(dataset.get());
    } catch (const std::runtime_error& failure) {
      Fail(path, candidate.dataset_path + ": " + failure.what());
    }
    if (dims.size() != 2 || dims[0] != dims[1]) {
      std::string shape;
      for (hsize_t d : dims) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
      Fail(path, "matrix " + candidate.dataset_path + " has shape (" + shape +
                     "): expected a square frames x frames matrix (rank 2)");
    }
    if (dims[0] > static_cast<hsize_t>(std::numeric_limits<int>::max())) {
      Fail(path, "matrix " + candidate.dataset_path + " is too large");
    }
    Hid type = TypeHid(H5Dget_type(dataset.get()));
    const std::string type_name = TypeName(type.get());
    if (type_name.empty()) {
      Fail(path, "matrix " + candidate.dataset_path + " is not float32 or float64");
    }
    RequireStoredValues(dataset.get(), path, candidate.dataset_path, dims[0], type_name);
    if (info.angles.empty()) {
      info.frames_in_file = static_cast<int>(dims[0]);
      info.value_type = type_name;
      info.compression = Compression(dataset.get(), path, candidate.dataset_path);
    } else {
      Compression(dataset.get(), path, candidate.dataset_path);  // decodable?
      if (static_cast<int>(dims[0]) != info.frames_in_file) {
        const AngleInfo& first = info.angles.front();
        if (std::abs(candidate.q - first.q_inv_angstrom) >= kApsUSameQ) {
          // Rings of several (docs/configuration.md, Several q rings): the key and the rings.
          Fail(path, std::string(kQKey) + ": the ring q = " + FormatDouble(candidate.q) +
                         " 1/A (" + candidate.dataset_path + ") has " + std::to_string(dims[0]) +
                         " frames but the ring q = " + FormatDouble(first.q_inv_angstrom) +
                         " 1/A (" + first.dataset_path + ") has " +
                         std::to_string(info.frames_in_file) +
                         "; rings fitted together must have the same frames");
        }
        Fail(path, "matrix " + candidate.dataset_path + " has " + std::to_string(dims[0]) +
                       " frames but " + info.angles.front().dataset_path + " has " +
                       std::to_string(info.frames_in_file));
      }
    }
    AngleInfo angle;
    angle.phi_degrees = NormalizePhiDegrees(candidate.phi_degrees);
    angle.q_inv_angstrom = candidate.q;
    angle.dataset_path = candidate.dataset_path;
    try {
      angle.stores_both_triangles = StoresBothTriangles(dataset.get(), info.frames_in_file);
    } catch (const std::runtime_error& failure) {
      Fail(path, "cannot read " + candidate.dataset_path + " (" + failure.what() + ")");
    }
    if (angle.stores_both_triangles) {
      info.warnings.push_back(path + ": " + candidate.dataset_path + " stores both triangles " +
                              "(not the APS upper-triangle convention); using its upper triangle " +
                              "as is instead of doubling the off-diagonal " +
                              "(docs/design.md section 8)");
    }
    info.angles.push_back(std::move(angle));
  }

  // Frame slicing, 1-based inclusive window (docs/design.md section 8).
  const int frames = info.frames_in_file;
  const int first = std::max(selection.start_frame, 1) - 1;
  if (first >= frames) {
    Fail(path, "start_frame = " + std::to_string(selection.start_frame) + " is beyond the file's " +
                   std::to_string(frames) + " frames");
  }
  int end = selection.end_frame < 0 ? frames : selection.end_frame;
  if (end > frames) {
    info.warnings.push_back(path + ": end_frame = " + std::to_string(selection.end_frame) +
                            " beyond the file's " + std::to_string(frames) + " frames; using " +
                            std::to_string(frames));
    end = frames;
  }
  if (end <= first) {
    Fail(path, "end_frame = " + std::to_string(selection.end_frame) +
                   " is before start_frame = " + std::to_string(first + 1));
  }
  if (end - first < 3) {
    Fail(path, "frame window [" + std::to_string(first + 1) + ", " + std::to_string(end) +
                   "] holds " + std::to_string(end - first) +
                   " frame(s); at least 3 are needed (frame 0 of the window is dropped)");
  }
  info.first_frame = first;
  info.num_raw_frames = end - first;

  // --phi (DataSelection::phi_selected_degrees): each requested angle keeps the file's nearest
  // angle within the tolerance; one with none there fails, naming the file's angles (the
  // successor warns and fits all angles instead: docs/user-guide.md section 3).
  if (!selection.phi_selected_degrees.empty()) {
    std::vector<bool> keep(info.angles.size(), false);
    for (const double requested : selection.phi_selected_degrees) {
      const double wanted = NormalizePhiDegrees(requested);
      size_t nearest = 0;
      double nearest_distance = std::numeric_limits<double>::infinity();
      for (size_t k = 0; k < info.angles.size(); ++k) {
        double distance = std::fabs(info.angles[k].phi_degrees - wanted);
        distance = std::min(distance, 360.0 - distance);
        if (distance < nearest_distance) {
          nearest = k;
          nearest_distance = distance;
        }
      }
      if (!(nearest_distance <= kPhiSelectionToleranceDegrees)) {
        std::ostringstream message;
        message << "--phi " << requested << ": no angle of the file within "
                << kPhiSelectionToleranceDegrees << " degree (its angles:";
        for (size_t k = 0; k < info.angles.size(); ++k) {
          message << (k ? ", " : " ") << info.angles[k].phi_degrees;
        }
        Fail(path, message.str() + ")");
      }
      keep[nearest] = true;
      // Several rings: each ring's own nearest angle within the tolerance too.
      for (size_t k = 0; k < info.angles.size(); ++k) {
        const double ring_q = info.angles[k].q_inv_angstrom;
        if (std::abs(ring_q - info.angles[nearest].q_inv_angstrom) < kApsUSameQ) continue;
        size_t ring_nearest = k;
        double ring_distance = std::numeric_limits<double>::infinity();
        for (size_t j = 0; j < info.angles.size(); ++j) {
          if (std::abs(info.angles[j].q_inv_angstrom - ring_q) >= kApsUSameQ) continue;
          double distance = std::fabs(info.angles[j].phi_degrees - wanted);
          distance = std::min(distance, 360.0 - distance);
          if (distance < ring_distance) {
            ring_nearest = j;
            ring_distance = distance;
          }
        }
        if (ring_distance <= kPhiSelectionToleranceDegrees) keep[ring_nearest] = true;
      }
    }
    std::vector<AngleInfo> selected;
    std::vector<double> left_out;
    for (size_t k = 0; k < info.angles.size(); ++k) {
      if (keep[k]) {
        selected.push_back(info.angles[k]);
      } else {
        left_out.push_back(info.angles[k].phi_degrees);
      }
    }
    info.angles = std::move(selected);
    info.phi_filtered_out = std::move(left_out);
  } else if (selection.phi_filtering_enabled && !selection.phi_ranges.empty()) {
    // phi_filtering (docs/design.md section 8): keep angles in any range; none matching keeps
    // all.
    std::vector<AngleInfo> in_range;
    std::vector<double> out_of_range;
    for (const AngleInfo& angle : info.angles) {
      const bool keep =
          std::any_of(selection.phi_ranges.begin(), selection.phi_ranges.end(),
                      [&](const PhiRange& r) { return PhiInRange(angle.phi_degrees, r); });
      if (keep) {
        in_range.push_back(angle);
      } else {
        out_of_range.push_back(angle.phi_degrees);
      }
    }
    if (in_range.empty()) {
      info.warnings.push_back(path + ": phi_filtering kept no angle of " +
                              std::to_string(info.angles.size()) +
                              "; using all angles (as the reference does)");
    } else {
      info.angles = std::move(in_range);
      info.phi_filtered_out = std::move(out_of_range);
    }
  }
  io_internal::ValidateDatasetInfo(info);
  return opened;
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
  int64_t block_rows_ = 0;  // 0 until BlockRows() has looked at the layout
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
};

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
  // a chunk is decompressed once per pass when its chunk row fits the block budget. With HDF5 1.10's chunk cache the
  // resident memory grew with the data read (836 MB RSS after scanning an 800 MB file, whatever
  // the cache size), which would break streaming's constant memory; without it: 70 MB, 3x faster.
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
  const io_internal::ChunkRectangle rectangle{Dataset(angle), &*plan,    first + begin,
                                              end - begin,    first,     width,
                                              decoded_floats_.data()};
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
  const int64_t end = std::min<int64_t>(file_row / rows * rows + rows - info_.first_frame,
                                        info_.num_raw_frames);
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
  // The super-diagonal values around each diagonal point (docs/model.md, Diagonal correction):
  // s_before of row i is raw C[i, i + 1] (fitted (i - 1, i); raw frame 0's when i = 0), s_after
  // fitted (i, i + 1).
  double s_before = raw_row(r0)[r0 + 1];
  for (int64_t i = r0; i < row_end; ++i) {
    const double* raw = raw_row(i + 1);
    double* row = out.data() + (i - r0) * width;  // row[j - r0] is fitted (i, j)
    // Below the diagonal: the rows of this band above row i, mirrored.
    for (int64_t j = r0; j < i; ++j) {
      row[j - r0] = out[static_cast<size_t>((j - r0) * width + (i - r0))];
    }
    for (int64_t j = i + 1; j < n; ++j) row[j - r0] = raw[j + 1];
    const double s_after = i < n - 1 ? raw[i + 2] : 0.0;
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

DatasetInfo InspectDataset(const DataSelection& selection) { return Inspect(selection).info; }

DataSelection SelectionOfRing(const DataSelection& selection, const RingInfo& ring) {
  DataSelection one = selection;
  one.wavevector_q_target = ring.q_inv_angstrom;
  one.wavevector_q_list = {ring.q_inv_angstrom};
  one.all_q_rings = false;
  one.data_q_range.reset();
  return one;
}

DataSelection JointSelection(const DataSelection& selection) {
  DataSelection joint = selection;
  joint.wavevector_q_list.clear();
  for (const RingInfo& ring : ListSelectedRings(selection)) {
    joint.wavevector_q_list.push_back(ring.q_inv_angstrom);
  }
  joint.wavevector_q_target = joint.wavevector_q_list.front();
  joint.all_q_rings = false;
  joint.data_q_range.reset();
  return joint;
}

std::vector<RingInfo> ListSelectedRings(const DataSelection& selection) {
  if (!selection.all_q_rings && selection.wavevector_q_list.empty()) {
    const DatasetInfo info = Inspect(selection).info;
    RingInfo ring{info.q_inv_angstrom, {}, info.num_raw_frames};
    for (const AngleInfo& angle : info.angles) ring.phi_degrees.push_back(angle.phi_degrees);
    return {ring};
  }
  // Every selected ring's matrices at once: a listed q absent, or rings of different frame
  // counts, fail here naming the key and the ring.
  const DatasetInfo all = Inspect(selection).info;
  std::vector<RingInfo> rings;
  for (const AngleInfo& angle : all.angles) {
    if (rings.empty() || std::abs(rings.back().q_inv_angstrom - angle.q_inv_angstrom) >= kApsUSameQ) {
      rings.push_back({angle.q_inv_angstrom, {}, all.num_raw_frames});
    }
    rings.back().phi_degrees.push_back(angle.phi_degrees);
  }
  return rings;
}

std::unique_ptr<BatchSource> OpenBatchSource(const DataSelection& selection) {
  return std::make_unique<HdfBatchSource>(Inspect(selection), /*allow_direct_reads=*/true,
                                          selection.diagonal_correction);
}

std::unique_ptr<BatchSource> io_internal::OpenHdfBatchSource(const DataSelection& selection,
                                                             bool allow_direct_reads) {
  return std::make_unique<HdfBatchSource>(Inspect(selection), allow_direct_reads,
                                          selection.diagonal_correction);
}

std::vector<std::string> io_internal::Float32ReadPaths(const BatchSource& source) {
  const auto* hdf_source = dynamic_cast<const HdfBatchSource*>(&source);
  return hdf_source != nullptr ? hdf_source->float32_read_paths() : std::vector<std::string>{};
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
