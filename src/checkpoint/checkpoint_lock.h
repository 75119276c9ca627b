// The lock of a checkpoint folder (docs/checkpoints.md, The folder lock): one live process uses
// a folder at a time, so that two fits never resume from, save into or prune the same files.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace homodyne {

// An advisory lock (flock(2), exclusive) on the file kLockFileName in the folder, held from
// Acquire to destruction, with "host HOST pid PID" of the holder written in the file. The kernel
// releases it when the holder's process ends, however it ends (kill -9 included); a lock file
// left behind by such a process is stale and the next process takes it over.
class CheckpointFolderLock {
 public:
  static constexpr const char* kLockFileName = ".homodyne.lock";

  // Locks `directory`, creating it (with parents) when absent. Throws InputError naming the
  // folder and the holder's host and PID when another process (this one included, through
  // another fit) holds the lock. Returns nullptr when the folder or its lock file cannot be
  // created (a read-only or missing parent: no checkpoint can be saved there either), with
  // `note` saying why; a stale lock taken over also sets `note` (whose it was). `note` is
  // cleared otherwise.
  static std::unique_ptr<CheckpointFolderLock> Acquire(const std::string& directory,
                                                       std::string& note);

  CheckpointFolderLock(const CheckpointFolderLock&) = delete;
  CheckpointFolderLock& operator=(const CheckpointFolderLock&) = delete;
  // Releases the lock: removes the lock file (while still holding it), closes it, and removes
  // the folder when Acquire created it and it is empty now.
  ~CheckpointFolderLock();

  const std::string& path() const { return path_; }

 private:
  CheckpointFolderLock(std::string directory, std::string path, int fd, bool created_folder)
      : directory_(std::move(directory)),
        path_(std::move(path)),
        fd_(fd),
        created_folder_(created_folder) {}

  std::string directory_;
  std::string path_;  // the lock file
  int fd_;
  bool created_folder_;
};

}  // namespace homodyne
