// Two-time correlation data from beamline HDF5 files (docs/design.md section 8, Input).
//
// Terms used throughout:
// - raw grid: the N_raw frames of the sliced window [start_frame, end_frame], t_k = k dt from 0.
// - fitted grid: the raw grid without frame 0 (the reference CLI drops it), N = N_raw - 1 times
//   t_i = (i + 1) dt. Row i of the fitted grid is file frame first_frame + 1 + i.
// - packed strict upper triangle: for each row i, the points (i, j) with j = i+1..N-1, rows in
//   order; N (N - 1) / 2 points per angle. The fit counts each of them twice (c2 is symmetric).
// Data is never loaded whole unless the caller asks: a BatchSource reads row ranges.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace homodyne {

enum class FileLayout { kApsU, kApsOld };
std::string_view ToString(FileLayout layout);  // "aps_u" or "aps_old"

// Points of a packed strict upper triangle with n times.
inline int64_t UpperTriangleSize(int64_t n) { return n * (n - 1) / 2; }
// Offset of row i's first point (i, i+1) in the packed strict upper triangle of n times.
inline int64_t UpperTriangleRowOffset(int64_t n, int64_t i) {
  return i * (n - 1) - i * (i - 1) / 2;
}
// Points in rows [row_begin, row_end) of the packed strict upper triangle of n times.
inline int64_t UpperTriangleRowsSize(int64_t n, int64_t row_begin, int64_t row_end) {
  return UpperTriangleRowOffset(n, row_end) - UpperTriangleRowOffset(n, row_begin);
}

// Normalises an angle to (-180, 180] as the reference CLI does: 210 -> -150, -180 -> 180.
double NormalizePhiDegrees(double phi_degrees);

// One kept angle range of phi_filtering, in degrees; min > max means a range that wraps.
struct PhiRange {
  double min_angle_degrees = 0.0;
  double max_angle_degrees = 0.0;
};
// True when phi (normalised) lies in the range (ends normalised, wrap-aware, inclusive).
bool PhiInRange(double phi_degrees, const PhiRange& range);

// How several selected rings are fitted (analyzer_parameters.scattering.q_fit).
enum class QFitMode {
  kIndependent,  // one fit per ring, each in its own results folder, then a summary
  kJoint,        // one fit of every ring's matrices: physical parameters shared
};
// "independent" or "joint".
inline std::string_view ToString(QFitMode mode) {
  return mode == QFitMode::kJoint ? "joint" : "independent";
}

// What to read from a file; built from the config (experimental_data, analyzer_parameters,
// phi_filtering) and CLI overrides.
// experimental_data.apply_diagonal_correction and experimental_data.diagonal_correction
// (docs/configuration.md, Model and data; docs/model.md, Diagonal correction).
struct DiagonalCorrectionOptions {
  bool apply = true;             // apply_diagonal_correction; false keeps the stored diagonal
  std::string method = "basic";  // diagonal_correction.method: basic | statistical | interpolation
  std::string estimator = "median";  // .estimator (statistical): median | mean | trimmed_mean
  int window = 3;              // .window (statistical): off-diagonal neighbours on each side, >= 1
  double trim_fraction = 0.2;  // .trim_fraction (trimmed_mean): cut from each end, in [0, 0.5)
};

// The diagonal correction `options` (method, estimator, window) in place on a row-major N x N
// matrix (docs/model.md, Diagonal correction): basic and interpolation as ApplyDiagonalCorrection
// (model.h), statistical from the window's neighbours; apply = false leaves it unchanged.
void ApplyDiagonalCorrection(const DiagonalCorrectionOptions& options, int n,
                             std::span<double> matrix);

struct DataSelection {
  std::string file_path;                // the HDF5 file
  double wavevector_q_target = 0.0054;  // analyzer_parameters.scattering.wavevector_q [1/A]
  int start_frame = 1;                  // 1-based, inclusive; clamped to >= 1
  int end_frame = -1;                   // 1-based, inclusive; -1 = to the last frame
  double dt_seconds = 0.001;            // frame time [s]
  double q_tolerance_fraction = 0.1;    // APS-old q window (docs/design.md section 8)
  bool phi_filtering_enabled = false;   // phi_filtering.enabled
  std::vector<PhiRange> phi_ranges;     // phi_filtering.target_ranges; empty keeps all
  // --phi: the angles to fit [degrees]. Non-empty: each keeps the file's nearest angle within
  // kPhiSelectionToleranceDegrees (the successor's tolerance), none there is a DataError, and
  // phi_filtering is not applied.
  std::vector<double> phi_selected_degrees;
  // Several q rings (docs/configuration.md, Several q rings). wavevector_q_list: the targets of a
  // list (or the rings `all` resolved to), in the order given; empty: the one ring nearest
  // wavevector_q_target (today's single-ring selection, bitwise the same). Non-empty: every listed
  // ring is selected exactly (the matrices whose q is that ring's, in both layouts: no APS-old
  // window), their matrices together in file order, each AngleInfo with its own q.
  std::vector<double> wavevector_q_list;
  bool all_q_rings = false;  // wavevector_q: all (every ring of the file; ListSelectedRings)
  // data_filtering (enabled): kept rings' q in [q_range_min, q_range_max] [1/A] and kept angles
  // in data_phi_range, on top of the q target(s) and phi_filtering. When they keep nothing:
  // fallback_on_empty keeps everything (a warning, as the reference does), else a DataError.
  std::optional<std::pair<double, double>> data_q_range;  // data_filtering.q_range {min, max}
  std::optional<PhiRange> data_phi_range;                 // data_filtering.phi_range {min, max}
  bool data_filtering_fallback_on_empty = true;           // data_filtering.fallback_on_empty
  QFitMode q_fit = QFitMode::kIndependent;                // analyzer_parameters.scattering.q_fit
  // How the stored diagonal of the matrices read for the result files and plots is replaced
  // (docs/model.md, Diagonal correction); the fit never reads the diagonal.
  DiagonalCorrectionOptions diagonal_correction;
};
inline constexpr double kPhiSelectionToleranceDegrees = 1.0;

