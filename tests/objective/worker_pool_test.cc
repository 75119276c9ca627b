// ParallelFor (src/objective/worker_pool.h): every index once, slots in range and never shared
// at once, exceptions rethrown on the caller, nested and concurrent loops, many short loops in a
// row (a lost wake-up would hang), and a forked child that starts a pool of its own.
#include "objective/worker_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <thread>
#include <vector>

namespace homodyne {
namespace {

TEST(WorkerPool, EveryIndexOnceWithSlotsInRange) {
  for (const int threads : {1, 2, 3, 8}) {
    for (const int count : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> calls(static_cast<size_t>(count));
      std::atomic<int> bad_slot{0};
      ParallelFor(count, threads, [&](int index, int slot) {
        calls[static_cast<size_t>(index)].fetch_add(1);
        if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
      });
      for (int i = 0; i < count; ++i) {
        EXPECT_EQ(calls[static_cast<size_t>(i)].load(), 1) << threads << " threads, index " << i;
      }
      EXPECT_EQ(bad_slot.load(), 0) << threads << " threads";
    }
  }
}

TEST(WorkerPool, NoTwoCallsShareASlotAtOnce) {
  constexpr int kThreads = 4;
  std::vector<std::atomic<int>> busy(kThreads);
  std::atomic<int> overlaps{0};
  std::atomic<int> slots_used_mask{0};
  ParallelFor(400, kThreads, [&](int, int slot) {
    if (busy[static_cast<size_t>(slot)].fetch_add(1) != 0) overlaps.fetch_add(1);
    slots_used_mask.fetch_or(1 << slot);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    busy[static_cast<size_t>(slot)].fetch_sub(1);
  });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_NE(slots_used_mask.load() & 1, 0) << "the calling thread takes part as slot 0";
}

TEST(WorkerPool, SingleThreadRunsInIndexOrderOnTheCaller) {
  std::vector<int> order;
  const std::thread::id caller = std::this_thread::get_id();
  bool all_on_caller = true;
  ParallelFor(50, 1, [&](int index, int slot) {
    order.push_back(index);
    all_on_caller = all_on_caller && slot == 0 && std::this_thread::get_id() == caller;
  });
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_TRUE(all_on_caller);
}

TEST(WorkerPool, TheFirstExceptionIsRethrownAfterTheOthersFinish) {
  std::atomic<int> running{0};
  std::atomic<int> running_after_throw{-1};
  try {
    ParallelFor(100, 3, [&](int index, int) {
      running.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      running.fetch_sub(1);
      if (index == 5) throw std::runtime_error("batch 5 failed");
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "batch 5 failed");
    running_after_throw = running.load();
  }
  EXPECT_EQ(running_after_throw.load(), 0) << "calls still running when ParallelFor returned";
  // The pool works again afterwards.
  std::atomic<int> sum{0};
  ParallelFor(10, 3, [&](int index, int) { sum.fetch_add(index); });
  EXPECT_EQ(sum.load(), 45);
}

TEST(WorkerPool, NestedLoopsRunOnTheirThread) {
  std::atomic<int> inner_calls{0};
  std::atomic<int> inner_on_other_thread{0};
  ParallelFor(8, 2, [&](int, int) {
    const std::thread::id outer = std::this_thread::get_id();
    ParallelFor(5, 4, [&](int, int slot) {
      inner_calls.fetch_add(1);
      if (std::this_thread::get_id() != outer || slot != 0) inner_on_other_thread.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_calls.load(), 40);
  EXPECT_EQ(inner_on_other_thread.load(), 0);
}

TEST(WorkerPool, LoopsFromTwoThreadsAtOnceBothComplete) {
  std::atomic<long> sums[2] = {0, 0};
  std::thread other([&] {
    for (int r = 0; r < 200; ++r) ParallelFor(50, 2, [&](int i, int) { sums[1].fetch_add(i); });
  });
  for (int r = 0; r < 200; ++r) ParallelFor(50, 2, [&](int i, int) { sums[0].fetch_add(i); });
  other.join();
  EXPECT_EQ(sums[0].load(), 200L * 1225);
  EXPECT_EQ(sums[1].load(), 200L * 1225);
}

TEST(WorkerPool, ManyShortLoopsInARow) {
  // Each loop ends before the workers block or while they block: a lost wake-up would hang here
  // (ctest's timeout) or lose calls.
  long total = 0;
  for (int r = 0; r < 5000; ++r) {
    std::atomic<int> calls{0};
    ParallelFor(3, 3, [&](int, int) { calls.fetch_add(1); });
    total += calls.load();
    if (r % 1000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(total, 15000);
}

TEST(WorkerPool, AForkedChildStartsItsOwnPool) {
  std::atomic<int> parent_calls{0};
  ParallelFor(10, 2, [&](int, int) { parent_calls.fetch_add(1); });  // the parent's workers exist
  ASSERT_EQ(parent_calls.load(), 10);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> calls{0};
    ParallelFor(100, 2, [&](int, int) { calls.fetch_add(1); });
    _exit(calls.load() == 100 ? 0 : 1);
  }
  int status = 0;
  // The child must finish on its own (a pool waiting for the parent's workers would hang).
  for (int waited_ms = 0; waited_ms < 20000; waited_ms += 10) {
    if (waitpid(child, &status, WNOHANG) == child) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waited_ms + 10 >= 20000) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the forked child's ParallelFor did not return within 20 s";
    }
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace homodyne
