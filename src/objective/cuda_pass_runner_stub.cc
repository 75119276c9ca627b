// cuda_pass_runner.h in a build without CUDA (HOMODYNE_WITH_CUDA off): no kernels to run.
#include "objective/cuda_pass_runner.h"

#include "homodyne/errors.h"

namespace homodyne::cuda {

std::unique_ptr<PassRunner> MakePassRunner(int /*device*/) {
  throw NotCompiledError("CUDA pass kernels: this homodyne was built without CUDA");
}

}  // namespace homodyne::cuda
