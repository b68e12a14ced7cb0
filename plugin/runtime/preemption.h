// Spot revocation watcher: polls the cloud's instance metadata endpoint (CLOUDTUNE_PREEMPTION_URL)
// every `poll_seconds` from its own thread with bounded connect/read timeouts (Boost.Beast client,
// plain http:// — metadata endpoints are link-local HTTP). On the first notice it raises an atomic
// flag the training loop polls (should_checkpoint()) and calls the callback once (the plugin writes
// the `preemption` record and asks the tuner for the remaining fleet's configuration).
//   AWS   http://169.254.169.254/latest/meta-data/spot/instance-action
//         404 = no notice; 200 + {"action":"terminate|stop|hibernate","time":"…"} = notice.
//         IMDSv2: a session token from `PUT /latest/api/token` (same host:port, header
//         "X-aws-ec2-metadata-token-ttl-seconds") is sent as "X-aws-ec2-metadata-token" and reused
//         until shortly before its TTL (the granted one, if shorter) ends; a 401 to the GET fetches
//         a fresh token and retries once. When the PUT fails (404/403/405, no answer, any
//         non-200) but a plain GET is answered, the watcher falls back to IMDSv1 (logged once)
//         and tries a token again only when a plain GET answers 401.
//   GCP   http://metadata.google.internal/computeMetadata/v1/instance/preempted
//         sent with "Metadata-Flavor: Google"; body "TRUE" = notice, "FALSE" = none.
//   Azure http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01
//         sent with "Metadata: true"; a JSON {"Events":[{"EventType":"Preempt",…}]} = notice.
// An unreachable endpoint or an unexpected answer is logged once; polling continues quietly.
// Nothing here throws.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "plugin/runtime/http_client.h"

namespace cloudtune::runtime {

enum class MetadataProvider { kAuto, kAws, kGcp, kAzure };

struct PreemptionOptions {
  // Metadata URL, http:// only (CLOUDTUNE_PREEMPTION_URL). "" = the watcher is off.
  std::string url;
  // Which cloud's protocol; kAuto guesses from the URL ("computeMetadata" → GCP,
  // "scheduledevents" → Azure, otherwise AWS).
  MetadataProvider provider = MetadataProvider::kAuto;
  // Seconds between polls (CLOUDTUNE_PREEMPTION_POLL_SECONDS). > 0. AWS gives a 2-minute notice.
  double poll_seconds = 5;
  // Bound on name resolution + TCP connect, seconds. > 0.
  double connect_timeout_seconds = 1;
  // Bound on sending the request and reading the answer, seconds. > 0.
  double read_timeout_seconds = 2;
  // Largest answer body accepted, bytes.
  std::size_t max_body_bytes = 64 * 1024;
  // AWS IMDSv2 token lifetime asked for, seconds, 1..21600 (the AWS maximum).
  int aws_token_ttl_seconds = 21600;
  bool IsValid(std::string* error) const;
};

MetadataProvider DetectProvider(const std::string& url);
const char* ProviderName(MetadataProvider p);
// The warning a cloud gives before it takes a spot node back, seconds: AWS 120 (the EC2 Spot
// interruption notice), GCP 30 (the preemption notice), Azure 30 (Scheduled Events' Preempt,
// at least 30 s); kAuto 0.
double NoticeLeadSeconds(MetadataProvider p);
// What of a `lead_s`-second warning a job polling every `poll_seconds` can count on to save its
// state: lead_s - poll_seconds, at least 0 (search::CostOptions::notice_s).
double UsableNoticeSeconds(double lead_s, double poll_seconds);

struct PreemptionNotice {
  std::string provider;  // "aws" | "gcp" | "azure"
  std::string url;
  int http_status = 0;
  std::string action;       // "terminate", "stop", "Preempt", "preempted" …
  std::string time;         // when the instance goes away, if the cloud says ("" otherwise)
  nlohmann::json detail;    // the cloud's answer (JSON when it was JSON, else the body string)
  std::string observed_at;  // UTC ISO 8601
  // The `preemption` sidecar record ("schema":"cloudtune.preemption/1").
  nlohmann::json ToJson() const;
};

// Interprets one metadata answer (status + body) for `provider` (not kAuto). Returns the notice,
// or nullopt for "no notice"; sets *unexpected (if given) to a description when the answer is
// neither a notice nor a clear "none" (e.g. 401, 500, a GCP body that is not TRUE/FALSE).
std::optional<PreemptionNotice> InterpretMetadataAnswer(MetadataProvider provider, int status,
                                                        const std::string& body,
                                                        std::string* unexpected);

class PreemptionWatcher {
 public:
  using NoticeFn = std::function<void(const PreemptionNotice&)>;
  using LogFn = std::function<void(const std::string& line)>;

  PreemptionWatcher(PreemptionOptions options, NoticeFn on_notice, LogFn log = {});
  ~PreemptionWatcher();  // Stop()
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Validates the options and starts polling. Returns false with a message when invalid.
  bool Start(std::string* error);
  // Stops polling and joins (a poll in flight ends within its timeouts). Idempotent.
  void Stop();

  // True once a revocation notice was seen. Lock-free; for the training loop.
  bool should_checkpoint() const { return flag_.load(std::memory_order_acquire); }
  std::uint64_t polls() const { return polls_.load(); }
  std::uint64_t failures() const { return failures_.load(); }  // unreachable / timed out

 private:
  // One HTTP exchange (bounded by the timeouts). ok = an HTTP answer arrived.
  struct Answer {
    bool ok = false;
    bool stopped = false;  // Stop() came between two requests of one poll
    std::string error;     // when !ok
    int status = 0;
    std::string body;
    std::string token_ttl;  // AWS: the "X-aws-ec2-metadata-token-ttl-seconds" answer header
  };
  using Headers = std::vector<std::pair<std::string, std::string>>;

  void Loop();
  void PollOnce();
  bool Stopping();
  Answer Exchange(bool put, const std::string& target, const Headers& headers);
  // AWS: the poll's GET with IMDSv2 token handling and the IMDSv1 fallback.
  Answer AwsExchange();
  // AWS: PUT for a fresh token; caches and returns it, or "" with the reason in *why.
  std::string FetchAwsToken(std::string* why);

  PreemptionOptions options_;
  MetadataProvider provider_ = MetadataProvider::kAws;
  HttpUrl url_;
  NoticeFn on_notice_;
  LogFn log_;
  std::atomic<bool> flag_{false};
  std::atomic<std::uint64_t> polls_{0}, failures_{0};
  bool logged_unreachable_ = false, logged_unexpected_ = false;
  // AWS IMDSv2 state (watcher thread only).
  std::string aws_token_;
  std::chrono::steady_clock::time_point aws_token_refresh_at_{};
  bool aws_v1_fallback_ = false, logged_v1_fallback_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
};

}  // namespace cloudtune::runtime
