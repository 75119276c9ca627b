// The lock of a folder that one fit writes (docs/checkpoints.md, The folder lock): one live
// process uses a checkpoint folder, or a results folder (output_dir/nlsq), at a time, so that two
// fits never resume from, save into, publish into or prune the same files.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace homodyne {

// Which folder a FolderLock guards: the lock file's name and the messages' words.
enum class LockedFolder {
  kCheckpoints,  // optimization.streaming.checkpoint_dir: lock file .homodyne.lock
  kResults,      // output_dir/nlsq: lock file .homodyne-results.lock
};

// An advisory lock (flock(2), exclusive) on the folder's lock file (LockFileName), held from
// Acquire to destruction, with "PID PID on host HOST" of the holder written in the file. The
// kernel releases it when the holder's process ends, however it ends (kill -9 included); a lock
// file left behind by such a process is stale and the next process takes it over. The lock file
// is opened without following a symbolic link (O_NOFOLLOW) and must be a regular file, so that a
// link planted in its place never makes the lock write through it.
class FolderLock {
 public:
  static const char* LockFileName(LockedFolder folder);

  // Locks `directory`, creating it (with parents) when absent. Throws InputError naming the
  // folder and the holder's host and PID when another process (this one included, through
  // another fit) holds the lock, and naming the lock file when it is a symbolic link or not a
  // regular file. Returns nullptr when the folder or its lock file cannot be created (a
  // read-only or missing parent: no file can be saved there either), with `note` saying why; a
  // stale lock taken over also sets `note` (whose it was). `note` is cleared otherwise.
  static std::unique_ptr<FolderLock> Acquire(const std::string& directory, LockedFolder folder,
                                             std::string& note);

  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  // Releases the lock: removes the lock file (while still holding it), closes it, and removes
  // the folder when Acquire created it and it is empty now.
  ~FolderLock();

  const std::string& path() const { return path_; }

 private:
  FolderLock(std::string directory, std::string path, int fd, bool created_folder)
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
