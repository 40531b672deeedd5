// Whole-file reads, crash-safe (atomic) writes, the clean-up of what killed writers left, and
// directory locks.
#include <attn/io.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "../common/error.h"
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
// set_write_hook's function, copied by every write that starts while it is set.
std::mutex g_write_hook_mutex;
std::function<void(const std::string&)> g_write_hook;
std::atomic<bool> g_write_hook_set{false};

// The file name part of `path`.
std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// gethostname(), or "" when it fails.
std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// The host name as it appears in temporary file names: letters, digits and '-' only (no '.', which
// separates the fields), "localhost" when there is none.
std::string host_tag() {
  std::string h = host_name();
  for (char& c : h)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) c = '_';
  return h.empty() ? "localhost" : h;
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Whether process `pid` of this host may still be running (and its files must be left alone).
bool process_alive(long long pid) {
  if (pid <= 0 || pid > INT_MAX) return true;  // not a process id: keep the file
  if (pid == ::getpid()) return true;
  if (::kill(pid_t(pid), 0) == 0) return true;
  return errno != ESRCH;  // EPERM: alive, someone else's
}

}  // namespace

namespace detail {

// What is left to read of fd (about `expected` bytes, 0 when unknown); errors as read_whole_file's.
static std::string read_to_end(const char* fn, const std::string& path, int fd, uint64_t expected) {
  std::string out;
  try {
    if (expected > 0) out.reserve(std::size_t(expected));
    char buf[1 << 16];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        attn::detail::fail(fn, "cannot read '", path, "': ", errno_str(errno));
      }
      if (n == 0) break;
      out.append(buf, std::size_t(n));
    }
  } catch (const std::bad_alloc&) {
    attn::detail::fail_workspace(fn, double(std::max<uint64_t>(expected, out.size())),
                                 "the contents of '" + path + "'");
  } catch (const std::length_error&) {
    attn::detail::fail_workspace(fn, double(expected), "the contents of '" + path + "'");
  }
  return out;
}

// The descriptor of `path` opened for reading; errors as read_whole_file's.
static int open_for_reading(const char* fn, const std::string& path, struct stat& st) {
  int raw;
  do {
    raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) attn::detail::fail(fn, "cannot open '", path, "': ", errno_str(errno));
  Fd fd(raw);
  if (::fstat(fd.fd, &st) != 0)
    attn::detail::fail(fn, "cannot stat '", path, "': ", errno_str(errno));
  if (S_ISDIR(st.st_mode)) attn::detail::fail(fn, "'", path, "' is a directory");
  fd.fd = -1;
  return raw;
}

ReadOnlyFile::ReadOnlyFile(const char* fn, const std::string& path) : fn_(fn), path_(path) {
  struct stat st {};
  const int raw = open_for_reading(fn, path, st);
  fd_ = std::shared_ptr<const int>(new int(raw), [](const int* p) {
    ::close(*p);
    delete p;
  });
  regular_ = S_ISREG(st.st_mode);
  size_ = regular_ ? uint64_t(st.st_size) : 0;
}

std::shared_ptr<void> ReadOnlyFile::map() const {
  if (!regular_ || size_ == 0) return nullptr;
  void* p = ::mmap(nullptr, std::size_t(size_), PROT_READ | PROT_WRITE, MAP_PRIVATE, *fd_, 0);
  if (p == MAP_FAILED) return nullptr;
  const std::size_t n = std::size_t(size_);
  return std::shared_ptr<void>(p, [n](void* q) { ::munmap(q, n); });
}

std::string ReadOnlyFile::read_rest() const { return read_to_end(fn_, path_, *fd_, size_); }

bool ReadOnlyFile::read_at(uint64_t offset, void* dst, std::size_t n) const {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const std::size_t chunk = std::min<std::size_t>(n, std::size_t(1) << 30);
    const ssize_t got = ::pread(*fd_, out, chunk, off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      attn::detail::fail(fn_, "cannot read '", path_, "': ", errno_str(errno));
    }
    if (got == 0) return false;
    out += got;
    offset += uint64_t(got);
    n -= std::size_t(got);
  }
  return true;
}

std::string read_whole_file(const char* fn, const std::string& path) {
  struct stat st {};
  Fd fd(open_for_reading(fn, path, st));
  return read_to_end(fn, path, fd.fd, S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0);
}

std::string concat(std::span<const std::string_view> pieces) {
  std::size_t n = 0;
  for (std::string_view p : pieces) n += p.size();
  std::string out;
  out.reserve(n);
  for (std::string_view p : pieces) out += p;
  return out;
}

std::function<void(const std::string&)> set_write_hook(
    std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> lock(g_write_hook_mutex);
  g_write_hook_set.store(bool(hook));
  std::swap(g_write_hook, hook);
  return hook;
}

void write_file_atomic(const char* fn, const std::string& path, std::string_view bytes) {
  write_file_atomic(fn, path, std::span<const std::string_view>(&bytes, 1));
}

