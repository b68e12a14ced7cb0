// A tiny HTTP/1.1 server on 127.0.0.1 for tests that need a peer: cloud metadata services (each
// cloud's format), endpoints that hang or answer garbage. One connection at a time, one request
// per connection; the handler decides the answer. Test-only (POSIX sockets, no dependencies).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cloudtune::test {

struct FakeRequest {
  std::string method, target;
  std::map<std::string, std::string> headers;  // names lower-cased
};

struct FakeAnswer {
  FakeAnswer() = default;
  FakeAnswer(int s, std::string b) : status(s), body(std::move(b)) {}
  int status = 404;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  int delay_ms = 0;        // wait before answering
  bool no_answer = false;  // keep the connection open and never answer (until the server stops)
};

class FakeHttpServer {
 public:
  using Handler = std::function<FakeAnswer(const FakeRequest&)>;
  explicit FakeHttpServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    thread_.join();
    for (int c : held_) ::close(c);
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }
  std::vector<FakeRequest> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string raw;
      char buf[4096];
      while (raw.find("\r\n\r\n") == std::string::npos) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 1000) <= 0) break;
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        raw.append(buf, static_cast<size_t>(n));
      }
      FakeRequest req = Parse(raw);
      ++requests_;
      {
        std::lock_guard<std::mutex> lock(mu_);
        seen_.push_back(req);
      }
      const FakeAnswer a = handler_(req);
      if (a.no_answer) {
        held_.push_back(c);
        continue;
      }
      if (a.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
      std::string resp = "HTTP/1.1 " + std::to_string(a.status) + " X\r\n";
      for (const auto& [k, v] : a.headers) resp += k + ": " + v + "\r\n";
      resp += "Content-Length: " + std::to_string(a.body.size()) + "\r\nConnection: close\r\n\r\n" +
              a.body;
      ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  static FakeRequest Parse(const std::string& raw) {
    FakeRequest r;
    const size_t eol = raw.find("\r\n");
    const std::string first = raw.substr(0, eol);
    const size_t sp1 = first.find(' '), sp2 = first.rfind(' ');
    if (sp1 != std::string::npos && sp2 > sp1) {
      r.method = first.substr(0, sp1);
      r.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    }
    size_t pos = eol == std::string::npos ? raw.size() : eol + 2;
    while (pos < raw.size()) {
      const size_t end = raw.find("\r\n", pos);
      if (end == std::string::npos || end == pos) break;
      const std::string line = raw.substr(pos, end - pos);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string k = line.substr(0, colon), v = line.substr(colon + 1);
        for (char& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        r.headers[k] = v;
      }
      pos = end + 2;
    }
    return r;
  }

  Handler handler_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  std::vector<FakeRequest> seen_;
  std::vector<int> held_;
  std::thread thread_;
};

// The answers of each cloud's metadata service for an instance `type` bought as `purchase`
// ("spot" or "on-demand"), in that cloud's format.
inline FakeHttpServer::Handler CloudMetadata(const std::string& cloud, const std::string& type,
                                             const std::string& purchase) {
  return [=](const FakeRequest& r) {
    FakeAnswer a;
    const bool spot = purchase == "spot";
    if (cloud == "aws") {
      if (r.method == "PUT" && r.target == "/latest/api/token") return FakeAnswer{200, "tok"};
      if (r.headers.count("x-aws-ec2-metadata-token") == 0) return FakeAnswer{401, ""};
      if (r.target == "/latest/meta-data/instance-type") return FakeAnswer{200, type};
      if (r.target == "/latest/meta-data/instance-life-cycle")
        return FakeAnswer{200, spot ? "spot" : "on-demand"};
    } else if (cloud == "gcp") {
      a.headers = {{"Metadata-Flavor", "Google"}};
      if (r.headers.count("metadata-flavor") == 0) return FakeAnswer{403, ""};
      a.status = 200;
      if (r.target == "/computeMetadata/v1/instance/machine-type") {
        a.body = "projects/1234/machineTypes/" + type;
        return a;
      }
      if (r.target == "/computeMetadata/v1/instance/scheduling/provisioning-model") {
        a.body = spot ? "SPOT" : "STANDARD";
        return a;
      }
      a.status = 404;
    } else if (cloud == "azure") {
      if (r.headers.count("metadata") == 0) return FakeAnswer{400, ""};
      if (r.target.rfind("/metadata/instance/compute", 0) == 0)
        return FakeAnswer{200, "{\"vmSize\":\"" + type + "\",\"priority\":\"" +
                                   (spot ? "Spot" : "Regular") + "\",\"location\":\"eastus\"}"};
    } else if (cloud == "garbage") {
      return FakeAnswer{200, "\x01\x02 not what you asked for {"};
    } else if (cloud == "hang") {
      a.no_answer = true;
      return a;
    }
    return a;
  };
}

}  // namespace cloudtune::test
