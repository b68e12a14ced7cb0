// cloudtune status [URL]: a one-screen summary of a running job, read from its HTTP endpoint
// (CLOUDTUNE_HTTP; plugin/runtime/http_server.h): GET /v1/recommendation, /v1/profile, /metrics.
// --watch refreshes it. The client is Boost.Beast (synchronous, with a timeout per request).
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "estimator/core/error.h"

namespace cloudtune::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

struct StatusArgs {
  std::string url;
  bool watch = false;
  double interval = 2;
  int iterations = 0;  // --watch: stop after this many refreshes (0 = until interrupted)
  double timeout = 5;
};

struct Endpoint {
  std::string host, port, text;  // text: as given, for messages
};

// "http://host:port[/...]", "host:port", ":port" or "port"; host defaults to 127.0.0.1.
Endpoint ParseUrl(const std::string& url) {
  Endpoint e;
  e.text = url;
  std::string s = url;
  if (s.rfind("https://", 0) == 0) throw InputError(url + ": https is not supported (use http://)");
  if (s.rfind("http://", 0) == 0) s = s.substr(7);
  s = s.substr(0, s.find('/'));
  std::string host = "127.0.0.1", port = s;
  if (!s.empty() && s[0] == '[') {  // [v6]:port
    const size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      throw InputError(url + ": expected [ADDRESS]:PORT");
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else if (const size_t colon = s.rfind(':'); colon != std::string::npos) {
    if (colon > 0) host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535)
    throw InputError(url + ": expected http://HOST:PORT (port 1..65535)");
  e.host = host;
  e.port = port;
  return e;
}

struct Reply {
  int status = 0;
  std::string body;
};

// One GET; throws InputError naming the URL when the endpoint cannot be reached or does not answer
// within `timeout_s` per step (Beast's stream timeouts apply to asynchronous operations only, so
// the request runs asynchronously on a private io_context).
Reply Get(const Endpoint& e, const std::string& target, double timeout_s) {
  boost::asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  const auto timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, e.host);
  req.set(http::field::user_agent, "cloudtune-status");
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  beast::error_code result;
  tcp::resolver::results_type endpoints;
  try {
    endpoints = resolver.resolve(e.host, e.port);
  } catch (const std::exception& ex) {
    throw InputError("http://" + e.host + ":" + e.port + target + ": " + ex.what());
  }
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) return void(result = ec);
    stream.expires_after(timeout);
    http::async_write(stream, req, [&](beast::error_code ec2, std::size_t) {
      if (ec2) return void(result = ec2);
      stream.expires_after(timeout);
      http::async_read(stream, buffer, parser,
                       [&](beast::error_code ec3, std::size_t) { result = ec3; });
    });
  });
  ioc.run();
  if (result)
    throw InputError("http://" + e.host + ":" + e.port + target + ": " + result.message());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return {static_cast<int>(parser.get().result_int()), parser.get().body()};
}

// Prometheus text: "name value" lines (labels are not used by the tuner's metrics).
std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream l(line);
    std::string name, value;
    if (!(l >> name >> value)) continue;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (*end == '\0') m[name] = v;
  }
  return m;
}

