// A small bounded HTTP/1.1 client (Boost.Beast) for the link-local metadata endpoints the runtime
// asks: where the job runs (cloud.h) and spot revocation notices (preemption.h). Plain http://
// only; every exchange is bounded in time, including name resolution. Never throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace cloudtune::runtime {

// Parsed pieces of an http:// URL.
struct HttpUrl {
  std::string host;
  std::string port = "80";
  std::string target = "/";  // path + query
};
// Returns false with a message for anything but http://host[:port][/path][?query].
bool ParseHttpUrl(const std::string& url, HttpUrl* out, std::string* error);

struct HttpAnswer {
  bool ok = false;    // an HTTP answer arrived
  std::string error;  // when !ok: why ("timed out", "Connection refused" …)
  int status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // the answer's header fields
  // The value of header `name` (case-insensitive), or "".
  std::string Header(const std::string& name) const;
};

struct HttpRequestSpec {
  bool put = false;  // PUT (with an empty body) instead of GET
  std::string target = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds connect_timeout{1000};  // resolution + connect
  std::chrono::milliseconds read_timeout{2000};     // send + receive
  std::size_t max_body_bytes = 64 * 1024;
};

// One exchange with `url`'s host and port (its target is replaced by spec.target). Bounded by
// connect_timeout + read_timeout in all.
HttpAnswer HttpExchange(const HttpUrl& url, const HttpRequestSpec& spec);

}  // namespace cloudtune::runtime
