// homodyne: the command-line entry point. Errors are caught here, once, and mapped to the exit
// codes of docs/design.md section 7.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "command_line.h"
#include "fit_command.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/interrupts.h"
#include "homodyne/process_group.h"

namespace homodyne::cli {
namespace {

void ConfigureLogging(const CommandLineOptions& options) {
  auto logger = spdlog::stderr_color_mt("homodyne");
  logger->set_pattern("%^[%l]%$ %v");
  spdlog::set_default_logger(logger);
  if (options.quiet) {
    spdlog::set_level(spdlog::level::warn);
  } else if (options.verbosity > 0) {
    spdlog::set_level(spdlog::level::debug);
  } else {
    spdlog::set_level(spdlog::level::info);
  }
}

int Run(int argc, char** argv) {
  const std::optional<CommandLineOptions> options = ParseCommandLine(argc, argv);
  if (!options) return kExitSuccess;  // --help or --version
  ConfigureLogging(*options);
  // The ranks of an MPI job run the same fit; rank 0 alone prints (and writes: RunFitJob).
  const bool root = CurrentProcessGroup()->is_root();
  if (!root) spdlog::set_level(spdlog::level::off);
  std::ostringstream discarded;
  std::ostream& out = root ? std::cout : discarded;
  // Before any loading: a SLURM pre-timeout signal during setup still ends in a clean exit 3.
  InstallInterruptHandlers();

  if (!std::filesystem::exists(options->config_path)) {
    throw InputError(options->config_path + ": config file not found" +
                     (options->config_path_given ? ""
                                                 : " (give one with --config; write a template "
                                                   "with homodyne-config --mode laminar_flow)"));
  }
  // Resolved once, for the final analysis mode: bounds and start values of a --laminar-flow run
  // on a static config are laminar_flow's.
  const Config config =
      ResolveConfig(ReadConfigFile(options->config_path), OverridesFromCommandLine(*options));
  for (const std::string& warning : config.warnings) spdlog::warn("{}", warning);

  if (options->dry_run) return RunDryRun(config, *options, out);  // its plan names the ignored keys
  // The keys that have no effect here, in one line (docs/configuration.md, Accepted but not used).
  if (const std::string ignored = IgnoredKeysText(config); !ignored.empty()) {
    spdlog::info("{}", ignored);
  }
  return RunFit(config, *options, out);
}

// A failure: its message on stderr and its exit code. In a job of several ranks, the ranks that
// are not rank 0 wait a moment first: a failure every rank sees (bad input) is then reported once,
// by rank 0, whose abort ends the others; a failure of one rank alone (its rows unreadable) is
// reported by that rank, naming it. Either way the whole job ends (the other ranks would wait
// for this one forever).
int Fail(ProcessGroup& group, const std::string& message, int exit_code) {
  if (group.size() == 1) {
    std::cerr << message;
    return exit_code;
  }
  if (!group.is_root()) std::this_thread::sleep_for(std::chrono::seconds(3));
  std::cerr << (group.is_root() ? std::string() : "[rank " + std::to_string(group.rank()) + "] ")
            << message << std::flush;
  // The launcher forwards a rank's output from a pipe; an abort straight after the write can
  // tear the forwarding down before it has read the message (seen with Open MPI and MPICH about
  // once in 5 runs). A moment's wait lets it through.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  group.Abort(exit_code);
  return exit_code;  // not reached: Abort ends the process
}

int RunAndReport(int argc, char** argv, ProcessGroup& group) {
  try {
    return Run(argc, argv);
  } catch (const UsageError& error) {
    return Fail(group,
                std::string("homodyne: usage error: ") + error.what() +
                    "\nRun 'homodyne --help' for the flags.\n",
                kExitUsage);
  } catch (const Error& error) {
    return Fail(group, std::string("homodyne: error: ") + error.what() + "\n", kExitFailure);
  } catch (const FitInterrupted& interrupted) {
    // Every rank stopped at the same point (InterruptSignal agrees) and knows whether rank 0 saved.
    if (group.is_root()) std::cerr << "homodyne: " << interrupted.what() << "\n";
    return interrupted.checkpoint_saved() ? kExitInterrupted : kExitFailure;
  } catch (const std::bad_alloc&) {
    return Fail(group,
                "homodyne: error: out of memory (try --strategy streaming or a lower "
                "--memory-limit-gb)\n",
                kExitFailure);
  } catch (const std::exception& error) {
    return Fail(group, std::string("homodyne: error: ") + error.what() + "\n", kExitFailure);
  }
}

}  // namespace
}  // namespace homodyne::cli

int main(int argc, char** argv) {
  using namespace homodyne;
  std::shared_ptr<ProcessGroup> group;
  try {
    // `mpirun -n K homodyne ...` or srun: one fit on K ranks (process_group.h); else one process.
    group = JoinProcessGroup(&argc, &argv);
  } catch (const std::exception& error) {
    std::cerr << "homodyne: error: " << error.what() << "\n";
    return kExitFailure;
  }
  SetProcessGroup(group);
  const int exit_code = cli::RunAndReport(argc, argv, *group);
  SetProcessGroup(nullptr);
  group.reset();
  LeaveProcessGroup();
  return exit_code;
}
