// How the optimisers write a number into a message (a warning, a stop reason, a validation error).
#pragma once

#include <string>

namespace homodyne {

// `value` as std::ostream writes a double by default, which is printf's %g: 6 significant
// digits, scientific notation when the exponent is below -4 or above 5, no trailing zeros
// ("0.001", "2", "123457", "1.23457e+06", "1e-08", "nan", "inf", "-inf"). Messages that the
// user guide quotes (docs/user-guide.md section 5) and the rules of docs/conventions.md habit 2
// are written with it, so its text must not change.
std::string FormatNumber(double value);

}  // namespace homodyne
