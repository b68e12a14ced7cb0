#include "plugin/runtime/preemption.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

#include "test_util.h"

using namespace cloudtune::runtime;
using cloudtune::runtime::testing::WaitFor;
using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;

namespace {

// A tiny metadata server on 127.0.0.1 (blocking Asio, one connection at a time). The handler maps
// the raw request to (status, body); status 0 = accept and never answer.
class FakeMetadataServer {
 public:
  using Handler = std::function<std::pair<int, std::string>(const std::string& request)>;
  explicit FakeMetadataServer(Handler h) : handler_(std::move(h)), acceptor_(io_) {
    asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeMetadataServer() {
    stop_ = true;
    boost::system::error_code ec;
    asio::ip::tcp::socket s(io_);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
    thread_.join();
  }
  void Set(Handler h) {
    std::lock_guard<std::mutex> l(mu_);
    handler_ = std::move(h);
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  std::string last_request() {
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }
  std::vector<std::string> all_requests() {
    std::lock_guard<std::mutex> l(mu_);
    return all_;
  }
  // Extra "Name: value\r\n" lines added to every answer.
  void SetExtraHeaders(std::string lines) {
    std::lock_guard<std::mutex> l(mu_);
    extra_headers_ = std::move(lines);
  }

 private:
  void Run() {
    std::vector<asio::ip::tcp::socket> held;  // silent mode keeps sockets open
    while (!stop_) {
      asio::ip::tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (ec || stop_) break;
      std::string req;
      char buf[1024];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const size_t n = s.read_some(asio::buffer(buf), ec);
        if (ec) break;
        req.append(buf, n);
      }
      std::pair<int, std::string> answer;
      std::string extra;
      {
        std::lock_guard<std::mutex> l(mu_);
        last_ = req;
        all_.push_back(req);
        answer = handler_(req);
        extra = extra_headers_;
      }
      ++requests_;
      if (answer.first == 0) {
        held.push_back(std::move(s));
        continue;
      }
      const std::string reason = answer.first == 200 ? "OK" : "Not Found";
      const std::string res = "HTTP/1.1 " + std::to_string(answer.first) + " " + reason +
                              "\r\nContent-Length: " + std::to_string(answer.second.size()) +
                              "\r\nConnection: close\r\n" + extra + "\r\n" + answer.second;
      asio::write(s, asio::buffer(res), ec);
      s.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    }
  }

  Handler handler_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::string last_, extra_headers_;
  std::vector<std::string> all_;
  std::thread thread_;
};

struct Collected {
  std::mutex mu;
  std::vector<PreemptionNotice> notices;
  std::vector<std::string> lines;
  PreemptionWatcher::NoticeFn OnNotice() {
    return [this](const PreemptionNotice& n) {
      std::lock_guard<std::mutex> l(mu);
      notices.push_back(n);
    };
  }
  PreemptionWatcher::LogFn Log() {
    return [this](const std::string& s) {
      std::lock_guard<std::mutex> l(mu);
      lines.push_back(s);
    };
  }
  size_t NumNotices() {
    std::lock_guard<std::mutex> l(mu);
    return notices.size();
  }
};

// Flips `server` to `notice` after a few quiet polls and checks callback + flag arrive within two
// poll intervals.
void ExpectNoticeWithinTwoPolls(FakeMetadataServer& server, const std::string& path,
                                FakeMetadataServer::Handler notice, const std::string& provider,
                                const std::string& action, Collected* collected = nullptr) {
  Collected local;
  Collected& c = collected ? *collected : local;
  PreemptionOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server.port()) + path;
  o.poll_seconds = 0.2;
  PreemptionWatcher w(o, c.OnNotice(), c.Log());
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  ASSERT_TRUE(WaitFor([&] { return w.polls() >= 3; }, 5));
  EXPECT_FALSE(w.should_checkpoint());
  EXPECT_EQ(c.NumNotices(), 0u);
  const auto flipped = Clock::now();
  server.Set(std::move(notice));
  ASSERT_TRUE(WaitFor([&] { return w.should_checkpoint(); }, 5));
  const double took = std::chrono::duration<double>(Clock::now() - flipped).count();
  EXPECT_LE(took, 2 * o.poll_seconds + 0.05) << "notice seen after " << took << " s";
  ASSERT_TRUE(WaitFor([&] { return c.NumNotices() == 1; }, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(c.NumNotices(), 1u);  // once
  const auto& n = c.notices[0];
  EXPECT_EQ(n.provider, provider);
  EXPECT_EQ(n.action, action);
  EXPECT_EQ(n.url, o.url);
  const auto j = n.ToJson();
  EXPECT_EQ(j["schema"], "cloudtune.preemption/1");
  w.Stop();
  EXPECT_TRUE(w.should_checkpoint());  // the flag stays raised
}

// A fake AWS IMDSv2 endpoint: `PUT /latest/api/token` with the TTL header hands out "tok-N"
// (400 without it); a GET must carry the current token ("X-aws-ec2-metadata-token") or gets 401.
// The spot path answers 404 until `notice`, then 200 + the notice document.
struct FakeImdsV2 {
  std::mutex mu;
  int next = 1;
  std::string valid;              // "" = no token issued yet (or revoked)
  Clock::time_point issued_at;    // of `valid`
  double lifetime_seconds = 1e9;  // older tokens get 401
  bool notice = false;
  int puts = 0, puts_with_ttl = 0, gets = 0, gets_with_token = 0, answered_401 = 0;
  std::string last_ttl;

  static std::string Header(const std::string& req, const std::string& name) {
    const auto at = req.find("\r\n" + name + ": ");
    if (at == std::string::npos) return "";
    const auto from = at + name.size() + 4;
    return req.substr(from, req.find("\r\n", from) - from);
  }
  FakeMetadataServer::Handler Handler() {
    return [this](const std::string& req) {
      std::lock_guard<std::mutex> l(mu);
      if (req.rfind("PUT /latest/api/token HTTP/1.1\r\n", 0) == 0) {
        ++puts;
        last_ttl = Header(req, "X-aws-ec2-metadata-token-ttl-seconds");
        if (last_ttl.empty()) return std::make_pair(400, std::string("missing TTL"));
        ++puts_with_ttl;
        valid = "tok-" + std::to_string(next++);
        issued_at = Clock::now();
        return std::make_pair(200, valid);
      }
      ++gets;
      const std::string token = Header(req, "X-aws-ec2-metadata-token");
      if (!token.empty()) ++gets_with_token;
      const double age = std::chrono::duration<double>(Clock::now() - issued_at).count();
      if (valid.empty() || token != valid || age > lifetime_seconds) {
        ++answered_401;
        return std::make_pair(401, std::string());
      }
      if (!notice) return std::make_pair(404, std::string());
      return std::make_pair(200,
                            std::string(R"({"action":"terminate","time":"2026-11-21T22:02:00Z"})"));
    };
  }
  void Revoke() {
    std::lock_guard<std::mutex> l(mu);
    valid.clear();
  }
  template <typename F>
  auto Read(F f) {
    std::lock_guard<std::mutex> l(mu);
    return f();
  }
};

PreemptionOptions AwsOptions(const FakeMetadataServer& server, double poll_seconds) {
  PreemptionOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server.port()) +
          "/latest/meta-data/spot/instance-action";
  o.poll_seconds = poll_seconds;
  return o;
}

// A watcher polling a FakeImdsV2 every `poll_seconds` (set up the fake and the server, then
// Start()); members in construction order.
struct ImdsV2Watch {
  explicit ImdsV2Watch(double poll_seconds)
      : server(imds.Handler()), w(AwsOptions(server, poll_seconds), c.OnNotice(), c.Log()) {}
  FakeImdsV2 imds;
  FakeMetadataServer server;
  Collected c;
  PreemptionWatcher w;
};

size_t CountContaining(const std::vector<std::string>& lines, const std::string& what) {
  size_t n = 0;
  for (const auto& l : lines) n += l.find(what) != std::string::npos;
  return n;
}

}  // namespace

TEST(Preemption, DefaultOptionsAreValid) {
  std::string err;
  EXPECT_TRUE(PreemptionOptions{}.IsValid(&err)) << err;
  PreemptionOptions o;
  o.poll_seconds = -1;
  EXPECT_FALSE(o.IsValid(&err));
  o = {};
  o.url = "https://169.254.169.254/latest/meta-data/spot/instance-action";
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_NE(err.find("only http://"), std::string::npos) << err;
  PreemptionWatcher w(o, {});
  EXPECT_FALSE(w.Start(&err));
  o = {};
  for (int bad : {0, -5, 21601}) {
    o.aws_token_ttl_seconds = bad;
    EXPECT_FALSE(o.IsValid(&err)) << bad;
    EXPECT_NE(err.find("aws_token_ttl_seconds"), std::string::npos) << err;
  }
  o.aws_token_ttl_seconds = 1;
  EXPECT_TRUE(o.IsValid(&err)) << err;
}

TEST(Preemption, ParseUrlAndDetectProvider) {
  HttpUrl u;
  std::string err;
  ASSERT_TRUE(
      ParseHttpUrl("http://169.254.169.254/latest/meta-data/spot/instance-action", &u, &err));
  EXPECT_EQ(u.host, "169.254.169.254");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.target, "/latest/meta-data/spot/instance-action");
  ASSERT_TRUE(ParseHttpUrl("http://127.0.0.1:8080?x=1", &u, &err));
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.target, "/?x=1");
  ASSERT_TRUE(ParseHttpUrl("http://[::1]:81/a", &u, &err));
  EXPECT_EQ(u.host, "::1");
  for (const char* bad : {"ftp://x/", "http://", "http://:80/", "http://h:99999/", "http://h:x/",
                          "http://u@h/", "http://h/a b"})
    EXPECT_FALSE(ParseHttpUrl(bad, &u, &err)) << bad;
  EXPECT_EQ(DetectProvider("http://metadata.google.internal/computeMetadata/v1/instance/preempted"),
            MetadataProvider::kGcp);
  EXPECT_EQ(
      DetectProvider("http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"),
      MetadataProvider::kAzure);
  EXPECT_EQ(DetectProvider("http://169.254.169.254/latest/meta-data/spot/instance-action"),
            MetadataProvider::kAws);
  // The warning each cloud gives, and what a job polling every few seconds can count on.
  EXPECT_EQ(NoticeLeadSeconds(MetadataProvider::kAws), 120);
  EXPECT_EQ(NoticeLeadSeconds(MetadataProvider::kGcp), 30);
  EXPECT_EQ(NoticeLeadSeconds(MetadataProvider::kAzure), 30);
  EXPECT_EQ(NoticeLeadSeconds(MetadataProvider::kAuto), 0);
  EXPECT_EQ(UsableNoticeSeconds(120, 5), 115);
  EXPECT_EQ(UsableNoticeSeconds(30, 60), 0);
}

