// DurableFile (durable_file.h): temporary file, write, fsync, rename, fsync of the folder; and
// DurableFileSet, several files published together.
#include "io/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "base/fault_injection.h"
#include "homodyne/errors.h"

namespace homodyne::io_internal {
namespace {

namespace fs = std::filesystem;

// Names tried before giving up when each one exists already (62^6 names per file).
constexpr int kMaxNameAttempts = 100;

std::string ErrnoText(int error_number) { return std::generic_category().message(error_number); }

// Length of the random part of a temporary name (RandomSuffix).
constexpr size_t kSuffixLength = 6;

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
  std::string suffix(kSuffixLength, '0');
  for (char& c : suffix) c = kAlphabet[pick(generator)];
  return suffix;
}

// The temporary name of a file of this name: "." + stem + "." + suffix + extension + ".tmp".
std::string TemporaryName(const fs::path& final_name, const std::string& suffix) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "." + std::string here.
  std::string name(1, '.');
  name.append(final_name.stem().string()).append(1, '.').append(suffix);
  name.append(final_name.extension().string()).append(".tmp");
  return name;
}

// True when `candidate` is a temporary name of final_name (TemporaryName, any suffix).
bool IsTemporaryNameOf(const std::string& candidate, const fs::path& final_name) {
  const std::string pattern = TemporaryName(final_name, std::string(kSuffixLength, '?'));
  if (candidate.size() != pattern.size()) return false;
  for (size_t k = 0; k < pattern.size(); ++k) {
    if (pattern[k] != '?' && pattern[k] != candidate[k]) return false;
  }
  return true;
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
  for (int attempt = 0; attempt < kMaxNameAttempts; ++attempt) {
    fs::path candidate = folder_ / TemporaryName(final_path_.filename(), RandomSuffix());
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

int64_t DurableFile::Sync() {
  HOMODYNE_CHECK(!committed_ && fd_ >= 0);  // one Sync per file
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
  return static_cast<int64_t>(status.st_size);
}

void DurableFile::Rename() {
  HOMODYNE_CHECK(!committed_ && fd_ < 0);  // after Sync, once
  if (::rename(temporary_path_.c_str(), final_path_.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + temporary_path_.string() + " to " +
                             final_path_.string() + ": " + ErrnoText(errno));
  }
  committed_ = true;
}

int64_t DurableFile::Commit() {
  const int64_t bytes = Sync();
  Rename();
  SyncFolder(folder_);
  return bytes;
}

void SyncFolder(const fs::path& folder) {
  // The rename is durable once the folder's entry is: fsync of the folder. File systems that
  // cannot sync folders (EINVAL) are accepted.
  const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd < 0) {
    throw std::runtime_error("cannot open the folder " + folder.string() +
                             " to sync it: " + ErrnoText(errno));
  }
  if (::fsync(folder_fd) != 0 && errno != EINVAL) {
    CloseKeepingErrno(folder_fd);
    throw std::runtime_error("cannot sync the folder " + folder.string() + ": " + ErrnoText(errno));
  }
  ::close(folder_fd);
}

int64_t WriteFileDurably(const fs::path& path, std::string_view bytes, mode_t mode) {
  DurableFile file(path, mode);
  file.Write(bytes);
  return file.Commit();
}

DurableFileSet::DurableFileSet(fs::path folder, std::vector<std::string> previous_names)
    : folder_(std::move(folder)), previous_names_(std::move(previous_names)) {}

DurableFileSet::~DurableFileSet() = default;

DurableFile& DurableFileSet::Add(const std::string& name, mode_t mode) {
  HOMODYNE_CHECK(!committed_);
  const fs::path final_path = folder_ / name;
  try {
    files_.push_back(std::make_unique<DurableFile>(final_path, mode));
  } catch (const std::runtime_error& failure) {
    throw std::runtime_error(final_path.string() + ": cannot write the file (" + failure.what() +
                             ")" + NothingPublished());
  }
  names_.push_back(name);
  return *files_.back();
}

std::string DurableFileSet::NothingPublished() const {
  return "; nothing published, " + folder_.string() + " keeps its previous files";
}

void DurableFileSet::RemoveFinalFiles() const {
  for (const std::vector<std::string>* names : {&previous_names_, &names_}) {
    for (const std::string& name : *names) ::unlink((folder_ / name).c_str());
  }
}

void DurableFileSet::Commit() {
  HOMODYNE_CHECK(!committed_);  // once per set
  committed_ = true;
  const FaultInjector* faults = InstalledFaultInjector();
  // 1. Every file durable under its temporary name; the previous files are untouched.
  for (size_t k = 0; k < files_.size(); ++k) {
    DurableFile& file = *files_[k];
    try {
      if (faults != nullptr && faults->FailResultWrite(names_[k])) {
        throw std::runtime_error("cannot write " + file.temporary_path().string() + ": " +
                                 ErrnoText(ENOSPC));
      }
      file.Sync();
    } catch (const std::runtime_error& failure) {
      throw std::runtime_error(file.final_path().string() + ": cannot write the file (" +
                               failure.what() + ")" + NothingPublished());
    }
    if (faults != nullptr) KillIfInjectedAt("written:" + names_[k]);
  }
  KillIfInjectedAt("before_renames");
  // 2. and 3. From here a failure removes the whole set, so that no mix of two sets is left.
  const fs::path* current = &folder_;
  try {
    RemoveFinalFiles();
    SyncFolder(folder_);
    for (size_t k = 0; k < files_.size(); ++k) {
      current = &files_[k]->final_path();
      files_[k]->Rename();
      if (faults != nullptr) KillIfInjectedAt("renamed:" + names_[k]);
    }
    current = &folder_;
    SyncFolder(folder_);
  } catch (const std::runtime_error& failure) {
    RemoveFinalFiles();
    const char* what =
        current == &folder_ ? ": cannot publish the files (" : ": cannot publish the file (";
    throw std::runtime_error(current->string() + what + failure.what() +
                             "); the files of the set were removed from " + folder_.string() +
                             ", none is left half updated");
  }
  KillIfInjectedAt("after_renames");
  RemoveLeftoverTemporaries();
}

void DurableFileSet::RemoveLeftoverTemporaries() const {
  std::error_code error;
  for (fs::directory_iterator it(folder_, error), end; !error && it != end; it.increment(error)) {
    const std::string entry = it->path().filename().string();
    for (const std::vector<std::string>* names : {&previous_names_, &names_}) {
      for (const std::string& name : *names) {
        if (IsTemporaryNameOf(entry, name)) ::unlink(it->path().c_str());
      }
    }
  }
}

}  // namespace homodyne::io_internal
