// CheckpointStore (src/checkpoint/checkpoint_store.h): the checkpoint folder of
// docs/design.md section 6: file names, saving (durably, pruning old files), finding the newest
// valid file. The file format is checkpoint_file.h.
//
// Writing: the file is built in memory (HDF5 core driver) and its bytes are written to a 0600
// temporary file, fsynced and renamed, and the folder fsynced (io/durable_file.h, the helper every
// writer uses); HDF5 itself never writes to disk. Attributes
// are kept in the (checksummed) object headers and HDF5's space aggregation is off, so the file
// has no unused bytes: nearly any damage fails an HDF5 metadata checksum or content_sha256.
//
// Fault point (src/base/fault_injection.h): when an installed injector asks for a crash
// during the write, Save writes the first half of the file to the temporary file, fsyncs it and
// calls std::abort() before the rest, the rename and the pruning: what kill -9 during a save
// leaves behind. Tests use it to show that earlier checkpoints stay valid and that no final file
// appears.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "base/fault_injection.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint_file.h"
#include "homodyne/checkpoint_errors.h"
#include "homodyne/errors.h"
#include "io/durable_file.h"
#include "io/hdf5_util.h"

namespace homodyne {
namespace {

namespace fs = std::filesystem;
using checkpoint_internal::BuildCheckpointImage;
using checkpoint_internal::ContentSha256;
using checkpoint_internal::ReadCheckpointFile;
using checkpoint_internal::StoredCheckpoint;

// A temporary file older than this is left over from a crashed save and is removed by Save.
constexpr auto kStaleTemporaryAge = std::chrono::minutes(10);

constexpr std::string_view kNamePrefix = "homodyne_state_batch_";
constexpr std::string_view kNameSuffix = ".h5";
// What the names of DurableFile's temporary files for checkpoints start and end with
// (".homodyne_state_batch_000010.Ab3xZ9.h5.tmp").
constexpr std::string_view kTemporaryPrefix = ".homodyne_state_batch_";
constexpr std::string_view kTemporarySuffix = ".h5.tmp";

std::string ErrnoText(int error_number) { return std::generic_category().message(error_number); }

// ---------------------------------------------------------------------------------------------
// Files and folders.

// The batch number in a checkpoint file name, or nullopt for any other name (temporary files
// included).
std::optional<int64_t> ParseCheckpointName(std::string_view name) {
  if (name.size() <= kNamePrefix.size() + kNameSuffix.size() || !name.starts_with(kNamePrefix) ||
      !name.ends_with(kNameSuffix)) {
    return std::nullopt;
  }
  const std::string_view digits =
      name.substr(kNamePrefix.size(), name.size() - kNamePrefix.size() - kNameSuffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int64_t batch = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), batch);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return batch;
}

std::string CheckpointFileName(int64_t global_batch) {
  std::string digits = std::to_string(global_batch);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return std::string(kNamePrefix) + digits + std::string(kNameSuffix);
}

// Removes temporary files of saves that crashed long ago (kStaleTemporaryAge); best effort.
void RemoveStaleTemporaries(const fs::path& folder) {
  std::error_code error;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kTemporaryPrefix) || !name.ends_with(kTemporarySuffix)) continue;
    std::error_code ignored;
    const auto modified = fs::last_write_time(it->path(), ignored);
    if (!ignored && now - modified > kStaleTemporaryAge) fs::remove(it->path(), ignored);
  }
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return lines;
    start = end + 1;
  }
}

// The first line where two fingerprints differ ("" for a missing line), shortened to 100
// characters, for the refusal message.
std::pair<std::string, std::string> FirstDifference(const std::string& a, const std::string& b) {
  const std::vector<std::string> lines_a = SplitLines(a);
  const std::vector<std::string> lines_b = SplitLines(b);
  auto shorten = [](const std::string& text) {
    return text.size() > 100 ? text.substr(0, 97) + "..." : text;
  };
  for (size_t k = 0; k < std::max(lines_a.size(), lines_b.size()); ++k) {
    const std::string line_a = k < lines_a.size() ? lines_a[k] : std::string();
    const std::string line_b = k < lines_b.size() ? lines_b[k] : std::string();
    if (line_a != line_b) return {shorten(line_a), shorten(line_b)};
  }
  return {shorten(a), shorten(b)};
}

std::string Abbreviate(const std::string& hex) {
  return hex.size() > 12 ? hex.substr(0, 12) + "..." : hex;
}

}  // namespace

CheckpointStore::CheckpointStore(CheckpointOptions options) : options_(std::move(options)) {
  if (options_.keep_last < 1) {
    throw ConfigError("optimization.streaming.keep_last_checkpoints = " +
                      std::to_string(options_.keep_last) + ": must be >= 1");
  }
}

