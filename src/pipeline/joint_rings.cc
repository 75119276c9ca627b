// The guard of joint fits of several q rings (RequireJointFitSupport, include/homodyne/fit.h).
#include <cmath>
#include <string>

#include "homodyne/errors.h"
#include "homodyne/fit.h"

namespace homodyne {

void RequireJointFitSupport(const DatasetInfo& info) {
  if (kFitSupportsSeveralQ || info.angles.empty()) return;
  const double first_q = info.angles.front().q_inv_angstrom;
  for (const AngleInfo& angle : info.angles) {
    if (angle.q_inv_angstrom != first_q) {
      throw InputError(info.file_path +
                       ": analyzer_parameters.scattering.q_fit: joint is not available yet: the "
                       "selected matrices have several q (" +
                       std::to_string(first_q) + " and " + std::to_string(angle.q_inv_angstrom) +
                       " 1/A) and the engine fits one q per data set; use q_fit: independent "
                       "(one fit per ring)");
    }
  }
}

}  // namespace homodyne
