// A build without MPI (HOMODYNE_MPI=OFF or MPI not found): every process is a group of one.
#include "homodyne/process_group.h"

namespace homodyne {

bool BuiltWithMpi() { return false; }

std::shared_ptr<ProcessGroup> JoinProcessGroup(int* /*argc*/, char*** /*argv*/) {
  return SingleProcessGroup();
}

void LeaveProcessGroup() {}

}  // namespace homodyne
