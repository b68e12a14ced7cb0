#include "plugin/service/preemption.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>

#include "estimator/csv.h"

namespace cloudtune::service {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

using estimator::csv::Trim;

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Excerpt(const std::string& body) {
  std::string s = body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

bool PreemptionOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!(poll_seconds > 0) || !std::isfinite(poll_seconds))
    return fail("preemption poll_seconds must be a finite number > 0");
  if (!(connect_timeout_seconds > 0) || !std::isfinite(connect_timeout_seconds))
    return fail("preemption connect_timeout_seconds must be > 0");
  if (!(read_timeout_seconds > 0) || !std::isfinite(read_timeout_seconds))
    return fail("preemption read_timeout_seconds must be > 0");
  if (max_body_bytes < 16) return fail("preemption max_body_bytes must be >= 16");
  if (!url.empty()) {
    HttpUrl u;
    std::string why;
    if (!ParseHttpUrl(url, &u, &why)) return fail("preemption url: " + why);
  }
  return true;
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

MetadataProvider DetectProvider(const std::string& url) {
  const std::string u = Lower(url);
  if (u.find("computemetadata") != std::string::npos) return MetadataProvider::kGcp;
  if (u.find("scheduledevents") != std::string::npos) return MetadataProvider::kAzure;
  return MetadataProvider::kAws;
}

const char* ProviderName(MetadataProvider p) {
  switch (p) {
    case MetadataProvider::kAws:
      return "aws";
    case MetadataProvider::kGcp:
      return "gcp";
    case MetadataProvider::kAzure:
      return "azure";
    default:
      return "auto";
  }
}

nlohmann::json PreemptionNotice::ToJson() const {
  return {{"schema", "cloudtune.preemption/1"},
          {"provider", provider},
          {"url", url},
          {"http_status", http_status},
          {"action", action},
          {"time", time},
          {"detail", detail},
          {"observed_at", observed_at}};
}

std::optional<PreemptionNotice> InterpretMetadataAnswer(MetadataProvider provider, int status,
                                                        const std::string& body,
                                                        std::string* unexpected) {
  auto odd = [&](const std::string& m) -> std::optional<PreemptionNotice> {
    if (unexpected) *unexpected = m;
    return std::nullopt;
  };
  if (unexpected) unexpected->clear();
  PreemptionNotice n;
  n.provider = ProviderName(provider);
  n.http_status = status;
  n.observed_at = UtcNow();
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  switch (provider) {
    case MetadataProvider::kAuto:
    case MetadataProvider::kAws: {
      if (status == 404) return std::nullopt;
      if (status != 200) return odd("HTTP status " + std::to_string(status));
      // 200 means a notice is scheduled; the body says which action and when.
      if (parsed.is_object()) {
        n.detail = parsed;
        if (parsed.contains("action") && parsed["action"].is_string()) n.action = parsed["action"];
        if (parsed.contains("time") && parsed["time"].is_string()) n.time = parsed["time"];
      } else {
        n.detail = body;
      }
      if (n.action.empty()) n.action = "terminate";
      return n;
    }
    case MetadataProvider::kGcp: {
      if (status != 200) return odd("HTTP status " + std::to_string(status));
      const std::string v = Trim(body);
      if (v == "FALSE") return std::nullopt;
      if (v != "TRUE") return odd("body '" + Excerpt(v) + "' is neither TRUE nor FALSE");
      n.action = "preempted";
      n.detail = v;
      return n;
    }
    case MetadataProvider::kAzure: {
      if (status != 200) return odd("HTTP status " + std::to_string(status));
      if (!parsed.is_object() || !parsed.contains("Events") || !parsed["Events"].is_array())
        return odd("answer is not a scheduled-events document: '" + Excerpt(body) + "'");
      for (const auto& e : parsed["Events"]) {
        if (!e.is_object() || !e.contains("EventType") || e["EventType"] != "Preempt") continue;
        n.action = "Preempt";
        if (e.contains("NotBefore") && e["NotBefore"].is_string()) n.time = e["NotBefore"];
        n.detail = e;
        return n;
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

PreemptionWatcher::PreemptionWatcher(PreemptionOptions options, NoticeFn on_notice, LogFn log)
    : options_(std::move(options)), on_notice_(std::move(on_notice)), log_(std::move(log)) {}

PreemptionWatcher::~PreemptionWatcher() { Stop(); }

bool PreemptionWatcher::Start(std::string* error) {
  std::string why;
  if (!options_.IsValid(&why)) {
    if (error) *error = why;
    return false;
  }
  if (options_.url.empty()) {
    if (error) *error = "preemption watcher: no URL";
    return false;
  }
  ParseHttpUrl(options_.url, &url_, nullptr);
  provider_ = options_.provider == MetadataProvider::kAuto ? DetectProvider(options_.url)
                                                           : options_.provider;
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stop_) {
    if (error) *error = "preemption watcher already started";
    return false;
  }
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
  return true;
}

void PreemptionWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PreemptionWatcher::Loop() {
  for (;;) {
    try {
      PollOnce();
    } catch (...) {  // defensive: nothing in PollOnce should throw
    }
    if (should_checkpoint()) return;  // one notice is all there is; the instance is going away
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, Seconds(options_.poll_seconds), [this] { return stop_; })) return;
  }
}

void PreemptionWatcher::PollOnce() {
  polls_.fetch_add(1);
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  http::request<http::empty_body> req{http::verb::get, url_.target, 11};
  req.set(http::field::host, url_.host);
  req.set(http::field::user_agent, "cloudtune");
  req.set(http::field::connection, "close");
  if (provider_ == MetadataProvider::kGcp) req.set("Metadata-Flavor", "Google");
  if (provider_ == MetadataProvider::kAzure) req.set("Metadata", "true");
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(options_.max_body_bytes);
  beast::error_code result = asio::error::timed_out;
  bool done = false;

  auto finish = [&](beast::error_code ec) {
    result = ec;
    done = true;
  };
  resolver.async_resolve(
      url_.host, url_.port, [&](beast::error_code ec, tcp::resolver::results_type results) {
        if (ec) return finish(ec);
        stream.expires_after(Seconds(options_.connect_timeout_seconds));
        stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
          if (ec) return finish(ec);
          stream.expires_after(Seconds(options_.read_timeout_seconds));
          http::async_write(stream, req, [&](beast::error_code ec, std::size_t) {
            if (ec) return finish(ec);
            http::async_read(stream, buffer, parser,
                             [&](beast::error_code ec, std::size_t) { finish(ec); });
          });
        });
      });
  // Overall bound (covers name resolution, which has no timeout of its own).
  ioc.run_for(Seconds(options_.connect_timeout_seconds + options_.read_timeout_seconds));
  if (!done) {
    resolver.cancel();
    beast::error_code ignored;
    stream.socket().close(ignored);
    ioc.stop();
  }
  if (!done || result) {
    failures_.fetch_add(1);
    if (!logged_unreachable_ && log_) {
      logged_unreachable_ = true;
      log_("cloudtune: preemption watcher cannot reach " + options_.url + ": " +
           (done ? result.message() : std::string("timed out")) + " (polling continues quietly)");
    }
    return;
  }
  logged_unreachable_ = false;  // reachable again: a later outage is worth one more line
  const auto& res = parser.get();
  std::string unexpected;
  auto notice = InterpretMetadataAnswer(provider_, static_cast<int>(res.result_int()), res.body(),
                                        &unexpected);
  if (!unexpected.empty()) {
    if (!logged_unexpected_ && log_) {
      logged_unexpected_ = true;
      log_("cloudtune: preemption watcher: unexpected answer from " + options_.url + " (" +
           ProviderName(provider_) + "): " + unexpected + " (polling continues quietly)");
    }
    return;
  }
  if (!notice) return;
  notice->url = options_.url;
  flag_.store(true, std::memory_order_release);
  if (log_)
    log_("cloudtune: spot revocation notice from " + notice->provider + " (" + notice->action +
         (notice->time.empty() ? "" : " at " + notice->time) + "): checkpoint now");
  if (on_notice_) {
    try {
      on_notice_(*notice);
    } catch (const std::exception& e) {
      if (log_) log_(std::string("cloudtune: preemption callback failed: ") + e.what());
    } catch (...) {
    }
  }
}

}  // namespace cloudtune::service
