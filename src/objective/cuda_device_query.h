// The core's only door to the CUDA runtime (docs/design.md section 5): plain C++, no CUDA types.
// Defined by cuda/device_query.cu in a build with CUDA (HOMODYNE_WITH_CUDA,
// cmake/HomodyneCuda.cmake) and by cuda_device_query_stub.cc otherwise, so the code that calls it
// compiles the same in both builds (no #ifdef). src/objective/CMakeLists.txt links one or the
// other.
#pragma once

#include <string>

namespace homodyne::cuda {

// True when this build links the CUDA runtime (cuda/device_query.cu); false from the stub.
bool BuiltWithCuda();

// What the CUDA runtime reports about this machine's devices.
struct DeviceQuery {
  int device_count = 0;  // devices the runtime can use
  // Why there is none (set exactly when device_count is 0): the call and the runtime's text,
  // e.g. "cudaGetDeviceCount: no CUDA-capable device is detected".
  std::string error;
  std::string device0;  // "NAME (X GiB)" of device 0 when device_count > 0
};

// Asks the CUDA runtime. The stub (a build without CUDA) throws NotCompiledError.
DeviceQuery QueryDevices();

}  // namespace homodyne::cuda
