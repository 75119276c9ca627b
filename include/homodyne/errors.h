// Typed errors of homodyne-cpp and the invariant check macro.
//
// Contract: bad input (files, configs, data) throws InputError or one of its subclasses; the
// message names what is wrong and where (file, YAML path, dataset). Bad command-line usage
// throws UsageError. main() catches these once and maps them to the exit codes of
// docs/design.md section 7. Broken internal invariants are programming errors: HOMODYNE_CHECK
// aborts with file and line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace homodyne {

// Process exit codes (docs/design.md section 7).
enum ExitCode : int {
  kExitSuccess = 0,      // fit (or requested action) finished
  kExitFailure = 1,      // bad input or failure; the message says what and where
  kExitUsage = 2,        // bad command-line usage
  kExitInterrupted = 3,  // interrupted with a checkpoint saved (resumable)
};

// Base of every error homodyne-cpp reports to the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input data, file or configuration: exit code 1.
class InputError : public Error {
 public:
  using Error::Error;
};

// A configuration value that breaks a rule; the message starts with the YAML path.
class ConfigError : public InputError {
 public:
  using InputError::InputError;
};

// A data file that cannot be used; the message starts with the file path.
class DataError : public InputError {
 public:
  using InputError::InputError;
};

// Bad command-line usage: exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A feature whose backend was not compiled in (e.g. CUDA in a CPU-only build): exit code 1.
class NotCompiledError : public Error {
 public:
  using Error::Error;
};

}  // namespace homodyne

// Aborts with file and line when an internal invariant does not hold. Not for user input.
#define HOMODYNE_CHECK(condition)                                                                 \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      std::fprintf(stderr, "%s:%d: internal check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                               \
    }                                                                                             \
  } while (false)