std::string Num(double v, const char* fmt = "%.3g") {
  if (!std::isfinite(v)) return "?";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// What one refresh shows. Throws InputError when the endpoint cannot be reached.
std::string Screen(const Endpoint& e, double timeout) {
  const Reply met = Get(e, "/metrics", timeout);
  const Reply rec = Get(e, "/v1/recommendation", timeout);
  const Reply prof = Get(e, "/v1/profile", timeout);
  const auto m = ParseMetrics(met.status == 200 ? met.body : "");
  const auto g = [&m](const char* name) {
    const auto it = m.find(std::string("cloudtune_") + name);
    return it == m.end() ? NAN : it->second;
  };
  std::ostringstream o;
  o << "cloudtune status  http://" << e.host << ":" << e.port << "\n";
  const nlohmann::json r =
      rec.status == 200 ? nlohmann::json::parse(rec.body, nullptr, false) : nlohmann::json();
  const nlohmann::json p =
      prof.status == 200 ? nlohmann::json::parse(prof.body, nullptr, false) : nlohmann::json();
  // A number of `j` ("?" when it is absent, null or not a number).
  const auto num = [](const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
  };
  // A string of `j` (`dflt` when it is absent or not a string).
  const auto str = [](const nlohmann::json& j, const char* key, const char* dflt) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                  : std::string(dflt);
  };
  // Costs in the recommendation's unit: dollars, or GPU-hours on machines no catalog prices.
  const bool gpu_hours = str(r, "cost_unit", "usd") == "gpu_hours";
  const auto cost = [&](double x, const char* fmt) {
    return gpu_hours ? Num(x, fmt) + " GPU-h" : "$" + Num(x, fmt);
  };
  const double target = num(r, "target_progress");
  o << "step      " << Num(g("steps_total"), "%.0f") << "   progress "
    << Num(g("progress_base_steps"), "%.0f");
  if (std::isfinite(target) && target > 0)
    o << " / " << Num(target, "%.0f") << " B0-steps ("
      << Num(100 * g("progress_base_steps") / target, "%.1f") << "%)";
  o << "\n";
  std::string current = "?";
  if (p.is_object() && p.contains("current") && p["current"].is_object()) {
    const auto& c = p["current"];
    current = Num(num(c, "num_nodes"), "%.0f") + "x " + str(c, "instance_type", "?") + ", " +
              Num(num(c, "num_replicas"), "%.0f") + " replicas, batch " +
              Num(num(c, "global_batch"), "%.0f");
  }
  o << "now       " << current << ", " << cost(g("cost_rate_usd_per_hour"), "%.3f") << "/h\n";
  o << "step time " << Num(1e3 * g("step_time_seconds"), "%.1f") << " ms = compute "
    << Num(1e3 * g("compute_time_seconds"), "%.1f") << " ms + exposed communication "
    << Num(1e3 * g("sync_time_seconds"), "%.1f") << " ms\n";
  o << "speed     " << Num(g("throughput_samples_per_second"), "%.0f") << " samples/s, goodput "
    << Num(g("goodput_samples_per_second"), "%.0f") << " (statistical efficiency "
    << Num(g("statistical_efficiency"), "%.3f") << "), noise scale "
    << Num(g("gradient_noise_scale_samples"), "%.1f") << " samples\n";
  if (r.is_object() && r.contains("proposed") && r["proposed"].is_object()) {
    const auto& pr = r["proposed"];
    const nlohmann::json cur = r.contains("current") ? r["current"] : nlohmann::json();
    o << "advice    " << str(r, "action", "?") << ": " << str(pr, "description", "?") << "\n";
    if (r.contains("rate")) {  // no target: the rate objective
      o << "          " << cost(num(pr, "usd_per_progress"), "%.3g") << " per B0-step, "
        << Num(num(pr, "progress_per_hour"), "%.3g") << " B0-steps/h";
      if (cur.is_object())
        o << " (staying: " << cost(num(cur, "usd_per_progress"), "%.3g") << ", "
          << Num(num(cur, "progress_per_hour"), "%.3g") << "/h)";
      o << "; no target set";
    } else {
      o << "          " << Num(num(pr, "hours"), "%.3g") << " h, "
        << cost(num(pr, "cost_usd"), "%.3g") << " to finish";
      if (cur.is_object())
        o << " (staying: " << Num(num(cur, "hours"), "%.3g") << " h, "
          << cost(num(cur, "cost_usd"), "%.3g") << ")";
    }
    o << "\nreason    " << str(r, "reason", "") << "\n";
  } else {
    o << "advice    none yet" << (rec.status == 503 ? " (the tuner has not published one)" : "")
      << "\n";
  }
  const size_t configs =
      p.is_object() && p.contains("configurations") && p["configurations"].is_array()
          ? p["configurations"].size()
          : 0;
  o << "tuner     " << configs << " configuration(s) measured, refits "
    << Num(g("refits_total"), "%.0f") << ", fit errors " << Num(g("fit_errors_total"), "%.0f")
    << ", recommendations " << Num(g("recommendations_total"), "%.0f") << "\n"
    << "health    straggler factor " << Num(g("straggler_factor"), "%.2f") << ", preemption notice "
    << (g("preemption_notice") > 0 ? "YES" : "no") << "\n";
  return o.str();
}

void RunStatus(const StatusArgs& a) {
  std::string url = a.url;
  if (url.empty()) {
    const char* env = std::getenv("CLOUDTUNE_HTTP");
    if (!env || !*env) throw InputError("status: give the job's URL (or set CLOUDTUNE_HTTP)");
    url = env;
  }
  if (!(a.interval > 0)) throw InputError("--interval: must be > 0");
  if (!(a.timeout > 0)) throw InputError("--timeout: must be > 0");
  const Endpoint e = ParseUrl(url);
  if (!a.watch) {
    std::cout << Screen(e, a.timeout);
    return;
  }
  const bool tty = ::isatty(STDOUT_FILENO);
  for (int i = 0; a.iterations <= 0 || i < a.iterations; ++i) {
    std::string text;
    try {
      text = Screen(e, a.timeout);
    } catch (const InputError& ex) {  // the job may restart: keep watching
      text = std::string("cloudtune status: ") + ex.what() + "\n";
    }
    if (tty) std::cout << "\033[H\033[2J";  // clear the screen, cursor home
    std::cout << text << std::flush;
    if (a.iterations > 0 && i + 1 >= a.iterations) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(a.interval * 1000)));
  }
}

}  // namespace

void RegisterStatusCommand(CLI::App& app) {
  auto* st =
      app.add_subcommand("status", "One-screen summary of a running job (its CLOUDTUNE_HTTP)");
  auto sa = std::make_shared<StatusArgs>();
  st->add_option("url", sa->url, "http://HOST:PORT of the job (default $CLOUDTUNE_HTTP)");
  st->add_flag("--watch", sa->watch, "Refresh until interrupted");
  st->add_option("--interval", sa->interval, "Seconds between refreshes with --watch (default 2)");
  st->add_option("--iterations", sa->iterations,
                 "With --watch, stop after this many refreshes (default 0 = never)");
  st->add_option("--timeout", sa->timeout, "Seconds per request (default 5)");
  st->callback([sa]() { RunStatus(*sa); });
}

}  // namespace cloudtune::cli
