// How the optimisers write a number into a message (number_text.h).
#include "optimize/number_text.h"

#include <sstream>

namespace homodyne {

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace homodyne
