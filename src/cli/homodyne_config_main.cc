// homodyne-config: writes a documented config template or validates a config file.
//
//   homodyne-config --mode static|laminar_flow|two_component --output FILE [--force]
//     (any name of homodyne::AnalysisModeNames(): heterodyne is two_component)
//   homodyne-config --validate FILE     (no -v: that is --verbose in homodyne)
//
// Exit codes (docs/design.md section 7): 0 done / valid; 1 invalid config, unwritable output or an
// existing output without --force; 2 bad usage (no action, unknown flag, bad value).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "homodyne/config.h"
#include "homodyne/errors.h"

namespace {

int WriteTemplate(const std::string& mode_text, const std::string& output, bool force) {
  const homodyne::AnalysisMode mode = homodyne::ParseAnalysisMode(mode_text);
  std::error_code error;
  if (!force && std::filesystem::exists(output, error)) {
    std::cerr << "homodyne-config: " << output << ": file exists; use --force to overwrite it\n";
    return homodyne::kExitFailure;
  }
  std::ofstream out(output, std::ios::binary | std::ios::trunc);
  out << homodyne::ConfigTemplate(mode);
  out.close();
  if (!out) {
    std::cerr << "homodyne-config: " << output << ": cannot write the file\n";
    return homodyne::kExitFailure;
  }
  std::cout << "wrote " << homodyne::ToString(mode) << " template to " << output << "\n";
  return homodyne::kExitSuccess;
}

int Validate(const std::string& path) {
  const homodyne::Config config = homodyne::LoadConfig(path);
  for (const std::string& warning : config.warnings) std::cout << "warning: " << warning << "\n";
  if (!config.unknown_sections.empty()) {
    std::string sections;
    for (const std::string& section : config.unknown_sections) {
      sections += (sections.empty() ? "" : ", ") + section;
    }
    std::cerr << "homodyne-config: " << path << ": not valid: unknown section(s) " << sections
              << ", whose keys would be ignored (see the warnings above)\n";
    return homodyne::kExitFailure;
  }
  std::cout << path << ": valid\n" << homodyne::BriefReport(config);
  return homodyne::kExitSuccess;
}

// `-v` (alone or first in a group such as -vf) was --validate in the reference's homodyne-config;
// here it means nothing, and in homodyne it means --verbose. Returns kExitUsage after a message
// that names the long form, 0 when argv has no -v.
int RefuseShortValidate(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--") break;
    if (argument.size() >= 2 && argument[0] == '-' && argument[1] == 'v') {
      std::cerr << "homodyne-config: -v is not a flag of homodyne-config: use --validate FILE "
                   "(-v means --verbose in homodyne)\n";
      return homodyne::kExitUsage;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a documented homodyne config template, or validate a config file."};
  std::string mode;
  std::string output;
  std::string validate_path;
  bool force = false;
  // Any analysis mode name or alias of the mode catalog; a bad one is a usage error (exit 2).
  const CLI::Validator known_mode(
      [](std::string& text) -> std::string {
        try {
          homodyne::ParseAnalysisMode(text);
        } catch (const homodyne::Error&) {
          return "'" + text + "' is not an analysis mode (one of " + homodyne::AnalysisModeNames() +
                 ")";
        }
        return "";
      },
      "MODE");
  auto* mode_option =
      app.add_option("-m,--mode", mode,
                     "analysis mode of the template: one of " + homodyne::AnalysisModeNames())
          ->check(known_mode);
  auto* output_option =
      app.add_option("-o,--output", output, "file to write (default homodyne_{mode}_config.yaml)");
  app.add_flag("-f,--force", force, "overwrite an existing output file");
  // No short form: -v is --verbose in homodyne, so it is not --validate here (the reference's
  // homodyne-config had -v for --validate; RefuseShortValidate says so).
  auto* validate_option =
      app.add_option("--validate", validate_path, "config file to load and check");
  validate_option->excludes(mode_option)->excludes(output_option);
  if (const int code = RefuseShortValidate(argc, argv); code != 0) return code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return homodyne::kExitUsage;
  }

  try {
    if (!validate_path.empty()) return Validate(validate_path);
    if (!mode.empty()) {
      if (output.empty()) {
        output = "homodyne_" + std::string(homodyne::ToString(homodyne::ParseAnalysisMode(mode))) +
                 "_config.yaml";
      }
      return WriteTemplate(mode, output, force);
    }
    if (!output.empty()) {
      std::cerr << "homodyne-config: --output needs --mode\n" << app.help();
      return homodyne::kExitUsage;
    }
    std::cerr << app.help();
    return homodyne::kExitUsage;
  } catch (const homodyne::UsageError& e) {
    std::cerr << "homodyne-config: " << e.what() << "\n";
    return homodyne::kExitUsage;
  } catch (const homodyne::Error& e) {
    std::cerr << "homodyne-config: " << e.what() << "\n";
    return homodyne::kExitFailure;
  }
}
