#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

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

search::Config ParseConfigArg(const std::string& text, const std::string& option) {
  std::vector<std::string> p;
  std::stringstream ss(text);
  std::string x;
  while (std::getline(ss, x, ':')) p.push_back(x);
  if (p.size() < 4 || p.size() > 6)
    throw InputError(option +
                     ": expected TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]], got '" +
                     text + "'");
  auto integer = [&](const std::string& v, const char* what, int min) {
    const double d = ParseNumber(v, option + " " + what);
    if (d < min || d != std::floor(d))
      throw InputError(option + " " + what + ": '" + v +
                       "' must be an integer >= " + std::to_string(min));
    return static_cast<int>(d);
  };
  search::Config c;
  c.type = p[0];
  c.nodes = integer(p[1], "nodes", 1);
  c.gpus_per_node = integer(p[2], "gpus_per_node", 1);
  c.local_bsz = integer(p[3], "local_bsz", 1);
  if (p.size() > 4) c.accum_steps = integer(p[4], "accum", 0);
  if (p.size() > 5 && !core::ParsePurchase(p[5], &c.purchase))
    throw InputError(option + " purchase: '" + p[5] + "' (expected on-demand, spot or anchor)");
  return c;
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
