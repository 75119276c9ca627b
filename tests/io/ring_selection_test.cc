// Tests of the selection of several q rings (docs/configuration.md, Several q rings): lists and
// `all` in both layouts, the joint data set (a q per matrix), data_filtering, and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io_test_util.h"

namespace homodyne {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_io::SelectionFor;
using testing_io::StoredValue;
using testing_io::TempDirTest;
using testing_io::TestFileSpec;
using testing_io::WriteTestFile;

// 3 rings x 2 angles, ring-major: matrix k is ring k / 2, angle k % 2.
TestFileSpec ThreeRings(FileLayout layout) {
  TestFileSpec spec;
  spec.layout = layout;
  spec.num_matrices = 6;
  if (layout == FileLayout::kApsU) {
    spec.q_values = {0.0054, 0.0060, 0.0048};
    spec.phi_values = {0.0, 90.0};
    spec.bins = {1, 2, 3, 4, 5, 6};
  } else {
    spec.q_values = {0.0054, 0.0054, 0.0060, 0.0060, 0.0048, 0.0048};
    spec.phi_values = {0.0, 90.0, 0.0, 90.0, 0.0, 90.0};
  }
  return spec;
}

std::vector<double> QsOf(const DatasetInfo& info) {
  std::vector<double> qs;
  for (const AngleInfo& angle : info.angles) qs.push_back(angle.q_inv_angstrom);
  return qs;
}

class RingSelectionTest : public TempDirTest, public ::testing::WithParamInterface<FileLayout> {};

TEST_P(RingSelectionTest, AListSelectsEachRingExactlyInItsOrder) {
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, ThreeRings(GetParam()));
  DataSelection selection = SelectionFor(path);
  selection.wavevector_q_list = {0.0061, 0.0054};  // 0.0061: within 10 % of the ring 0.0060

  const std::vector<RingInfo> rings = ListSelectedRings(selection);

  ASSERT_EQ(rings.size(), 2u);
  EXPECT_DOUBLE_EQ(rings[0].q_inv_angstrom, 0.0060);
  EXPECT_DOUBLE_EQ(rings[1].q_inv_angstrom, 0.0054);
  EXPECT_THAT(rings[0].phi_degrees, ElementsAre(0.0, 90.0));
  EXPECT_EQ(rings[0].num_raw_frames, 20);
  EXPECT_EQ(rings[0].num_fit_points(), 2 * 19 * 18);
  // One ring alone (an independent fit): only its own matrices, in APS-old too (no q window,
  // which would take every bin of this file: fewer than 5 in the window).
  const DatasetInfo one = InspectDataset(SelectionOfRing(selection, rings[1]));
  EXPECT_THAT(QsOf(one), ElementsAre(0.0054, 0.0054));
  EXPECT_DOUBLE_EQ(one.q_inv_angstrom, 0.0054);
}

TEST_P(RingSelectionTest, TheJointDataSetHoldsEveryRingsMatricesWithTheirQ) {
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, ThreeRings(GetParam()));
  DataSelection selection = SelectionFor(path);
  selection.all_q_rings = true;
  selection.q_fit = QFitMode::kJoint;

  const DataSelection joint = JointSelection(selection);
  std::unique_ptr<BatchSource> source = OpenBatchSource(joint);

  // `all`: ascending q; ring after ring, file order within a ring.
  EXPECT_THAT(joint.wavevector_q_list, ElementsAre(0.0048, 0.0054, 0.0060));
  EXPECT_FALSE(joint.all_q_rings);
  const DatasetInfo& info = source->info();
  EXPECT_THAT(QsOf(info), ElementsAre(0.0048, 0.0048, 0.0054, 0.0054, 0.0060, 0.0060));
  ASSERT_EQ(info.num_angles(), 6);
  EXPECT_DOUBLE_EQ(info.angles[1].phi_degrees, 90.0);
  // The values are those of each ring's own matrices (file matrices 4, 5, 0, 1, 2, 3).
  const std::vector<int> matrices = {4, 5, 0, 1, 2, 3};
  const int n = info.num_times();
  std::vector<double> row(static_cast<size_t>(n - 1));
  for (int a = 0; a < info.num_angles(); ++a) {
    source->ReadUpperTriangleRows(a, 0, 1, std::span<double>(row));
    EXPECT_NEAR(row[0], StoredValue(matrices[static_cast<size_t>(a)], 1, 2), 1e-12)
        << "angle " << a;
  }
}

