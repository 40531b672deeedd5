// The zip container of torch.save files: a reader and writer of stored (uncompressed) records.
//
// Our own code rather than libzip or zlib: PyTorch writes and reads only stored records, so the
// container is a few fixed-size headers and a CRC-32; a small reader written for it checks every
// offset and size against the buffer (it is fuzzed, fuzz/fuzz_torch_archive.cpp), aligns records
// to 64 bytes as PyTorch's writer does, and adds no dependency to attn or its installed package.
// Deflated records (other zip tools) are refused with a clear message.
#include <array>

#include "file_internal.h"
#include "torch_internal.h"

namespace attn::io::detail {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr std::size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22;
constexpr uint64_t kAlign = 64;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t rd16(std::string_view b, std::size_t at) {
  return uint32_t(uint8_t(b[at])) | uint32_t(uint8_t(b[at + 1])) << 8;
}
uint32_t rd32(std::string_view b, std::size_t at) { return rd16(b, at) | rd16(b, at + 2) << 16; }
uint64_t rd64(std::string_view b, std::size_t at) {
  return uint64_t(rd32(b, at)) | uint64_t(rd32(b, at + 4)) << 32;
}

void put16(std::string& out, uint32_t v) {
  out.push_back(char(v & 0xff));
  out.push_back(char((v >> 8) & 0xff));
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

}  // namespace

uint32_t crc32(std::string_view bytes) {
  const auto& t = crc_table();
  uint32_t c = 0xffffffffu;
  for (char ch : bytes) c = t[(c ^ uint8_t(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

ZipReader::ZipReader(std::string_view b, const std::string& what, const char* fn) {
  auto bad = [&](const auto&... args) { raise<ArchiveError>(fn, "'", what, "': ", args...); };
  if (!b.empty() && uint8_t(b[0]) == 0x80)  // a pickle: the legacy format's first record
    raise<UnsupportedError>(fn, "'", what,
                            "': a legacy torch.save file (PyTorch before 1.6, or "
                            "_use_new_zipfile_serialization=False), which attn does not read; "
                            "save it again with a recent PyTorch");
  if (b.size() < kEndSize)
    bad("not a zip archive (", b.size(), " bytes; a torch.save file is a zip archive)");
  // The end-of-central-directory record: the last signature within the 64 KiB comment window.
  std::size_t end = std::string_view::npos;
  const std::size_t lowest = b.size() >= kEndSize + 0xffff ? b.size() - kEndSize - 0xffff : 0;
  for (std::size_t at = b.size() - kEndSize + 1; at-- > lowest;) {
    if (rd32(b, at) == kEndSig && at + kEndSize + rd16(b, at + 20) == b.size()) {
      end = at;
      break;
    }
  }
  if (end == std::string_view::npos)
    bad("not a zip archive: no end-of-central-directory record (truncated or not a torch.save "
        "file)");
  uint64_t count = rd16(b, end + 10), cd_size = rd32(b, end + 12), cd_off = rd32(b, end + 16);
  if (rd16(b, end + 4) != 0 || rd16(b, end + 6) != 0 || rd16(b, end + 8) != count)
    raise<UnsupportedError>(fn, "'", what, "': multi-disk zip archives are not supported");
  // ZIP64 (PyTorch writes its end records always): a locator just before the end record points
  // at the ZIP64 end record, whose 64-bit fields replace saturated ones.
  uint64_t dir_end = end;  // where the central directory must end
  if (end >= 20 && rd32(b, end - 20) == kZip64LocatorSig) {
    const uint64_t z = rd64(b, end - 12);
    if (z > end - 20 || end - 20 - z < 56 || rd32(b, std::size_t(z)) != kZip64EndSig)
      bad("the ZIP64 end record at offset ", z, " is missing or corrupt");
    const uint64_t count64 = rd64(b, std::size_t(z) + 32), size64 = rd64(b, std::size_t(z) + 40),
                   off64 = rd64(b, std::size_t(z) + 48);
    if ((count != 0xffff && count != count64) || (cd_size != 0xffffffffu && cd_size != size64) ||
        (cd_off != 0xffffffffu && cd_off != off64))
      bad("the ZIP64 end record disagrees with the end-of-central-directory record");
    count = count64, cd_size = size64, cd_off = off64;
    dir_end = z;
  }
  if (cd_off > dir_end || cd_size > dir_end - cd_off)
    bad("central directory [", cd_off, ", ", cd_off + cd_size, ") runs past its end record at ",
        dir_end);
  if (count > cd_size / kCentralSize)
    bad(count, " records cannot fit a central directory of ", cd_size, " bytes");

  std::size_t at = std::size_t(cd_off);
  const std::size_t cd_end = std::size_t(cd_off + cd_size);
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_end - at < kCentralSize || rd32(b, at) != kCentralSig)
      bad("central directory entry ", i, " of ", count, " is truncated or corrupt");
    const uint32_t flags = rd16(b, at + 8), method = rd16(b, at + 10), crc = rd32(b, at + 16);
    uint64_t csize = rd32(b, at + 20), usize = rd32(b, at + 24);
    const std::size_t nlen = rd16(b, at + 28), xlen = rd16(b, at + 30), clen = rd16(b, at + 32);
    uint64_t local = rd32(b, at + 42);
    if (cd_end - at - kCentralSize < nlen + xlen + clen)
      bad("central directory entry ", i, " of ", count, " runs past the directory");
    std::string name(b.substr(at + kCentralSize, nlen));
    // The ZIP64 extra field holds, in this order, the fields saturated above.
    const std::string_view extra = b.substr(at + kCentralSize + nlen, xlen);
    for (std::size_t x = 0; x + 4 <= extra.size();) {
      const uint32_t id = rd16(extra, x), len = rd16(extra, x + 2);
      if (len > extra.size() - x - 4) bad("record '", name, "' has a corrupt extra field");
      if (id == 1) {
        std::size_t y = x + 4;
        for (uint64_t* f : {&usize, &csize, &local}) {
          if (*f != 0xffffffffu) continue;
          if (y + 8 > x + 4 + len) bad("record '", name, "' has a short ZIP64 extra field");
          *f = rd64(extra, y);
          y += 8;
        }
      }
      x += 4 + len;
    }
    at += kCentralSize + nlen + xlen + clen;
    if (name.empty()) bad("record ", i, " has an empty name");
    if (flags & 1) raise<UnsupportedError>(fn, "'", what, "': record '", name, "' is encrypted");
    if (method != 0)
      raise<UnsupportedError>(fn, "'", what, "': record '", name, "' is compressed (method ",
                              method, "); torch.save files store records uncompressed");
    if (csize != usize)
      bad("record '", name, "' is stored but its sizes differ (", csize, " and ", usize, ")");
    if (local > cd_off || cd_off - local < kLocalSize || rd32(b, std::size_t(local)) != kLocalSig)
      bad("record '", name, "' has no local header at offset ", local);
    const std::size_t lnlen = rd16(b, std::size_t(local) + 26),
                      lxlen = rd16(b, std::size_t(local) + 28);
    const uint64_t data = local + kLocalSize + lnlen + lxlen;
    if (data > cd_off || csize > cd_off - data)
      bad("record '", name, "' data [", data, ", ", data + csize,
          ") runs past the central directory at ", cd_off, " (truncated archive?)");
    if (b.substr(std::size_t(local) + kLocalSize, lnlen) != name)
      bad("record '", name, "' has a different name in its local header");
    const std::string_view bytes = b.substr(std::size_t(data), csize);
    if (crc32(bytes) != crc) bad("record '", name, "' fails its CRC-32 check (corrupt data)");
    if (!records_.emplace(name, bytes).second) bad("record '", name, "' appears twice");
    if (i == 0) {
      const std::size_t slash = name.find('/');
      if (slash == std::string::npos || slash == 0)
        bad("the first record '", name, "' is not inside a directory (not a torch.save file)");
      prefix_ = name.substr(0, slash);
    }
  }
  if (count == 0) bad("the zip archive is empty (not a torch.save file)");
}

const std::string_view* ZipReader::find(const std::string& name) const {
  auto it = records_.find(prefix_ + "/" + name);
  return it == records_.end() ? nullptr : &it->second;
}

ZipPieces zip_pieces(const std::vector<std::pair<std::string, std::string_view>>& records,
                     const char* fn) {
  if (records.size() >= 0xffff)
    raise<UnsupportedError>(fn, records.size(), " records exceed the zip limit of 65534");
  ZipPieces z;
  std::string central;
  uint64_t size = 0;  // of everything so far
  for (const auto& record : records) {
    // Named references, not structured bindings: the lambda below captures them (C++20 allows
    // capturing bindings, clang 14 does not).
    const std::string& name = record.first;
    const std::string_view data = record.second;
    const uint64_t local = size;
    const uint64_t base = local + kLocalSize + name.size();
    uint64_t pad = (kAlign - base % kAlign) % kAlign;
    if (pad != 0 && pad < 4) pad += kAlign;  // an extra field needs 4 bytes of header
    if (base + pad + data.size() > 0xfffffffful || name.size() > 0xffff)
      raise<UnsupportedError>(fn, "the archive would exceed 4 GiB (ZIP64 is not supported)");
    const uint32_t crc = crc32(data);
    auto header = [&](std::string& o, bool is_central) {
      put32(o, is_central ? kCentralSig : kLocalSig);
      if (is_central) put16(o, 20);  // version made by
      put16(o, 20);                  // version needed
      put16(o, 0);                   // flags
      put16(o, 0);                   // stored
      put16(o, 0);                   // time 00:00:00
      put16(o, 0x21);                // date 1980-01-01: reproducible files
      put32(o, crc);
      put32(o, uint32_t(data.size()));
      put32(o, uint32_t(data.size()));
      put16(o, uint32_t(name.size()));
      put16(o, is_central ? 0 : uint32_t(pad));
      if (is_central) {
        put16(o, 0);  // comment
        put16(o, 0);  // disk
        put16(o, 0);  // internal attributes
        put32(o, 0);  // external attributes
        put32(o, uint32_t(local));
      }
      o += name;
    };
    std::string& head = z.owned.emplace_back();
    header(head, false);
    if (pad != 0) {  // padding in an extra field of id "FB", as PyTorch's writer
      put16(head, 0x4246);
      put16(head, uint32_t(pad - 4));
      head.append(std::size_t(pad - 4), 'Z');
    }
    z.pieces.push_back(head);
    if (!data.empty()) z.pieces.push_back(data);
    size += head.size() + data.size();
    header(central, true);
  }
  const uint64_t cd_off = size;
  if (cd_off + central.size() > 0xfffffffful)
    raise<UnsupportedError>(fn, "the archive would exceed 4 GiB (ZIP64 is not supported)");
  std::string& tail = z.owned.emplace_back(std::move(central));
  put32(tail, kEndSig);
  put16(tail, 0);
  put16(tail, 0);
  put16(tail, uint32_t(records.size()));
  put16(tail, uint32_t(records.size()));
  put32(tail, uint32_t(tail.size() - 12));  // the central directory: all of tail so far
  put32(tail, uint32_t(cd_off));
  put16(tail, 0);
  z.pieces.push_back(tail);
  return z;
}

std::string write_zip(const std::vector<std::pair<std::string, std::string_view>>& records,
                      const char* fn) {
  return concat(zip_pieces(records, fn).pieces);
}

}  // namespace attn::io::detail
