// A FaultInjector (src/base/fault_injection.h) for gtests: the faults are listed in its fields
// and installed for a scope with ScopedFaultInjector, e.g.
//   test::ListedFaults faults;
//   faults.failing_allocations = {"ceres_jacobian"};
//   const ScopedFaultInjector installed(faults);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/fault_injection.h"

namespace homodyne::test {

struct ListedFaults final : FaultInjector {
  std::vector<std::string> failing_allocations;  // sites as FaultInjector::FailAllocation names
  std::optional<int> failing_batch_read;         // every streamed read of this batch fails
  std::optional<SignalFault> signal;             // raised once after its batch count
  bool crash_in_checkpoint_write = false;        // every CheckpointStore::Save aborts half way
  std::string kill_at_result_stage;              // SIGKILL at this result-writing stage
  std::string failing_result_write;              // this result file's write fails (ENOSPC)
  int64_t batch_delay_ms = 0;                    // every counted batch takes this much longer

  bool FailAllocation(std::string_view site) const override {
    for (const std::string& name : failing_allocations) {
      if (name == site) return true;
    }
    return false;
  }
  bool FailBatchRead(int batch_index) const override {
    return failing_batch_read && *failing_batch_read == batch_index;
  }
  std::optional<SignalFault> SignalAfterBatches() const override { return signal; }
  bool CrashDuringCheckpointWrite() const override { return crash_in_checkpoint_write; }
  bool KillAtResultStage(std::string_view stage) const override {
    return !kill_at_result_stage.empty() && stage == kill_at_result_stage;
  }
  bool FailResultWrite(std::string_view name) const override {
    return !failing_result_write.empty() && name == failing_result_write;
  }
  int64_t BatchDelayMilliseconds() const override { return batch_delay_ms; }
};

}  // namespace homodyne::test
