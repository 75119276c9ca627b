// Speckle-level noise for homodyne-simulate (docs/configuration.md, Simulation; docs/results.md,
// Checking error bars): pixel intensities whose field correlation is the model's g1, and c2
// computed from them as a correlator computes it. Its noise is correlated as a beamline's is:
// a frame's intensity fluctuation enters its whole row and column of the two-time matrix.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "homodyne/model.h"

namespace homodyne::io_internal {

struct SpeckleOptions {
  int pixels = 1000;  // independent speckles averaged by the correlator (pixels of the ring)
  int modes = 1;      // incoherent modes per pixel: the raw speckle contrast is 1 / modes
  uint64_t seed = 42;
};

// The largest pixels x frames of one angle (the intensities held in memory: 8 bytes each).
inline constexpr int64_t kMaxSpeckleValues = int64_t{1} << 27;
// The largest frames of a speckle simulation (its N x N matrix is held in memory).
inline constexpr int kMaxSpeckleFrames = 16384;

// The two-time matrix of one angle (row-major N x N, N = model.num_times(); the upper triangle
// and the diagonal set, zeros below): for each pixel p and frame k an intensity
// I_p(k) = (1 / modes) sum over modes of |E(k)|^2, each mode's field E a sum of independent
// complex Gaussian fields whose frame-to-frame correlation is the model's (see the .cc for how
// each factor is made), and
//   c2(i, j) = offset + contrast * modes * (<I(i) I(j)> / (<I(i)> <I(j)>) - 1)     (<>: pixels)
// so that the expectation is offset + contrast g1^2 up to O(1 / pixels) (two_component: the
// model's g, the fields of its reference and sample components added). Static, laminar_flow and
// two_component modes (throws InputError for another). Deterministic for (seed, angle_index),
// whatever the thread count: each pixel draws from its own generator.
std::vector<double> SpeckleTwoTimeMatrix(const HomodyneModel& model,
                                         std::span<const double> physical, double phi_degrees,
                                         double contrast, double offset,
                                         const SpeckleOptions& options, int angle_index);

}  // namespace homodyne::io_internal
