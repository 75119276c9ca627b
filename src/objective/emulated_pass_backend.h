// The host emulation of the CUDA backend (emulated_pass_backend.cc; docs/backends.md): a
// DevicePassBackend whose devices run the kernels' schedule on the host. For tests only: it is
// compiled into the test library homodyne_testing (src/objective/CMakeLists.txt), which the tests
// link and which is neither installed nor exported; homodyne_objective and the programs do not
// contain it, and no production code calls it (no config value or variable selects it), so it
// needs no seam of its own: a test passes the backend it makes wherever a PassBackend is taken.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/device/device_schedule.h"
#include "objective/pass_backend.h"

namespace homodyne {

// The emulated devices of MakeEmulatedPassBackend (a test hook: no config value selects them).
struct EmulatedDeviceOptions {
  int num_devices = 1;  // emulated devices, >= 1
  // Device memory each emulated device gives resident data (FreeResidentBytes: this less what it
  // holds): a small value makes the resident cache fall back to copies on every pass.
  int64_t memory_bytes = int64_t{1} << 40;
  // A test hook for the self-check: this device's block sums are off by a factor (1 + 1e-6)
  // (-1: none).
  int faulty_device = -1;
};

// What an emulated device has done since it was made: the counts of data arrays (one batch's
// values of one angle) uploaded to its resident memory and copied for a single launch.
struct EmulatedDeviceCounters {
  int64_t resident_uploads = 0;  // arrays uploaded once, kept for later passes
  int64_t launch_copies = 0;     // arrays copied for one launch (streamed or not resident)
  int64_t launches = 0;
  // Of the launches: full passes that built the Gram point by point (ThreadGramPartial), and full
  // passes through per-frame sums (ThreadDataPartial: the data terms only; the static mode under
  // the linear loss, docs/design.md section 2). The others are cost passes.
  int64_t point_gram_launches = 0;
  int64_t data_sum_launches = 0;
  int64_t resident_bytes = 0;  // held now
};

// The host emulation of the CUDA backend at `geometry` (IsValidGeometry; checked) on
// options.num_devices emulated devices: a DevicePassBackend whose devices run the kernels'
// schedule on the host and model device memory (resident arrays copied into memory of their own,
// up to options.memory_bytes; launch copies of the others). kind() reports kCuda: it stands for
// the CUDA backend wherever a test needs one without a device.
std::shared_ptr<PassBackend> MakeEmulatedPassBackend(
    device_pass::LaunchGeometry geometry = device_pass::LaunchGeometry(),
    EmulatedDeviceOptions options = EmulatedDeviceOptions());

// The counters of each emulated device of a MakeEmulatedPassBackend backend, in device order.
std::vector<EmulatedDeviceCounters> EmulatedCounters(const PassBackend& emulated);

}  // namespace homodyne
