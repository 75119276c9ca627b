// The fault seam (src/base/fault_injection.h): no injector is installed by default;
// ScopedFaultInjector installs one for a scope and restores the one before; an injector asks for
// no fault at the points it does not override. The fault points themselves are tested where they
// are: tests/pipeline/fit_strategy_test.cc, tests/pipeline/fit_fallback_test.cc,
// tests/objective/strategies_test.cc, tests/checkpoint/checkpoint_store_test.cc and, through
// homodyne_with_faults, tests/cli/fault_injection_test.sh.
#include <gtest/gtest.h>

#include "base/fault_injection.h"

namespace homodyne {
namespace {

struct CrashOnly final : FaultInjector {
  bool CrashDuringCheckpointWrite() const override { return true; }
};

TEST(FaultInjectionTest, NoInjectorIsInstalledByDefault) {
  EXPECT_EQ(InstalledFaultInjector(), nullptr);
}

TEST(FaultInjectionTest, ScopedInjectorsNestAndRestoreThePreviousOne) {
  const CrashOnly outer;
  const CrashOnly inner;
  {
    const ScopedFaultInjector install_outer(outer);
    EXPECT_EQ(InstalledFaultInjector(), &outer);
    {
      const ScopedFaultInjector install_inner(inner);
      EXPECT_EQ(InstalledFaultInjector(), &inner);
    }
    EXPECT_EQ(InstalledFaultInjector(), &outer);
  }
  EXPECT_EQ(InstalledFaultInjector(), nullptr);
}

TEST(FaultInjectionTest, AnInjectorAsksForNoFaultWhereItDoesNotOverride) {
  const CrashOnly faults;
  const FaultInjector& injector = faults;
  EXPECT_TRUE(injector.CrashDuringCheckpointWrite());
  EXPECT_FALSE(injector.FailAllocation("standard"));
  EXPECT_FALSE(injector.FailAllocation("ceres_jacobian"));
  EXPECT_FALSE(injector.FailBatchRead(0));
  EXPECT_FALSE(injector.SignalAfterBatches().has_value());
  EXPECT_FALSE(injector.KillAtResultStage("before_renames"));
  EXPECT_FALSE(injector.FailResultWrite("parameters.json"));
}

}  // namespace
}  // namespace homodyne
