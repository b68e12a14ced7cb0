// Helpers shared by the end-to-end tests, which run the built example as real worker processes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
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

// A free port on 127.0.0.1 for a job's MASTER_PORT, or one held busy (`held_fd`: the socket,
// listening, for the caller to close). It is taken below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), where no other socket is given a port by the kernel:
// a port asked of the kernel and closed again can be handed to another process's connection or
// Gloo listener (tests run in parallel) before the job's store binds it. Falls back to the
// kernel's choice when the range leaves no room below it.
inline int FreePort(int* held_fd = nullptr) {
  // Binds 127.0.0.1:port (0: the kernel's choice); the port bound, or 0.
  auto bind = [held_fd](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t len = sizeof(a);
    const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    if (ok && held_fd) {
      ::listen(fd, 4);
      *held_fd = fd;
    } else if (fd >= 0) {
      ::close(fd);
    }
    return ok ? static_cast<int>(ntohs(a.sin_port)) : 0;
  };
  int low = 32768;  // Linux's default start of the ephemeral range
  if (int v = 0; std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> v && v > 0) low = v;
  constexpr int kFirst = 10000;  // above the well-known and most registered service ports
  const int span = std::max(low - kFirst, 0);
  const int start = span > 0 ? static_cast<int>(std::random_device{}() % span) : 0;
  for (int i = 0; i < span; ++i)
    if (const int port = bind(kFirst + (start + i) % span)) return port;
  return bind(0);
}

}  // namespace cloudtune::e2e
