// GPT-2's bytes-to-unicode table written out for the tests (test_bpe.cpp, test_hf_cli.cpp),
// independently of src/data/bpe.cpp, from the Python of GPT-2's encoder.py.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace attn::testing {

inline std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {  // all byte symbols are below U+0800
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode, as its Python: the printable ranges first, then 256 + n.
inline std::vector<std::string> byte_symbols() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<uint32_t> cs(bs.begin(), bs.end());
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(uint32_t(256 + n++));
    }
  std::vector<std::string> sym(256);
  for (std::size_t i = 0; i < bs.size(); ++i) sym[std::size_t(bs[i])] = utf8_of(cs[i]);
  return sym;
}

inline std::string to_symbols(const std::string& bytes) {
  static const std::vector<std::string> sym = byte_symbols();
  std::string s;
  for (char c : bytes) s += sym[static_cast<unsigned char>(c)];
  return s;
}

}  // namespace attn::testing
