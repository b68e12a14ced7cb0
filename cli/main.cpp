#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "estimator/core/atomic_file.h"
#include "estimator/core/error.h"
#include "estimator/core/version.h"

namespace cloudtune::cli {

void Output(const std::string& path, const std::string& text) {
  if (path.empty())
    std::cout << text;
  else
    core::WriteFileAtomicallyOrThrow(path, text);
}

double ParseNumber(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v))
    throw InputError(what + ": '" + text + "' is not a number");
  return v;
}

}  // namespace cloudtune::cli

int main(int argc, char** argv) {
  CLI::App app{"cloudtune: fit, predict and search training configurations offline"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("cloudtune ") + cloudtune::core::Version());
  cloudtune::cli::RegisterFitCommands(app);
  cloudtune::cli::RegisterStepsCommand(app);
  cloudtune::cli::RegisterRecommendCommand(app);
  cloudtune::cli::RegisterReplayCommand(app);
  cloudtune::cli::RegisterReportCommand(app);
  cloudtune::cli::RegisterStatusCommand(app);
  cloudtune::cli::RegisterLaunchSpecCommand(app);
  cloudtune::cli::RegisterHistoryCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
