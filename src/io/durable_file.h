// Durable, atomic replacement of a file: the one way every writer of homodyne-cpp publishes a
// file (checkpoints, the JSON results, nlsq/fitted_data.h5, the simulator's output). Private to
// src/io and src/checkpoint.
//
// The contents go to a temporary file in the final file's folder; Commit() fsyncs it, renames it
// over the final name and fsyncs the folder. After a crash or a failure the final name holds the
// previous file or the complete new one, never a part of it, and a failed write removes its
// temporary file. A crash (kill -9, power loss) can leave a temporary file behind: its name is
// "." + stem + "." + 6 random characters + extension + ".tmp" (".parameters.Ab3xZ9.json.tmp"
// for "parameters.json"), hidden and recognisable.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace homodyne::io_internal {

class DurableFile {
 public:
  // Creates the temporary file next to final_path (O_EXCL, permission bits `mode` less the
  // umask, as open(2) and std::ofstream create files) and keeps it open. Throws
  // std::runtime_error naming the folder and the OS reason ("No such file or directory", "Not a
  // directory", "Permission denied", "No space left on device") when it cannot.
  explicit DurableFile(std::filesystem::path final_path, mode_t mode = 0666);
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  // Closes and removes the temporary file unless Commit() renamed it.
  ~DurableFile();

  const std::filesystem::path& final_path() const { return final_path_; }
  // Where the contents go. Writers that open the file themselves (HDF5) open this path and must
  // close it before Commit(); fsync of fd() then flushes their writes too (one inode).
  const std::filesystem::path& temporary_path() const { return temporary_path_; }
  int fd() const { return fd_; }

  // Appends `bytes` at the file offset of fd() (short writes and EINTR retried). Throws
  // std::runtime_error naming the temporary file and the OS reason.
  void Write(std::string_view bytes);

  // fsync of the temporary file, rename over final_path, fsync of the folder (file systems that
  // cannot sync folders are accepted). Returns the size of the file in bytes. Throws
  // std::runtime_error naming the path and the OS reason; the temporary file is removed unless
  // the rename succeeded (then only the folder sync failed and final_path holds the new file).
  int64_t Commit();

 private:
  std::filesystem::path final_path_;
  std::filesystem::path folder_;
  std::filesystem::path temporary_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `bytes` as the whole file `path` through a DurableFile; returns its size in bytes.
// Throws std::runtime_error naming the path and the OS reason.
int64_t WriteFileDurably(const std::filesystem::path& path, std::string_view bytes,
                         mode_t mode = 0666);

}  // namespace homodyne::io_internal
