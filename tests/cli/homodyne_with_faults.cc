// homodyne_with_faults: the homodyne program (the objects of src/cli/, its main included) with a
// fault injector (src/base/fault_injection.h) that reads the end-to-end tests' variables, for
// tests/cli/fault_injection_test.sh and tests/cli/cli_test.sh. The production homodyne reads none
// of them (tests/cli/cli_test.sh, case fault_variables_ignored). Never installed.
//
// The variables, each unset or empty for no fault:
//   HOMODYNE_TEST_FAIL_ALLOCATION=NAME[,NAME...]  the allocations that throw std::bad_alloc: a
//       strategy's set-up (standard, large, chunked, streaming), the Ceres Jacobian
//       (ceres_jacobian), a rank's copy of all the data for the profile intervals (whole_data) or
//       a profile point's refit (profile_fit);
//   HOMODYNE_TEST_FAIL_READ_AT_BATCH=B            every streamed read of batch B fails;
//   HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=N:SIGNAL   SIGNAL is raised once N batches are done;
//   HOMODYNE_TEST_CRASH_DURING_CHECKPOINT_WRITE=1 every checkpoint save aborts half way;
//   HOMODYNE_TEST_KILL_AT_RESULT_STAGE=STAGE      SIGKILL at a stage of the result writing:
//       written:NAME, before_renames, renamed:NAME, after_renames or before_checkpoint_removal,
//       NAME a result file (fitted_data.h5, convergence_metrics.json, analysis_results_nlsq.json,
//       parameters.json; FaultInjector::KillAtResultStage);
//   HOMODYNE_TEST_FAIL_RESULT_WRITE=NAME          the write of result file NAME fails as on a full
//       disk (ENOSPC);
//   HOMODYNE_TEST_BATCH_DELAY_MS=N                every computed batch takes N ms longer, as on a
//       slow node (tests/slurm/slurm_requeue_test.sh: the fit outlasts SLURM's signal on any
//       machine).
// A malformed value exits 2 before the fit, so that a test cannot pass without its fault.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/fault_injection.h"
#include "homodyne/results.h"
#include "support/listed_faults.h"

namespace homodyne {
namespace {

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> Variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

[[noreturn]] void Malformed(const char* name, const std::string& value, const char* expected) {
  std::cerr << "homodyne_with_faults: " << name << "=" << value << ": expected " << expected
            << "\n";
  std::exit(2);
}

// A whole decimal integer, or nullopt.
std::optional<int64_t> ParseInteger(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const long long value = std::stoll(text, &used);
    if (used != text.size()) return std::nullopt;
    return static_cast<int64_t>(value);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The result-writing stages FaultInjector::KillAtResultStage is asked at.
std::vector<std::string> ResultStages() {
  std::vector<std::string> stages = {"before_renames", "after_renames",
                                     "before_checkpoint_removal"};
  for (const std::string_view name : kResultFileNames) {
    stages.push_back("written:" + std::string(name));
    stages.push_back("renamed:" + std::string(name));
  }
  return stages;
}

bool IsResultFileName(const std::string& text) {
  for (const std::string_view name : kResultFileNames) {
    if (text == name) return true;
  }
  return false;
}

// The faults the variables ask for; exits 2 on a malformed value.
test::ListedFaults* FaultsFromEnvironment() {
  auto* faults = new test::ListedFaults();
  if (const auto names = Variable("HOMODYNE_TEST_FAIL_ALLOCATION")) {
    std::stringstream list(*names);
    std::string name;
    while (std::getline(list, name, ',')) faults->failing_allocations.push_back(name);
  }
  if (const auto batch = Variable("HOMODYNE_TEST_FAIL_READ_AT_BATCH")) {
    const std::optional<int64_t> value = ParseInteger(*batch);
    if (!value || *value < 0) {
      Malformed("HOMODYNE_TEST_FAIL_READ_AT_BATCH", *batch, "a batch index >= 0");
    }
    faults->failing_batch_read = static_cast<int>(*value);
  }
  if (const auto signal = Variable("HOMODYNE_TEST_SIGNAL_AFTER_BATCHES")) {
    const size_t colon = signal->find(':');
    const std::optional<int64_t> after =
        colon == std::string::npos ? std::nullopt : ParseInteger(signal->substr(0, colon));
    const std::optional<int64_t> number =
        colon == std::string::npos ? std::nullopt : ParseInteger(signal->substr(colon + 1));
    if (!after || !number || *after < 0 || *number <= 0) {
      Malformed("HOMODYNE_TEST_SIGNAL_AFTER_BATCHES", *signal, "BATCHES:SIGNAL, e.g. 40:15");
    }
    faults->signal = SignalFault{*after, static_cast<int>(*number)};
  }
  faults->crash_in_checkpoint_write =
      Variable("HOMODYNE_TEST_CRASH_DURING_CHECKPOINT_WRITE").has_value();
  if (const auto stage = Variable("HOMODYNE_TEST_KILL_AT_RESULT_STAGE")) {
    const std::vector<std::string> stages = ResultStages();
    if (std::find(stages.begin(), stages.end(), *stage) == stages.end()) {
      Malformed("HOMODYNE_TEST_KILL_AT_RESULT_STAGE", *stage,
                "written:NAME, before_renames, renamed:NAME, after_renames or "
                "before_checkpoint_removal (NAME a result file)");
    }
    faults->kill_at_result_stage = *stage;
  }
  if (const auto name = Variable("HOMODYNE_TEST_FAIL_RESULT_WRITE")) {
    if (!IsResultFileName(*name)) {
      Malformed("HOMODYNE_TEST_FAIL_RESULT_WRITE", *name,
                "a result file name, e.g. fitted_data.h5");
    }
    faults->failing_result_write = *name;
  }
  if (const auto delay = Variable("HOMODYNE_TEST_BATCH_DELAY_MS")) {
    const std::optional<int64_t> value = ParseInteger(*delay);
    if (!value || *value < 0 || *value > 60000) {
      Malformed("HOMODYNE_TEST_BATCH_DELAY_MS", *delay, "milliseconds from 0 to 60000");
    }
    faults->batch_delay_ms = *value;
  }
  return faults;
}

// Installed by a static initialiser, so before homodyne's main runs. Never destroyed: a fit still
// running while the process exits (std::exit from a worker's error path) may still ask it.
[[maybe_unused]] const bool installed = [] {
  InstallFaultInjector(FaultsFromEnvironment());
  return true;
}();

}  // namespace
}  // namespace homodyne
