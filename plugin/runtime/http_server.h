// Read-only HTTP/1.1 endpoint (Boost.Beast) of the online tuner, enabled by CLOUDTUNE_HTTP:
//   GET /v1/recommendation  latest recommendation (application/json; 503 before the first one)
//   GET /v1/profile         measured profile (JSON; CSV with ?format=csv or Accept: text/csv)
//   GET /metrics            Prometheus text format 0.0.4
//   GET /healthz            "ok"
// HEAD is accepted too; other methods get 405, unknown paths 404, malformed requests 400, a header
// over the limit 431, a body over the limit 413, connections over the limit 503. Each connection
// has a read timeout. The server runs on its own thread and gets its content only from providers
// (functions returning strings), so it never touches training state; a provider that throws
// yields 500 for that request only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace cloudtune::runtime {

struct HttpOptions {
  // Address to bind: numeric IPv4/IPv6 or "localhost". Default loopback only.
  std::string host = "127.0.0.1";
  // TCP port; 0 = an ephemeral port (see HttpServer::BoundPort()). 0..65535.
  int port = 0;
  // Largest request header (request line + fields), bytes; larger → 431. >= 256.
  std::size_t max_header_bytes = 8 * 1024;
  // Largest request body, bytes (a GET needs none); larger → 413.
  std::size_t max_body_bytes = 1024;
  // Concurrent connections; more are answered 503 and closed. >= 1.
  int max_connections = 32;
  // Seconds a connection may take to send a complete request (and idle between keep-alive
  // requests) before it is closed. > 0.
  double read_timeout_seconds = 5;
  // Seconds allowed to write a response. > 0.
  double write_timeout_seconds = 5;

  bool IsValid(std::string* error) const;
  // Parses CLOUDTUNE_HTTP's value: "host:port", "[v6]:port", ":port" or "port" (host stays the
  // default 127.0.0.1). Returns false with a message on a malformed value.
  static bool Parse(const std::string& spec, HttpOptions* out, std::string* error);
};

// Content providers, called on the server thread for each request. An empty string from
// `recommendation` means "none yet" (503). Unset providers answer 404.
struct HttpProviders {
  std::function<std::string()> recommendation;  // JSON document
  std::function<std::string()> profile_json;    // JSON document
  std::function<std::string()> profile_csv;     // trace CSV
  std::function<std::string()> metrics;         // Prometheus text (RenderPrometheus)
};

struct HttpStats {
  std::uint64_t requests = 0;     // complete requests answered
  std::uint64_t rejected = 0;     // 4xx/5xx answers, over-limit and malformed requests
  std::uint64_t connections = 0;  // accepted connections
};

// Answers one raw request as a connection of HttpServer does, without a socket: `request` (the
// bytes a client sent) is parsed with the options' header and body limits and routed to the
// providers. Returns the serialized response (status line, fields, body), or "" when the bytes are
// not yet a complete request (the server would wait for more and time out). Never throws. Used by
// the tests and the fuzzer (fuzz/http_request_fuzz.cpp) to exercise parsing and routing.
std::string HttpRespond(std::string_view request, const HttpOptions& options,
                        const HttpProviders& providers);

class HttpServer {
 public:
  HttpServer(HttpOptions options, HttpProviders providers);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the server thread. Returns false with a message (naming the
  // address) when the options are invalid or the address cannot be bound. Never throws.
  bool Start(std::string* error);
  // Closes the listener and all connections and joins the thread. Idempotent.
  void Stop();
  // The port actually bound (the ephemeral one when options.port == 0); 0 before Start().
  int BoundPort() const { return bound_port_.load(); }
  HttpStats Stats() const;

  struct Impl;  // internal (public only so the .cpp's session class can reach it)

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<int> bound_port_{0};
};

}  // namespace cloudtune::runtime
