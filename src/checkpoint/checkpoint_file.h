// The checkpoint file format (docs/design.md section 6; docs/checkpoints.md): one Checkpoint as
// the bytes of an HDF5 file built in memory, and back. The folder, names and durable writing are
// the store's (checkpoint_store.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_store.h"

namespace homodyne::checkpoint_internal {

// 2: /lm/trust_region_radius added; 3: /global_search added; 4: /lm/solver added.
inline constexpr int64_t kFormatVersion = 4;
// 5: /profile_intervals added. Written only for a checkpoint that holds profile points
// (FormatVersionOf), so that every other checkpoint stays a version 4 file that earlier builds
// resume; this build reads both.
inline constexpr int64_t kProfileFormatVersion = 5;

// The format_version `checkpoint` is written as: kProfileFormatVersion when it holds profile
// points, else kFormatVersion.
int64_t FormatVersionOf(const Checkpoint& checkpoint);

// The bytes of the HDF5 file holding `checkpoint` (every field, content_sha256 included).
// compression: shuffle + deflate on the array datasets. Throws std::runtime_error on an HDF5
// failure.
std::vector<char> BuildCheckpointImage(const Checkpoint& checkpoint, bool compression);

// A checkpoint file as read: its fields and the checksum it claims.
struct StoredCheckpoint {
  Checkpoint checkpoint;
  std::string content_sha256;
};

// Reads every field of the file at `path`. Throws std::runtime_error saying what is wrong
// (unreadable HDF5, a format_version other than 4 and 5, a missing or malformed field).
StoredCheckpoint ReadCheckpointFile(const std::string& path);

// SHA-256 (hex) of the canonical serialisation of every field: what content_sha256 must be.
std::string ContentSha256(const Checkpoint& checkpoint);

// The reason of the last HDF5 failure (the OS error text when HDF5 reports one, e.g. "No space
// left on device", else HDF5's own descriptions). Clears the HDF5 error stack.
std::string Hdf5Reason();

}  // namespace homodyne::checkpoint_internal
