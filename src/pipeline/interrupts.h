// The process-wide interrupt flag (include/homodyne/interrupts.h), and what the fit says about a
// signal it stopped for.
#pragma once

#include <string>

#include "homodyne/interrupts.h"

namespace homodyne {

// "SIGTERM", "SIGINT", "SIGUSR1", else "signal N": for the message of FitInterrupted.
std::string SignalName(int signal_number);

}  // namespace homodyne
