// Whole-file reads and crash-safe (atomic) writes.
#include <attn/io.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "../tensor/internal.h"
#include "file_internal.h"

namespace attn::io {
namespace {

std::string errno_str(int err) { return std::strerror(err); }

// Closes a descriptor on scope exit unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  // Closes now and returns 0 or the errno of a failed close.
  int close_now() {
    int err = 0;
    if (fd >= 0 && ::close(fd) != 0) err = errno;
    fd = -1;
    return err;
  }
};

// The directory holding `path` ("." for a bare file name).
std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::atomic<unsigned> g_tmp_counter{0};

}  // namespace

namespace detail {

std::string read_whole_file(const char* fn, const std::string& path) {
  int raw;
  do {
    raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) attn::detail::fail(fn, "cannot open '", path, "': ", errno_str(errno));
  Fd fd(raw);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    attn::detail::fail(fn, "cannot stat '", path, "': ", errno_str(errno));
  if (S_ISDIR(st.st_mode)) attn::detail::fail(fn, "'", path, "' is a directory");
  std::string out;
  if (S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(std::size_t(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      attn::detail::fail(fn, "cannot read '", path, "': ", errno_str(errno));
    }
    if (n == 0) break;
    out.append(buf, std::size_t(n));
  }
  return out;
}

}  // namespace detail

std::string read_file(const std::string& path) {
  return detail::read_whole_file("read_file", path);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  constexpr const char* fn = "write_file_atomic";
  if (path.empty()) attn::detail::fail(fn, "empty path");
  if (path.back() == '/') attn::detail::fail(fn, "'", path, "' names a directory, not a file");
  {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      attn::detail::fail(fn, "'", path, "' is a directory");
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(g_tmp_counter.fetch_add(1));
  int raw;
  do {
    raw = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) {
    attn::detail::fail(fn, "cannot write '", path, "': cannot create temporary file '", tmp,
                       "': ", errno_str(errno));
  }
  Fd fd(raw);
  // On any failure below: close, remove the temporary file, throw.
  auto abort_with = [&](const std::string& what, int err) {
    fd.close_now();
    ::unlink(tmp.c_str());
    attn::detail::fail(fn, "cannot write '", path, "': ", what, ": ", errno_str(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abort_with("write failed", errno);
    }
    done += std::size_t(n);
  }
  if (::fsync(fd.fd) != 0) abort_with("fsync failed", errno);
  if (int err = fd.close_now(); err != 0) {
    ::unlink(tmp.c_str());
    attn::detail::fail(fn, "cannot write '", path, "': close failed: ", errno_str(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    attn::detail::fail(fn, "cannot write '", path, "': rename from '", tmp,
                       "' failed: ", errno_str(err));
  }
  // Make the rename itself durable. Filesystems that cannot fsync a directory (EINVAL) are
  // accepted: the new file is complete and in place either way.
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    attn::detail::fail(fn, "wrote '", path, "' but cannot open its directory '", dir,
                       "' to sync it: ", errno_str(errno));
  }
  Fd dir_fd(dfd);
  if (::fsync(dir_fd.fd) != 0 && errno != EINVAL) {
    attn::detail::fail(fn, "wrote '", path, "' but cannot sync its directory '", dir,
                       "': ", errno_str(errno));
  }
}

}  // namespace attn::io
