// Helpers shared by src/io and src/data (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace attn::io::detail {

// The whole file at `path`; errors are reported as "[fn] cannot open 'path': <strerror>",
// "[fn] 'path' is a directory" or "[fn] cannot read 'path': <strerror>".
std::string read_whole_file(const char* fn, const std::string& path);

// A file opened for reading at offsets (pread); closed with the last copy. Opening reports
// errors as read_whole_file does.
class ReadOnlyFile {
 public:
  ReadOnlyFile(const char* fn, const std::string& path);
  // Whether it is a regular file, and its size then (0 otherwise).
  bool regular() const { return regular_; }
  uint64_t size() const { return size_; }
  // The whole regular file mapped copy-on-write (private: writes through it stay in memory, the
  // file never changes), unmapped when the last holder lets go; null when it cannot be mapped
  // (not a regular file, empty, or mmap failed).
  std::shared_ptr<void> map() const;
  // Reads exactly n bytes at `offset` into dst; false when the file ends first. Throws
  // "[fn] cannot read 'path': <strerror>" on a read error.
  bool read_at(uint64_t offset, void* dst, std::size_t n) const;
  // Everything from the current position to the end, read in order (for pipes and devices,
  // which have no offsets).
  std::string read_rest() const;

 private:
  std::shared_ptr<const int> fd_;
  const char* fn_;
  std::string path_;
  bool regular_ = false;
  uint64_t size_ = 0;
};

// io::write_file_atomic with errors reported as "[fn] cannot write 'path': ..." (plot::save
// shares it).
void write_file_atomic(const char* fn, const std::string& path, std::string_view bytes);
// The same for the concatenation of `pieces`, written one after another (no copy joins them).
void write_file_atomic(const char* fn, const std::string& path,
                       std::span<const std::string_view> pieces);
// The concatenation of `pieces` in memory (what write_file_atomic above writes).
std::string concat(std::span<const std::string_view> pieces);

// A debugging hook for fault tests (attn::train::TrainHooks::inside_write): every atomic write
// calls `hook(path)` halfway through writing its temporary file, so that a process killed (or
// paused) there leaves a half-written temporary file behind. An empty function (the default) turns
// it off. Returns the hook it replaces.
std::function<void(const std::string&)> set_write_hook(
    std::function<void(const std::string&)> hook);

}  // namespace attn::io::detail
