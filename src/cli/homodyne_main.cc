// homodyne: the command-line entry point. Errors are caught here, once, and mapped to the exit
// codes of docs/design.md section 7.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>

#include "command_line.h"
#include "fit_command.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/interrupts.h"

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

  if (options->dry_run) return RunDryRun(config, std::cout);
  return RunFit(config, *options, std::cout);
}

}  // namespace
}  // namespace homodyne::cli

int main(int argc, char** argv) {
  using namespace homodyne;
  try {
    return cli::Run(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << "homodyne: usage error: " << error.what() << "\n"
              << "Run 'homodyne --help' for the flags.\n";
    return kExitUsage;
  } catch (const Error& error) {
    std::cerr << "homodyne: error: " << error.what() << "\n";
    return kExitFailure;
  } catch (const FitInterrupted& interrupted) {
    std::cerr << "homodyne: " << interrupted.what() << "\n";
    return interrupted.checkpoint_saved() ? kExitInterrupted : kExitFailure;
  } catch (const std::bad_alloc&) {
    std::cerr << "homodyne: error: out of memory (try --strategy streaming or a lower "
                 "--memory-limit-gb)\n";
    return kExitFailure;
  } catch (const std::exception& error) {
    std::cerr << "homodyne: error: " << error.what() << "\n";
    return kExitFailure;
  }
}
