// Interruption of a running fit (docs/design.md section 6): one process-wide flag, set by a
// signal or by RequestInterrupt, and checked by the fit between chunks, candidates and
// iterations; the fit then saves a checkpoint and throws FitInterrupted (fit.h).
#pragma once

namespace homodyne {

// SIGTERM, SIGINT and SIGUSR1 (what SLURM sends before a time limit) set the flag; a second
// SIGINT exits at once (status 130). For programs; idempotent.
void InstallInterruptHandlers();
// Sets the flag as if `signal_number` had arrived (Python's KeyboardInterrupt, tests).
void RequestInterrupt(int signal_number);
// The signal received, or 0. When the fits of this process run on a group of several ranks
// (process_group.h), a collective call that every rank makes at the same point of the fit (the
// checks between chunks, candidates and iterations): it returns the largest signal number any
// rank received, so that every rank stops at the same point.
int InterruptSignal();
// The signal this process received, or 0: never collective. For work that ranks do apart, at
// points the other ranks do not reach together (the global phase's local fits spread over ranks,
// global_search.h); the ranks agree at their next InterruptSignal.
int InterruptSignalHere();
// Clears the flag (before a new fit in the same process).
void ClearInterrupt();

}  // namespace homodyne
