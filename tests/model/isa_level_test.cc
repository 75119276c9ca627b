// Tests of the choice of the pass kernel's instruction-set level (src/model/isa_level.h): the
// best level by default, HOMODYNE_ISA's level when the build has it and the CPU supports it, and
// a clear InputError otherwise. The CPU is a stand-in (a set of supported levels), so every case
// runs on any machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "homodyne/backend.h"
#include "homodyne/errors.h"
#include "model/isa_level.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

const std::vector<IsaLevel> kX86Build = {IsaLevel::kBaseline, IsaLevel::kAvx2, IsaLevel::kAvx512};

// A CPU that supports exactly `levels`.
auto CpuWith(std::vector<IsaLevel> levels) {
  return [levels](IsaLevel level) {
    return std::find(levels.begin(), levels.end(), level) != levels.end();
  };
}

// The message of the InputError that ChooseIsaLevel throws, or "" when it does not throw.
std::string ChoiceError(const char* requested, const std::vector<IsaLevel>& built,
                        const std::vector<IsaLevel>& cpu) {
  try {
    ChooseIsaLevel(requested, built, CpuWith(cpu));
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(IsaLevelTest, UnsetPicksTheBestLevelTheCpuSupports) {
  const std::vector<IsaLevel> avx2_cpu = {IsaLevel::kBaseline, IsaLevel::kAvx2};
  EXPECT_EQ(ChooseIsaLevel(nullptr, kX86Build, CpuWith(avx2_cpu)), IsaLevel::kAvx2);
  EXPECT_EQ(ChooseIsaLevel(nullptr, kX86Build, CpuWith(kX86Build)), IsaLevel::kAvx512);
  EXPECT_EQ(ChooseIsaLevel(nullptr, kX86Build, CpuWith({IsaLevel::kBaseline})),
            IsaLevel::kBaseline);
  // An empty value counts as unset.
  EXPECT_EQ(ChooseIsaLevel("", kX86Build, CpuWith(avx2_cpu)), IsaLevel::kAvx2);
}

TEST(IsaLevelTest, RequestedLevelIsUsedWhenBuiltAndSupported) {
  EXPECT_EQ(ChooseIsaLevel("baseline", kX86Build, CpuWith(kX86Build)), IsaLevel::kBaseline);
  EXPECT_EQ(ChooseIsaLevel("avx2", kX86Build, CpuWith(kX86Build)), IsaLevel::kAvx2);
  EXPECT_EQ(ChooseIsaLevel("avx512", kX86Build, CpuWith(kX86Build)), IsaLevel::kAvx512);
  const std::vector<IsaLevel> native_build = {IsaLevel::kNative};
  EXPECT_EQ(ChooseIsaLevel("native", native_build, CpuWith(native_build)), IsaLevel::kNative);
}

TEST(IsaLevelTest, LevelTheCpuLacksIsRefusedWithWhatItSupports) {
  const std::string message =
      ChoiceError("avx512", kX86Build, {IsaLevel::kBaseline, IsaLevel::kAvx2});
  EXPECT_THAT(message, HasSubstr("HOMODYNE_ISA = 'avx512': this CPU lacks x86-64-v4 (AVX-512)"));
  EXPECT_THAT(message, HasSubstr("it supports baseline, avx2"));
}

TEST(IsaLevelTest, UnknownLevelIsRefusedWithTheList) {
  const std::string message = ChoiceError("AVX512", kX86Build, kX86Build);
  EXPECT_THAT(message, HasSubstr("HOMODYNE_ISA = 'AVX512': unknown instruction-set level"));
  EXPECT_THAT(message, HasSubstr("must be one of baseline, avx2, avx512"));
}

TEST(IsaLevelTest, LevelTheBuildLacksIsRefusedWithTheBuildsLevels) {
  // A build for another processor (aarch64: baseline only), and a HOMODYNE_NATIVE_ARCH=ON build.
  EXPECT_THAT(ChoiceError("avx2", {IsaLevel::kBaseline}, {IsaLevel::kBaseline}),
              HasSubstr("HOMODYNE_ISA = 'avx2': this build has no such kernel; it has baseline"));
  EXPECT_THAT(ChoiceError("baseline", {IsaLevel::kNative}, {IsaLevel::kNative}),
              HasSubstr("this build has no such kernel; it has native"));
  EXPECT_THAT(ChoiceError("native", kX86Build, kX86Build),
              HasSubstr("it has baseline, avx2, avx512"));
}

TEST(IsaLevelTest, ThisBuildsLevelsAscendAndTheLowestRunsHere) {
  const std::span<const IsaLevel> built = BuiltIsaLevels();
  ASSERT_FALSE(built.empty());
  EXPECT_TRUE(std::is_sorted(built.begin(), built.end()));
  EXPECT_TRUE(CpuSupportsIsaLevel(built.front()));
#if defined(__x86_64__)
  // An x86-64 build is portable (baseline, avx2, avx512; baseline alone with a compiler that
  // lacks the level names) or native (native only).
  const std::vector<IsaLevel> levels(built.begin(), built.end());
  EXPECT_TRUE(levels == kX86Build || levels == std::vector<IsaLevel>{IsaLevel::kBaseline} ||
              levels == std::vector<IsaLevel>{IsaLevel::kNative});
#endif
}

TEST(IsaLevelTest, ProcessLevelIsNamedInTheDescription) {
  // ctest runs this without HOMODYNE_ISA: the best level of the build for this CPU.
  const IsaLevel active = ActiveIsaLevel();
  EXPECT_TRUE(CpuSupportsIsaLevel(active));
  EXPECT_THAT(CpuKernelDescription(),
              HasSubstr("pass kernel " + std::string(ToString(active)) + ": "));
}

}  // namespace
}  // namespace homodyne
