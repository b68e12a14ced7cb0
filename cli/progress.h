// A one-line progress indicator on stderr for long commands (replay over many scenarios, fits of
// large traces), shown only when stderr is a terminal: "\r<task>: <step> (<i>/<n>)", cleared when
// done. Off a terminal (CI, pipes, files) it prints nothing, so outputs stay clean.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace cloudtune::cli {

class Progress {
 public:
  // `total` steps (0 = unknown). `enabled` defaults to whether stderr is a terminal.
  Progress(std::string task, int total, bool enabled = ::isatty(STDERR_FILENO) != 0)
      : task_(std::move(task)), total_(total), enabled_(enabled) {}
  ~Progress() { Done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Shows `what` as step `i` (1-based) of the total.
  void Step(int i, const std::string& what) {
    if (!enabled_) return;
    std::string line = task_ + ": " + what;
    if (total_ > 0) line += " (" + std::to_string(i) + "/" + std::to_string(total_) + ")";
    if (line.size() > 100) line = line.substr(0, 97) + "...";
    std::fprintf(stderr, "\r%-*s", static_cast<int>(width_), line.c_str());
    std::fflush(stderr);
    width_ = std::max(width_, line.size());
    shown_ = true;
  }
  // Clears the line.
  void Done() {
    if (!enabled_ || !shown_) return;
    std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
    std::fflush(stderr);
    shown_ = false;
  }
  bool enabled() const { return enabled_; }

 private:
  std::string task_;
  int total_;
  bool enabled_;
  bool shown_ = false;
  size_t width_ = 0;
};

}  // namespace cloudtune::cli
