// Shared by the parts of the torch.save format (src/io/torch_*.cpp, src/io/pickle.cpp); not
// installed.
#pragma once

#include <attn/torch_format.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../common/error.h"

namespace attn::io::detail {

// Throws E with the message "[fn] args...".
template <typename E, typename... Args>
[[noreturn]] void raise(const char* fn, const Args&... args) {
  throw E(attn::detail::msg(fn, args...));
}

// CRC-32 (ISO-HDLC, as zip uses) of `bytes`.
uint32_t crc32(std::string_view bytes);

// The records of a zip archive of stored entries, as PyTorch's reader sees them: every record lives
// under the directory of the first entry ("archive/" for torch.save of a file object).
// Validates the end-of-central-directory record, the central directory, each local header (its
// name agrees with the central directory), the method (stored only), sizes inside the buffer and
// the CRC-32 of every record; ArchiveError / UnsupportedError ("[fn] 'what': ...") otherwise.
class ZipReader {
 public:
  ZipReader(std::string_view bytes, const std::string& what, const char* fn);
  const std::string& prefix() const { return prefix_; }
  // The record "<prefix>/<name>", or nullptr.
  const std::string_view* find(const std::string& name) const;

 private:
  std::map<std::string, std::string_view> records_;  // full names
  std::string prefix_;
};

// A zip archive of stored records (names as given, in order), each record's data aligned to 64
// bytes in the file as PyTorch's writer does. UnsupportedError beyond the limits of plain zip
// (4 GiB, 65535 records).
std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& records,
                      const char* fn);
// The same archive as pieces to write one after another: headers (held in `owned`) and views of
// the records' data, which must outlive the pieces.
struct ZipPieces {
  std::deque<std::string> owned;
  std::vector<std::string_view> pieces;
};
ZipPieces zip_pieces(const std::vector<std::pair<std::string, std::string_view>>& records,
                     const char* fn);

// The pickle of a value tree (protocol 2), with tensors as persistent ids of storages; `storages`
// receives the key and bytes of each storage in key order ("0", "1", ...), viewing the tensors'
// memory (valid while `value` lives).
std::string pickle_value(const Value& value,
                         std::vector<std::pair<std::string, std::string_view>>& storages,
                         const char* fn);
// Unpickles data.pkl, loading storage <key> from the record data/<key> of `zip`. Returns the value
// after validating it (no cycles, no Global/Storage left, no tensor of an unsupported dtype,
// nesting within the limit). With `owner` (of the memory the archive's bytes are in), a storage
// whose record is 64-byte aligned views those bytes instead of copying them.
Value unpickle_value(std::string_view pickle, const ZipReader& zip, const std::string& what,
                     const char* fn, std::shared_ptr<void> owner = nullptr);

// Deepest nesting of containers accepted in either direction.
constexpr int kMaxDepth = 1000;

}  // namespace attn::io::detail
