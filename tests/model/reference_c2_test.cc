// Every element of every case of tests/data/reference_c2.h5 (computed by the reference package;
// docs/model.md, Test numbers) within 1e-10 absolute, through ComputeC2Matrix and through
// EvaluateUpperTriangleRows (packed order: row i, j = i+1..N-1); and the pass kernel's c2 and
// Jacobian at every point, at every instruction-set level this CPU runs, within 1e-10 of the
// reference's c2 and of the scalar model's Jacobian.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "homodyne/model.h"
#include "model/isa_level.h"
#include "model/pass_kernel.h"

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

// The pass kernel (src/model/pass_kernel.h) at one point at a time: with every other data point
// NaN and this one 0, the Gram of [J | e] holds the point's row alone, so that with the offset
// column (all 1) c2 = -G(e, offset) and J_a = G(offset, a) exactly; the cost pass gives c2^2.
TEST_P(ReferenceC2Test, PassKernelMatchesEveryElement) {
  const ReferenceCase reference = ReadCase(GetParam());
  const HomodyneModel model(reference.mode, reference.geometry, reference.t);
  const ModelEvaluation evaluation(model, reference.params);
  const int n = model.num_times();
  const int m = model.num_point_derivatives();  // physical, contrast, offset
  const std::size_t num_points = static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1) / 2;
  const std::size_t num_angles = reference.phi.size();
  // The scalar model's Jacobian per angle (its c2 is checked above).
  std::vector<std::vector<double>> jacobians(num_angles);
  std::vector<double> c2(num_points);
  for (std::size_t k = 0; k < num_angles; ++k) {
    jacobians[k].resize(num_points * static_cast<std::size_t>(m));
    evaluation.EvaluateUpperTriangleRows(reference.phi[k], reference.contrast[k],
                                         reference.offset[k], 0, n, c2, jacobians[k]);
  }
  const int offset_column = m - 1;
  const int residual_column = m;
  for (IsaLevel level : BuiltIsaLevels()) {
    if (!CpuSupportsIsaLevel(level)) continue;
    const PassKernel kernel(evaluation, reference.phi, reference.contrast, reference.offset, level);
    PassKernel::Workspace workspace(kernel.gram_size());
    std::vector<std::vector<float>> rows(num_angles);
    std::vector<const float*> pointers(num_angles);
    double max_c2_error = 0.0, max_cost_error = 0.0, max_jacobian_error = 0.0;
    std::size_t point = 0;
    for (int i = 0; i + 1 < n; ++i) {
      for (std::size_t k = 0; k < num_angles; ++k) {
        rows[k].assign(static_cast<std::size_t>(n - i - 1), std::nanf(""));
        pointers[k] = rows[k].data();
      }
      for (int j = i + 1; j < n; ++j, ++point) {
        for (std::size_t k = 0; k < num_angles; ++k) {
          float& value = rows[k][static_cast<std::size_t>(j - i - 1)];
          value = 0.0f;
          std::vector<Eigen::MatrixXd> grams(
              num_angles, Eigen::MatrixXd::Zero(kernel.gram_size(), kernel.gram_size()));
          std::vector<int64_t> finite(num_angles, 0);
          kernel.AccumulateRows(i, i + 1, pointers, grams, finite, workspace);
          const double cost = kernel.SumSquaredResiduals(i, i + 1, pointers, workspace);
          value = std::nanf("");
          ASSERT_EQ(finite[k], 1);
          const double expected =
              reference
                  .c2[k * static_cast<std::size_t>(n * n) + static_cast<std::size_t>(i * n + j)];
          max_c2_error = std::max(max_c2_error,
                                  std::abs(-grams[k](residual_column, offset_column) - expected));
          max_cost_error = std::max(max_cost_error, std::abs(std::sqrt(cost) - expected));
          for (int a = 0; a < offset_column; ++a) {
            const double jacobian =
                jacobians[k][point * static_cast<std::size_t>(m) + static_cast<std::size_t>(a)];
            max_jacobian_error =
                std::max(max_jacobian_error, std::abs(grams[k](offset_column, a) - jacobian) /
                                                 std::max(1.0, std::abs(jacobian)));
          }
        }
      }
    }
    SCOPED_TRACE(std::string(GetParam()) + " level " + std::string(ToString(level)));
    std::cout << GetParam() << " " << ToString(level) << ": pass kernel c2 " << max_c2_error
              << ", cost pass c2 " << max_cost_error << " from the reference; Jacobian "
              << max_jacobian_error << " (relative above 1) from the scalar model\n";
    EXPECT_LE(max_c2_error, kTolerance);
    EXPECT_LE(max_cost_error, kTolerance);
    EXPECT_LE(max_jacobian_error, kTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, ReferenceC2Test,
                         ::testing::Values("flow_basic", "flow_timedep", "static_anomalous",
                                           "static_basic"));

}  // namespace
}  // namespace homodyne
