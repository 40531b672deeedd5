// Hugging Face tokenizers' tokenizer.json, read and run in C++: the ids of tokenizers'
// Tokenizer.from_file(path).encode(text).ids, and its decode.
//
// What a tokenizer.json may hold (anything else is refused, naming the field and its value):
//   model          BPE: vocab, merges ("a b" strings or [a, b] pairs), unk_token, fuse_unk,
//                  byte_fallback (<0xNN> tokens for characters the vocabulary lacks),
//                  ignore_merges (a word that is a token is that token); no dropout,
//                  continuing_subword_prefix or end_of_word_suffix.
//   normalizer     NFC, NFD, NFKC, NFKD (ICU), Replace (a string or a regex), Prepend, Sequence.
//   pre_tokenizer  ByteLevel (add_prefix_space, use_regex: GPT-2's pattern), Split (a string or
//                  a regex; removed, isolated, merged_with_previous, merged_with_next or
//                  contiguous; invert), Metaspace (replacement, prepend_scheme, split), Digits,
//                  Whitespace, WhitespaceSplit, Sequence.
//   post_processor TemplateProcessing (its single-sequence template), ByteLevel, Sequence.
//   decoder        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence.
//   added_tokens   matched leftmost-longest before anything else (those with normalized: true in
//                  the normalized text), with single_word, lstrip and rstrip.
// Regexes are tokenizers' Oniguruma patterns run by PCRE2 (Unicode properties; \s as Unicode's
// White_Space, which is what Oniguruma's \s takes).
//
// Llama 3 and Qwen2/3 (byte-level BPE behind a Split regex) and Llama 2 and Gemma (BPE with byte
// fallback over "▁"-spaced text) are of this kind.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn::data {

class Tokenizer {
 public:
  // attn::Error "[Tokenizer] 'path': ..." naming the field at fault.
  static Tokenizer from_file(const std::string& path);
  // The file's contents; the name is for error messages.
  static Tokenizer from_string(std::string_view tokenizer_json,
                               const std::string& name = "tokenizer.json");

  // One past the largest id of the model's vocabulary and the added tokens.
  int64_t vocab_size() const;
  std::optional<int64_t> token_to_id(std::string_view token) const;
  // The token of `id` (an added token's content, or the model's entry); IndexError when no token
  // has that id.
  std::string id_to_token(int64_t id) const;
  // Whether `id` is an added token marked special.
  bool is_special(int64_t id) const;

  // Text (valid UTF-8; attn::Error naming the byte offset otherwise) -> ids.
  // add_special_tokens: the post-processor's template (e.g. Llama 3's <|begin_of_text|>).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // encode(text) with the tokens of its ids: the vocabulary entries (e.g. "Ġthe"), an added
  // token as the text it matched (tokenizers' Encoding.tokens).
  struct Encoding {
    std::vector<int64_t> ids;
    std::vector<std::string> tokens;
  };
  Encoding encode_with_tokens(std::string_view text, bool add_special_tokens = true) const;
  // Ids -> text through the decoder, as tokenizers' decode: ill-formed UTF-8 becomes U+FFFD.
  // IndexError for an id no token has.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;  // immutable once built, but for its mutex-guarded cache
};

}  // namespace attn::data
