// The fault seam of docs/design.md section 7: the points where the engine asks whether a test
// wants a fault (an allocation failure, an unreadable batch, a signal, a crash inside a checkpoint
// write), so that the fallbacks, retries, interruptions and checkpoint durability can be tested
// without exhausting memory, damaging files or timing a kill. One interface, one installation
// point (docs/conventions.md habit 4); production code never reads the environment for faults.
//
// Who installs one: tests only, through this internal header (src/ is not installed, and the
// programs and the Python module see the public headers only): the gtests with
// ScopedFaultInjector, and the test program tests/cli/homodyne_with_faults.cc, which reads the
// HOMODYNE_TEST_* variables of the end-to-end tests into an injector before its main runs.
// Nothing is installed by default, and every fault point then costs one atomic load and a
// branch.
//
// In src/base/, the bottom layer (docs/design.md section 9), and header-only on purpose: src/io,
// src/checkpoint, src/objective and src/pipeline all ask it, so it belongs to none of them.
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <optional>
#include <string_view>

namespace homodyne {

// A signal to raise once a fit has computed `after_batches` batches (the batch count of
// src/pipeline/fit_checkpoints.h, global phase included).
struct SignalFault {
  int64_t after_batches = 0;
  int signal_number = 0;  // e.g. SIGTERM (15), SIGKILL (9)
};

// What a test injects. Every method answers "no fault" unless overridden, so an injector states
// only the faults it wants. Methods may be called from several threads at once (the streaming
// prefetch thread reads batches), so they must not mutate unsynchronised state.
class FaultInjector {
 public:
  virtual ~FaultInjector() = default;

  // Asked before an allocation that can exhaust memory: `site` is a strategy's name
  // (ToString(StrategyKind): "standard", "large", "chunked", "streaming") while it is set up,
  // "ceres_jacobian" before the Ceres standard fit allocates its Jacobian, "whole_data" before a
  // rank of a job copies all the data for the profile intervals (src/pipeline/fit_strategy.cc),
  // or "profile_fit" before each profile point's refit (src/pipeline/fit.cc). True: the caller
  // throws std::bad_alloc, as the allocation would.
  virtual bool FailAllocation(std::string_view /*site*/) const { return false; }

  // Asked before each read of a streamed batch (every angle, every retry;
  // src/objective/streaming_pass_data.cc), and for every batch of a chunk before the chunk's
  // one read per angle: the answer for a batch must not depend on how often it was asked. True:
  // the read throws DataError, as a truncated file or an unreadable dataset would, and the
  // retries and the stop with a checkpoint follow.
  virtual bool FailBatchRead(int /*batch_index*/) const { return false; }

  // Asked once per fit when its checkpoint orchestration starts
  // (src/pipeline/fit_checkpoints.cc): the signal to raise, once, when the fit's batch count
  // reaches after_batches; nullopt for none.
  virtual std::optional<SignalFault> SignalAfterBatches() const { return std::nullopt; }

  // Asked once per fit when its checkpoint orchestration starts (src/pipeline/fit_checkpoints.cc):
  // every computed batch then takes this many milliseconds longer (the fit sleeps that long per
  // batch counted), as on a slow node, so that a test of signals, time limits and requeues does
  // not depend on how fast the machine computes. 0: no delay. Results are unchanged.
  virtual int64_t BatchDelayMilliseconds() const { return 0; }

  // Asked by each CheckpointStore::Save (src/checkpoint/checkpoint_store.cc). True: the save
  // writes the first half of the file to its temporary file, fsyncs it and calls std::abort()
  // before the rest, the rename and the pruning: what kill -9 during a save leaves behind.
  virtual bool CrashDuringCheckpointWrite() const { return false; }

  // Asked at each stage of publishing a fit's result files (src/io/durable_file.cc,
  // DurableFileSet::Commit; src/pipeline/fit_job.cc; docs/results.md, How the files are
  // written), `stage` one of
  //   "written:NAME"               the temporary file of NAME (e.g. parameters.json) is complete
  //                                and fsynced;
  //   "before_renames"             every temporary file is durable, nothing is renamed yet;
  //   "renamed:NAME"               NAME has its new contents (the previous files are removed);
  //   "after_renames"              every file is renamed and the folder fsynced;
  //   "before_checkpoint_removal"  the results are durable, the checkpoints still there.
  // True: the process raises SIGKILL there (KillIfInjectedAt), what a kill -9 or a node failure
  // at that moment leaves behind.
  virtual bool KillAtResultStage(std::string_view /*stage*/) const { return false; }

  // Asked for each result file (`name`, e.g. fitted_data.h5) once its temporary file is written,
  // before its fsync (DurableFileSet::Commit). True: the write fails as on a full disk (the OS
  // reason ENOSPC, "No space left on device"), after its bytes went to the temporary file.
  virtual bool FailResultWrite(std::string_view /*name*/) const { return false; }
};

namespace fault_injection_internal {
// The installed injector, process-wide; constant-initialised to none, so it is valid before any
// static constructor (homodyne_with_faults installs from one).
inline std::atomic<const FaultInjector*> installed{nullptr};
}  // namespace fault_injection_internal

// Installs `injector` for every fit of the process from now on (nullptr: none). The caller keeps
// ownership; the injector must outlive every fit that runs while it is installed. Install between
// fits, not during one.
inline void InstallFaultInjector(const FaultInjector* injector) {
  fault_injection_internal::installed.store(injector, std::memory_order_release);
}

// The installed injector, or nullptr (the default): callers skip the fault point then.
inline const FaultInjector* InstalledFaultInjector() {
  return fault_injection_internal::installed.load(std::memory_order_acquire);
}

// The fault point of a result-writing stage (FaultInjector::KillAtResultStage): raises SIGKILL when
// the installed injector asks for it at `stage`; without an injector, one atomic load.
inline void KillIfInjectedAt(std::string_view stage) {
  const FaultInjector* faults = InstalledFaultInjector();
  if (faults != nullptr && faults->KillAtResultStage(stage)) std::raise(SIGKILL);
}

// Installs an injector for a scope (a test), then restores the one installed before.
class ScopedFaultInjector {
 public:
  explicit ScopedFaultInjector(const FaultInjector& injector)
      : previous_(InstalledFaultInjector()) {
    InstallFaultInjector(&injector);
  }
  ~ScopedFaultInjector() { InstallFaultInjector(previous_); }
  ScopedFaultInjector(const ScopedFaultInjector&) = delete;
  ScopedFaultInjector& operator=(const ScopedFaultInjector&) = delete;

 private:
  const FaultInjector* previous_;
};

}  // namespace homodyne
