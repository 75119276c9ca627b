// Which path the HDF5 data source reads float32 values by (docs/design.md section 8, Input):
// directly with preadv (io/direct_reads.h) or through HDF5, and how many rows its prefetch
// decoded itself (io/chunk_decoder.h). Private to src/io, its tests and
// bench/streaming_benchmark.cc (which prints it). No HDF5 types here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "homodyne/dataset.h"

namespace homodyne::io_internal {

// OpenBatchSource with the direct reads allowed (as OpenBatchSource) or not (every read through
// HDF5: the reference the tests compare the direct reads with).
std::unique_ptr<BatchSource> OpenHdfBatchSource(const DataSelection& selection,
                                                bool allow_direct_reads);

// Per angle of a source made by OpenBatchSource or OpenHdfBatchSource: "" when its float32 reads
// are direct, otherwise why they go through HDF5 ("stored with a filter", ...). Empty for any
// other source.
std::vector<std::string> Float32ReadPaths(const BatchSource& source);

// Rows a source made by OpenBatchSource has decoded itself in PrefetchRows (io/chunk_decoder.h),
// summed over the angles and calls: 0 when none, and for any other source.
int64_t RowsDecodedByPrefetch(const BatchSource& source);

// Raw rows a source made by OpenBatchSource has decoded itself for its corrected reads
// (ReadCorrectedUpperRows, ReadCorrectedRows: the fitted data's writer), summed over the angles
// and calls: 0 when none, and for any other source.
int64_t RowsDecodedForCorrectedReads(const BatchSource& source);

// Lends a source made by OpenBatchSource the fit's data as it held them in memory
// (FitOutcome::held_data: every angle's packed strict upper triangle, float32, read from this
// source): its corrected reads (ReadCorrectedUpperRows: the fitted data's writer) take the values
// off the diagonal from them instead of decoding the file again, the same values bitwise. Taken
// only where they are the file's values: every selected matrix float32, one whole triangle per
// angle. Null: no longer lent. Returns whether the source takes them (false for any other source).
bool LendHeldUpperTriangles(BatchSource& source,
                            std::shared_ptr<const std::vector<std::vector<float>>> values);

}  // namespace homodyne::io_internal
