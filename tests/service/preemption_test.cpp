#include "plugin/service/preemption.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>

#include "test_util.h"

using namespace cloudtune::service;
using cloudtune::service::testing::WaitFor;
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
      {
        std::lock_guard<std::mutex> l(mu_);
        last_ = req;
        answer = handler_(req);
      }
      ++requests_;
      if (answer.first == 0) {
        held.push_back(std::move(s));
        continue;
      }
      const std::string reason = answer.first == 200 ? "OK" : "Not Found";
      const std::string res = "HTTP/1.1 " + std::to_string(answer.first) + " " + reason +
                              "\r\nContent-Length: " + std::to_string(answer.second.size()) +
                              "\r\nConnection: close\r\n\r\n" + answer.second;
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
  std::string last_;
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
                                const std::string& action) {
  Collected c;
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
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_NE(c.lines[0].find("HTTP status 500"), std::string::npos) << c.lines[0];
}
