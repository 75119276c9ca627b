// Every element of every case of tests/data/reference_c2.h5 (computed by the reference package;
// docs/model.md, Test numbers) within 1e-10 absolute, through ComputeC2Matrix and through
// EvaluateUpperTriangleRows (packed order: row i, j = i+1..N-1).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "homodyne/model.h"

namespace homodyne {
namespace {

constexpr double kTolerance = 1e-10;
const char* const kReferenceFile = HOMODYNE_TEST_DATA_DIR "/reference_c2.h5";

// Owns one HDF5 identifier and closes it with the matching H5*close.
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~H5Handle() {
    if (id_ >= 0) closer_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  Closer closer_;
};

std::vector<double> ReadDoubles(hid_t group, const char* name) {
  const H5Handle dataset(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) ADD_FAILURE() << "missing dataset " << name;
  const H5Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  std::vector<double> values(static_cast<std::size_t>(count));
  if (H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
    ADD_FAILURE() << "cannot read " << name;
  }
  return values;
}

double ReadDoubleAttribute(hid_t group, const char* name) {
  const H5Handle attribute(H5Aopen(group, name, H5P_DEFAULT), H5Aclose);
  double value = std::nan("");
  if (!attribute.valid() || H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    ADD_FAILURE() << "cannot read attribute " << name;
  }
  return value;
}

std::string ReadStringAttribute(hid_t group, const char* name) {
  const H5Handle attribute(H5Aopen(group, name, H5P_DEFAULT), H5Aclose);
  const H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  char* text = nullptr;
  if (!attribute.valid() || H5Aread(attribute.get(), type.get(), &text) < 0 || text == nullptr) {
    ADD_FAILURE() << "cannot read attribute " << name;
    return {};
  }
  std::string result(text);
  H5free_memory(text);
  return result;
}

struct ReferenceCase {
  AnalysisMode mode;
  ScatteringGeometry geometry;
  std::vector<double> params, t, phi, contrast, offset, c2;
};

ReferenceCase ReadCase(const std::string& group_name) {
  const H5Handle file(H5Fopen(kReferenceFile, H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) ADD_FAILURE() << "cannot open " << kReferenceFile;
  const H5Handle group(H5Gopen2(file.get(), group_name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!group.valid()) ADD_FAILURE() << "missing group " << group_name;
  ReferenceCase reference;
  reference.mode = ParseAnalysisMode(ReadStringAttribute(group.get(), "mode"));
  reference.geometry.q_inv_angstrom = ReadDoubleAttribute(group.get(), "q");
  reference.geometry.gap_angstrom = ReadDoubleAttribute(group.get(), "L");
  reference.geometry.dt_seconds = ReadDoubleAttribute(group.get(), "dt");
  reference.params = ReadDoubles(group.get(), "params");
  reference.t = ReadDoubles(group.get(), "t");
  reference.phi = ReadDoubles(group.get(), "phi");
  reference.contrast = ReadDoubles(group.get(), "contrast");
  reference.offset = ReadDoubles(group.get(), "offset");
  reference.c2 = ReadDoubles(group.get(), "c2");
  return reference;
}

class ReferenceC2Test : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceC2Test, MatrixMatchesEveryElement) {
  const ReferenceCase reference = ReadCase(GetParam());
  const HomodyneModel model(reference.mode, reference.geometry, reference.t);
  ASSERT_EQ(reference.params.size(), static_cast<std::size_t>(model.num_physical()));
  ASSERT_EQ(reference.t.front(), 0.0);  // the t = 0 guard is exercised
  const ModelEvaluation evaluation(model, reference.params);
  const std::size_t n = reference.t.size();
  ASSERT_EQ(reference.c2.size(), reference.phi.size() * n * n);

  std::vector<double> c2(n * n);
  for (std::size_t k = 0; k < reference.phi.size(); ++k) {
    evaluation.ComputeC2Matrix(reference.phi[k], reference.contrast[k], reference.offset[k], c2);

    double max_error = 0.0;
    for (std::size_t e = 0; e < n * n; ++e) {
      max_error = std::max(max_error, std::abs(c2[e] - reference.c2[k * n * n + e]));
    }
    EXPECT_LE(max_error, kTolerance) << GetParam() << " phi=" << reference.phi[k];
  }
}

TEST_P(ReferenceC2Test, PackedUpperTriangleMatchesEveryElement) {
  const ReferenceCase reference = ReadCase(GetParam());
  const HomodyneModel model(reference.mode, reference.geometry, reference.t);
  const ModelEvaluation evaluation(model, reference.params);
  const int n = model.num_times();
  const std::size_t num_points = static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1) / 2;
  const std::size_t stride = static_cast<std::size_t>(model.num_point_derivatives());

  std::vector<double> c2(num_points);
  std::vector<double> c2_with_jacobian(num_points);
  std::vector<double> jacobian(num_points * stride);
  for (std::size_t k = 0; k < reference.phi.size(); ++k) {
    // Two row blocks, to check that a block starts at the right packed position.
    const int split = n / 3;
    const std::size_t split_point =
        static_cast<std::size_t>(split) * static_cast<std::size_t>(2 * n - split - 1) / 2;
    evaluation.EvaluateUpperTriangleRows(reference.phi[k], reference.contrast[k],
                                         reference.offset[k], 0, split, c2, {});
    evaluation.EvaluateUpperTriangleRows(reference.phi[k], reference.contrast[k],
                                         reference.offset[k], split, n,
                                         std::span<double>(c2).subspan(split_point), {});
    evaluation.EvaluateUpperTriangleRows(reference.phi[k], reference.contrast[k],
                                         reference.offset[k], 0, n, c2_with_jacobian, jacobian);

    std::size_t point = 0;
    double max_error = 0.0;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j, ++point) {
        const double expected =
            reference.c2[k * static_cast<std::size_t>(n * n) + static_cast<std::size_t>(i * n + j)];
        max_error = std::max(max_error, std::abs(c2[point] - expected));
        ASSERT_EQ(c2[point], c2_with_jacobian[point]) << i << "," << j;
      }
    }
    EXPECT_LE(max_error, kTolerance) << GetParam() << " phi=" << reference.phi[k];
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, ReferenceC2Test,
                         ::testing::Values("flow_basic", "flow_timedep", "static_anomalous",
                                           "static_basic"));

}  // namespace
}  // namespace homodyne
