#include "plots.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

// The source tree's scripts/homodyne_plot.py, set by src/cli/CMakeLists.txt.
#ifndef HOMODYNE_PLOT_SCRIPT_SOURCE
#define HOMODYNE_PLOT_SCRIPT_SOURCE ""
#endif

namespace homodyne::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kScriptName = "homodyne_plot.py";
// homodyne_plot.py's exit code when h5py, numpy or matplotlib cannot be imported.
constexpr int kScriptMissingModule = 3;
// The exit code of the child when exec itself failed (the shell's convention).
constexpr int kExecFailed = 127;

std::string Environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

bool IsFile(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

// The plot script (see SavePlots for the order), or nullopt with `reason` set.
std::optional<fs::path> FindScript(std::string* reason) {
  const std::string from_environment = Environment("HOMODYNE_PLOT_SCRIPT");
  if (!from_environment.empty()) {
    if (IsFile(from_environment)) return fs::path(from_environment);
    *reason = "HOMODYNE_PLOT_SCRIPT = " + from_environment + ": no such file";
    return std::nullopt;
  }
  std::vector<fs::path> candidates;
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    candidates.push_back(executable.parent_path() / kScriptName);
    candidates.push_back(executable.parent_path() / ".." / "share" / "homodyne" / kScriptName);
  }
  if (std::strlen(HOMODYNE_PLOT_SCRIPT_SOURCE) > 0) {
    candidates.emplace_back(HOMODYNE_PLOT_SCRIPT_SOURCE);
  }
  for (const fs::path& candidate : candidates) {
    if (IsFile(candidate)) return candidate;
  }
  std::ostringstream searched;
  for (size_t k = 0; k < candidates.size(); ++k) {
    searched << (k ? ", " : "") << candidates[k].string();
  }
  *reason = std::string(kScriptName) + " not found (looked in " + searched.str() +
            "; set HOMODYNE_PLOT_SCRIPT to its path)";
  return std::nullopt;
}

// `program` itself when it contains a '/', else the first executable `program` on PATH; "" when
// there is none.
std::string ResolveProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  std::istringstream path(Environment("PATH"));
  std::string folder;
  while (std::getline(path, folder, ':')) {
    if (folder.empty()) continue;
    const fs::path candidate = fs::path(folder) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::string();
}

// Interpreters to try, in order: $HOMODYNE_PYTHON alone if set (a path, or a name on PATH), else
// /usr/bin/python3 (the system one, where python3-matplotlib and python3-h5py install) and python3
// on PATH.
std::vector<std::string> PythonCandidates() {
  const std::string from_environment = Environment("HOMODYNE_PYTHON");
  if (!from_environment.empty()) {
    const std::string resolved = ResolveProgram(from_environment);
    return {resolved.empty() ? from_environment : resolved};
  }
  std::vector<std::string> candidates = {"/usr/bin/python3"};
  const std::string on_path = ResolveProgram("python3");
  if (!on_path.empty() && on_path != candidates.front()) candidates.push_back(on_path);
  return candidates;
}

struct ChildOutcome {
  bool started = false;  // fork succeeded and the child was waited for
  int exit_code = -1;    // valid when it exited normally
  int signal = 0;        // the signal that ended it, else 0
  std::string error;     // why fork/wait failed
};

// Runs argv[0] (an absolute or relative path, no PATH search) with `argv` and waits for it. The
// child's stdout is redirected to stderr. Between fork and exec the child only calls
// async-signal-safe functions (the parent may have OpenMP threads).
ChildOutcome RunProgram(const std::vector<std::string>& argv) {
  std::vector<char*> arguments;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  std::cout.flush();
  std::fflush(nullptr);
  ChildOutcome outcome;
  const pid_t pid = ::fork();
  if (pid < 0) {
    outcome.error = std::string("cannot start a process: ") + std::strerror(errno);
    return outcome;
  }
  if (pid == 0) {
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    ::execv(arguments[0], arguments.data());
    ::_exit(kExecFailed);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      outcome.error = std::string("cannot wait for the plot process: ") + std::strerror(errno);
      return outcome;
    }
  }
  outcome.started = true;
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
  return outcome;
}

// Runs the plot script with `script_arguments` (the last is the output folder), trying each
// interpreter (SavePlots); never throws.
bool RunPlotScript(const std::vector<std::string>& script_arguments);

void WarnNoPlots(const std::string& reason) {
  spdlog::warn("--save-plots: no plots written: {}; the fit's result files are complete", reason);
}

}  // namespace

bool SavePlots(const std::string& output_dir) { return RunPlotScript({"--", output_dir}); }

bool SaveRingSummaryPlot(const std::string& output_dir) {
  return RunPlotScript({"--q-summary", "--", output_dir});
}

}  // namespace homodyne::cli

namespace homodyne::cli {
namespace {

bool RunPlotScript(const std::vector<std::string>& script_arguments) {
  const std::string& output_dir = script_arguments.back();
  try {
    std::string reason;
    const std::optional<fs::path> script = FindScript(&reason);
    if (!script) {
      WarnNoPlots(reason);
      return false;
    }
    std::vector<std::string> attempts;
    for (const std::string& python : PythonCandidates()) {
      // "--" ends the script's options, so an output folder starting with '-' is still a folder.
      std::vector<std::string> argv = {python, script->string()};
      argv.insert(argv.end(), script_arguments.begin(), script_arguments.end());
      const ChildOutcome outcome = RunProgram(argv);
      if (!outcome.started) {
        WarnNoPlots(outcome.error);
        return false;
      }
      if (outcome.exit_code == 0) {
        spdlog::info("--save-plots: plots written to {}/nlsq/*.png", output_dir);
        return true;
      }
      if (outcome.exit_code == kExecFailed) {
        attempts.push_back(python + " cannot be run");
        continue;
      }
      if (outcome.exit_code == kScriptMissingModule) {
        attempts.push_back(python + " lacks h5py, numpy or matplotlib");
        continue;
      }
      WarnNoPlots(script->string() + " " +
                  (outcome.signal != 0
                       ? "was killed by signal " + std::to_string(outcome.signal)
                       : "failed with exit code " + std::to_string(outcome.exit_code)) +
                  " (its message is above)");
      return false;
    }
    std::string tried;
    for (size_t k = 0; k < attempts.size(); ++k) tried += (k ? "; " : "") + attempts[k];
    WarnNoPlots(tried + " (install python3-matplotlib and python3-h5py, or set HOMODYNE_PYTHON)");
    return false;
  } catch (const std::exception& error) {  // e.g. bad_alloc: plots are never worth a failed run
    WarnNoPlots(error.what());
    return false;
  }
}

}  // namespace
}  // namespace homodyne::cli