// One q ring of a file as a selection keeps it: its q and the angles kept there.
struct RingInfo {
  double q_inv_angstrom = 0.0;      // the file's q of the ring
  std::vector<double> phi_degrees;  // kept angles, normalised, file order
  int num_raw_frames = 0;           // N_raw after slicing (the same for every ring)
  int64_t num_fit_points() const;   // n_angles * N * (N - 1)
};

// One correlation matrix kept for fitting.
struct AngleInfo {
  double phi_degrees = 0.0;  // normalised to (-180, 180]
  double q_inv_angstrom = 0.0;
  // HDF5 path of its (half) matrix, e.g. /xpcs/twotime/correlation_map/c2_00001.
  std::string dataset_path;
  // The matrix holds both triangles instead of the APS convention (upper triangle, zeros below):
  // its upper triangle is used as is rather than doubling the off-diagonal (a warning says so).
  bool stores_both_triangles = false;
};

// What a file holds and what of it is selected. Built without reading matrix values.
struct DatasetInfo {
  std::string file_path;
  FileLayout layout = FileLayout::kApsU;
  std::string value_type;   // "float32" or "float64"
  std::string compression;  // "none", "gzip", "lzf" (of the first selected matrix)
  int frames_in_file = 0;   // matrix size in the file
  int first_frame = 0;      // 0-based file frame of raw-grid time 0
  int num_raw_frames = 0;   // N_raw after slicing
  double dt_seconds = 0.0;
  // q of the selected ring (the first kept matrix's q); each matrix's own: AngleInfo.
  double q_inv_angstrom = 0.0;
  double q_target_inv_angstrom = 0.0;    // the requested q (DataSelection::wavevector_q_target)
  std::vector<AngleInfo> angles;         // kept, in file order
  std::vector<double> phi_filtered_out;  // normalised angles removed by phi_filtering
  std::vector<std::string> warnings;     // things the user should know (logged by callers)

  int num_angles() const { return static_cast<int>(angles.size()); }
  // N: times of the fitted grid.
  int num_times() const { return num_raw_frames - 1; }
  // Points entering chi2: both triangles, diagonal excluded: n_angles * N * (N - 1).
  int64_t num_fit_points() const;
  // Fitted-grid times t_i = (i + 1) dt, i = 0..N-1.
  std::vector<double> FittedTimes() const;
};

