#include "plugin/runtime/preemption.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>

#include "estimator/core/csv.h"
#include "plugin/runtime/detail/thread.h"
#include "plugin/runtime/detail/time.h"

namespace cloudtune::runtime {

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

using core::csv::Trim;

using detail::UtcNow;

// AWS IMDSv2
// (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html).
constexpr char kAwsTokenTarget[] = "/latest/api/token";
constexpr char kAwsTokenTtlHeader[] = "X-aws-ec2-metadata-token-ttl-seconds";
constexpr char kAwsTokenHeader[] = "X-aws-ec2-metadata-token";
constexpr int kAwsMaxTokenTtlSeconds = 21600;

// A token goes into a header: printable ASCII without spaces only.
bool UsableToken(const std::string& t) {
  if (t.empty() || t.size() > 4096) return false;
  for (char c : t)
    if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f) return false;
  return true;
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
  if (aws_token_ttl_seconds < 1 || aws_token_ttl_seconds > kAwsMaxTokenTtlSeconds)
    return fail("preemption aws_token_ttl_seconds must be in 1..21600");
  if (!url.empty()) {
    HttpUrl u;
    std::string why;
    if (!ParseHttpUrl(url, &u, &why)) return fail("preemption url: " + why);
  }
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

double NoticeLeadSeconds(MetadataProvider p) {
  switch (p) {
    case MetadataProvider::kAws:
      return 120;
    case MetadataProvider::kGcp:
    case MetadataProvider::kAzure:
      return 30;
    default:
      return 0;
  }
}

double UsableNoticeSeconds(double lead_s, double poll_seconds) {
  return std::max(0.0, lead_s - std::max(0.0, poll_seconds));
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
  thread_ = std::thread([this] {
    detail::NameThisThread("preempt");
    Loop();
  });
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

bool PreemptionWatcher::Stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

PreemptionWatcher::Answer PreemptionWatcher::Exchange(bool put, const std::string& target,
                                                      const Headers& headers) {
  HttpRequestSpec spec;
  spec.put = put;
  spec.target = target;
  spec.headers = headers;
  spec.connect_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options_.connect_timeout_seconds));
  spec.read_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options_.read_timeout_seconds));
  spec.max_body_bytes = options_.max_body_bytes;
  const HttpAnswer a = HttpExchange(url_, spec);
  Answer out;
  out.ok = a.ok;
  out.error = a.error;
  out.status = a.status;
  out.body = a.body;
  out.token_ttl = a.Header(kAwsTokenTtlHeader);
  return out;
}

std::string PreemptionWatcher::FetchAwsToken(std::string* why) {
  aws_token_.clear();
  const int asked = options_.aws_token_ttl_seconds;
  const Answer a =
      Exchange(/*put=*/true, kAwsTokenTarget, {{kAwsTokenTtlHeader, std::to_string(asked)}});
  if (!a.ok) {
    *why = a.error;
    return "";
  }
  if (a.status != 200) {
    *why = "HTTP status " + std::to_string(a.status);
    return "";
  }
  std::string token = Trim(a.body);
  if (!UsableToken(token)) {
    *why = "the answer is not a usable token";
    return "";
  }
  // The service may grant less than asked (it says so in the same header).
  double ttl = asked;
  const std::string granted = Trim(a.token_ttl);
  if (!granted.empty() && granted.size() <= 6 &&
      granted.find_first_not_of("0123456789") == std::string::npos) {
    const int g = std::stoi(granted);
    if (g > 0 && g < asked) ttl = g;
  }
  // Refresh shortly before the end: 10% of the TTL ahead, at most a minute.
  aws_token_refresh_at_ =
      std::chrono::steady_clock::now() + Seconds(ttl - std::min(60.0, ttl / 10));
  aws_token_ = std::move(token);
  return aws_token_;
}

PreemptionWatcher::Answer PreemptionWatcher::AwsExchange() {
  auto get = [&](const std::string& token) {
    Headers h;
    if (!token.empty()) h.emplace_back(kAwsTokenHeader, token);
    return Exchange(/*put=*/false, url_.target, h);
  };
  auto stopped = [] {
    Answer a;
    a.stopped = true;
    return a;
  };
  std::string token, why_no_token;
  bool fetched = false;  // a PUT was sent in this poll
  if (!aws_v1_fallback_) {
    if (!aws_token_.empty() && std::chrono::steady_clock::now() < aws_token_refresh_at_) {
      token = aws_token_;
    } else {
      token = FetchAwsToken(&why_no_token);
      fetched = true;
      if (Stopping()) return stopped();
    }
  }
  Answer a = get(token);
  if (a.ok && a.status == 401 && !fetched && !Stopping()) {
    // A cached token that expired or was revoked, or an endpoint that now requires IMDSv2: one
    // fresh token, one retry (a plain GET again when no token can be had and one was sent).
    const std::string fresh = FetchAwsToken(&why_no_token);
    fetched = true;
    if (!fresh.empty() || !token.empty()) {
      token = fresh;
      if (Stopping()) return stopped();
      a = get(token);
    }
  }
  if (!token.empty()) {
    aws_v1_fallback_ = false;  // IMDSv2 in use (again)
  } else if (fetched && a.ok && a.status != 401) {
    // No token, but the plain GET was answered: IMDSv1 works here. Stay on it (no PUT per poll)
    // until a plain GET answers 401.
    aws_v1_fallback_ = true;
    if (!logged_v1_fallback_ && log_) {
      logged_v1_fallback_ = true;
      const std::string host =
          url_.host.find(':') == std::string::npos ? url_.host : "[" + url_.host + "]";
      log_("cloudtune: preemption watcher: no IMDSv2 token from PUT http://" + host + ":" +
           url_.port + kAwsTokenTarget + " (" + why_no_token + "); falling back to IMDSv1 for " +
           options_.url);
    }
  }
  return a;
}

void PreemptionWatcher::PollOnce() {
  polls_.fetch_add(1);
  Answer a;
  if (provider_ == MetadataProvider::kAws) {
    a = AwsExchange();
    if (a.stopped) return;
  } else {
    Headers h;
    if (provider_ == MetadataProvider::kGcp) h.emplace_back("Metadata-Flavor", "Google");
    if (provider_ == MetadataProvider::kAzure) h.emplace_back("Metadata", "true");
    a = Exchange(/*put=*/false, url_.target, h);
  }
  if (!a.ok) {
    failures_.fetch_add(1);
    if (!logged_unreachable_ && log_) {
      logged_unreachable_ = true;
      log_("cloudtune: preemption watcher cannot reach " + options_.url + ": " + a.error +
           " (polling continues quietly)");
    }
    return;
  }
  logged_unreachable_ = false;  // reachable again: a later outage is worth one more line
  std::string unexpected;
  auto notice = InterpretMetadataAnswer(provider_, a.status, a.body, &unexpected);
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

}  // namespace cloudtune::runtime
