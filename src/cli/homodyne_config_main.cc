// homodyne-config: writes a documented config template or validates a config file.
//
//   homodyne-config --mode static|laminar_flow --output FILE [--force]
//   homodyne-config --validate FILE
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
  std::cout << path << ": valid\n" << homodyne::BriefReport(config);
  return homodyne::kExitSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a documented homodyne config template, or validate a config file."};
  std::string mode;
  std::string output;
  std::string validate_path;
  bool force = false;
  auto* mode_option = app.add_option("-m,--mode", mode, "static or laminar_flow")
                          ->check(CLI::IsMember({"static", "laminar_flow"}));
  auto* output_option =
      app.add_option("-o,--output", output, "file to write (default homodyne_{mode}_config.yaml)");
  app.add_flag("-f,--force", force, "overwrite an existing output file");
  auto* validate_option =
      app.add_option("-v,--validate", validate_path, "config file to load and check");
  validate_option->excludes(mode_option)->excludes(output_option);
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
      if (output.empty()) output = "homodyne_" + mode + "_config.yaml";
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
