// ParallelFor (worker_pool.h): one process-wide pool of sleeping workers.
#include "objective/worker_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace homodyne {
namespace {

// How long a waiting thread checks before it blocks: about 2000 pause instructions, tens of
// microseconds. Long enough for the gap between the chunks of a pass on an idle machine, short
// enough that a loaded machine's time slices are not spent spinning.
constexpr int kSpinChecks = 2000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins up to kSpinChecks times until done() is true; true if it became true.
template <typename Done>
bool SpinUntil(Done done) {
  for (int i = 0; i < kSpinChecks; ++i) {
    if (done()) return true;
    CpuRelax();
  }
  return done();
}

// Set on the pool's worker threads: a ParallelFor called from a body runs on its thread.
thread_local bool on_worker_thread = false;

class WorkerPool {
 public:
  // ParallelFor with the loop lock held by the caller. The caller takes indices too; once none
  // are left it closes the loop and waits only for the workers that joined it before: a worker
  // that has not woken by then (on a loaded machine it may wait milliseconds for a time slice)
  // no longer takes part, so a short loop costs the caller a wake-up call, never a wait for the
  // scheduler.
  void Run(int count, int threads, const std::function<void(int, int)>& body) {
    EnsureWorkers(threads - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      count_ = count;
      participants_ = std::min(threads - 1, static_cast<int>(workers_.size()));
      closed_ = false;
      next_.store(0, std::memory_order_relaxed);
      failed_.store(false, std::memory_order_relaxed);
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    Participate(body, count, 0);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;  // from here on active_ only falls
    }
    if (!SpinUntil([this] { return active_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return active_.load(std::memory_order_acquire) == 0; });
    }
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error = std::exchange(error_, nullptr);
      body_ = nullptr;
    }
    if (error) std::rethrow_exception(error);
  }

  // One loop at a time: ParallelFor holds this while it runs a loop.
  std::mutex& loop_mutex() { return loop_mutex_; }

 private:
  // Starts workers until there are `count` (they are never stopped: the pool lives as long as
  // the process, its workers blocked while no loop runs).
  void EnsureWorkers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int slot = static_cast<int>(workers_.size()) + 1;
      const uint64_t seen = generation_.load(std::memory_order_acquire);
      workers_.emplace_back([this, slot, seen] { WorkerLoop(slot, seen); });
      workers_.back().detach();
    }
  }

  // Takes indices until none are left (or a call threw).
  void Participate(const std::function<void(int, int)>& body, int count, int slot) {
    while (!failed_.load(std::memory_order_relaxed)) {
      const int index = next_.fetch_add(1, std::memory_order_relaxed);
      if (index >= count) break;
      try {
        body(index, slot);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
  }

  void WorkerLoop(int slot, uint64_t seen) {
    on_worker_thread = true;
    while (true) {
      if (!SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      // The loop to join, read under the lock so that generation and loop agree (a worker that
      // is not part of a loop may see the next one's instead; it never sees a mix). A loop the
      // caller has closed (Run) is not joined.
      const std::function<void(int, int)>* body = nullptr;
      int count = 0;
      bool participant = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        seen = generation_.load(std::memory_order_acquire);
        participant = slot <= participants_ && body_ != nullptr && !closed_;
        if (participant) active_.fetch_add(1, std::memory_order_relaxed);
        body = body_;
        count = count_;
      }
      if (!participant) continue;
      Participate(*body, count, slot);
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_one();
      }
    }
  }

  std::mutex loop_mutex_;
  std::vector<std::thread> workers_;  // detached; slot k + 1 is workers_[k]
  // The loop being run, under mutex_ (next_, failed_, active_ also change without it).
  std::mutex mutex_;
  std::condition_variable wake_;  // a new generation
  std::condition_variable done_;  // active_ reached 0 after the loop was closed
  std::atomic<uint64_t> generation_{0};
  const std::function<void(int, int)>* body_ = nullptr;
  int count_ = 0;
  int participants_ = 0;  // workers with slots 1 .. participants_ may take part
  bool closed_ = false;   // no index left for a worker that has not joined yet
  std::atomic<int> next_{0};
  std::atomic<int> active_{0};  // workers that joined the loop and are not done (under mutex_
                                // it rises, only before closed_)
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// The process's pool, made on first use. Never destroyed (its workers may still be blocked on it
// while the process exits). A child made by fork() has none of the parent's workers: it starts a
// pool of its own on first use (the parent's is left behind, unused).
std::atomic<WorkerPool*> shared_pool{nullptr};
std::mutex shared_pool_mutex;

WorkerPool& SharedPool() {
  WorkerPool* pool = shared_pool.load(std::memory_order_acquire);
  if (pool != nullptr) return *pool;
  std::lock_guard<std::mutex> lock(shared_pool_mutex);
  pool = shared_pool.load(std::memory_order_relaxed);
  if (pool == nullptr) {
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, [] { shared_pool.store(nullptr); });
      return true;
    }();
    (void)registered;
    pool = new WorkerPool();
    shared_pool.store(pool, std::memory_order_release);
  }
  return *pool;
}

}  // namespace

void ParallelFor(int count, int threads, const std::function<void(int index, int slot)>& body) {
  if (count <= 0) return;
  threads = std::min(threads, count);
  if (threads > 1 && !on_worker_thread) {
    WorkerPool& pool = SharedPool();
    std::unique_lock<std::mutex> lock(pool.loop_mutex(), std::try_to_lock);
    if (lock.owns_lock()) {
      pool.Run(count, threads, body);
      return;
    }
  }
  for (int index = 0; index < count; ++index) body(index, 0);
}

}  // namespace homodyne
