#include "plugin/runtime/http_server.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <sstream>

#include "plugin/runtime/detail/thread.h"

namespace cloudtune::runtime {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

bool IsParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

}  // namespace

bool HttpOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (host.empty()) return fail("http host is empty");
  if (port < 0 || port > 65535)
    return fail("http port must be in 0..65535, got " + std::to_string(port));
  if (max_header_bytes < 256) return fail("http max_header_bytes must be >= 256");
  if (max_connections < 1) return fail("http max_connections must be >= 1");
  if (!(read_timeout_seconds > 0) || !std::isfinite(read_timeout_seconds))
    return fail("http read_timeout_seconds must be > 0");
  if (!(write_timeout_seconds > 0) || !std::isfinite(write_timeout_seconds))
    return fail("http write_timeout_seconds must be > 0");
  boost::system::error_code ec;
  if (host != "localhost") {
    asio::ip::make_address(host, ec);
    if (ec) return fail("http host '" + host + "' is not a numeric IP address or 'localhost'");
  }
  return true;
}

bool HttpOptions::Parse(const std::string& spec, HttpOptions* out, std::string* error) {
  auto fail = [&](const std::string& m) {
    if (error) *error = "'" + spec + "': " + m + " (expected host:port, e.g. 127.0.0.1:9464)";
    return false;
  };
  std::string host, port;
  if (!spec.empty() && spec[0] == '[') {
    const auto close = spec.find(']');
    if (close == std::string::npos || close + 1 >= spec.size() || spec[close + 1] != ':')
      return fail("malformed [IPv6]:port");
    host = spec.substr(1, close - 1);
    port = spec.substr(close + 2);
  } else {
    const auto colon = spec.rfind(':');
    if (colon == std::string::npos) {
      port = spec;
    } else {
      host = spec.substr(0, colon);
      port = spec.substr(colon + 1);
      if (host.find(':') != std::string::npos) return fail("IPv6 addresses need [brackets]");
    }
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return fail("port is not a number");
  HttpOptions o = *out;
  if (!host.empty()) o.host = host;
  o.port = std::stoi(port);
  std::string why;
  if (!o.IsValid(&why)) return fail(why);
  *out = o;
  return true;
}

struct HttpServer::Impl {
  // Declared before `io`: sessions still queued in the io_context are destroyed with it and touch
  // these in their destructors.
  HttpOptions options;
  HttpProviders providers;
  std::atomic<int> active{0};
  std::atomic<std::uint64_t> requests{0}, rejected{0}, connections{0};
  std::mutex start_stop;
  bool started = false, stopped = false;
  std::thread thread;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};

  void Accept();
};

namespace {

using Response = http::response<http::string_body>;

Response MakeResponse(http::status status, unsigned version, std::string body,
                      const char* content_type) {
  Response res{status, version};
  res.set(http::field::server, "cloudtune");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-store");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response ErrorResponse(http::status status, unsigned version, const std::string& what) {
  Response res = MakeResponse(status, version,
                              "{\"error\":\"" + what + "\",\"status\":" +
                                  std::to_string(static_cast<unsigned>(status)) + "}\n",
                              "application/json");
  return res;
}

// The answer to a request the parser refused (`ec` is a parse error).
Response ParseErrorResponse(const beast::error_code& ec) {
  http::status st = http::status::bad_request;
  std::string what = "malformed request: " + ec.message();
  if (ec == http::error::body_limit) {
    st = http::status::payload_too_large;
    what = "request body too large";
  } else if (ec == http::error::header_limit) {
    st = http::status::request_header_fields_too_large;
    what = "request header too large";
  }
  Response res = ErrorResponse(st, 11, what);
  res.set(http::field::connection, "close");
  res.keep_alive(false);
  return res;
}

Response Route(const HttpProviders& providers, const http::request<http::string_body>& req);

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server) {
    server_->active.fetch_add(1);
  }
  ~Session() { server_->active.fetch_sub(1); }

  void Run() { ReadRequest(); }

  // Over the connection limit: answer 503 and close without reading.
  void Reject() {
    server_->rejected.fetch_add(1);
    res_ = ErrorResponse(http::status::service_unavailable, 11, "too many connections");
    res_.set(http::field::connection, "close");
    res_.keep_alive(false);
    Write(/*close=*/true);
  }

 private:
  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_->options.max_header_bytes));
    parser_->body_limit(server_->options.max_body_bytes);
    stream_.expires_after(Seconds(server_->options.read_timeout_seconds));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted) {
      Close();
      return;
    }
    if (ec) {
      if (!IsParseError(ec)) {  // connection reset etc.
        Close();
        return;
      }
      server_->rejected.fetch_add(1);
      res_ = ParseErrorResponse(ec);
      Write(/*close=*/true);
      return;
    }
    const auto& req = parser_->get();
    res_ = Route(server_->providers, req);
    const bool keep = req.keep_alive() && res_.result_int() < 400;
    res_.keep_alive(keep);
    server_->requests.fetch_add(1);
    if (res_.result_int() >= 400) server_->rejected.fetch_add(1);
    Write(/*close=*/!keep);
  }

  void Write(bool close) {
    stream_.expires_after(Seconds(server_->options.write_timeout_seconds));
    http::async_write(stream_, res_,
                      [self = shared_from_this(), close](beast::error_code ec, std::size_t) {
                        if (ec) return self->Close();
                        if (close) return self->LingeringClose();
                        self->ReadRequest();
                      });
  }

  // After an error answer the client may still be sending (an oversized body, a pipelined
  // request). Closing with unread data makes the kernel send RST, which can destroy the answer
  // before the client reads it; so half-close, then discard input for a bounded time and size.
  void LingeringClose() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(Seconds(std::min(1.0, server_->options.read_timeout_seconds)));
    Drain();
  }
  void Drain() {
    if (drained_ > 256 * 1024) return Close();
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (ec) return self->Close();
                              self->drained_ += n;
                              self->Drain();
                            });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Response res_;
  std::size_t drained_ = 0;
  char scratch_[4096];
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      accept_backoff.expires_after(std::chrono::milliseconds(50));
      accept_backoff.async_wait([this](beast::error_code e) {
        if (!e && acceptor.is_open()) Accept();
      });
      return;
    }
    connections.fetch_add(1);
    const bool over = active.load() >= options.max_connections;
    auto session = std::make_shared<Session>(std::move(socket), this);
    if (over)
      session->Reject();
    else
      session->Run();
    Accept();
  });
}

