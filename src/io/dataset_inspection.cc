// The inspection of beamline two-time correlation files (docs/design.md section 8, Input):
// what a file holds and which of its matrices a selection fits, without reading a matrix's
// values beyond a few sampled rows (io/dataset_inspection.h). The reads are beamline_reader.cc's.
//
// OpenAndInspect follows the reference loader: layout detection, APS-U and APS-old selection,
// frame slicing, phi normalisation and phi_filtering, as docs/design.md section 8 describes them.
// Where the reference silently truncates or guesses, it stops with a DataError whose message
// starts with the file path (a count mismatch between bins and matrices, a target q far from
// every ring).
#include "io/dataset_inspection.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "config/path_checks.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/dataset_validation.h"
#include "io/hdf5_util.h"

namespace homodyne {

using io_internal::DatasetHid;
using io_internal::Hdf5ErrorText;
using io_internal::Hid;
using io_internal::OpenedDataset;
using io_internal::PlistHid;
using io_internal::ReadRectangle;
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

std::string FormatDouble(double value) {
  std::ostringstream text;
  text.precision(10);
  text << value;
  return text.str();
}

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  io_internal::FailOnFile(path, what);
}

// Every value of a q or phi list must be finite: the selection sorts by the distance to the target
// q and normalises phi, neither of which means anything for NaN or inf.
void RequireFinite(const std::string& path, const char* list_path,
                   const std::vector<double>& values) {
  for (size_t k = 0; k < values.size(); ++k) {
    if (!std::isfinite(values[k])) {
      Fail(path, std::string(list_path) + "[" + std::to_string(k) + "] = " +
                     (std::isnan(values[k]) ? "nan"
                      : values[k] > 0       ? "inf"
                                            : "-inf") +
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
                       FormatDouble(selection.q_tolerance_fraction) +
                       " x q; the file's rings: " + ListOfRings(file_rings) + ")");
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
      warnings.push_back(path + ": data_filtering.q_range = " + range +
                         " keeps none of the rings " + ListOfRings(rings) +
                         " 1/A; using them all (fallback_on_empty, as the " + "reference does)");
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
    const bool keep =
        (!q_range || InQRange(candidate.q, selection)) &&
        (!selection.data_phi_range || PhiInRange(candidate.phi_degrees, *selection.data_phi_range));
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

}  // namespace

void io_internal::FailOnFile(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

OpenedDataset io_internal::OpenAndInspect(const DataSelection& selection) {
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
          Fail(path, std::string(kQKey) + ": the ring q = " + FormatDouble(candidate.q) + " 1/A (" +
                         candidate.dataset_path + ") has " + std::to_string(dims[0]) +
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

DatasetInfo InspectDataset(const DataSelection& selection) {
  return io_internal::OpenAndInspect(selection).info;
}

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
    const DatasetInfo info = io_internal::OpenAndInspect(selection).info;
    RingInfo ring{info.q_inv_angstrom, {}, info.num_raw_frames};
    for (const AngleInfo& angle : info.angles) ring.phi_degrees.push_back(angle.phi_degrees);
    return {ring};
  }
  // Every selected ring's matrices at once: a listed q absent, or rings of different frame
  // counts, fail here naming the key and the ring.
  const DatasetInfo all = io_internal::OpenAndInspect(selection).info;
  std::vector<RingInfo> rings;
  for (const AngleInfo& angle : all.angles) {
    if (rings.empty() ||
        std::abs(rings.back().q_inv_angstrom - angle.q_inv_angstrom) >= kApsUSameQ) {
      rings.push_back({angle.q_inv_angstrom, {}, all.num_raw_frames});
    }
    rings.back().phi_degrees.push_back(angle.phi_degrees);
  }
  return rings;
}

}  // namespace homodyne
