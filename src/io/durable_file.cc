// DurableFile (durable_file.h): temporary file, write, fsync, rename, fsync of the folder.
#include "io/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "homodyne/errors.h"

namespace homodyne::io_internal {
namespace {

namespace fs = std::filesystem;

// Names tried before giving up when each one exists already (62^6 names per file).
constexpr int kMaxNameAttempts = 100;

std::string ErrnoText(int error_number) { return std::generic_category().message(error_number); }

// 6 characters [0-9A-Za-z] for a temporary name; a per-thread generator, so no locking.
std::string RandomSuffix() {
  static constexpr std::string_view kAlphabet =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 generator = [] {
    std::random_device device;
    std::seed_seq seed{device(), device(), static_cast<unsigned>(::getpid())};
    return std::mt19937_64(seed);
  }();
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string suffix(6, '0');
  for (char& c : suffix) c = kAlphabet[pick(generator)];
  return suffix;
}

// Closes fd, keeping the first error's errno for the caller.
void CloseKeepingErrno(int fd) {
  const int saved = errno;
  ::close(fd);
  errno = saved;
}

}  // namespace

DurableFile::DurableFile(fs::path final_path, mode_t mode) : final_path_(std::move(final_path)) {
  folder_ = final_path_.has_parent_path() ? final_path_.parent_path() : fs::path(".");
  const std::string stem = final_path_.stem().string();
  const std::string extension = final_path_.extension().string();
  for (int attempt = 0; attempt < kMaxNameAttempts; ++attempt) {
    fs::path candidate = folder_ / ("." + stem + "." + RandomSuffix() + extension + ".tmp");
    fd_ = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd_ >= 0) {
      temporary_path_ = std::move(candidate);
      return;
    }
    if (errno != EEXIST) break;
  }
  throw std::runtime_error("cannot create a temporary file in " + folder_.string() + ": " +
                           ErrnoText(errno));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temporary_path_.empty()) ::unlink(temporary_path_.c_str());
}

void DurableFile::Write(std::string_view bytes) {
  const char* data = bytes.data();
  size_t size = bytes.size();
  while (size > 0) {
    const ssize_t written = ::write(fd_, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write " + temporary_path_.string() + ": " +
                               ErrnoText(errno));
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
}

int64_t DurableFile::Commit() {
  HOMODYNE_CHECK(!committed_ && fd_ >= 0);  // one Commit per file
  if (::fsync(fd_) != 0) {
    throw std::runtime_error("cannot fsync " + temporary_path_.string() + ": " + ErrnoText(errno));
  }
  struct stat status {};
  if (::fstat(fd_, &status) != 0) {
    throw std::runtime_error("cannot stat " + temporary_path_.string() + ": " + ErrnoText(errno));
  }
  // close(2) can report a delayed write error (NFS): the file is not complete then.
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    throw std::runtime_error("cannot close " + temporary_path_.string() + ": " + ErrnoText(errno));
  }
  if (::rename(temporary_path_.c_str(), final_path_.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + temporary_path_.string() + " to " +
                             final_path_.string() + ": " + ErrnoText(errno));
  }
  committed_ = true;
  // The rename is durable once the folder's entry is: fsync of the folder. File systems that
  // cannot sync folders (EINVAL) are accepted.
  const int folder_fd = ::open(folder_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd < 0) {
    throw std::runtime_error("cannot open the folder " + folder_.string() +
                             " to sync it: " + ErrnoText(errno));
  }
  if (::fsync(folder_fd) != 0 && errno != EINVAL) {
    CloseKeepingErrno(folder_fd);
    throw std::runtime_error("cannot sync the folder " + folder_.string() + ": " +
                             ErrnoText(errno));
  }
  ::close(folder_fd);
  return static_cast<int64_t>(status.st_size);
}

int64_t WriteFileDurably(const fs::path& path, std::string_view bytes, mode_t mode) {
  DurableFile file(path, mode);
  file.Write(bytes);
  return file.Commit();
}

}  // namespace homodyne::io_internal