void write_file_atomic(const char* fn, const std::string& path,
                       std::span<const std::string_view> pieces) {
  if (path.empty()) attn::detail::fail(fn, "empty path");
  if (path.back() == '/') attn::detail::fail(fn, "'", path, "' names a directory, not a file");
  {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      attn::detail::fail(fn, "'", path, "' is a directory");
  }
  (void)remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp." + host_tag() + "." + std::to_string(::getpid()) + "." +
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
  // The debugging hook (set_write_hook) runs halfway: a half-written temporary file.
  std::function<void(const std::string&)> hook;
  if (g_write_hook_set.load()) {
    std::lock_guard<std::mutex> lock(g_write_hook_mutex);
    hook = g_write_hook;
  }
  std::size_t total = 0;
  for (std::string_view p : pieces) total += p.size();
  const std::size_t pause_at = hook ? total / 2 : total + 1;
  std::size_t done = 0;  // bytes written, over all pieces
  bool paused = false;
  for (std::string_view piece : pieces) {
    std::size_t at = 0;
    while (at < piece.size()) {
      if (done == pause_at && !paused) {
        paused = true;
        hook(path);
      }
      std::size_t want = piece.size() - at;
      if (done < pause_at) want = std::min(want, pause_at - done);
      const ssize_t n = ::write(fd.fd, piece.data() + at, want);
      if (n < 0) {
        if (errno == EINTR) continue;
        abort_with("write failed", errno);
      }
      at += std::size_t(n);
      done += std::size_t(n);
    }
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

}  // namespace detail

std::string read_file(const std::string& path) {
  return detail::read_whole_file("read_file", path);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  detail::write_file_atomic("write_file_atomic", path, bytes);
}

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  std::vector<std::string> removed;
  if (path.empty() || path.back() == '/') return removed;
  const std::string dir = parent_dir(path);
  const std::string prefix = base_name(path) + ".tmp.";
  const std::string host = host_tag();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // <host>.<pid>.<n>, or the older <pid>.<n> and <pid>
    std::vector<std::string_view> fields;
    std::string_view rest = name.substr(prefix.size());
    for (std::size_t dot; (dot = rest.find('.')) != std::string_view::npos;) {
      fields.push_back(rest.substr(0, dot));
      rest = rest.substr(dot + 1);
    }
    fields.push_back(rest);
    std::string_view pid;
    if (fields.size() == 3 && fields[0] == host && all_digits(fields[2]))
      pid = fields[1];
    else if (fields.size() == 2 && all_digits(fields[1]))
      pid = fields[0];
    else if (fields.size() == 1)
      pid = fields[0];
    else
      continue;
    if (!all_digits(pid) || process_alive(std::stoll(std::string(pid)))) continue;
    candidates.emplace_back(name);
  }
  ::closedir(d);
  for (const std::string& name : candidates) {
    const std::string full = dir == "/" ? "/" + name : dir + "/" + name;
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(full.c_str()) == 0) removed.push_back(full);
  }
  return removed;
}

// ---- directory locks ----------------------------------------------------------------------------

std::string LockOwner::describe() const {
  std::string when = "at an unknown time";
  const std::time_t t = std::time_t(started);
  std::tm tm{};
  char buf[64];
  if (started > 0 && ::gmtime_r(&t, &tm) &&
      std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm) > 0)
    when = buf;
  std::string s = "PID " + std::to_string(pid) + " on host " + (host.empty() ? "?" : host) +
                  ", started " + when;
  if (!command.empty()) s += " (" + command + ")";
  return s;
}

LockOwner parse_lock_owner(std::string_view bytes) {
  constexpr const char* fn = "parse_lock_owner";
  if (bytes.empty()) attn::detail::fail(fn, "the lock file is empty");
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) attn::detail::fail(fn, "not a JSON object");
  auto integer = [&](const char* key, int64_t min) {
    auto it = j.find(key);
    if (it == j.end() || !(it->is_number_integer() || it->is_number_unsigned()))
      attn::detail::fail(fn, "'", key, "' is missing or not an integer");
    if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
      attn::detail::fail(fn, "'", key, "' is too large");
    const int64_t v = it->get<int64_t>();
    if (v < min) attn::detail::fail(fn, "'", key, "' is ", v, ", below ", min);
    return v;
  };
  auto text = [&](const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string())
      attn::detail::fail(fn, "'", key, "' is missing or not a string");
    return it->get<std::string>();
  };
  LockOwner o;
  o.pid = integer("pid", 1);
  o.host = text("host");
  o.started = integer("started", 0);
  o.command = text("command");
  return o;
}

DirectoryLock::DirectoryLock(const std::string& path, const std::string& command, const char* fn,
                             const std::string& what)
    : path_(path) {
  int raw;
  do {
    raw = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) attn::detail::fail(fn, "cannot open the lock file '", path, "': ", errno_str(errno));
  Fd fd(raw);
  int rc;
  do {
    rc = ::flock(fd.fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      // Who holds it: what it wrote (nothing yet if it has only just taken the lock).
      std::string bytes;
      char buf[4096];
      for (off_t off = 0; bytes.size() < 65536;) {
        const ssize_t n = ::pread(fd.fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        bytes.append(buf, std::size_t(n));
        off += n;
      }
      std::string who;
      try {
        who = parse_lock_owner(bytes).describe();
      } catch (const Error&) {
        who = "another process (which has not recorded itself in the lock file yet)";
      }
      attn::detail::fail(fn, what, " is in use by ", who, "; lock file '", path, "'");
    }
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
      unlocked_reason_ = "cannot lock '" + path + "': " + errno_str(err);
      return;  // fd closes: an unlocked object
    }
    attn::detail::fail(fn, "cannot lock '", path, "': ", errno_str(err));
  }
  // Record this process for the next one that finds the directory locked. Best effort: the lock
  // is what matters, and the record only names its holder.
  const nlohmann::json me = {{"pid", int64_t(::getpid())},
                             {"host", host_name()},
                             {"started", int64_t(std::time(nullptr))},
                             {"command", command}};
  const std::string record = me.dump() + "\n";
  if (::ftruncate(fd.fd, 0) == 0) {
    std::size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::pwrite(fd.fd, record.data() + done, record.size() - done, off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += std::size_t(n);
    }
  }
  fd_ = fd.fd;
  fd.fd = -1;  // kept open (and locked) until the destructor
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace attn::io
