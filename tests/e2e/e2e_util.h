// Helpers shared by the end-to-end tests, which run the built example as real worker processes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cloudtune::e2e {

// A fresh, empty directory <tmp>/<prefix>-<pid>/<name> for one run.
inline std::filesystem::path TempDir(const std::string& prefix, const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole file ("" when it cannot be read).
inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Lines of `text` that contain `needle` (log lines the plugin printed, for example).
inline int CountLines(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace cloudtune::e2e
