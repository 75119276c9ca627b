// Helpers shared by the config tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "homodyne/config.h"
#include "homodyne/errors.h"

namespace homodyne::testing {

// The message of the ConfigError ParseConfig throws for `yaml`; fails the test if none.
inline std::string ConfigErrorOf(const std::string& yaml) {
  try {
    ParseConfig(yaml, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ConfigError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

inline std::string JoinWarnings(const Config& config) {
  std::string out;
  for (const std::string& w : config.warnings) out += w + "\n";
  return out;
}

}  // namespace homodyne::testing
