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
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

  // Commit's two halves, for DurableFileSet. Sync: fsync and close of the temporary file, which
  // is then durable under its temporary name; returns its size in bytes. Rename: the synced
  // temporary file over final_path, without the folder's fsync. Each throws std::runtime_error
  // naming the path and the OS reason; the temporary file is removed unless renamed.
  int64_t Sync();
  void Rename();

 private:
  std::filesystem::path final_path_;
  std::filesystem::path folder_;
  std::filesystem::path temporary_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// fsync of a folder, so that the renames and removals in it survive a crash (file systems that
// cannot sync folders are accepted). Throws std::runtime_error naming the folder and the reason.
void SyncFolder(const std::filesystem::path& folder);

// Files of one folder published together, all or nothing: the result files of a fit
// (docs/results.md, How the files are written). Add creates each file's temporary file, the
// caller writes it; Commit then
//   1. closes and fsyncs every temporary file (the fault points "written:NAME");
//   2. removes the previous files of the set's names (`previous_names` and every added name),
//      fsyncs the folder ("before_renames" comes before this step);
//   3. renames the temporary files in the order they were added ("renamed:NAME" after each),
//      fsyncs the folder ("after_renames"), and removes the temporary files of the set's names
//      that a killed writer left behind (a second writer of the same folder at the same time is
//      not supported: its set would replace this one anyway).
// A failure in step 1 (or before Commit) removes every temporary file and leaves the previous
// files untouched. A failure in steps 2 or 3 removes every file of the set's names, new or
// previous, and the temporary files: the folder never holds a mix of two sets. A kill in steps
// 2 or 3 leaves a prefix of the new set and no previous file (the caller orders the files so
// that the last one marks a complete set). Every error is std::runtime_error: "FINAL: cannot write
// the file (REASON)" + NothingPublished(), or "FINAL: cannot publish the file (REASON); the files
// of the set were removed from FOLDER, none is left half updated".
class DurableFileSet {
 public:
  // folder: where the files go (it must exist). previous_names: files a previous set may have
  // left that this set replaces even when it has no file of that name.
  DurableFileSet(std::filesystem::path folder, std::vector<std::string> previous_names);
  DurableFileSet(const DurableFileSet&) = delete;
  DurableFileSet& operator=(const DurableFileSet&) = delete;
  // Removes the temporary files that Commit did not rename (DurableFile's destructor).
  ~DurableFileSet();

  // Creates the temporary file of folder/name (DurableFile). Throws std::runtime_error naming the
  // final path and the OS reason.
  DurableFile& Add(const std::string& name, mode_t mode = 0666);
  // Steps 1 to 3 above; once per set.
  void Commit();
  // What a failure before step 2 leaves, for the writers' messages: "; nothing published, FOLDER
  // keeps its previous files".
  std::string NothingPublished() const;

 private:
  // Removes every file of the set's names and of previous_names_ (best effort).
  void RemoveFinalFiles() const;
  // Removes temporary files of the set's names and of previous_names_ that a killed writer left
  // (best effort); after a successful Commit only, whose own files are renamed by then.
  void RemoveLeftoverTemporaries() const;

  std::filesystem::path folder_;
  std::vector<std::string> previous_names_;
  std::vector<std::string> names_;                   // in the order added
  std::vector<std::unique_ptr<DurableFile>> files_;  // one per name
  bool committed_ = false;
};

// Writes `bytes` as the whole file `path` through a DurableFile; returns its size in bytes.
// Throws std::runtime_error naming the path and the OS reason.
int64_t WriteFileDurably(const std::filesystem::path& path, std::string_view bytes,
                         mode_t mode = 0666);

}  // namespace homodyne::io_internal