TEST(Preemption, InterpretAnswers) {
  std::string odd;
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kAws, 404, "", &odd));
  EXPECT_EQ(odd, "");
  auto n = InterpretMetadataAnswer(MetadataProvider::kAws, 200,
                                   R"({"action":"stop","time":"2026-11-21T22:00:00Z"})", &odd);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->action, "stop");
  EXPECT_EQ(n->time, "2026-11-21T22:00:00Z");
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kAws, 401, "", &odd));
  EXPECT_NE(odd.find("401"), std::string::npos);
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kGcp, 200, "FALSE", &odd));
  EXPECT_EQ(odd, "");
  EXPECT_TRUE(InterpretMetadataAnswer(MetadataProvider::kGcp, 200, "TRUE\n", &odd));
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kGcp, 200, "<html>", &odd));
  EXPECT_NE(odd.find("neither TRUE nor FALSE"), std::string::npos);
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kAzure, 200,
                                       R"({"DocumentIncarnation":1,"Events":[]})", &odd));
  EXPECT_EQ(odd, "");
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kAzure, 200,
                                       R"({"Events":[{"EventType":"Reboot","NotBefore":"x"}]})",
                                       &odd));
  n = InterpretMetadataAnswer(
      MetadataProvider::kAzure, 200,
      R"({"Events":[{"EventType":"Freeze"},{"EventType":"Preempt","NotBefore":"Mon, 19 Sep 2016 18:29:47 GMT"}]})",
      &odd);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->time, "Mon, 19 Sep 2016 18:29:47 GMT");
  EXPECT_FALSE(InterpretMetadataAnswer(MetadataProvider::kAzure, 200, "not json", &odd));
  EXPECT_NE(odd, "");
}

