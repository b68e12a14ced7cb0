// Shared helpers for the service tests: wait-until with a deadline, peak RSS, and a tiny
// blocking HTTP client/server over 127.0.0.1 (raw Asio sockets, independent of the code tested).
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace cloudtune::runtime::testing {

inline bool WaitFor(const std::function<bool()>& pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// /proc/self/status field in kB (VmHWM = peak RSS, VmRSS = current).
inline long ProcStatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

struct RawResponse {
  int status = 0;  // 0 = no/unparsable answer
  std::string head, body, raw;
};

// Sends `request` bytes to 127.0.0.1:port and reads until the server closes (or `timeout_s`).
inline RawResponse RawExchange(int port, const std::string& request, double timeout_s = 5) {
  namespace asio = boost::asio;
  RawResponse r;
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  if (ec) return r;
  timeval tv{static_cast<long>(timeout_s), static_cast<long>((timeout_s - (long)timeout_s) * 1e6)};
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  asio::write(s, asio::buffer(request), ec);
  // A server may answer and close before reading everything we sent; keep what it said.
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(s.native_handle(), buf, sizeof buf, 0);
    if (n <= 0) break;
    r.raw.append(buf, static_cast<size_t>(n));
  }
  const auto sep = r.raw.find("\r\n\r\n");
  r.head = r.raw.substr(0, sep);
  if (sep != std::string::npos) r.body = r.raw.substr(sep + 4);
  if (r.raw.rfind("HTTP/1.", 0) == 0 && r.raw.size() > 12) r.status = std::stoi(r.raw.substr(9, 3));
  return r;
}

inline RawResponse Get(int port, const std::string& target, const std::string& extra = "") {
  return RawExchange(
      port, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + "\r\n");
}

}  // namespace cloudtune::runtime::testing
