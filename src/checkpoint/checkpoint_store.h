// Checkpoints of a fit (docs/design.md section 6): everything needed to continue bit for bit, in a
// small HDF5 file per save, written atomically, validated by a SHA-256 over its content.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "checkpoint/checkpoint_state.h"
#include "homodyne/fit_events.h"

namespace homodyne {

// LevenbergMarquardtState, PassState and GlobalSearchTrail are declared in checkpoint_state.h
// (the LM core, the pass and the global phase produce and consume them); a checkpoint stores them.

// Batch statistics of the run (docs/design.md section 7).
struct BatchStatistics {
  int64_t batches = 0;              // batches computed (all passes)
  int64_t retries = 0;              // batch reads retried
  int64_t read_failures = 0;        // batch reads that failed after all retries
  int64_t checkpoint_failures = 0;  // checkpoints that could not be written
};

// Everything a checkpoint holds.
struct Checkpoint {
  LevenbergMarquardtState lm;
  std::optional<PassState> pass;    // set when saved inside a pass
  GlobalSearchTrail global_search;  // the global phase's work so far (empty: none, or phase off)
  ProfileTrail profile_intervals;   // the profile intervals' points so far (empty: none)
  BatchStatistics statistics;
  int64_t global_batch = 0;      // batches computed over the whole run: names the file
  std::string config_sha256;     // SHA-256 of the resolved config (hex)
  std::string data_fingerprint;  // DataFingerprint of the input (see below)
  std::string engine_version;    // HOMODYNE_VERSION
  std::string timestamp_utc;     // ISO 8601, when it was written
};

// SHA-256 of bytes, as 64 lowercase hex digits (FIPS 180-4).
std::string Sha256Hex(const void* data, size_t size);
inline std::string Sha256Hex(const std::string& text) {
  return Sha256Hex(text.data(), text.size());
}

// The checkpoint folder: files homodyne_state_batch_{global_batch:06d}.h5.
class CheckpointStore {
 public:
  explicit CheckpointStore(CheckpointOptions options);

  // Writes `checkpoint` to a temporary file in the folder (created if absent), fsyncs it, renames
  // it to its final name, fsyncs the folder; mode 0600. Then deletes all but the newest keep_last
  // checkpoints. Throws InputError naming the path on any failure (full disk, permissions); a
  // failed save leaves the previous checkpoints intact and no partial file behind.
  CheckpointSaveReport Save(const Checkpoint& checkpoint);

  // The newest checkpoint in the folder that validates (readable HDF5, all fields present, the
  // SHA-256 over its content matches). Corrupt files are skipped and each adds a warning naming
  // the file and what is wrong. A valid checkpoint whose config_sha256 or data_fingerprint differs
  // from the expected ones throws CheckpointMismatchError (an InputError) saying which differs.
  // std::nullopt when the folder is absent or holds no valid checkpoint.
  std::optional<Checkpoint> LoadNewestValid(const std::string& expected_config_sha256,
                                            const std::string& expected_data_fingerprint,
                                            std::vector<std::string>* warnings) const;

  // The file a checkpoint of global_batch is saved as: the folder / homodyne_state_batch_
  // {global_batch:06d}.h5 (whether or not it exists).
  std::string PathOf(int64_t global_batch) const;

  // Checkpoint files in the folder, oldest first (by global batch in the name).
  std::vector<std::string> List() const;

  const CheckpointOptions& options() const { return options_; }

 private:
  CheckpointOptions options_;
};

}  // namespace homodyne