TEST(Preemption, AwsFlipFrom404ToNotice) {
  FakeMetadataServer server([](const std::string&) { return std::make_pair(404, std::string()); });
  ExpectNoticeWithinTwoPolls(
      server, "/latest/meta-data/spot/instance-action",
      [](const std::string&) {
        return std::make_pair(
            200, std::string(R"({"action":"terminate","time":"2026-11-21T22:02:00Z"})"));
      },
      "aws", "terminate");
  EXPECT_NE(server.last_request().find("GET /latest/meta-data/spot/instance-action HTTP/1.1"),
            std::string::npos);
}

TEST(Preemption, GcpSendsTheFlavorHeader) {
  // The fake answers 403 without "Metadata-Flavor: Google", as GCP does.
  auto gcp = [](const char* value) {
    return [value](const std::string& req) {
      if (req.find("Metadata-Flavor: Google\r\n") == std::string::npos)
        return std::make_pair(403, std::string("missing header"));
      return std::make_pair(200, std::string(value));
    };
  };
  FakeMetadataServer server(gcp("FALSE"));
  ExpectNoticeWithinTwoPolls(server, "/computeMetadata/v1/instance/preempted", gcp("TRUE"), "gcp",
                             "preempted");
}

TEST(Preemption, AzureScheduledEvents) {
  FakeMetadataServer server([](const std::string&) {
    return std::make_pair(200, std::string(R"({"DocumentIncarnation":1,"Events":[]})"));
  });
  ExpectNoticeWithinTwoPolls(
      server, "/metadata/scheduledevents?api-version=2020-07-01",
      [](const std::string& req) {
        const bool ok = req.find("Metadata: true\r\n") != std::string::npos;
        return std::make_pair(
            200, std::string(ok ? R"({"Events":[{"EventId":"A","EventType":"Preempt"}]})"
                                : R"({"Events":[]})"));
      },
      "azure", "Preempt");
}

