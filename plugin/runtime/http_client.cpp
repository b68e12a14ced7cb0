#include "plugin/runtime/http_client.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>

namespace cloudtune::runtime {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string HttpAnswer::Header(const std::string& name) const {
  const std::string want = Lower(name);
  for (const auto& [k, v] : headers)
    if (Lower(k) == want) return v;
  return "";
}

bool ParseHttpUrl(const std::string& url, HttpUrl* out, std::string* error) {
  auto fail = [&](const std::string& m) {
    if (error) *error = "'" + url + "': " + m;
    return false;
  };
  const std::string scheme = "http://";
  if (Lower(url.substr(0, scheme.size())) != scheme) return fail("only http:// URLs are supported");
  const std::string rest = url.substr(scheme.size());
  const auto slash = rest.find_first_of("/?");
  std::string authority = rest.substr(0, slash);
  HttpUrl u;
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (!u.target.empty() && u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string::npos) return fail("user info is not supported");
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string::npos) return fail("malformed [IPv6] host");
    u.host = authority.substr(1, close - 1);
    const std::string tail = authority.substr(close + 1);
    if (!tail.empty()) {
      if (tail[0] != ':') return fail("malformed port");
      u.port = tail.substr(1);
    }
  } else {
    const auto colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return fail("no host");
  if (u.port.empty() || u.port.size() > 5 ||
      u.port.find_first_not_of("0123456789") != std::string::npos || std::stoi(u.port) > 65535)
    return fail("port is not a number in 0..65535");
  for (char c : u.target)
    if (static_cast<unsigned char>(c) <= ' ')
      return fail("URL contains spaces or control characters");
  *out = u;
  return true;
}

HttpAnswer HttpExchange(const HttpUrl& url, const HttpRequestSpec& spec) {
  HttpAnswer out;
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    http::request<http::string_body> req{spec.put ? http::verb::put : http::verb::get, spec.target,
                                         11};
    req.set(http::field::host, url.host);
    req.set(http::field::user_agent, "cloudtune");
    req.set(http::field::connection, "close");
    for (const auto& [name, value] : spec.headers) req.set(name, value);
    req.prepare_payload();  // PUT: "Content-Length: 0"
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(spec.max_body_bytes);
    beast::error_code result = asio::error::timed_out;
    bool done = false;
    auto finish = [&](beast::error_code ec) {
      result = ec;
      done = true;
    };
    resolver.async_resolve(
        url.host, url.port, [&](beast::error_code ec, tcp::resolver::results_type results) {
          if (ec) return finish(ec);
          stream.expires_after(spec.connect_timeout);
          stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
            if (ec) return finish(ec);
            stream.expires_after(spec.read_timeout);
            http::async_write(stream, req, [&](beast::error_code ec, std::size_t) {
              if (ec) return finish(ec);
              http::async_read(stream, buffer, parser,
                               [&](beast::error_code ec, std::size_t) { finish(ec); });
            });
          });
        });
    // Overall bound (covers name resolution, which has no timeout of its own).
    ioc.run_for(spec.connect_timeout + spec.read_timeout);
    if (!done) {
      resolver.cancel();
      beast::error_code ignored;
      stream.socket().close(ignored);
      ioc.stop();
    }
    if (!done || result) {
      out.error = done ? result.message() : std::string("timed out");
      return out;
    }
    const auto& res = parser.get();
    out.ok = true;
    out.status = static_cast<int>(res.result_int());
    out.body = res.body();
    for (const auto& f : res)
      out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  } catch (const std::exception& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

}  // namespace cloudtune::runtime
