// src/objective/cuda_device_query.h on the CUDA runtime (built when HOMODYNE_WITH_CUDA).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "objective/cuda_device_query.h"

namespace homodyne::cuda {

bool BuiltWithCuda() { return true; }

DeviceQuery QueryDevices() {
  DeviceQuery query;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    query.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    return query;
  }
  if (count == 0) {
    query.error = "cudaGetDeviceCount: 0 devices";
    return query;
  }
  query.device_count = count;
  cudaDeviceProp properties{};
  const cudaError_t properties_status = cudaGetDeviceProperties(&properties, 0);
  if (properties_status != cudaSuccess) {
    query.error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(properties_status);
    query.device_count = 0;  // not usable
    return query;
  }
  char text[512];
  std::snprintf(text, sizeof(text), "%s (%.1f GiB)", properties.name,
                static_cast<double>(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  query.device0 = text;
  return query;
}

}  // namespace homodyne::cuda
