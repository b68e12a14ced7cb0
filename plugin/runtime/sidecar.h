// The JSON Lines sidecar (DESIGN §2): one self-describing record per line,
//   {"schema":"cloudtune.sidecar/1","time":<unix seconds>,"step":<optimizer step>,"kind":"...",...}
// appended to a file by rank 0. Records are queued and written by one background thread, each with
// a single O_APPEND write() so that a killed job leaves only complete lines (plus at most one
// truncated last line if the kernel is interrupted mid-write). Thread-safe: the training thread,
// the tuner and watchers may all call Write(). Write() never blocks on disk and never throws.
//
// Record kinds written so far: "start", "measurement", "end" (plugin); later issues add
// "recommendation", "preemption", "straggler", ...
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace cloudtune::runtime {

inline constexpr const char* kSidecarSchema = "cloudtune.sidecar/1";

class Sidecar {
 public:
  Sidecar() = default;
  ~Sidecar();  // Close()
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  // Opens (creates or appends to) `path` and starts the writer thread. On failure (e.g. a missing
  // directory) returns false with "cannot open sidecar 'PATH': reason" in *error.
  bool Open(const std::string& path, std::string* error);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // Queues one record: `fields` (a JSON object, may be empty) with schema, time, step and kind
  // added in front. A no-op when the sidecar is not open.
  void Write(const std::string& kind, int64_t step, const nlohmann::json& fields = {});
  // Queues the file's last record (the "end"): records written after it, from any thread, are
  // dropped, so a reader always finds it last. Post tasks still run.
  void WriteLast(const std::string& kind, int64_t step, const nlohmann::json& fields = {});

  // Runs `task` on the writer thread, after the records queued before it (for other file output
  // that must stay off the training thread, e.g. the profile CSV). Dropped when not open.
  void Post(std::function<void()> task);

  // Blocks until everything queued so far is on disk.
  void Flush();
  // Flushes, stops the writer thread and closes the file. Idempotent.
  void Close();

  // Records that could not be written (I/O errors); the first error is logged once to stderr.
  int64_t write_errors() const;

  // The record as one line (no trailing newline); exposed for tests.
  static std::string Format(const std::string& kind, int64_t step, double unix_time,
                            const nlohmann::json& fields);

 private:
  void Run();
  void Queue(const std::string& kind, int64_t step, const nlohmann::json& fields, bool last);

  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work available / stop
  std::condition_variable idle_cv_;  // queue drained
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  bool sealed_ = false;  // the last record is queued
  int64_t write_errors_ = 0;
  std::thread thread_;
};

}  // namespace cloudtune::runtime
