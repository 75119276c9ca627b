// FolderLock (src/checkpoint/checkpoint_lock.h): flock(2) on the folder's lock file.
#include "checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "homodyne/errors.h"

namespace homodyne {
namespace {

namespace fs = std::filesystem;

// Opens that find the lock file removed by its releasing holder before it is locked, before
// giving up (each such race needs a holder that ends at that very moment).
constexpr int kMaxLockAttempts = 20;

std::string ErrnoText(int error_number) { return std::generic_category().message(error_number); }

// "PID 1234 on host node7": who holds the lock, as written into the lock file.
std::string HolderText() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return "PID " + std::to_string(::getpid()) + " on host " + (host[0] != '\0' ? host : "unknown");
}

// The holder named in an open lock file (its first line, at most 200 characters); "" when empty.
std::string ReadHolder(int fd) {
  char text[201] = {};
  const ssize_t size = ::pread(fd, text, sizeof(text) - 1, 0);
  if (size <= 0) return "";
  std::string holder(text, static_cast<size_t>(size));
  const size_t end = holder.find('\n');
  return end == std::string::npos ? holder : holder.substr(0, end);
}

// True when fd is the file now at `path` (not one its releasing holder removed meanwhile).
bool IsFileAtPath(int fd, const std::string& path) {
  struct stat opened {};
  struct stat named {};
  return ::fstat(fd, &opened) == 0 && ::stat(path.c_str(), &named) == 0 &&
         opened.st_dev == named.st_dev && opened.st_ino == named.st_ino;
}

// "checkpoint folder" / "results folder", and the advice of the in-use message.
const char* FolderNoun(LockedFolder folder) {
  return folder == LockedFolder::kCheckpoints ? "checkpoint folder" : "results folder";
}
const char* InUseAdvice(LockedFolder folder) {
  return folder == LockedFolder::kCheckpoints
             ? "two fits cannot share a checkpoint folder; wait for that fit to end or give this "
               "one another checkpoint_dir (--checkpoint-dir)"
             : "two fits cannot write their results into one folder; wait for that fit to end or "
               "give this one another output folder (--output-dir)";
}

}  // namespace

const char* FolderLock::LockFileName(LockedFolder folder) {
  return folder == LockedFolder::kCheckpoints ? ".homodyne.lock" : ".homodyne-results.lock";
}

std::unique_ptr<FolderLock> FolderLock::Acquire(const std::string& directory, LockedFolder folder,
                                                std::string& note) {
  note.clear();
  const std::string noun = FolderNoun(folder);
  std::error_code error;
  const bool existed = fs::is_directory(directory, error);
  if (!existed) {
    fs::create_directories(directory, error);
    if (!fs::is_directory(directory)) {
      note = "cannot lock the " + noun + " " + directory + ": cannot create it (" +
             (error ? error.message() : std::string("not a folder")) + ")";
      return nullptr;
    }
  }
  const std::string path = (fs::path(directory) / LockFileName(folder)).string();
  auto give_up = [&](const std::string& why) -> std::unique_ptr<FolderLock> {
    note = "cannot lock the " + noun + " " + directory + ": " + why +
           "; another fit could use it at the same time";
    if (!existed) ::rmdir(directory.c_str());
    return nullptr;
  };
  for (int attempt = 0; attempt < kMaxLockAttempts; ++attempt) {
    // O_NOFOLLOW: a symbolic link in the lock file's place fails (ELOOP) instead of having its
    // target truncated and overwritten with the holder's name.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == ELOOP) {
      throw InputError("the lock file " + path + " of the " + noun + " " + directory +
                       " is a symbolic link: it is not followed; remove it and run again");
    }
    if (fd < 0 && errno == EISDIR) {
      throw InputError("the lock file " + path + " of the " + noun + " " + directory +
                       " is not a regular file; remove it and run again");
    }
    if (fd < 0) return give_up("cannot open " + path + " (" + ErrnoText(errno) + ")");
    struct stat opened {};
    if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
      ::close(fd);
      throw InputError("the lock file " + path + " of the " + noun + " " + directory +
                       " is not a regular file; remove it and run again");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int reason = errno;
      const std::string holder = ReadHolder(fd);
      ::close(fd);
      if (reason == EWOULDBLOCK) {
        throw InputError(noun + " " + directory + " is in use by " +
                         (holder.empty() ? std::string("another process") : holder) +
                         " (lock file " + path + "): " + InUseAdvice(folder));
      }
      return give_up("flock of " + path + " failed (" + ErrnoText(reason) + ")");
    }
    if (!IsFileAtPath(fd, path)) {  // its holder removed it between our open and flock
      ::close(fd);
      continue;
    }
    const std::string stale = ReadHolder(fd);
    if (!stale.empty()) {
      note = "took over the stale lock of " + stale + " on the " + noun + " " + directory + " (" +
             path + " was left by a process that has ended)";
    }
    const std::string holder = HolderText() + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
      const int reason = errno;
      ::close(fd);
      return give_up("cannot write " + path + " (" + ErrnoText(reason) + ")");
    }
    return std::unique_ptr<FolderLock>(new FolderLock(directory, path, fd, !existed));
  }
  return give_up(path + " was removed " + std::to_string(kMaxLockAttempts) +
                 " times while being locked");
}

FolderLock::~FolderLock() {
  // Removed while still locked: a process that opens the path from now on creates a new file.
  ::unlink(path_.c_str());
  ::close(fd_);
  if (created_folder_) ::rmdir(directory_.c_str());  // only when empty
}

}  // namespace homodyne
