#include "plugin/torch/signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <mutex>
#include <thread>

namespace cloudtune::plugin {
namespace {

int g_pipe[2] = {-1, -1};
struct sigaction g_previous;
std::mutex g_mu;
bool g_installed = false;

void OnTerm(int) {
  const char b = 't';
  if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], &b, 1);  // async-signal-safe
}

}  // namespace

bool WatchTermination(std::function<void()> on_term) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_installed) return true;
  struct sigaction current;
  if (::sigaction(SIGTERM, nullptr, &current) != 0) return false;
  if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) return false;
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return false;
  struct sigaction sa = {};
  sa.sa_handler = OnTerm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(SIGTERM, &sa, &g_previous) != 0) {
    ::close(g_pipe[0]);
    ::close(g_pipe[1]);
    g_pipe[0] = g_pipe[1] = -1;
    return false;
  }
  g_installed = true;
  const int in = g_pipe[0];
  // Detached: it must never hold up the process's exit; it ends on 'q' from Stop.
  std::thread([in, on_term = std::move(on_term)] {
    char b = 0;
    ssize_t n;
    do {
      n = ::read(in, &b, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1 || b != 't') return;  // 'q' (stop) or a closed pipe
    try {
      on_term();
    } catch (...) {
    }
    // Die as the signal would have.
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  }).detach();
  return true;
}

void StopWatchingTermination() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_installed) return;
  ::sigaction(SIGTERM, &g_previous, nullptr);
  const char q = 'q';
  (void)!::write(g_pipe[1], &q, 1);
  // The pipe stays open: the watcher may not have read 'q' yet, and a closed descriptor's number
  // could be reused by the job.
  g_installed = false;
}

}  // namespace cloudtune::plugin
