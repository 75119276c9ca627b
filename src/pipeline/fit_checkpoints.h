// Checkpoints, resume and interruption of one fit (docs/design.md sections 6 and 7): when to save,
// what goes in, what a signal does (the flag it sets is in interrupts.h, FitInterrupted in fit.h).
// The file format and the folder live in src/checkpoint/ (checkpoint_file.h, checkpoint_store.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/fault_injection.h"
#include "checkpoint/checkpoint_lock.h"
#include "checkpoint/checkpoint_store.h"
#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/fit.h"
#include "optimize/levenberg_marquardt.h"

namespace homodyne {

// The resolved settings that determine a fit's numbers, as text; its SHA-256 identifies the
// config in checkpoints. Every Config field whose role in fit_identity.h is kNumbers or
// kInputFile (threads, output paths and checkpoint settings are not), plus what was resolved:
// batch_points (points per angle in a batch) and global_search_method (the method ResolveConfig
// settled, GlobalSearchOptions::method).
std::string FitIdentityText(const Config& config, int64_t batch_points,
                            GlobalSearchMethod global_search_method);

// What a checkpoint must hold to be resumed by a fit: the sizes of its parameter vectors.
struct CheckpointLayout {
  int num_reduced = 0;  // parameters the fit optimises (LM state, global-search minima)
  int num_full = 0;     // parameters of the objective (a pass's point and sums)
  int num_batches = 0;  // batches of one pass
};
// Throws CheckpointMismatchError (naming the checkpoint, the sizes and the way out) when it does
// not fit `layout`: a checkpoint of another config must never reach the optimisers' invariant
// checks, even if the identity missed what made it different.
void CheckCheckpointFits(const Checkpoint& checkpoint, const CheckpointLayout& layout,
                         const std::string& directory);
// Throws CheckpointMismatchError (naming the checkpoint, both optimisers and the flags and config
// key that resume it) when `checkpoint` holds a fit state of the other optimiser than `solver`:
// Ceres and the LM core keep different states, and one cannot continue the other's.
void CheckCheckpointSolver(const Checkpoint& checkpoint, StateSolver solver,
                           const std::string& directory);

// The line that announces a resume, at a level --quiet still shows (docs/checkpoints.md, How
// resume picks a file): "resuming from PATH (batch B, written AGE ago by homodyne-cpp
// VERSION); --no-resume starts afresh". AGE is now minus checkpoint.timestamp_utc (ISO 8601,
// UTC) in whole seconds ("42 s"), minutes below 2 hours ("3 min"), hours below 2 days ("5 h") or
// days ("3 days"); a timestamp that does not parse or lies ahead of now is quoted instead
// ("written at TIMESTAMP").
// path: the checkpoint's file.
std::string ResumeAnnouncement(const Checkpoint& checkpoint, const std::string& path,
                               std::chrono::system_clock::time_point now);

// Path, size, modification time, shape and a SHA-256 of sampled rows (first, middle and last row
// of every angle) of the input: a checkpoint of another data set is refused. Reads the source:
// call it before passes start (a streaming source's reader thread reads it during passes).
std::string DataFingerprint(BatchSource& source);

// The fingerprint's last line for a data file, "\ncontent_crc32=C of every byte" (or "of B
// bytes"): the CRC-32 of its bytes, all of them up to 1 GiB, else 1 GiB in blocks spread over it
// (file_checksum.h), so that a checkpoint of this file edited in place since, its size and
// modification time kept, is refused. "" when file_path is not a regular file (data from memory).
// Reads the file itself (not through a BatchSource), up to 1 GiB: FitCheckpoints asks for it only
// when it saves or compares a checkpoint. Throws std::runtime_error naming the file on a failed
// read.
std::string DataContentFingerprintLine(const std::string& file_path);

// When a strategy's checkpoints are written (docs/design.md section 6;
// FitStrategy::checkpoint_policy).
struct CheckpointPolicy {
  // Periodic saves inside passes, at chunk ends (chunked, streaming: a pass is long).
  bool save_inside_passes = false;
  // Periodic saves at iteration ends (standard, large: a pass is short).
  bool save_at_iterations = false;
  // The optimiser calls no chunk callback (Ceres): the passes it reports at iteration ends count
  // as batches, and a signal stops it there (OnIteration returns false).
  bool passes_from_iterations = false;
};

class FitCheckpoints {
 public:
  // policy: the strategy's (when periodic saves are written). batches_per_pass: the batches of
  // one pass over the data; an optimiser that reports passes, not batches
  // (policy.passes_from_iterations), counts its passes in these. on_saved: called after each
  // checkpoint written (FitObserver::on_checkpoint_saved; may be empty).
  // data_fingerprint: computes the input's whole fingerprint (DataFingerprint and
  // DataContentFingerprintLine), called at most once, when the first checkpoint is saved or
  // compared, possibly while a pass runs: it must not read the fit's BatchSource.
  FitCheckpoints(const Config& config, CheckpointPolicy policy, std::string config_sha256,
                 std::function<std::string()> data_fingerprint, int64_t batches_per_pass,
                 std::function<void(const CheckpointSaveReport&)> on_saved = {});

