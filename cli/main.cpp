#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "estimator/error.h"

namespace cloudtune::cli {

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(path + ": cannot write (cannot create " + tmp + ")");
    f << text;
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw InputError(path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot rename " + tmp + " into place");
  }
}

}  // namespace cloudtune::cli

int main(int argc, char** argv) {
  CLI::App app{"cloudtune: fit, predict and search training configurations offline"};
  app.require_subcommand(1);
  cloudtune::cli::RegisterFitCommands(app);
  cloudtune::cli::RegisterStepsCommand(app);
  cloudtune::cli::RegisterSearchCommands(app);
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
