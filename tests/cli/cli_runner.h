// Runs the built `cloudtune` binary for the CLI tests and captures its exit status, stdout and
// stderr; files for a test go to one temporary directory per test binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace cloudtune::cli_test {

struct CliResult {
  int status = -1;
  std::string out, err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::string TmpDir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/cloudtune_cli_test.XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    return std::string(d ? d : "/tmp");
  }();
  return dir;
}

// `cloudtune ARGS` (ARGS is shell text), with CLOUDTUNE_CATALOG unset so the embedded catalog is
// used.
inline CliResult RunCli(const std::string& args) {
  ::unsetenv("CLOUDTUNE_CATALOG");
  const std::string out = TmpDir() + "/out", err = TmpDir() + "/err";
  const std::string cmd =
      std::string(CLOUDTUNE_BIN_DIR) + "/cloudtune " + args + " >" + out + " 2>" + err;
  const int rc = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

// Writes `text` to TmpDir()/name and returns the path.
inline std::string Write(const std::string& name, const std::string& text) {
  const std::string p = TmpDir() + "/" + name;
  std::ofstream(p) << text;
  return p;
}

}  // namespace cloudtune::cli_test