  bool enabled() const { return enabled_; }
  // The checkpoint folder's lock, held until the last owner drops it (FitOutcome keeps it until
  // the result files are durable and the checkpoints removed); null when checkpoints are disabled
  // or the folder could not be locked.
  const std::shared_ptr<FolderLock>& folder_lock() const { return folder_lock_; }
  const CheckpointOptions& store_options() const { return store_.options(); }
  // With resuming off (--no-resume), deletes the folder's checkpoints and returns nothing.
  // The newest valid checkpoint of this config and data when resuming is on; corrupt files are
  // skipped with a warning (appended to warnings()). Throws InputError for a checkpoint of
  // another config or data set.
  std::optional<Checkpoint> LoadForResume();
  // Continues the counters of a loaded checkpoint (global batch, statistics), and announces the
  // resume (ResumeAnnouncement) as a warning, so that --quiet shows it too.
  void ContinueFrom(const Checkpoint& checkpoint);

  // After a fallback to another strategy in the middle of the fit (StrategyFallback: the Ceres
  // Jacobian did not fit in memory, the LM core goes on as large), count batches and save as
  // that strategy does.
  void FollowPolicy(CheckpointPolicy policy) { policy_ = policy; }

  // The LM callback: remembers the state after each iteration; saves it when a periodic save is
  // due and policy.save_at_iterations. Returns true, except after a signal under
  // policy.passes_from_iterations: false stops the (Ceres) fit, and StopIfInterrupted then saves.
  bool OnIteration(const LevenbergMarquardtIteration& iteration);
  // After a fit stopped by OnIteration: on a signal, saves the last state and throws
  // FitInterrupted (as OnChunk does inside passes); else returns.
  void StopIfInterrupted();
  // Progress of the global phase (global_search.h): `batches` newly computed (its new passes
  // times the batches of one of its passes) are counted (statistics, the test signal hook); `trail`
  // (what the phase computed so far) goes into every checkpoint from now on, so that a resumed run
  // replays it (GlobalSearchInputs::replay) and ends bitwise where an uninterrupted one does. Saves
  // when a periodic save is due (its work is not lost to kill -9); on a signal, saves and throws
  // FitInterrupted. The trail is read only during the call (no copy per progress: the phase's trail
  // grows with it); after the phase, OnGlobalSearchFinished keeps its final trail for the saves of
  // the final fit.
  void OnGlobalSearchProgress(int64_t batches, const GlobalSearchTrail& trail);
  // The phase's last progress: as OnGlobalSearchProgress, and keeps a copy of `trail`.
  void OnGlobalSearchFinished(int64_t batches, const GlobalSearchTrail& trail);
  // The trail of a checkpoint this run resumed from (empty when none).
  const GlobalSearchTrail& global_search_trail() const { return global_search_trail_; }
  // After the final fit ended by itself (not stopped by a signal) after `iterations` iterations:
  // when none (it ended at its start), the later saves (the phases after the fit) hold no LM
  // state, since the state of iteration 0 is reported before the tests that ended the fit and a
  // run resumed from it would take a step; the resumed run does the final fit again instead.
  void OnFinalFitEnded(int iterations) {
    if (iterations == 0) last_state_.reset();
  }
  // After each profile point of the profile intervals (docs/results.md, Profile intervals),
  // computed in `passes` passes over the data (a local fit's; its passes call no chunk callback):
  // they are counted as batches (statistics, the test signal hook), `trail` (every point so far,
  // in order) goes into every checkpoint from now on, so that a resumed run takes those points
  // from it; saves when a periodic save is due, and on a signal saves and throws FitInterrupted.
  void OnProfilePoint(int64_t passes, const ProfileTrail& trail);
  // The profile points of a checkpoint this run resumed from (empty when none).
  const ProfileTrail& profile_trail() const { return profile_trail_; }
  // A profile point that this rank alone computed in `passes` passes, inside a round of the
  // spread interval ends (fit.cc SpreadIntervalEnds), whose batches every rank counts only at the
  // round's end (OnProfilePoint): until then only the injected signal's count sees them, so that
  // a test can signal one rank between two points of an end. Nothing else changes.
  void OnLocalProfilePoint(int64_t passes);
  // The chunk callback of a pass: counts batches, saves every checkpoint_frequency batches
  // (policy.save_inside_passes), and on a signal saves and throws FitInterrupted.
  void OnChunk(const PassProgress& progress);
  // After a failure that ends the fit (a batch that cannot be read): saves the last state, with
  // the partial sums of the pass in progress, so nothing computed is lost. True if saved.
  bool SaveAfterFailure();

