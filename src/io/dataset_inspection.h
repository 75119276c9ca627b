// The inspection of a beamline file, apart from the reads of its values (docs/design.md section 8,
// Input): dataset_inspection.cc opens the file, detects its layout (APS-U or APS-old), lists what
// it holds and selects the matrices a DataSelection fits (q rings, frame window, angles); the
// public entry points are InspectDataset, ListSelectedRings, SelectionOfRing and JointSelection
// (homodyne/dataset.h). beamline_reader.cc's BatchSource reads the values of the matrices an
// inspection chose. Private to src/io. HDF5 types here: HDF5 stays in src/io
// (docs/conventions.md habit 7).
#pragma once

#include <string>

#include "homodyne/dataset.h"
#include "io/hdf5_util.h"

namespace homodyne::io_internal {

// An inspected file: what it holds and the selection's matrices (info), and the file, open
// read-only, for the reads.
struct OpenedDataset {
  DatasetInfo info;
  Hid file;
};

// Opens selection.file_path and inspects it as InspectDataset (homodyne/dataset.h) describes,
// keeping the file open. Throws DataError (the message starting with the path) for a file that
// is missing, not HDF5, of neither layout, or whose selection fails; reads of the matrices'
// values are left to the caller, apart from a few sampled rows (whether a matrix stores both
// triangles) and its storage size (whether its values were written).
OpenedDataset OpenAndInspect(const DataSelection& selection);

// Throws DataError("path: what"), the form of every message about a data file.
[[noreturn]] void FailOnFile(const std::string& path, const std::string& what);

}  // namespace homodyne::io_internal