std::string CheckpointStore::PathOf(int64_t global_batch) const {
  return (fs::path(options_.directory) / CheckpointFileName(global_batch)).string();
}

CheckpointSaveReport CheckpointStore::Save(const Checkpoint& checkpoint) {
  HOMODYNE_CHECK(checkpoint.global_batch >= 0);
  const auto start = std::chrono::steady_clock::now();
  io_internal::InitializeHdf5();
  const fs::path folder(options_.directory);
  const fs::path final_path = folder / CheckpointFileName(checkpoint.global_batch);

  std::error_code error;
  fs::create_directories(folder, error);
  if (error || !fs::is_directory(folder)) {
    throw InputError(folder.string() + ": cannot create the checkpoint folder: " +
                     (error ? error.message() : std::string("not a folder")));
  }

  CheckpointSaveReport report;
  report.path = final_path.string();
  try {
    const std::vector<char> image = BuildCheckpointImage(checkpoint, options_.compression);
    io_internal::DurableFile file(final_path, 0600);
    const std::string_view bytes(image.data(), image.size());
    if (const FaultInjector* faults = InstalledFaultInjector();
        faults != nullptr && faults->CrashDuringCheckpointWrite()) {
      file.Write(bytes.substr(0, bytes.size() / 2));
      ::fsync(file.fd());
      std::abort();
    }
    file.Write(bytes);
    // Created 0600 less the umask; the chmod states the contract whatever the umask.
    if (::fchmod(file.fd(), 0600) != 0) {
      throw std::runtime_error("cannot chmod 0600: " + ErrnoText(errno));
    }
    report.bytes = file.Commit();
  } catch (const std::runtime_error& failure) {
    throw InputError(final_path.string() + ": cannot save the checkpoint (" + failure.what() + ")");
  }

  // Keep the file just written and the newest keep_last - 1 others (by batch in the name).
  std::vector<std::string> others = List();
  std::erase_if(others, [&](const std::string& path) {
    return fs::path(path).filename() == final_path.filename();
  });
  const size_t keep_others = static_cast<size_t>(options_.keep_last - 1);
  for (size_t k = 0; k + keep_others < others.size(); ++k) fs::remove(others[k], error);
  RemoveStaleTemporaries(folder);

  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::optional<Checkpoint> CheckpointStore::LoadNewestValid(
    const std::string& expected_config_sha256, const std::string& expected_data_fingerprint,
    std::vector<std::string>* warnings) const {
  io_internal::InitializeHdf5();
  auto warn = [warnings](std::string text) {
    if (warnings != nullptr) warnings->push_back(std::move(text));
  };
  const std::vector<std::string> files = List();
  for (auto path = files.rbegin(); path != files.rend(); ++path) {
    StoredCheckpoint stored;
    try {
      stored = ReadCheckpointFile(*path);
    } catch (const std::runtime_error& failure) {
      warn(*path + ": not a readable checkpoint (" + failure.what() + "); skipped");
      continue;
    }
    if (ContentSha256(stored.checkpoint) != stored.content_sha256) {
      warn(*path + ": content checksum mismatch (corrupt); skipped");
      continue;
    }
    const Checkpoint& checkpoint = stored.checkpoint;
    // A file renamed or copied by hand would resume at the wrong place in the order of files.
    if (ParseCheckpointName(fs::path(*path).filename().string()) != checkpoint.global_batch) {
      warn(*path + ": holds global_batch " + std::to_string(checkpoint.global_batch) +
           ", not the batch in its name (renamed?); skipped");
      continue;
    }
    if (checkpoint.config_sha256 != expected_config_sha256) {
      throw CheckpointMismatchError(
          *path + ": checkpoint was written for a different config (config SHA-256 " +
          Abbreviate(checkpoint.config_sha256) + ", this run " +
          Abbreviate(expected_config_sha256) + "); remove it or use ");
    }
    if (checkpoint.data_fingerprint != expected_data_fingerprint) {
      const auto [stored_line, expected_line] =
          FirstDifference(checkpoint.data_fingerprint, expected_data_fingerprint);
      throw CheckpointMismatchError(
          *path + ": checkpoint was written for a different data set (checkpoint '" + stored_line +
          "', this run '" + expected_line + "'); remove it or use ");
    }
    return std::move(stored.checkpoint);
  }
  return std::nullopt;
}

std::vector<std::string> CheckpointStore::List() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  for (fs::directory_iterator it(options_.directory, error), end; !error && it != end;
       it.increment(error)) {
    const std::optional<int64_t> batch = ParseCheckpointName(it->path().filename().string());
    std::error_code ignored;
    if (batch && it->is_regular_file(ignored)) found.emplace_back(*batch, it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  paths.reserve(found.size());
  for (auto& [batch, path] : found) paths.push_back(std::move(path));
  return paths;
}

}  // namespace homodyne
