// PassKernel (pass_kernel.h): the per-angle coefficients, the checks of every call, and the call
// of the chosen instruction-set level's body (pass_kernel_variant.{h,cc}).
//
// Why one source compiled per level with a table of function pointers, and not GCC's target_clones
// (docs/design.md section 2b): the kernel's speed comes from inlining (vector_math.h, the Gram
// blocks) into `omp simd` loops, and each compilation of the variant source inlines everything for
// its own -march; target_clones would have to be put on every helper and gives no say over the
// choice (HOMODYNE_ISA, the level in --version and the log). And the variants keep Eigen and other
// shared templates out (pass_kernel_variant.h), so no code of one level is merged into another's.
#include "model/pass_kernel.h"

#include <cmath>
#include <numbers>

#include "homodyne/errors.h"

namespace homodyne {
namespace {

constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;
constexpr int kTile = PassKernel::kTilePoints;

// The body compiled for `level`, or nullptr when this build lacks the level (BuiltIsaLevels()).
const pass_kernel::Functions* FunctionsOf(IsaLevel level) {
  switch (level) {
#ifdef HOMODYNE_PASS_KERNEL_HAS_BASELINE
    case IsaLevel::kBaseline:
      return &pass_kernel::baseline::kFunctions;
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_AVX2
    case IsaLevel::kAvx2:
      return &pass_kernel::avx2::kFunctions;
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_AVX512
    case IsaLevel::kAvx512:
      return &pass_kernel::avx512::kFunctions;
#endif
#ifdef HOMODYNE_PASS_KERNEL_HAS_NATIVE
    case IsaLevel::kNative:
      return &pass_kernel::native::kFunctions;
#endif
    default:
      return nullptr;
  }
}

}  // namespace

PassKernel::Workspace::Workspace(int gram_size)
    : g1_diffusion_(kTile),
      dlog_g1d_(3 * kTile),
      m_shear_(kTile),
      dm_shear_(3 * kTile),
      tile_(static_cast<size_t>(kTile) * pass_kernel::PaddedTileColumns(gram_size), 0.0),
      gram_size_(gram_size) {}

PassKernel::PassKernel(const ModelEvaluation& evaluation, std::span<const double> phi_degrees,
                       std::span<const double> contrast, std::span<const double> offset,
                       IsaLevel level)
    : evaluation_(evaluation),
      laminar_(evaluation.model().mode() == AnalysisMode::kLaminarFlow),
      num_times_(evaluation.model().num_times()),
      gram_size_(evaluation.model().num_point_derivatives() + 1),
      level_(level),
      functions_(FunctionsOf(level)) {
  HOMODYNE_CHECK(phi_degrees.size() == contrast.size() && contrast.size() == offset.size());
  HOMODYNE_CHECK(functions_ != nullptr && CpuSupportsIsaLevel(level));
  for (size_t k = 0; k < phi_degrees.size(); ++k) {
    pass_kernel::AngleCoefficients angle;
    angle.contrast = contrast[k];
    angle.offset = offset[k];
    if (laminar_) {
      const double phi0 = evaluation.physical_parameters()[kPhi0];
      const double psi = (phi0 - phi_degrees[k]) * kRadiansPerDegree;
      angle.phase_per_step = evaluation.sinc_prefactor() * std::cos(psi);
      angle.dphase_dphi0_per_step =
          -evaluation.sinc_prefactor() * std::sin(psi) * kRadiansPerDegree;
    }
    angles_.push_back(angle);
  }
}

pass_kernel::Inputs PassKernel::KernelInputs() const {
  pass_kernel::Inputs inputs;
  inputs.laminar = laminar_;
  inputs.num_times = num_times_;
  inputs.gram_size = gram_size_;
  inputs.diffusion_prefactor = evaluation_.diffusion_prefactor();
  inputs.cumulative_diffusion = evaluation_.cumulative_diffusion().data();
  inputs.cumulative_diffusion_derivatives = evaluation_.cumulative_diffusion_derivatives().data();
  if (laminar_) {
    inputs.cumulative_shear = evaluation_.cumulative_shear().data();
    inputs.cumulative_shear_derivatives = evaluation_.cumulative_shear_derivatives().data();
  }
  inputs.angles = angles_.data();
  inputs.num_angles = num_angles();
  return inputs;
}

pass_kernel::Scratch PassKernel::Workspace::Pointers() {
  return {g1_diffusion_.data(), dlog_g1d_.data(), m_shear_.data(), dm_shear_.data(), tile_.data()};
}

void PassKernel::AccumulateRows(int row_begin, int row_end, std::span<const float* const> data,
                                std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                                Workspace& workspace) const {
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_);
  HOMODYNE_CHECK(data.size() == angles_.size() && grams.size() == angles_.size() &&
                 finite_points.size() == angles_.size());
  HOMODYNE_CHECK(workspace.gram_size_ == gram_size_);
  std::vector<double*> gram_data(angles_.size());
  for (size_t k = 0; k < angles_.size(); ++k) {
    HOMODYNE_CHECK(grams[k].rows() == gram_size_ && grams[k].cols() == gram_size_);
    gram_data[k] = grams[k].data();
  }
  functions_->accumulate_rows(KernelInputs(), row_begin, row_end, data.data(), gram_data.data(),
                              finite_points.data(), workspace.Pointers());
}

double PassKernel::SumSquaredResiduals(int row_begin, int row_end,
                                       std::span<const float* const> data,
                                       Workspace& workspace) const {
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_);
  HOMODYNE_CHECK(data.size() == angles_.size());
  // Per-angle sums, added in angle order at the end: the same order for every split of rows.
  std::vector<double> sums(angles_.size(), 0.0);
  functions_->sum_squared_residuals(KernelInputs(), row_begin, row_end, data.data(), sums.data(),
                                    workspace.Pointers());
  double total = 0.0;
  for (double sum : sums) total += sum;
  return total;
}

}  // namespace homodyne