namespace {

// Maps a complete request to its answer (method, path, query and Accept against the providers).
Response Route(const HttpProviders& providers, const http::request<http::string_body>& req) {
  const unsigned v = req.version();
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    Response res = ErrorResponse(http::status::method_not_allowed, v, "read-only endpoint");
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }
  const std::string target(req.target());
  const auto q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  auto call = [&](const std::function<std::string()>& f, const char* type,
                  bool empty_is_unavailable) -> Response {
    if (!f) return ErrorResponse(http::status::not_found, v, "not available");
    std::string body;
    try {
      body = f();
    } catch (const std::exception& e) {
      return ErrorResponse(http::status::internal_server_error, v, "provider failed");
    } catch (...) {
      return ErrorResponse(http::status::internal_server_error, v, "provider failed");
    }
    if (body.empty() && empty_is_unavailable) {
      Response res = ErrorResponse(http::status::service_unavailable, v, "not available yet");
      res.set(http::field::retry_after, "5");
      return res;
    }
    return MakeResponse(http::status::ok, v, std::move(body), type);
  };
  Response res;
  if (path == "/v1/recommendation") {
    res = call(providers.recommendation, "application/json", true);
  } else if (path == "/v1/profile") {
    const auto accept = req[http::field::accept];
    const bool csv = query.find("format=csv") != std::string::npos ||
                     (accept.find("text/csv") != beast::string_view::npos &&
                      query.find("format=json") == std::string::npos);
    res = csv ? call(providers.profile_csv, "text/csv; charset=utf-8", false)
              : call(providers.profile_json, "application/json", false);
  } else if (path == "/metrics") {
    res = call(providers.metrics, "text/plain; version=0.0.4; charset=utf-8", false);
  } else if (path == "/healthz") {
    res = MakeResponse(http::status::ok, v, "ok\n", "text/plain");
  } else {
    res = ErrorResponse(http::status::not_found, v, "unknown path");
  }
  if (req.method() == http::verb::head) {
    const auto size = res.body().size();
    res.body().clear();
    res.content_length(size);
  }
  return res;
}

}  // namespace

std::string HttpRespond(std::string_view request, const HttpOptions& options,
                        const HttpProviders& providers) {
  try {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    parser.body_limit(options.max_body_bytes);
    beast::error_code ec;
    std::size_t used = 0;
    while (!ec && !parser.is_done() && used < request.size()) {
      const std::size_t n =
          parser.put(asio::buffer(request.data() + used, request.size() - used), ec);
      if (ec == http::error::need_more) ec = {};
      if (n == 0 && !ec) break;  // the rest is an incomplete piece the parser cannot take yet
      used += n;
    }
    Response res;
    if (ec) {
      res = ParseErrorResponse(ec);
    } else if (!parser.is_done()) {
      return "";
    } else {
      const auto& req = parser.get();
      res = Route(providers, req);
      res.keep_alive(req.keep_alive() && res.result_int() < 400);
    }
    std::ostringstream out;
    out << res;
    return out.str();
  } catch (...) {  // e.g. out of memory: the connection would be closed without an answer
    return "";
  }
}

HttpServer::HttpServer(HttpOptions options, HttpProviders providers)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->providers = std::move(providers);
}

HttpServer::~HttpServer() { Stop(); }

bool HttpServer::Start(std::string* error) {
  std::lock_guard<std::mutex> lock(impl_->start_stop);
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (impl_->started || impl_->stopped) return fail("http server already started");
  std::string why;
  if (!impl_->options.IsValid(&why)) return fail(why);
  const std::string host = impl_->options.host == "localhost" ? "127.0.0.1" : impl_->options.host;
  const std::string where = host + ":" + std::to_string(impl_->options.port);
  try {
    boost::system::error_code ec;
    const tcp::endpoint ep(asio::ip::make_address(host), impl_->options.port);
    impl_->acceptor.open(ep.protocol(), ec);
    if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) impl_->acceptor.bind(ep, ec);
    if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      const std::string why_not = ec.message();  // before close() overwrites ec
      impl_->acceptor.close(ec);
      return fail("cannot listen on " + where + ": " + why_not);
    }
    bound_port_ = impl_->acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    return fail("cannot listen on " + where + ": " + e.what());
  }
  impl_->started = true;
  impl_->Accept();
  impl_->thread = std::thread([this] {
    detail::NameThisThread("http");
    for (;;) {
      try {
        impl_->io.run();
        return;
      } catch (...) {  // a handler threw (should not happen): keep serving
      }
    }
  });
  return true;
}

void HttpServer::Stop() {
  std::lock_guard<std::mutex> lock(impl_->start_stop);
  if (impl_->stopped) return;
  impl_->stopped = true;
  if (!impl_->started) return;
  asio::post(impl_->io, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

HttpStats HttpServer::Stats() const {
  HttpStats s;
  s.requests = impl_->requests.load();
  s.rejected = impl_->rejected.load();
  s.connections = impl_->connections.load();
  return s;
}

}  // namespace cloudtune::runtime
