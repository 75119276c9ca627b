// Device discovery for the CUDA backend (compiled only when HOMODYNE_WITH_CUDA).
#pragma once

#include <string>

namespace homodyne::cuda {

// Number of usable CUDA devices; 0 when the driver reports none or no driver is loaded.
int CountDevices();
// "NAME (X GiB)" of device 0, or the CUDA error text when there is none.
std::string DescribeDevice0();

}  // namespace homodyne::cuda
