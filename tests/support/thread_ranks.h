// An in-process ProcessGroup for tests (include/homodyne/process_group.h): K threads stand for
// the K ranks of an MPI job, each holding a ThreadRank of one SharedState. Every collective
// publishes this rank's part, waits for all, reads, and waits again before the slots are reused;
// a mismatch of the ranks' calls fails the test (EXPECT) or hangs it, as MPI would.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "homodyne/process_group.h"

namespace homodyne {

// What the ranks of one in-process group share: a barrier and a slot per rank.
struct SharedState {
  explicit SharedState(int size)
      : barrier(size), blocks(static_cast<size_t>(size)), values(static_cast<size_t>(size)) {}
  std::barrier<> barrier;
  std::vector<std::vector<double>> blocks;
  std::vector<int64_t> values;
};

// One rank of the in-process group.
class ThreadRank final : public ProcessGroup {
 public:
  ThreadRank(SharedState& state, int rank, int size) : state_(state), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllGather(std::span<const double> mine, std::span<const int> counts,
                 std::span<double> all) override {
    EXPECT_EQ(static_cast<int>(mine.size()), counts[static_cast<size_t>(rank_)]);
    state_.blocks[static_cast<size_t>(rank_)].assign(mine.begin(), mine.end());
    state_.barrier.arrive_and_wait();
    size_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const std::vector<double>& block = state_.blocks[static_cast<size_t>(r)];
      EXPECT_EQ(static_cast<int>(block.size()), counts[static_cast<size_t>(r)]);
      std::copy(block.begin(), block.end(), all.begin() + static_cast<std::ptrdiff_t>(at));
      at += block.size();
    }
    state_.barrier.arrive_and_wait();
  }
  int64_t MaxOverRanks(int64_t value) override {
    state_.values[static_cast<size_t>(rank_)] = value;
    state_.barrier.arrive_and_wait();
    const int64_t result = *std::max_element(state_.values.begin(), state_.values.end());
    state_.barrier.arrive_and_wait();
    return result;
  }
  int64_t BroadcastFromRoot(int64_t value) override {
    state_.values[static_cast<size_t>(rank_)] = value;
    state_.barrier.arrive_and_wait();
    const int64_t result = state_.values[0];
    state_.barrier.arrive_and_wait();
    return result;
  }
  [[noreturn]] void Abort(int /*exit_code*/) override { std::abort(); }
  int64_t bytes_received() const override { return 0; }

 private:
  SharedState& state_;
  int rank_;
  int size_;
};

}  // namespace homodyne
