#include "plugin/runtime/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>

#include "plugin/runtime/metrics.h"
#include "test_util.h"

using namespace cloudtune::runtime;
using cloudtune::runtime::testing::Get;
using cloudtune::runtime::testing::RawExchange;
using cloudtune::runtime::testing::WaitFor;

namespace {

struct Fixture {
  std::atomic<int> rec_calls{0};
  std::atomic<bool> have_rec{true};
  HttpProviders Providers() {
    HttpProviders p;
    p.recommendation = [this] {
      ++rec_calls;
      return have_rec
                 ? std::string(
                       R"({"schema":"cloudtune.recommendation/1","proposed":{"num_replicas":8}})")
                 : std::string();
    };
    p.profile_json = [] { return std::string(R"({"profile":[{"num_replicas":2}]})"); };
    p.profile_csv = [] {
      return std::string("num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,2,32,0.1,0.01\n");
    };
    p.metrics = [] {
      MetricsSnapshot m;
      m.step_time_seconds = 0.1;
      m.goodput = 300;
      return RenderPrometheus(m);
    };
    return p;
  }
};

std::string Header(const std::string& head, const std::string& name) {
  const auto p = head.find("\r\n" + name + ": ");
  if (p == std::string::npos) return "";
  const auto b = p + name.size() + 4;
  return head.substr(b, head.find("\r\n", b) - b);
}

}  // namespace

TEST(HttpServer, DefaultOptionsAreValidAndLoopback) {
  std::string err;
  HttpOptions o;
  EXPECT_TRUE(o.IsValid(&err)) << err;
  EXPECT_EQ(o.host, "127.0.0.1");
  o.port = 70000;
  EXPECT_FALSE(o.IsValid(&err));
}

TEST(HttpServer, ParseHostPort) {
  std::string err;
  HttpOptions o;
  ASSERT_TRUE(HttpOptions::Parse("0.0.0.0:9464", &o, &err)) << err;
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 9464);
  HttpOptions p;
  ASSERT_TRUE(HttpOptions::Parse(":8080", &p, &err)) << err;
  EXPECT_EQ(p.host, "127.0.0.1");
  EXPECT_EQ(p.port, 8080);
  ASSERT_TRUE(HttpOptions::Parse("9000", &p, &err));
  EXPECT_EQ(p.port, 9000);
  ASSERT_TRUE(HttpOptions::Parse("[::1]:9000", &p, &err)) << err;
  EXPECT_EQ(p.host, "::1");
  for (const char* bad :
       {"", "host:", "127.0.0.1:99999", "127.0.0.1:abc", "example.com:80", "::1:80", "[::1]80"}) {
    HttpOptions q;
    EXPECT_FALSE(HttpOptions::Parse(bad, &q, &err)) << bad;
    EXPECT_NE(err.find("expected host:port"), std::string::npos) << err;
    EXPECT_EQ(q.port, 0) << "a failed parse leaves the options untouched";
  }
}

