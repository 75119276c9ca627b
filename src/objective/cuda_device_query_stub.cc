// cuda_device_query.h in a build without CUDA (HOMODYNE_WITH_CUDA off): no runtime to ask.
#include "objective/cuda_device_query.h"

#include "homodyne/errors.h"

namespace homodyne::cuda {

bool BuiltWithCuda() { return false; }

DeviceQuery QueryDevices() {
  throw NotCompiledError("CUDA device query: this homodyne was built without CUDA");
}

}  // namespace homodyne::cuda
