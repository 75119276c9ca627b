// The threads of the CPU backend's passes (docs/design.md section 5): a process-wide pool that runs
// one parallel loop at a time, with workers that sleep between loops.
//
// Why not an OpenMP parallel region: libgomp's idle threads spin (GOMP_SPINCOUNT, about 3e5
// iterations) at every region's end and before the next one, and its wait policy can only be set
// by environment variables read when the library loads. On a shared machine the spinning threads
// take the time slices the working ones need: a default fit of 1.08e6 points at load 7 on 2 cores
// took 3.4-4.0 s (1.1-1.3 s of user CPU) with libgomp's default policy and 2.3-2.6 s (0.6-0.7 s)
// with OMP_WAIT_POLICY=passive (docs/history/performance-notebook.md, Threads that sleep). The
// streaming reader thread competes with them the same way. These workers spin for a few
// microseconds at most, then block on a condition variable.
#pragma once

#include <functional>

namespace homodyne {

// Calls body(index, slot) once for every index in [0, count), on up to `threads` threads (the
// calling thread is one of them; threads <= 1 or count <= 1: all on the calling thread, in index
// order). Indices are handed out in increasing order to whichever thread is free (a dynamic
// schedule); `slot` in [0, threads) names the thread that runs the call, so that per-thread
// scratch of this loop can be indexed by it: no two calls of one loop with the same slot run at
// once. A worker that has not woken by the time the calling thread has taken the last index
// does not take part (the call does not wait for the scheduler to run it). Returns when
// every call has returned. If calls throw, the first exception caught is rethrown here after the
// others have finished (the remaining indices are skipped).
//
// The results may depend on which thread runs which index only through what body does with
// `slot`: a body that writes only the outputs of its own index gives the same results for any
// thread count. One loop runs at a time in the process: a call made while another thread's loop
// runs (or from inside a body) runs on its calling thread alone.
void ParallelFor(int count, int threads, const std::function<void(int index, int slot)>& body);

}  // namespace homodyne
