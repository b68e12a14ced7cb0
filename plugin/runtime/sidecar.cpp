#include "plugin/runtime/sidecar.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>

#include "plugin/runtime/detail/thread.h"

namespace cloudtune::runtime {

Sidecar::~Sidecar() { Close(); }

bool Sidecar::Open(const std::string& path, std::string* error) {
  Close();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (error) *error = "cannot open sidecar '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
  fd_ = fd;
  stop_ = false;
  sealed_ = false;
  thread_ = std::thread([this] {
    detail::NameThisThread("sidecar");
    Run();
  });
  return true;
}

std::string Sidecar::Format(const std::string& kind, int64_t step, double unix_time,
                            const nlohmann::json& fields) {
  // nlohmann::json keeps keys sorted; build the line by hand so the header fields come first.
  nlohmann::json head = {{"schema", kSidecarSchema}};
  std::string line = head.dump();
  line.pop_back();  // '}'
  line += ",\"time\":" + nlohmann::json(unix_time).dump();
  line += ",\"step\":" + std::to_string(step);
  line += ",\"kind\":" + nlohmann::json(kind).dump();
  if (fields.is_object()) {
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it.key() == "schema" || it.key() == "time" || it.key() == "step" || it.key() == "kind")
        continue;
      line += "," + nlohmann::json(it.key()).dump() + ":" +
              it.value().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  line += "}";
  return line;
}

void Sidecar::Write(const std::string& kind, int64_t step, const nlohmann::json& fields) {
  Queue(kind, step, fields, false);
}

void Sidecar::WriteLast(const std::string& kind, int64_t step, const nlohmann::json& fields) {
  Queue(kind, step, fields, true);
}

void Sidecar::Queue(const std::string& kind, int64_t step, const nlohmann::json& fields,
                    bool last) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string line;
  try {
    line = Format(kind, step, now, fields) + "\n";
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: sidecar: cannot format a '" << kind << "' record: " << e.what()
              << "\n";
    return;
  }
  auto task = [this, line = std::move(line)] {
    // One write() per record: O_APPEND makes it atomic with respect to other writers, and a
    // killed process leaves whole lines only.
    size_t done = 0;
    while (done < line.size()) {
      ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::lock_guard<std::mutex> lock(mu_);
        if (write_errors_++ == 0)
          std::cerr << "cloudtune: sidecar: write to '" << path_
                    << "' failed: " << std::strerror(errno) << "\n";
        return;
      }
      done += static_cast<size_t>(n);
    }
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stop_ || sealed_) return;
  sealed_ = last;
  queue_.push_back(std::move(task));
  cv_.notify_one();
}

void Sidecar::Post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stop_) return;
  queue_.push_back(std::move(task));
  cv_.notify_one();
}

void Sidecar::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) break;
      continue;
    }
    auto task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      std::cerr << "cloudtune: sidecar: background task failed: " << e.what() << "\n";
    } catch (...) {
      std::cerr << "cloudtune: sidecar: background task failed\n";
    }
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void Sidecar::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  idle_cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || !thread_.joinable(); });
}

void Sidecar::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0) return;
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();  // drains the queue before leaving
  std::lock_guard<std::mutex> lock(mu_);
  ::close(fd_);
  fd_ = -1;
}

int64_t Sidecar::write_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return write_errors_;
}

}  // namespace cloudtune::runtime