// Reads row ranges of one angle's strict upper triangle on the fitted grid. Implementations read
// hyperslabs from disk on every call (constant memory); not thread-safe (one reader per thread,
// or external locking).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual const DatasetInfo& info() const = 0;

  // Rows [row_begin, row_end) of the fitted grid of angle `angle`, packed strict upper triangle:
  // out.size() must be UpperTriangleRowsSize(N, row_begin, row_end). Values are c2 as rebuilt by
  // the reference (C = H + H^T off the diagonal). Throws DataError naming file and dataset on a
  // failed read.
  virtual void ReadUpperTriangleRows(int angle, int row_begin, int row_end,
                                     std::span<double> out) = 0;
  virtual void ReadUpperTriangleRows(int angle, int row_begin, int row_end,
                                     std::span<float> out) = 0;

  // The full symmetric N x N matrix of one angle on the fitted grid, row-major, with the diagonal
  // corrected as the reference does (computed with raw frame 0 present). For outputs and plots;
  // needs N*N doubles.
  virtual void ReadCorrectedMatrix(int angle, std::span<double> out) = 0;

  // Rows [row_begin, row_end) of that corrected symmetric matrix (the same values as
  // ReadCorrectedMatrix), full rows of N values, row-major: out.size() must be
  // (row_end - row_begin) * N. The default reads the whole matrix (N*N doubles); the HDF5 source
  // reads the rows (ReadCorrectedUpperRows) and, for the columns left of row_begin, the part of
  // the rows above them (memory grows with the block, not with N^2).
  virtual void ReadCorrectedRows(int angle, int row_begin, int row_end, std::span<double> out);

  // The same rows from column row_begin on: the part of rows [row_begin, row_end) on and right of
  // the diagonal block, row-major, (row_end - row_begin) * (N - row_begin) values (out[(i -
  // row_begin) (N - row_begin) + (j - row_begin)] = ReadCorrectedRows' value (i, j), j >=
  // row_begin). Unlike whole rows it needs no value of an earlier row, so rows read in order read
  // the file once (the HDF5 source: from its row blocks); the default goes through
  // ReadCorrectedRows. The fitted data's writer reads the matrix this way (fitted_data_writer.cc).
  virtual void ReadCorrectedUpperRows(int angle, int row_begin, int row_end, std::span<double> out);

  // Says that rows [row_begin, row_end) of every angle will be read next (ReadUpperTriangleRows),
  // and lets the source prepare the first of them using up to `threads` threads. Returns the end
  // of the rows prepared, in (row_begin, row_end]: the caller reads every angle's rows up to it,
  // then calls again from there. The HDF5 source decompresses the LZF or deflate chunks of those
  // rows on those threads, as many rows as its row blocks' memory holds (docs/design.md section
  // 8, Input); the default prepares nothing and returns row_end. Never throws: a failure leaves
  // the reads that follow to read, and report, as usual.
  virtual int PrefetchRows(int row_begin, int row_end, int threads) {
    static_cast<void>(row_begin);
    static_cast<void>(threads);
    return row_end;
  }

  // Frees what the source keeps between reads (the HDF5 source's row blocks, at most 16 MB, and
  // its direct reads' buffers: docs/design.md section 8); the next read reads the file again. For
  // callers done reading for a while, e.g. after loading the data into memory.
  virtual void ReleaseReadBuffers() {}
};

// Opens the file, detects the layout, selects q ring, frames and angles, and validates shapes.
// Throws DataError with the file path and what is missing or wrong.
DatasetInfo InspectDataset(const DataSelection& selection);
// The rings a selection names, each with its kept angles, in the order of the list (ascending q
// for `all`): wavevector_q_list (or all_q_rings), else the one ring of wavevector_q_target. Each
// listed q must match a ring within q_tolerance_fraction (the single-ring message, with the key
// and list index). Throws DataError naming the file, the key and the ring: a listed q absent,
// two entries on the same ring, rings of different frame counts, a ring without angles.
std::vector<RingInfo> ListSelectedRings(const DataSelection& selection);
// The selection of ring `ring` alone (one fit of an independent run): wavevector_q_list = {its q},
// wavevector_q_target its q, all_q_rings and data_q_range cleared.
DataSelection SelectionOfRing(const DataSelection& selection, const RingInfo& ring);
// The selection of a joint fit (q_fit: joint): every ring ListSelectedRings selects, by its
// file q, in one data set (AngleInfo::q_inv_angstrom per matrix); all_q_rings and data_q_range
// resolved into wavevector_q_list.
DataSelection JointSelection(const DataSelection& selection);
std::unique_ptr<BatchSource> OpenBatchSource(const DataSelection& selection);

// Correlation matrices already in memory (numpy arrays from Python, a program's own buffers):
// values[(angle * N + i) * N + j] is c2 at fitted-grid times (t_i, t_j), t_i = (i + 1) dt, as
// load_xpcs_data / ReadCorrectedMatrix return it (symmetric; only the strict upper triangle is
// fitted). Exactly one of float32_values / float64_values is non-empty. Not copied: the caller
// keeps the buffer alive and unchanged while the source lives.
struct InMemoryData {
  std::span<const float> float32_values;
  std::span<const double> float64_values;
  int num_angles = 0;
  int num_times = 0;                // N
  std::vector<double> phi_degrees;  // one per angle
  double q_inv_angstrom = 0.0;
  // The q of each matrix when they differ (a joint fit of several q rings: docs/design.md
  // section 2d): one per angle, and q_inv_angstrom is then ignored; empty: every
  // matrix at q_inv_angstrom.
  std::vector<double> q_per_angle;
  double dt_seconds = 0.0;
  std::string name = "<in-memory data>";  // DatasetInfo::file_path: names the data in messages
};
// A BatchSource over `data`. Throws InputError naming what is inconsistent (sizes, N < 2), and
// DataError (an InputError) from the checks every data source passes: dt or q not positive and
// finite, a phi that is not finite, an angle given twice (the same phi and q).
std::unique_ptr<BatchSource> MakeInMemoryBatchSource(InMemoryData data);

// Counts of non-finite values in the fitted points (strict upper triangle) of a data set.
struct NonFiniteCount {
  int64_t nan = 0;
  int64_t inf = 0;
  int64_t points_scanned = 0;
};
// Streams through every angle in batches of about rows_per_batch rows; constant memory.
NonFiniteCount CountNonFinite(BatchSource& source, int rows_per_batch = 256);

}  // namespace homodyne
