// The interrupt flag and its signal handlers (interrupts.h).
#include "interrupts.h"

#include "homodyne/process_group.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <string>

namespace homodyne {
namespace {

std::atomic<int> g_interrupt_signal{0};

extern "C" void HandleInterrupt(int signal_number) {
  // A second SIGINT (Ctrl-C twice) ends the process at once; async-signal-safe calls only.
  if (signal_number == SIGINT && g_interrupt_signal.load() == SIGINT) _exit(130);
  g_interrupt_signal.store(signal_number);
}

}  // namespace

void InstallInterruptHandlers() {
  struct sigaction action {};
  action.sa_handler = HandleInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal_number : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal_number, &action, nullptr);
}

int InterruptSignal() {
  const int signal_number = g_interrupt_signal.load();
  ProcessGroup& group = *CurrentProcessGroup();
  if (group.size() == 1) return signal_number;
  // The ranks of a job agree: a signal that reached any rank stops every rank at this point.
  return static_cast<int>(group.MaxOverRanks(signal_number));
}

int InterruptSignalHere() { return g_interrupt_signal.load(); }

void RequestInterrupt(int signal_number) { g_interrupt_signal.store(signal_number); }

void ClearInterrupt() { g_interrupt_signal.store(0); }

std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
  }
  return "signal " + std::to_string(signal_number);
}

}  // namespace homodyne