TEST(Preemption, UnreachableUrlNeverThrowsAndLogsOnce) {
  // A port nobody listens on (bound then closed).
  int port;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  Collected c;
  PreemptionOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port) + "/latest/meta-data/spot/instance-action";
  o.poll_seconds = 0.05;
  PreemptionWatcher w(o, c.OnNotice(), c.Log());
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  ASSERT_TRUE(WaitFor([&] { return w.failures() >= 5; }, 5));
  EXPECT_FALSE(w.should_checkpoint());
  w.Stop();
  EXPECT_EQ(c.NumNotices(), 0u);
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_NE(c.lines[0].find("cannot reach " + o.url), std::string::npos) << c.lines[0];
}

TEST(Preemption, SilentServerIsBoundedByTheReadTimeout) {
  FakeMetadataServer server([](const std::string&) { return std::make_pair(0, std::string()); });
  Collected c;
  PreemptionOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/x";
  o.poll_seconds = 0.05;
  o.read_timeout_seconds = 0.2;
  PreemptionWatcher w(o, c.OnNotice(), c.Log());
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  ASSERT_TRUE(WaitFor([&] { return w.failures() >= 2; }, 5));
  const auto t0 = Clock::now();
  w.Stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  EXPECT_FALSE(w.should_checkpoint());
  EXPECT_EQ(c.lines.size(), 1u);
}

TEST(Preemption, UnexpectedAnswersAreLoggedOnce) {
  FakeMetadataServer server(
      [](const std::string&) { return std::make_pair(500, std::string("x")); });
  Collected c;
  PreemptionOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server.port()) +
          "/latest/meta-data/spot/instance-action";
  o.poll_seconds = 0.05;
  PreemptionWatcher w(o, c.OnNotice(), c.Log());
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  ASSERT_TRUE(WaitFor([&] { return w.polls() >= 4; }, 5));
  w.Stop();
  EXPECT_FALSE(w.should_checkpoint());
  // The token PUT got a 500 too (AWS): one fallback line, then the GET's 500 once.
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_NE(c.lines[0].find("falling back to IMDSv1"), std::string::npos) << c.lines[0];
  EXPECT_NE(c.lines[1].find("HTTP status 500"), std::string::npos) << c.lines[1];
}

