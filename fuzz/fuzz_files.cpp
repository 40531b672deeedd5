// The small file readers not covered by the other targets. Byte 0 picks the reader (low 2 bits),
// the rest is the file:
//   0  attn::data::read_text_file, the training data of `attn train --data`, on a real file holding
//      the bytes: it succeeds exactly for non-empty valid UTF-8 without NUL (checked against an
//      independent strict decoder) and returns the bytes; a tokenizer and the 90/10 dataset split
//      of nanoGPT are then built from them
//   1  attn::io::parse_lock_owner, the record in `attn train`'s DIR/train.lock: what it accepts has
//      pid >= 1 and started >= 0, describes itself, and parses again from its own JSON
//   2  attn::plot::decode_png (through cairo): what it accepts has a positive size and RGB bytes
//      to match (headers declaring more than 4 Mpixel are skipped, to keep the runs fast)
#include <attn/data.h>
#include <attn/io.h>
#include <attn/plot.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"

namespace {

// One scratch file for the whole run, rewritten for every input: created and unlinked at once
// (nothing is left behind, however the fuzzer ends), read through /proc/self/fd/N.
struct Scratch {
  int fd = -1;
  std::string path;
};

const Scratch& scratch() {
  static const Scratch s = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/attn_fuzz_files_XXXXXX";
    Scratch r;
    r.fd = ::mkstemp(tmpl.data());
    if (r.fd < 0) std::abort();
    ::unlink(tmpl.c_str());
    r.path = "/proc/self/fd/" + std::to_string(r.fd);
    return r;
  }();
  return s;
}

// The bytes as the scratch file's contents (a plain write: write_file_atomic's fsync would cost
// more than the reading under test).
void put_scratch(std::string_view bytes) {
  const int fd = scratch().fd;
  if (::ftruncate(fd, 0) != 0) std::abort();
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(done));
    if (n <= 0) std::abort();
    done += std::size_t(n);
  }
}

void text_file_mode(std::string_view bytes) {
  const std::string& path = scratch().path;
  put_scratch(bytes);
  const auto cps = attn_fuzz::utf8_code_points(bytes);
  const bool valid = !bytes.empty() && bytes.find('\0') == std::string_view::npos && cps;
  std::string text;
  try {
    text = attn::data::read_text_file(path);
  } catch (const attn::Error& e) {
    FUZZ_CHECK(!valid);
    FUZZ_CHECK(std::string(e.what()).find(path) != std::string::npos);  // names the file
    return;
  }
  FUZZ_CHECK(valid);
  FUZZ_CHECK(text == bytes);
  const auto tok = attn::data::CharTokenizer::from_text(text);
  const std::vector<int64_t> ids = tok.encode(text);
  FUZZ_CHECK(ids.size() == cps->size());
  const attn::data::TextDataset ds(ids, 0.9);
  FUZZ_CHECK(ds.train().size() + ds.val().size() == ids.size());
}

void lock_record_mode(std::string_view bytes) {
  attn::io::LockOwner o;
  try {
    o = attn::io::parse_lock_owner(bytes);
  } catch (const attn::Error&) {
    return;
  }
  FUZZ_CHECK(o.pid >= 1 && o.started >= 0);
  FUZZ_CHECK(o.describe().rfind("PID " + std::to_string(o.pid) + " on host ", 0) == 0);
  const nlohmann::json j = {
      {"pid", o.pid}, {"host", o.host}, {"started", o.started}, {"command", o.command}};
  const attn::io::LockOwner again = attn::io::parse_lock_owner(j.dump());
  FUZZ_CHECK(again.pid == o.pid && again.host == o.host && again.started == o.started &&
             again.command == o.command);
}

// The width x height an IHDR chunk right after the signature declares (0 if there is none).
uint64_t declared_pixels(std::string_view png) {
  if (png.size() < 24 || png.substr(12, 4) != "IHDR") return 0;
  auto be32 = [&](std::size_t at) {
    uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | uint8_t(png[at + i]);
    return uint64_t(v);
  };
  return be32(16) * be32(20);
}

void png_mode(std::string_view bytes) {
  // Allocating and clearing hundreds of MB per input would leave little time for anything else:
  // mutations declaring more than 4 Mpixel are skipped.
  if (declared_pixels(bytes) > (uint64_t(1) << 22)) return;
  attn::plot::Image img;
  try {
    img = attn::plot::decode_png(bytes);
  } catch (const attn::Error&) {
    return;
  }
  FUZZ_CHECK(img.width >= 1 && img.height >= 1);
  FUZZ_CHECK(img.rgb.size() == std::size_t(img.width) * std::size_t(img.height) * 3);
  (void)img.get(img.width - 1, img.height - 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes = attn_fuzz::as_view(data + 1, size - 1);
  switch (data[0] & 3) {
    case 0: text_file_mode(bytes); break;
    case 1: lock_record_mode(bytes); break;
    case 2: png_mode(bytes); break;
    default: break;
  }
  return 0;
}
