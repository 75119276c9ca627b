// The Ceres fallback in the middle of a fit: when the standard strategy's Ceres Jacobian does not
// fit in memory (an allocation failure injected at "ceres_jacobian",
// src/base/fault_injection.h), the LM core goes on as the large strategy. It must then be the
// LM-core fit in every number: the same parameters, chi2 and iterations as `--solver lm`, and
// batch statistics counted once (as large counts them: from pass chunks), not also from
// iterations as the Ceres policy does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/fault_injection.h"
#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/fit.h"
#include "laminar_data.h"
#include "support/listed_faults.h"

namespace homodyne {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

FitResult FitWithSolver(LmSolver solver) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.3, 0.0, 4.0};
  const std::vector<double> phi = {0.0, 60.0};
  const std::vector<double> c2 = test::LaminarC2(truth, phi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, phi));
  Config config = ParseConfig(test::kLaminarConfig, "fit_fallback_test");
  config.initial.values = std::vector<double>{1000.0, -0.5, 0.0, 1e-4, 0.0, 0.0, 0.0};
  config.nlsq.solver = solver;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;  // as --global-search off
  return Fit(config, *source).result;
}

TEST(FitFallbackTest, CeresJacobianFallbackIsTheLmCoreFit) {
  const FitResult lm = FitWithSolver(LmSolver::kLmCore);
  test::ListedFaults faults;
  faults.failing_allocations = {"ceres_jacobian"};
  const FitResult fallback = [&] {
    const ScopedFaultInjector installed(faults);
    return FitWithSolver(LmSolver::kCeres);
  }();

  EXPECT_EQ(fallback.strategy, "large");
  EXPECT_THAT(fallback.recovery_actions,
              Contains(HasSubstr("ran out of memory for its Jacobian; fell back to large")));
  ASSERT_EQ(fallback.physical.size(), lm.physical.size());
  for (size_t p = 0; p < lm.physical.size(); ++p) {
    EXPECT_EQ(fallback.physical[p].value, lm.physical[p].value) << lm.physical[p].name;
    EXPECT_EQ(fallback.physical[p].uncertainty, lm.physical[p].uncertainty) << lm.physical[p].name;
  }
  EXPECT_EQ(fallback.chi_squared, lm.chi_squared);
  EXPECT_EQ(fallback.iterations, lm.iterations);
  EXPECT_GT(lm.batch_statistics.batches, 0);
  EXPECT_EQ(fallback.batch_statistics.batches, lm.batch_statistics.batches);
}

}  // namespace
}  // namespace homodyne
