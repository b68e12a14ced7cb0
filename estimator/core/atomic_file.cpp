#include "estimator/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "estimator/core/error.h"

namespace cloudtune::core {

bool WriteFileAtomically(const std::string& path, const std::string& text, std::string* error) {
  auto fail = [&](const std::string& what) {
    if (error) *error = path + ": " + what;
    return false;
  };
  // Unique per process and call, so concurrent writers of one path never share a temporary.
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot create " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string msg = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail("cannot write " + tmp + ": " + msg);
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const std::string msg = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail("cannot flush " + tmp + ": " + msg);
  }
  if (::close(fd) != 0) {
    const std::string msg = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail("cannot close " + tmp + ": " + msg);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string msg = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail("cannot rename " + tmp + " into place: " + msg);
  }
  return true;
}

void WriteFileAtomicallyOrThrow(const std::string& path, const std::string& text) {
  std::string error;
  if (!WriteFileAtomically(path, text, &error)) throw InputError(error);
}

}  // namespace cloudtune::core
