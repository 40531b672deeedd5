// GPT-2's byte-level BPE (attn::data::BpeTokenizer) on arbitrary files and text. Byte 0 picks the
// mode (low bit), the rest is cut at 0xFF bytes into parts:
//   0  vocab.json | merges.txt | text: from_strings succeeds or throws attn::Error; a tokenizer
//      that loads is checked on the text as below
//   1  merges | text with a vocabulary of all 256 byte symbols: each line "A B" of the first part
//      (plain bytes, mapped through GPT-2's byte table) becomes a merge and its concatenation a
//      token, so that the merge loop itself is exercised on every text
// Properties of encode on a loaded tokenizer, against an independent strict UTF-8 decoder:
// encode throws exactly for invalid UTF-8 (or, in mode 0, a byte without a token); its ids are
// in range; decode gives the text back; the pre-tokenised words are non-empty and concatenate to
// the text; decode of an out-of-range id throws IndexError.
#include <attn/bpe.h>
#include <attn/tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace {

using attn::data::BpeTokenizer;

std::vector<std::string_view> split_ff(std::string_view s, std::size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const std::size_t cut = s.find('\xff');
    if (cut == std::string_view::npos) break;
    out.push_back(s.substr(0, cut));
    s.remove_prefix(cut + 1);
  }
  out.push_back(s);
  while (out.size() < parts) out.emplace_back();
  return out;
}

// GPT-2's bytes_to_unicode as UTF-8 strings, written from its Python.
const std::vector<std::string>& symbols() {
  static const std::vector<std::string> sym = [] {
    std::vector<std::string> s(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const uint32_t cp = keep ? b : next++;
      std::string u;
      if (cp < 0x80) {
        u += char(cp);
      } else {
        u += char(0xC0 | (cp >> 6));
        u += char(0x80 | (cp & 0x3F));
      }
      s[b] = u;
    }
    return s;
  }();
  return sym;
}

std::string to_symbols(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += symbols()[static_cast<unsigned char>(c)];
  return s;
}

void check_text(const BpeTokenizer& tok, std::string_view text, bool all_bytes) {
  const bool valid = attn_fuzz::utf8_code_points(text).has_value();
  std::vector<int64_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const attn::Error& e) {
    const std::string m = e.what();
    if (m.find("not valid UTF-8") != std::string::npos) {
      FUZZ_CHECK(!valid);
    } else {
      FUZZ_CHECK(!all_bytes && m.find("no token for byte") != std::string::npos);
    }
    return;
  }
  FUZZ_CHECK(valid);
  for (int64_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  FUZZ_CHECK(tok.decode(ids) == text);
  FUZZ_CHECK(ids.empty() == text.empty());
  std::string joined;
  for (const std::string& w : tok.pretokenize(text)) {
    FUZZ_CHECK(!w.empty());
    joined += w;
  }
  FUZZ_CHECK(joined == text);
  bool threw = false;
  try {
    tok.decode(tok.vocab_size());
  } catch (const attn::IndexError&) {
    threw = true;
  }
  FUZZ_CHECK(threw);
}

void files_mode(std::string_view input) {
  const auto parts = split_ff(input, 3);
  BpeTokenizer tok;
  try {
    tok = BpeTokenizer::from_strings(parts[0], parts[1]);
  } catch (const attn::Error&) {
    return;
  }
  FUZZ_CHECK(tok.vocab_size() >= 1);
  check_text(tok, parts[2], false);
}

void merges_mode(std::string_view input) {
  const auto parts = split_ff(input, 2);
  nlohmann::json vocab = nlohmann::json::object();
  for (const std::string& s : symbols()) vocab[s] = int64_t(vocab.size());
  vocab["<|endoftext|>"] = int64_t(vocab.size());
  std::string merges;
  std::string_view m = parts[0];
  while (!m.empty()) {
    const std::size_t nl = std::min(m.find('\n'), m.size());
    const std::string_view line = m.substr(0, nl);
    m.remove_prefix(std::min(nl + 1, m.size()));
    const std::size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 >= line.size()) continue;
    const std::string a = to_symbols(line.substr(0, sp)), b = to_symbols(line.substr(sp + 1));
    if (!vocab.contains(a) || !vocab.contains(b)) continue;  // only tokens merged before
    merges += a + " " + b + "\n";
    if (!vocab.contains(a + b)) vocab[a + b] = int64_t(vocab.size());
  }
  const BpeTokenizer tok = BpeTokenizer::from_strings(vocab.dump(), merges);
  check_text(tok, parts[1], true);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  attn_fuzz::ByteReader in(data, size);
  const int mode = in.byte() & 1;
  const std::string_view rest = in.rest();
  if (mode == 0)
    files_mode(rest);
  else
    merges_mode(rest);
  return 0;
}