TEST_P(RingSelectionTest, DataFilteringSelectsRingsAndAngles) {
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, ThreeRings(GetParam()));
  DataSelection selection = SelectionFor(path);
  selection.all_q_rings = true;
  selection.data_q_range = std::make_pair(0.0050, 0.0070);
  selection.data_phi_range = PhiRange{45.0, 135.0};

  const std::vector<RingInfo> rings = ListSelectedRings(selection);

  ASSERT_EQ(rings.size(), 2u);
  EXPECT_DOUBLE_EQ(rings[0].q_inv_angstrom, 0.0054);
  EXPECT_DOUBLE_EQ(rings[1].q_inv_angstrom, 0.0060);
  EXPECT_THAT(rings[1].phi_degrees, ElementsAre(90.0));
  // On the single-ring selection (one number) phi_range applies too: APS-U keeps the ring,
  // APS-old its window (here every bin: fewer than 5 within 10 % of q, docs/design.md section 8).
  DataSelection single = SelectionFor(path, 0.0054);
  single.data_phi_range = PhiRange{-10.0, 10.0};
  const DatasetInfo info = InspectDataset(single);
  if (GetParam() == FileLayout::kApsU) {
    EXPECT_THAT(QsOf(info), ElementsAre(0.0054));
    EXPECT_THAT(info.phi_filtered_out, ElementsAre(90.0));
  } else {
    EXPECT_THAT(QsOf(info), ElementsAre(0.0054, 0.0060, 0.0048));
    EXPECT_THAT(info.phi_filtered_out, ElementsAre(90.0, 90.0, 90.0));
  }
  EXPECT_DOUBLE_EQ(info.angles[0].phi_degrees, 0.0);
}

TEST_P(RingSelectionTest, DataFilteringKeepingNothingFallsBackOrFails) {
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, ThreeRings(GetParam()));
  DataSelection selection = SelectionFor(path);
  selection.all_q_rings = true;
  selection.data_q_range = std::make_pair(0.1, 0.2);

  EXPECT_EQ(ListSelectedRings(selection).size(), 3u);  // fallback_on_empty: every ring
  EXPECT_THAT(InspectDataset(selection).warnings.back(),
              HasSubstr("data_filtering.q_range = [0.1, 0.2] keeps none of the rings"));
  selection.data_filtering_fallback_on_empty = false;
  try {
    ListSelectedRings(selection);
    FAIL() << "no DataError";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), HasSubstr("data_filtering.fallback_on_empty = false"));
  }
}

TEST_P(RingSelectionTest, AListedQAbsentFromTheFileNamesTheKeyAndTheRings) {
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, ThreeRings(GetParam()));
  DataSelection selection = SelectionFor(path);
  selection.wavevector_q_list = {0.0054, 0.0090};

  try {
    ListSelectedRings(selection);
    FAIL() << "no DataError";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), ::testing::StartsWith(path));
    EXPECT_THAT(error.what(),
                HasSubstr("analyzer_parameters.scattering.wavevector_q[1]: wavevector q = 0.009 "
                          "1/A is not present: the closest available q is 0.006 1/A"));
    EXPECT_THAT(error.what(), HasSubstr("the file's rings: 0.0048, 0.0054, 0.006"));
  }
  selection.wavevector_q_list = {0.0054, 0.0055};  // the same ring twice
  try {
    ListSelectedRings(selection);
    FAIL() << "no DataError";
  } catch (const DataError& error) {
    EXPECT_THAT(error.what(), HasSubstr("select the same ring, q = 0.0054 1/A"));
  }
}

TEST_P(RingSelectionTest, PhiSelectionKeepsTheAngleOfEveryRing) {
  const std::string path = PathOf("rings.h5");
  WriteTestFile(path, ThreeRings(GetParam()));
  DataSelection selection = SelectionFor(path);
  selection.wavevector_q_list = {0.0054, 0.0060};
  selection.phi_selected_degrees = {90.0};

  const DatasetInfo info = InspectDataset(selection);

  EXPECT_THAT(QsOf(info), ElementsAre(0.0054, 0.0060));
  EXPECT_DOUBLE_EQ(info.angles[0].phi_degrees, 90.0);
  EXPECT_DOUBLE_EQ(info.angles[1].phi_degrees, 90.0);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, RingSelectionTest,
                         ::testing::Values(FileLayout::kApsU, FileLayout::kApsOld),
                         [](const auto& layout) { return std::string(ToString(layout.param)); });

}  // namespace
}  // namespace homodyne
