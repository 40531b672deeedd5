// Files in and out: atomic writes and the safetensors format.
//
// safetensors (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value", ...}}, then the raw little-endian tensor bytes. Files written
// here load in PyTorch with safetensors.torch.load_file. Supported dtypes: F32, I64, BOOL, BF16,
// F16, and U8 as bytes (ByteTensor, SafeTensorsFile::read_u8).
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::io {

// Writes `bytes` to `path` so that a crash at any moment leaves either the old file or the
// complete new one: a temporary file in the same directory ("<path>.tmp.<host>.<pid>.<n>"),
// fsync, rename over `path`, fsync of the directory. Throws attn::Error naming the path and the
// system error ("[write_file_atomic] cannot write 'out/x': write failed: No space left on
// device"); the temporary file is removed then. Before writing, it removes the temporary files of
// `path` that dead writers left (remove_stale_temporaries).
void write_file_atomic(const std::string& path, std::string_view bytes);

// The temporary files of `path` that writers killed in the middle of write_file_atomic left:
// "<path>.tmp.<host>.<pid>.<n>" (and the older "<path>.tmp.<pid>[.<n>]") of this host whose
// process <pid> is no longer alive. Removes them and returns their paths. A live writer's file
// (this process's included) is never touched; neither is another host's, nor anything that is
// not a regular file. Best effort: a file that cannot be removed is left and not returned.
std::vector<std::string> remove_stale_temporaries(const std::string& path);

// Who holds a DirectoryLock, as its lock file records it.
struct LockOwner {
  int64_t pid = 0;
  std::string host;
  int64_t started = 0;  // Unix time (seconds) at which the lock was taken
  std::string command;  // what holds it, e.g. "attn train"
  // "PID 1234 on host box, started 2024-05-01 12:00:00 UTC (attn train)"
  std::string describe() const;
};
// The contents of a lock file: JSON {"pid": N, "host": "...", "started": N, "command": "..."}.
// Throws attn::Error ("[parse_lock_owner] ...") when it is not that (an empty file: a process
// that has the lock but has not written it yet).
LockOwner parse_lock_owner(std::string_view bytes);

// An exclusive lock on a directory, held while the object lives: flock(2) on the lock file
// `path` (created if missing), which then records this process (LockOwner as JSON). The kernel
// drops the lock when the process ends, however it ends, so a killed holder never leaves it
// stuck; the file itself stays (removing it would let two processes lock two different files).
// Advisory: it keeps out only processes that take the same lock.
class DirectoryLock {
 public:
  // Takes the lock or throws attn::Error "[fn] <what> is in use by PID 1234 on host box, started
  // ... (attn train; lock file 'path')". `command` is recorded for the next one to read.
  // A filesystem without flock (ENOLCK, EOPNOTSUPP) gives an unlocked object: held() is false.
  DirectoryLock(const std::string& path, const std::string& command, const char* fn,
                const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Why the lock could not be taken when held() is false ("" otherwise).
  const std::string& unlocked_reason() const { return unlocked_reason_; }

 private:
  int fd_ = -1;
  std::string path_, unlocked_reason_;
};
// The whole file. Throws attn::Error ("[read_file] cannot open 'x': No such file or directory").
std::string read_file(const std::string& path);

struct SafeTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order (sorted by offset)
  std::map<std::string, std::string> metadata;
  std::string what = "<memory>";  // where it came from (the path), for error messages
  // The tensor called `name`; attn::Error naming `what` (the file) when missing.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Bytes that have no attn dtype, written as a "U8" tensor of `shape` (MXFP4 blocks and scales):
// the product of shape must be bytes->size(). The bytes are shared, not copied.
struct ByteTensor {
  std::string name;
  Shape shape;
  std::shared_ptr<const std::vector<uint8_t>> bytes;
};

// Serialises tensors (any strides; written contiguous), then `u8` byte tensors, and metadata.
// Names must be unique and non-empty and not "__metadata__"; attn::Error ("[to_safetensors]
// ...") otherwise, or for a ByteTensor whose shape does not hold its bytes.
std::string to_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {},
                           const std::vector<ByteTensor>& u8 = {});
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::vector<ByteTensor>& u8 = {});  // atomic
// Parses and validates everything (header length, JSON, dtypes, shapes, offsets inside the
// buffer, contiguous and non-overlapping data, sizes matching shapes); throws attn::Error
// ("[load_safetensors] 'what': ...") on any defect. Never reads out of bounds.
SafeTensors from_safetensors(std::string_view bytes, const std::string& what = "<memory>");
// The whole file, read tensor by tensor through SafeTensorsFile: no copy of the file is held.
SafeTensors load_safetensors(const std::string& path);

// A safetensors file read one tensor at a time, like safetensors' safe_open. Opening reads and
// validates the header only (every check of from_safetensors that needs no tensor data, against
// the file's size); each tensor's bytes are read when asked for, straight into the tensor that
// receives them, so a model loads with no copy of the file in memory. The file stays open while
// any copy of the reader lives (copies share it). A tensor read after the file shrank gives
// attn::Error ("[load_safetensors] 'path': the file ended ..."); errors name the file as
// from_safetensors's do.
class SafeTensorsFile {
 public:
  struct Entry {
    std::string name;
    Dtype dtype;
    Shape shape;
    // A "U8" tensor: bytes with no attn dtype (MXFP4 blocks and scales). Its dtype says Bool (one
    // byte each); read(), read_into() and map() refuse it, read_u8() gives its bytes.
    bool u8 = false;
  };
  explicit SafeTensorsFile(const std::string& path);
  // The same over bytes in memory (`what` names them in errors).
  static SafeTensorsFile from_bytes(std::string bytes, const std::string& what = "<memory>");

  const std::string& what() const;
  const std::vector<Entry>& entries() const;  // in file order
  const std::map<std::string, std::string>& metadata() const;
  const Entry* find(const std::string& name) const;  // nullptr when absent
  // How the header names a dtype: "F32", "I64", "BOOL", "BF16", "F16".
  static const char* dtype_name(Dtype dtype);
  // The tensor `name` (attn::Error naming the file when it has none).
  Tensor read(const std::string& name) const;
  // Reads `name` into dst, which must have its shape; converted to dst's dtype, any strides or
  // device. A CPU tensor that is contiguous and of the file's dtype receives the bytes directly;
  // if that read fails part-way, dst holds part of the new values.
  void read_into(const std::string& name, Tensor& dst) const;
  // The tensor `name` viewing the file's pages, mapped copy-on-write (writes to it stay in this
  // process): nothing is read until used, and pages the kernel can drop and read again. A file
  // that cannot be mapped (bytes in memory, a pipe), a misaligned tensor and BOOL tensors are read
  // as read() does. The file must not shrink while the tensor lives (its pages would be gone).
  Tensor map(const std::string& name) const;
  // The bytes of the U8 tensor `name`, row-major (attn::Error for a tensor of another dtype).
  std::vector<uint8_t> read_u8(const std::string& name) const;
  // Every tensor (attn::Error if one is U8).
  SafeTensors read_all() const;

 private:
  friend SafeTensors from_safetensors(std::string_view bytes, const std::string& what);
  struct Impl;
  explicit SafeTensorsFile(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace attn::io
