// The phi0 mirror check (src/pipeline/phi0_mirror.h; docs/results.md, The phi0 mirror check):
// which angle sets cannot tell phi0 from its mirror, and on simulated laminar_flow data (truth
// phi0 = +3) that angles 0 and 90 give a warning naming both values and their chi2, with both in
// the result, while 0, 30 and 90 give no check at all.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/fit.h"
#include "laminar_data.h"
#include "optimize/number_text.h"
#include "pipeline/phi0_mirror.h"

namespace homodyne {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Phi0MirrorTest, AnglesThatAgreeModulo90HaveAMirror) {
  EXPECT_NEAR(Phi0Mirror({0.0, 90.0}, 3.0, -10.0, 10.0).value(), -3.0, 1e-12);
  EXPECT_NEAR(Phi0Mirror({0.0}, 3.0, -10.0, 10.0).value(), -3.0, 1e-12);
  EXPECT_NEAR(Phi0Mirror({-90.0, 0.0, 90.0, 180.0}, 3.0, -10.0, 10.0).value(), -3.0, 1e-12);
  // A single angle 20: the mirror of 3 is 2 * 20 - 3.
  EXPECT_NEAR(Phi0Mirror({20.0}, 3.0, -90.0, 90.0).value(), 37.0, 1e-12);
  // Within the tolerance (0.5 deg modulo 90) the axis is the angles' mean.
  EXPECT_NEAR(Phi0Mirror({0.2, 90.0}, 3.0, -10.0, 10.0).value(), -2.8, 1e-12);
}

TEST(Phi0MirrorTest, AnglesThatDisagreeModulo90HaveNone) {
  EXPECT_FALSE(Phi0Mirror({0.0, 30.0, 90.0}, 3.0, -10.0, 10.0).has_value());
  EXPECT_FALSE(Phi0Mirror({0.0, 45.0, 90.0}, 3.0, -10.0, 10.0).has_value());
  EXPECT_FALSE(Phi0Mirror({0.0, 91.0}, 3.0, -10.0, 10.0).has_value());
  EXPECT_FALSE(Phi0Mirror({}, 3.0, -10.0, 10.0).has_value());
}

TEST(Phi0MirrorTest, MirrorOutsideTheBoundsIsNamedButNotReturned) {
  double outside = 0.0;
  // 45 and 135: the mirror of 3 is 87 (modulo 180; -93 is farther from the bounds), outside
  // [-10, 10].
  EXPECT_FALSE(Phi0Mirror({45.0, 135.0}, 3.0, -10.0, 10.0, &outside).has_value());
  EXPECT_NEAR(outside, 87.0, 1e-12);
  EXPECT_NEAR(Phi0Mirror({45.0, 135.0}, 3.0, 0.0, 100.0).value(), 87.0, 1e-12);
  // Bounds on one side of the axis choose the sign.
  EXPECT_FALSE(Phi0Mirror({0.0, 90.0}, 3.0, 0.0, 10.0, &outside).has_value());
  EXPECT_NEAR(outside, -3.0, 1e-12);
}

// Laminar-flow data at `phi` for a truth with phi0 = +3, fitted from the truth with the global
// phase off (the mirror check is what is tested, not the search).
FitResult FitAtAngles(const std::vector<double>& phi) {
  // D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0.
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 3.0};
  const std::vector<double> c2 = test::LaminarC2(truth, phi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, phi));
  Config config = ParseConfig(test::kLaminarConfig, "phi0_mirror_test");
  config.initial.values = truth;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;
  return Fit(config, *source).result;
}

TEST(Phi0MirrorTest, AnglesZeroAndNinetyWarnWithBothValues) {
  const FitResult result = FitAtAngles({0.0, 90.0});
  const Phi0MirrorRecord& mirror = result.phi0_mirror;
  ASSERT_TRUE(mirror.checked);
  EXPECT_TRUE(mirror.tie);
  EXPECT_EQ(mirror.measure, "chi2");
  EXPECT_NEAR(mirror.phi0, 3.0, 1.0);
  EXPECT_NEAR(mirror.mirror_phi0, -mirror.phi0, 0.05);
  EXPECT_GT(mirror.phi0_uncertainty, 0.0);
  EXPECT_LE(std::abs(mirror.mirror_cost - mirror.cost), result.reduced_chi_squared);
  EXPECT_NE(result.quality_flag, "good");
  EXPECT_THAT(result.quality_reasons,
              ::testing::Contains(::testing::HasSubstr("the sign of phi0 is not determined")));
  const auto warning =
      std::find_if(result.warnings.begin(), result.warnings.end(),
                   [](const std::string& w) { return w.find("phi0 mirror") == 0; });
  ASSERT_NE(warning, result.warnings.end());
  EXPECT_THAT(*warning,
              HasSubstr("the angles (0, 90 deg) cannot tell phi0 = " + FormatNumber(mirror.phi0)));
  EXPECT_THAT(*warning, HasSubstr("from phi0 = " + FormatNumber(mirror.mirror_phi0)));
  EXPECT_THAT(*warning, HasSubstr("chi2 " + FormatNumber(mirror.cost)));
  EXPECT_THAT(*warning, HasSubstr("chi2 " + FormatNumber(mirror.mirror_cost)));
  EXPECT_THAT(*warning, HasSubstr("bounds of phi0 on one side of 0 choose one"));
}

TEST(Phi0MirrorTest, AnglesZeroThirtyNinetyHaveNoCheck) {
  const FitResult result = FitAtAngles({0.0, 30.0, 90.0});
  EXPECT_FALSE(result.phi0_mirror.checked);
  EXPECT_THAT(result.warnings, Not(Contains(HasSubstr("phi0 mirror"))));
  // The asymmetric set determines the sign: phi0 near the truth, not its mirror.
  const auto phi0 = std::find_if(result.physical.begin(), result.physical.end(),
                                 [](const ParameterEstimate& p) { return p.name == "phi0"; });
  ASSERT_NE(phi0, result.physical.end());
  EXPECT_NEAR(phi0->value, 3.0, 5.0 * phi0->uncertainty + 0.1);
}

}  // namespace
}  // namespace homodyne
