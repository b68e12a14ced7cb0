// Spot revocation watcher: polls the cloud's instance metadata endpoint (CLOUDTUNE_PREEMPTION_URL)
// every `poll_seconds` from its own thread with bounded connect/read timeouts (Boost.Beast client,
// plain http:// — metadata endpoints are link-local HTTP). On the first notice it raises an atomic
// flag the training loop polls (should_checkpoint()) and calls the callback once (the plugin writes
// the `preemption` record and asks the tuner for the remaining fleet's configuration).
//   AWS   http://169.254.169.254/latest/meta-data/spot/instance-action
//         404 = no notice; 200 + {"action":"terminate|stop|hibernate","time":"…"} = notice.
//         (IMDSv1 only: an IMDSv2-only instance answers 401, which is logged once.)
//   GCP   http://metadata.google.internal/computeMetadata/v1/instance/preempted
//         sent with "Metadata-Flavor: Google"; body "TRUE" = notice, "FALSE" = none.
//   Azure http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01
//         sent with "Metadata: true"; a JSON {"Events":[{"EventType":"Preempt",…}]} = notice.
// An unreachable endpoint or an unexpected answer is logged once; polling continues quietly.
// Nothing here throws.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

namespace cloudtune::service {

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
  bool IsValid(std::string* error) const;
};

// Parsed pieces of an http:// URL.
struct HttpUrl {
  std::string host;
  std::string port = "80";
  std::string target = "/";  // path + query
};
// Returns false with a message for anything but http://host[:port][/path][?query].
bool ParseHttpUrl(const std::string& url, HttpUrl* out, std::string* error);

MetadataProvider DetectProvider(const std::string& url);
const char* ProviderName(MetadataProvider p);

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
  void Loop();
  void PollOnce();

  PreemptionOptions options_;
  MetadataProvider provider_ = MetadataProvider::kAws;
  HttpUrl url_;
  NoticeFn on_notice_;
  LogFn log_;
  std::atomic<bool> flag_{false};
  std::atomic<std::uint64_t> polls_{0}, failures_{0};
  bool logged_unreachable_ = false, logged_unexpected_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
};

}  // namespace cloudtune::service