TEST(HttpServer, ServesTheThreeEndpoints) {
  Fixture f;
  HttpServer s(HttpOptions{}, f.Providers());
  std::string err;
  ASSERT_TRUE(s.Start(&err)) << err;
  const int port = s.BoundPort();
  ASSERT_GT(port, 0);

  auto r = Get(port, "/v1/recommendation");
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(Header(r.head, "Content-Type"), "application/json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["proposed"]["num_replicas"], 8);

  r = Get(port, "/v1/profile");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body)["profile"][0]["num_replicas"], 2);
  r = Get(port, "/v1/profile?format=csv");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind("num_nodes,num_replicas", 0), 0u) << r.body;
  EXPECT_NE(Header(r.head, "Content-Type").find("text/csv"), std::string::npos);
  r = Get(port, "/v1/profile", "Accept: text/csv\r\n");
  EXPECT_EQ(r.body.rfind("num_nodes,", 0), 0u);

  r = Get(port, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Header(r.head, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(
      r.body.find("# TYPE cloudtune_step_time_seconds gauge\ncloudtune_step_time_seconds 0.1"),
      std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("cloudtune_goodput_samples_per_second 300"), std::string::npos);

  // HEAD: headers with the length, no body.
  r = RawExchange(port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_GT(std::stoi(Header(r.head, "Content-Length")), 0);
  EXPECT_EQ(r.body, "");

  // Before the first recommendation: 503.
  f.have_rec = false;
  r = Get(port, "/v1/recommendation");
  EXPECT_EQ(r.status, 503);

  // Keep-alive: two requests on one connection.
  r = RawExchange(port,
                  "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: "
                  "x\r\nConnection: close\r\n\r\n");
  size_t count = 0;
  for (size_t p = 0; (p = r.raw.find("HTTP/1.1 200", p)) != std::string::npos; ++p) ++count;
  EXPECT_EQ(count, 2u) << r.raw;
  s.Stop();
}

TEST(HttpServer, BadRequestsGet4xxAndTheServerKeepsServing) {
  Fixture f;
  HttpOptions o;
  o.max_header_bytes = 4096;
  o.max_body_bytes = 256;
  HttpServer s(o, f.Providers());
  std::string err;
  ASSERT_TRUE(s.Start(&err)) << err;
  const int port = s.BoundPort();

  EXPECT_EQ(RawExchange(port, "HELLO THERE\r\n\r\n").status, 400);
  EXPECT_EQ(RawExchange(port, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) +
                                  std::string(100, '\xaa'))
                .status,
            400);  // a TLS ClientHello
  EXPECT_EQ(RawExchange(port, "GET /metrics HTTP/9.9\r\n\r\n").status, 400);
  EXPECT_EQ(RawExchange(port, "GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n").status, 400);
  // Oversized header → 431, oversized body → 413 (the body is never read into memory).
  EXPECT_EQ(Get(port, "/metrics", "X-Junk: " + std::string(10000, 'a') + "\r\n").status, 431);
  EXPECT_EQ(Get(port, "/" + std::string(10000, 'a')).status, 431);
  EXPECT_EQ(RawExchange(port,
                        "POST /v1/recommendation HTTP/1.1\r\nHost: x\r\nContent-Length: "
                        "1000000\r\n\r\n" +
                            std::string(2000, 'x'))
                .status,
            413);
  // Methods other than GET/HEAD → 405 with Allow.
  auto r = RawExchange(port,
                       "POST /v1/recommendation HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                       "Connection: close\r\n\r\n{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r.head, "Allow"), "GET, HEAD");
  EXPECT_EQ(RawExchange(port, "DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n").status, 405);
  EXPECT_EQ(Get(port, "/v2/whatever").status, 404);
  EXPECT_EQ(Get(port, "/").status, 404);
  // The providers were never touched by rejected requests, and the server still answers.
  EXPECT_EQ(f.rec_calls.load(), 0);
  EXPECT_EQ(Get(port, "/v1/recommendation").status, 200);
  EXPECT_EQ(Get(port, "/metrics").status, 200);
  EXPECT_GE(s.Stats().rejected, 11u);
  s.Stop();
}

TEST(HttpServer, ThrowingProviderIs500ForThatRequestOnly) {
  HttpProviders p;
  p.metrics = []() -> std::string { throw std::runtime_error("boom"); };
  HttpServer s(HttpOptions{}, p);
  std::string err;
  ASSERT_TRUE(s.Start(&err)) << err;
  EXPECT_EQ(Get(s.BoundPort(), "/metrics").status, 500);
  EXPECT_EQ(Get(s.BoundPort(), "/v1/recommendation").status, 404);  // no provider
  EXPECT_EQ(Get(s.BoundPort(), "/healthz").status, 200);
}

TEST(HttpServer, ConnectionLimitAndReadTimeout) {
  Fixture f;
  HttpOptions o;
  o.max_connections = 2;
  o.read_timeout_seconds = 0.3;
  HttpServer s(o, f.Providers());
  std::string err;
  ASSERT_TRUE(s.Start(&err)) << err;
  const int port = s.BoundPort();
  namespace asio = boost::asio;
  asio::io_context io;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> idle;
  for (int i = 0; i < 2; ++i) {
    idle.push_back(std::make_unique<asio::ip::tcp::socket>(io));
    idle.back()->connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  }
  ASSERT_TRUE(WaitFor([&] { return s.Stats().connections >= 2; }, 2));
  EXPECT_EQ(Get(port, "/metrics").status, 503);  // third connection: over the limit
  // Idle connections are closed by the read timeout, after which the server serves again.
  const auto t0 = std::chrono::steady_clock::now();
  char c;
  boost::system::error_code ec;
  idle[0]->read_some(asio::buffer(&c, 1), ec);  // returns when the server closes
  EXPECT_EQ(ec, asio::error::eof);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 2.0);
  idle[1]->read_some(asio::buffer(&c, 1), ec);
  ASSERT_TRUE(WaitFor([&] { return Get(port, "/metrics").status == 200; }, 2));
}

TEST(HttpServer, BindFailureIsReported) {
  HttpServer a(HttpOptions{}, {});
  std::string err;
  ASSERT_TRUE(a.Start(&err)) << err;
  HttpOptions o;
  o.port = a.BoundPort();
  HttpServer b(o, {});
  EXPECT_FALSE(b.Start(&err));
  EXPECT_NE(err.find("cannot listen on 127.0.0.1:" + std::to_string(o.port)), std::string::npos)
      << err;
  EXPECT_EQ(err.find("Success"), std::string::npos) << err;  // the bind error, not close()'s
  EXPECT_NE(err.find("in use"), std::string::npos) << err;
  HttpOptions bad;
  bad.host = "not-an-ip";
  HttpServer c(bad, {});
  EXPECT_FALSE(c.Start(&err));
  EXPECT_NE(err.find("not-an-ip"), std::string::npos);
}

TEST(HttpServer, ConcurrentClientsAndStopUnderLoad) {
  Fixture f;
  HttpServer s(HttpOptions{}, f.Providers());
  std::string err;
  ASSERT_TRUE(s.Start(&err)) << err;
  const int port = s.BoundPort();
  std::atomic<int> ok{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 40; ++i) {
        const auto r = (i + c) % 3 == 0   ? Get(port, "/metrics")
                       : (i + c) % 3 == 1 ? Get(port, "/v1/recommendation")
                                          : RawExchange(port, "BROKEN\r\n\r\n");
        ((i + c) % 3 == 2 ? r.status == 400 : r.status == 200) ? ++ok : ++other;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 320);
  EXPECT_EQ(other.load(), 0);
  // Stop while clients hold open connections: returns promptly.
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket held(io);
  held.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  asio::write(held, asio::buffer(std::string("GET /metrics HTTP/1.1\r\n")));  // incomplete
  const auto t0 = std::chrono::steady_clock::now();
  s.Stop();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}
