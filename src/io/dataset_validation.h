// The checks every data source passes before a fit, whatever it reads from (a beamline file, or
// arrays in memory from Python or a C++ program): one set of rules, one set of messages
// (docs/design.md section 7).
#pragma once

#include "homodyne/dataset.h"

namespace homodyne::io_internal {

// Checks the selected data set's description and appends warnings to info.warnings:
//   - at least one angle and at least 2 fitted times;
//   - dt finite and > 0; each kept angle's q finite and > 0;
//   - each kept angle's phi finite, and no two kept angles at the same phi (after normalisation
//     to (-180, 180] degrees: 0 and 360 are the same angle);
//   - a warning when more than one angle is kept and every |phi| <= 2 pi: phi is read in degrees,
//     and such angles look like radians.
// Throws DataError naming info.file_path, the angle (index and dataset) and the rule broken.
// Says nothing about the correlation values themselves (NaN points are the fit's to count).
void ValidateDatasetInfo(DatasetInfo& info);

}  // namespace homodyne::io_internal
