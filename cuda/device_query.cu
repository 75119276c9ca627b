#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "device_query.h"

namespace homodyne::cuda {

int CountDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

std::string DescribeDevice0() {
  cudaDeviceProp properties{};
  const cudaError_t status = cudaGetDeviceProperties(&properties, 0);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  char text[512];
  std::snprintf(text, sizeof(text), "%s (%.1f GiB)", properties.name,
                static_cast<double>(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace homodyne::cuda