TEST(Preemption, AwsImdsV2TokenIsFetchedAndSent) {
  FakeImdsV2 imds;
  FakeMetadataServer server(imds.Handler());
  Collected c;
  // The handler is the same; the notice is switched on in the fake's state.
  ExpectNoticeWithinTwoPolls(
      server, "/latest/meta-data/spot/instance-action",
      [&imds, h = imds.Handler()](const std::string& req) {
        imds.Read([&] { return imds.notice = true; });
        return h(req);
      },
      "aws", "terminate", &c);
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_EQ(c.notices[0].time, "2026-11-21T22:02:00Z");
  EXPECT_EQ(c.notices[0].http_status, 200);
  EXPECT_EQ(imds.Read([&] { return imds.puts; }), 1);
  EXPECT_EQ(imds.Read([&] { return imds.puts_with_ttl; }), 1);
  EXPECT_EQ(imds.Read([&] { return imds.last_ttl; }), "21600");
  EXPECT_EQ(imds.Read([&] { return imds.answered_401; }), 0);
  // Several polls (404, then the notice), one token for all of them.
  EXPECT_GE(imds.Read([&] { return imds.gets; }), 3);
  EXPECT_EQ(imds.Read([&] { return imds.gets_with_token; }), imds.Read([&] { return imds.gets; }));
  const auto reqs = server.all_requests();
  ASSERT_GE(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].rfind("PUT /latest/api/token HTTP/1.1\r\n", 0), 0u) << reqs[0];
  EXPECT_NE(reqs[0].find("\r\nX-aws-ec2-metadata-token-ttl-seconds: 21600\r\n"), std::string::npos)
      << reqs[0];
  EXPECT_NE(reqs[0].find("\r\nContent-Length: 0\r\n"), std::string::npos) << reqs[0];
  EXPECT_EQ(reqs.back().rfind("GET /latest/meta-data/spot/instance-action HTTP/1.1\r\n", 0), 0u)
      << reqs.back();
  EXPECT_NE(reqs.back().find("\r\nX-aws-ec2-metadata-token: tok-1\r\n"), std::string::npos)
      << reqs.back();
  EXPECT_EQ(CountContaining(c.lines, "IMDSv1"), 0u);
  EXPECT_EQ(CountContaining(c.lines, "unexpected"), 0u);
}

TEST(Preemption, AwsImdsV2TokenIsReusedAcrossPolls) {
  ImdsV2Watch x(0.03);
  auto& [imds, server, c, w] = x;
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  ASSERT_TRUE(WaitFor([&] { return imds.Read([&] { return imds.gets; }) >= 8; }, 5));
  w.Stop();
  EXPECT_EQ(imds.Read([&] { return imds.puts; }), 1);  // one token for every GET
  EXPECT_EQ(imds.Read([&] { return imds.gets_with_token; }), imds.Read([&] { return imds.gets; }));
  EXPECT_EQ(imds.Read([&] { return imds.answered_401; }), 0);
  EXPECT_FALSE(w.should_checkpoint());
  EXPECT_EQ(w.failures(), 0u);
  EXPECT_TRUE(c.lines.empty()) << c.lines[0];
}

