// The replay's one thread pool: fn(i) for every i in [0, n) on up to `threads` threads (0 = one
// per core), the calling thread included. Each index runs exactly once; which thread runs it is
// not fixed, so fn must write only what belongs to its index. The first exception thrown is
// rethrown after every thread has stopped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cloudtune::replay {

template <typename Fn>
void ParallelFor(size_t n, unsigned threads, Fn&& fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, n));
  std::atomic<size_t> next{0};
  std::mutex m;
  std::exception_ptr error;
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace cloudtune::replay
