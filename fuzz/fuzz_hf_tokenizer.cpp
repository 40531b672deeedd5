// Hugging Face tokenizer.json (attn::data::Tokenizer) on arbitrary files and text. The input is
// cut at the first 0xFF byte: tokenizer.json | text (0xFF is never part of UTF-8, so the JSON and
// the text are each free to be anything else).
// from_string succeeds or throws attn::Error; a tokenizer that loads is checked on the text,
// against an independent strict UTF-8 decoder: encode throws exactly for invalid UTF-8 (or, on
// valid text, with an error of the steps' limits: PCRE2's match limit, the growth cap); its ids
// are in range and each has a token; decode gives valid UTF-8 (with and without special
// tokens); decode of an out-of-range id throws IndexError.
#include <attn/tensor.h>
#include <attn/tokenizer.h>

#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace {

using attn::data::Tokenizer;

bool valid_utf8(std::string_view s) { return attn_fuzz::utf8_code_points(s).has_value(); }

void check(const Tokenizer& tok, std::string_view text) {
  const bool valid = valid_utf8(text);
  for (bool special : {true, false}) {
    Tokenizer::Encoding e;
    try {
      e = tok.encode_with_tokens(text, special);
    } catch (const attn::Error& err) {
      const std::string m = err.what();
      FUZZ_CHECK(!valid || m.find("PCRE2") != std::string::npos ||
                 m.find("over the limit") != std::string::npos);
      return;
    }
    FUZZ_CHECK(valid);
    FUZZ_CHECK(e.ids.size() == e.tokens.size());
    for (int64_t id : e.ids) {
      FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
      FUZZ_CHECK(valid_utf8(tok.id_to_token(id)));
    }
    for (const std::string& t : e.tokens) FUZZ_CHECK(valid_utf8(t));
    FUZZ_CHECK(valid_utf8(tok.decode(e.ids, false)));
    FUZZ_CHECK(valid_utf8(tok.decode(e.ids, true)));
  }
  FUZZ_CHECK(attn_fuzz::throws<attn::IndexError>([&] { tok.decode({tok.vocab_size()}); }));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view in = attn_fuzz::as_view(data, size);
  const std::size_t cut = in.find('\xff');
  const std::string_view file = in.substr(0, cut);
  const std::string_view text = cut == std::string_view::npos ? "" : in.substr(cut + 1);
  std::optional<Tokenizer> tok;
  try {
    tok = Tokenizer::from_string(file, "fuzz.json");
  } catch (const attn::Error&) {
    return 0;
  }
  check(*tok, text);
  return 0;
}
