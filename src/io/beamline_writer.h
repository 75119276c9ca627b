// Writes correlation data sets in the beamline layouts the reader accepts
// (docs/design.md section 8): used by the simulator and by tests. Private to src/io.
//
// Matrices are frames x frames, chunked by rows, float32 or float64, uncompressed, deflate
// ("gzip") or LZF, written in row blocks. The beamline convention is the upper triangle including
// the diagonal with zeros below; the writer stores whatever full rows it is given (tests use that
// to write files holding both triangles).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "io/hdf5_util.h"

namespace homodyne::io_internal {

struct BeamlineWriterOptions {
  FileLayout layout = FileLayout::kApsU;  // group structure of the file
  int frames = 0;                         // matrix size, >= 1
  std::string dtype = "float32";          // float32 | float64
  std::string compression = "none";       // none | gzip | lzf
  int gzip_level = 4;                     // deflate level for "gzip", 0..9
  int chunk_rows = 0;                     // rows per chunk; 0 = automatic (chunks of ~1 MiB)
  int chunk_cols = 0;                     // columns per chunk; 0 = all frames
};

// "c2_00001" for index 0: the member names of both layouts (zero-padded, sorted = file order).
std::string MatrixDatasetName(int index);

// One open matrix dataset. Rows must be written in chunk-aligned blocks for speed (any order
// works). Throws DataError naming the file and dataset on failure.
class MatrixWriter {
 public:
  MatrixWriter(std::string file_path, std::string dataset_path, Hid dataset, int frames);
  const std::string& dataset_path() const { return dataset_path_; }

  // Writes rows [row_begin, row_begin + row_count): row_count * frames values, row-major.
  void WriteRows(int row_begin, int row_count, std::span<const double> rows);
  // Closes the dataset; checks the status.
  void Close();

 private:
  std::string file_path_;
  std::string dataset_path_;
  Hid dataset_;
  int frames_;
};

class BeamlineWriter {
 public:
  // Creates (truncates) the file. Throws InputError for bad options, DataError (message starting
  // with the path) when the file cannot be created.
  BeamlineWriter(std::string path, BeamlineWriterOptions options);

  const std::string& path() const { return path_; }
  const BeamlineWriterOptions& options() const { return options_; }
  hid_t file() const { return file_.get(); }
  // Rows per chunk actually used.
  int chunk_rows() const { return chunk_rows_; }

  // APS-U metadata: /xpcs/qmap/dynamic_v_list_dim0 = q values, /xpcs/qmap/dynamic_v_list_dim1 =
  // phi values [deg], /xpcs/twotime/processed_bins = 1-based bins (bin b <-> q index (b-1) / n_phi,
  // phi index (b-1) % n_phi; matrix k of the sorted correlation_map belongs to the k-th bin).
  void WriteApsUBins(std::span<const double> q_values, std::span<const double> phi_values,
                     std::span<const int64_t> processed_bins);
  // APS-old metadata: /xpcs/dqlist and /xpcs/dphilist, shape (1, M), one entry per matrix.
  void WriteApsOldBins(std::span<const double> q_per_matrix,
                       std::span<const double> phi_per_matrix);

  // Creates matrix `index` (0-based; name MatrixDatasetName(index)) in the layout's group.
  MatrixWriter CreateMatrix(int index);

  // Flushes and closes the file; throws DataError if HDF5 reports a failure (e.g. disk full).
  void Close();

 private:
  [[noreturn]] void Fail(const std::string& what) const;

  std::string path_;
  BeamlineWriterOptions options_;
  int chunk_rows_ = 1;
  Hid file_;
};

}  // namespace homodyne::io_internal
