// Checks of the paths a fit writes to (src/config/path_checks.h).
#include "config/path_checks.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "homodyne/errors.h"
#include "homodyne/results.h"

namespace homodyne {

bool HasNul(std::string_view path) { return path.find('\0') != std::string_view::npos; }

std::string ShowNuls(std::string_view path) {
  std::string shown;
  for (const char c : path) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  return shown;
}

std::string NulInPathMessage(std::string_view key, std::string_view path) {
  return std::string(key) + " = '" + ShowNuls(path) +
         "': contains a NUL character (\\0) at position " + std::to_string(path.find('\0')) +
         "; a path ends at its first NUL for the system, so the file would go elsewhere";
}

std::optional<std::string> PerformanceLogOnResultsMessage(const std::string& filename) {
  namespace fs = std::filesystem;
  const fs::path log = fs::path(filename).lexically_normal();
  const fs::path folder(kResultsFolderName);
  auto message = [&](const fs::path& result, const char* what) {
    return "logging.performance.filename = '" + filename + "': the performance log " +
           log.string() + " " + what + " " + result.string() +
           " in the output folder; give the log another name";
  };
  if (log == folder) return message(folder, "would be the results folder");
  for (const std::string_view name : kResultFileNames) {
    const fs::path result = folder / std::string(name);
    if (log == result) return message(result, "would be the result file");
    // Inside: every part of `result` starts `log`.
    auto [result_end, log_at] = std::mismatch(result.begin(), result.end(), log.begin(), log.end());
    if (result_end == result.end() && log_at != log.end()) {
      return message(result, "would lie inside the result file");
    }
  }
  return std::nullopt;
}

void CheckJobPaths(const Config& config, const std::optional<std::string>& output_dir) {
  const std::string source = config.source_path.empty() ? "" : config.source_path + ": ";
  if (HasNul(config.streaming.checkpoint_dir)) {
    throw ConfigError(source + NulInPathMessage("optimization.streaming.checkpoint_dir",
                                                config.streaming.checkpoint_dir));
  }
  const std::string& log_name = config.logging.performance.filename;
  if (HasNul(log_name)) {
    throw ConfigError(source + NulInPathMessage("logging.performance.filename", log_name));
  }
  if (const std::optional<std::string> clash = PerformanceLogOnResultsMessage(log_name)) {
    throw ConfigError(source + *clash);
  }
  if (output_dir && output_dir->empty()) {
    throw ConfigError(
        "output_dir (--output-dir) = '': an empty path; name a folder (\".\" for the current one)");
  }
  if (output_dir && HasNul(*output_dir)) {
    throw ConfigError(NulInPathMessage("output_dir", *output_dir));
  }
}

}  // namespace homodyne