  const BatchStatistics& statistics() const { return statistics_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  int64_t saves() const { return saves_; }

 private:
  // True when a periodic save is due: checkpoint_frequency batches and
  // checkpoint_min_interval_seconds since the last save (or the start).
  bool PeriodicSaveDue() const;
  // The data fingerprint, computed on the first call.
  const std::string& DataFingerprintText();
  // Counts finished batches; sleeps the injected delay per batch (test_batch_delay_ms_) and
  // raises the injected signal (test_signal_) once due.
  void AdvanceBatches(int64_t batches);
  // Saves the current state (with `pass` when inside a pass) and throws FitInterrupted.
  [[noreturn]] void SaveAndStop(const PassState* pass, int signal_number);
  // Saves the current state (with `pass` when inside a pass); false and a warning on failure.
  bool Save(const PassState* pass);

  bool enabled_;
  bool resume_;
  CheckpointPolicy policy_;
  int frequency_;
  double min_interval_seconds_;
  std::chrono::steady_clock::time_point last_save_time_;  // or the start
  std::string config_sha256_;
  std::function<std::string()> data_fingerprint_of_source_;
  std::optional<std::string> data_fingerprint_;  // DataFingerprintText, once computed
  CheckpointStore store_;
  std::shared_ptr<FolderLock> folder_lock_;  // from the constructor on
  std::optional<LevenbergMarquardtState> last_state_;
  std::optional<PassState> last_pass_;     // after the last finished chunk, or the resumed one
  GlobalSearchTrail global_search_trail_;  // the resumed or finished global phase's work
  ProfileTrail profile_trail_;             // the resumed or computed profile points
  // The running phase's trail, during OnGlobalSearchProgress only (what Save writes then).
  const GlobalSearchTrail* live_trail_ = nullptr;
  // The injected signal (src/base/fault_injection.h), raised once when global_batch_ reaches
  // its batch count, for deterministic interruption tests; nullopt without an injector.
  std::optional<SignalFault> test_signal_;
  int64_t test_batch_delay_ms_ = 0;  // FaultInjector::BatchDelayMilliseconds
  BatchStatistics statistics_;
  int64_t global_batch_ = 0;
  int64_t local_profile_batches_ = 0;  // OnLocalProfilePoint's since the last OnProfilePoint
  int64_t batches_at_last_save_ = 0;
  int64_t saves_ = 0;
  int64_t batches_per_pass_;
  int64_t passes_seen_ = 0;  // full and cost passes reported (policy.passes_from_iterations)
  std::vector<std::string> warnings_;
  std::function<void(const CheckpointSaveReport&)> on_saved_;
  // This process writes and removes the checkpoints and holds the folder's lock: the single
  // process, or rank 0 of a job (process_group.h); the other ranks keep the same state unsaved.
  bool writer_;
};

}  // namespace homodyne
