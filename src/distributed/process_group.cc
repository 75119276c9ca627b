// The single-process group and the process's current group (include/homodyne/process_group.h).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <span>
#include <utility>

#include "homodyne/process_group.h"

namespace homodyne {
namespace {

class SingleProcess final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllGather(std::span<const double> mine, std::span<const int> /*counts*/,
                 std::span<double> all) override {
    std::copy(mine.begin(), mine.end(), all.begin());
  }
  int64_t MaxOverRanks(int64_t value) override { return value; }
  int64_t BroadcastFromRoot(int64_t value) override { return value; }
  [[noreturn]] void Abort(int exit_code) override { std::exit(exit_code); }
  int64_t bytes_received() const override { return 0; }
};

std::shared_ptr<ProcessGroup>& Current() {
  static std::shared_ptr<ProcessGroup> group = SingleProcessGroup();
  return group;
}

}  // namespace

std::shared_ptr<ProcessGroup> SingleProcessGroup() { return std::make_shared<SingleProcess>(); }

void SetProcessGroup(std::shared_ptr<ProcessGroup> group) {
  Current() = group != nullptr ? std::move(group) : SingleProcessGroup();
}

const std::shared_ptr<ProcessGroup>& CurrentProcessGroup() { return Current(); }

}  // namespace homodyne
