// ValidateDatasetInfo (dataset_validation.h).
#include "io/dataset_validation.h"

#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "homodyne/errors.h"

namespace homodyne::io_internal {
namespace {

std::string Text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// "angle 2 (/xpcs/twotime/correlation_map/c2_00003)".
std::string AngleName(const AngleInfo& angle, size_t index) {
  return "angle " + std::to_string(index) + " (" + angle.dataset_path + ")";
}

}  // namespace

void ValidateDatasetInfo(DatasetInfo& info) {
  const std::string& name = info.file_path;
  if (info.angles.empty()) throw DataError(name + ": no angle to fit");
  if (info.num_times() < 2) {
    throw DataError(name + ": " + std::to_string(info.num_times()) +
                    " fitted time(s); a fit needs at least 2 (3 frames, the first dropped)");
  }
  if (!(std::isfinite(info.dt_seconds) && info.dt_seconds > 0.0)) {
    throw DataError(name + ": dt = " + Text(info.dt_seconds) + " s must be finite and > 0");
  }
  bool all_within_two_pi = true;
  for (size_t k = 0; k < info.angles.size(); ++k) {
    const AngleInfo& angle = info.angles[k];
    if (!(std::isfinite(angle.q_inv_angstrom) && angle.q_inv_angstrom > 0.0)) {
      throw DataError(name + ": " + AngleName(angle, k) + " has q = " + Text(angle.q_inv_angstrom) +
                      " 1/A; q must be finite and > 0");
    }
    if (!std::isfinite(angle.phi_degrees)) {
      throw DataError(name + ": " + AngleName(angle, k) + " has phi = " + Text(angle.phi_degrees) +
                      "; phi must be a finite angle in degrees");
    }
    for (size_t other = 0; other < k; ++other) {
      // Each (q, phi) once: rings of several (docs/configuration.md, Several q rings) share
      // their angles.
      if (info.angles[other].phi_degrees == angle.phi_degrees &&
          info.angles[other].q_inv_angstrom == angle.q_inv_angstrom) {
        throw DataError(name + ": " + AngleName(info.angles[other], other) + " and " +
                        AngleName(angle, k) + " are both at phi = " + Text(angle.phi_degrees) +
                        " degrees (after normalisation to (-180, 180]) and q = " +
                        Text(angle.q_inv_angstrom) + " 1/A; each angle once");
      }
    }
    all_within_two_pi = all_within_two_pi && std::abs(angle.phi_degrees) <= 2.0 * std::numbers::pi;
  }
  if (info.angles.size() > 1 && all_within_two_pi) {
    info.warnings.push_back(name + ": every phi is within +-2 pi (" +
                            std::to_string(info.angles.size()) +
                            " angles): phi is read in degrees; if these are radians, convert them");
  }
}

}  // namespace homodyne::io_internal