TEST(Preemption, AwsFallsBackToImdsV1WhenTheTokenPutFails) {
  // 404/403/405: an IMDSv1-only endpoint (or a proxy refusing PUT); 0: the PUT is never answered
  // (the token answer dropped by the hop limit, as in a container).
  for (int put_status : {404, 403, 405, 0}) {
    SCOPED_TRACE("PUT answers " + std::to_string(put_status));
    std::mutex mu;
    int puts = 0, gets = 0, gets_with_token = 0;
    FakeMetadataServer server([&](const std::string& req) {
      std::lock_guard<std::mutex> l(mu);
      if (req.rfind("PUT ", 0) == 0) {
        ++puts;
        return std::make_pair(put_status, std::string("tok-never"));
      }
      ++gets;
      if (req.find("X-aws-ec2-metadata-token:") != std::string::npos) {
        ++gets_with_token;
        return std::make_pair(400, std::string());
      }
      if (gets < 5) return std::make_pair(404, std::string());
      return std::make_pair(200, std::string(R"({"action":"stop","time":"2026-11-21T22:02:00Z"})"));
    });
    Collected c;
    auto o = AwsOptions(server, 0.02);
    o.read_timeout_seconds = 0.2;
    PreemptionWatcher w(o, c.OnNotice(), c.Log());
    std::string err;
    ASSERT_TRUE(w.Start(&err)) << err;
    ASSERT_TRUE(WaitFor([&] { return c.NumNotices() == 1; }, 5));
    w.Stop();
    EXPECT_TRUE(w.should_checkpoint());
    EXPECT_EQ(c.notices[0].action, "stop");
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(puts, 1);  // no PUT per poll once on IMDSv1
    EXPECT_EQ(gets, 5);  // 4 x 404, then the notice; the watcher stops after it
    EXPECT_EQ(gets_with_token, 0);
    EXPECT_EQ(w.failures(), 0u);
    EXPECT_EQ(CountContaining(c.lines, "falling back to IMDSv1"), 1u);
    if (put_status != 0) {
      EXPECT_EQ(CountContaining(c.lines, "HTTP status " + std::to_string(put_status)), 1u);
    }
    EXPECT_EQ(CountContaining(c.lines, "unexpected"), 0u);
  }
}

TEST(Preemption, AwsRevokedTokenIsRefetchedOnceOn401) {
  ImdsV2Watch x(0.03);
  auto& [imds, server, c, w] = x;
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  ASSERT_TRUE(WaitFor([&] { return imds.Read([&] { return imds.gets; }) >= 3; }, 5));
  EXPECT_EQ(imds.Read([&] { return imds.puts; }), 1);
  imds.Revoke();  // the cached tok-1 now answers 401
  ASSERT_TRUE(WaitFor([&] { return imds.Read([&] { return imds.puts; }) >= 2; }, 5));
  const int gets_then = imds.Read([&] { return imds.gets; });
  ASSERT_TRUE(WaitFor([&] { return imds.Read([&] { return imds.gets; }) >= gets_then + 3; }, 5));
  imds.Read([&] { return imds.notice = true; });
  ASSERT_TRUE(WaitFor([&] { return w.should_checkpoint(); }, 5));
  w.Stop();
  EXPECT_EQ(imds.Read([&] { return imds.puts; }), 2);          // one re-fetch
  EXPECT_EQ(imds.Read([&] { return imds.answered_401; }), 1);  // the retry used tok-2
  EXPECT_NE(server.last_request().find("\r\nX-aws-ec2-metadata-token: tok-2\r\n"),
            std::string::npos);
  EXPECT_EQ(c.NumNotices(), 1u);
  EXPECT_EQ(CountContaining(c.lines, "unexpected"), 0u);  // the 401 was handled, not reported
  EXPECT_EQ(CountContaining(c.lines, "IMDSv1"), 0u);
}

TEST(Preemption, AwsTokenIsRefreshedBeforeItsGrantedTtlEnds) {
  // Asked for 21600 s, granted 1 s (said in the answer header); the fake answers 401 to tokens
  // older than 1 s, so any GET with an expired token would show up as a 401.
  ImdsV2Watch x(0.05);
  auto& [imds, server, c, w] = x;
  imds.Read([&] { return imds.lifetime_seconds = 1.0; });  // the server thread reads it
  server.SetExtraHeaders("X-aws-ec2-metadata-token-ttl-seconds: 1\r\n");
  std::string err;
  ASSERT_TRUE(w.Start(&err)) << err;
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  w.Stop();
  const int puts = imds.Read([&] { return imds.puts; });
  EXPECT_GE(puts, 3) << "refreshed at ~0.9 s and ~1.8 s";
  EXPECT_LE(puts, 4) << "not one token per poll";
  EXPECT_GE(w.polls(), 15u);
  EXPECT_EQ(imds.Read([&] { return imds.answered_401; }), 0);
  EXPECT_EQ(imds.Read([&] { return imds.last_ttl; }), "21600");
  EXPECT_TRUE(c.lines.empty()) << c.lines[0];
}
