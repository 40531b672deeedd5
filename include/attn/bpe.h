// GPT-2's byte-level BPE tokenizer, read from the vocab.json and merges.txt of a Hugging Face
// GPT-2 checkpoint (or of tokenizers' ByteLevelBPETokenizer.save_model), giving the ids of
// transformers' GPT2Tokenizer and GPT2TokenizerFast.
//
//   encode: the text is cut at the special token "<|endoftext|>" (when the vocabulary has it: it
//   is one id, never split); each piece is split by GPT-2's pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   (PCRE2, UTF mode with Unicode properties; \s spelt \p{White_Space}, since PCRE2's \s also
//   takes U+180E, which transformers' tokenizers do not); the bytes of each such word become the
//   printable characters of GPT-2's bytes-to-unicode table (bytes 0x21-0x7E, 0xA1-0xAC and
//   0xAE-0xFF are themselves, the other 68 bytes U+0100...); then the adjacent pair of symbols with
//   the lowest merge rank (its line in merges.txt) is merged, every occurrence left to right, until
//   no pair has a rank; the symbols are looked up in vocab.json. Words already seen are cached.
//   decode: the tokens' characters mapped back to bytes (special tokens as their text).
//
// Files: vocab.json is a JSON object {"token": id, ...} with the ids 0..N-1 each once; merges.txt
// has an optional "#version" first line, then one merge "A B" per line (two tokens of the
// vocabulary whose concatenation is in the vocabulary too), blank lines ignored. Defects throw
// attn::Error "[BpeTokenizer] 'path' line L: ..." (vocab.json: the JSON parser's line and column,
// or the token at fault).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn::data {

class BpeTokenizer {
 public:
  static BpeTokenizer from_files(const std::string& vocab_json_path,
                                 const std::string& merges_txt_path);
  // The files' contents; the names are for error messages.
  static BpeTokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                   const std::string& vocab_name = "vocab.json",
                                   const std::string& merges_name = "merges.txt");

  int64_t vocab_size() const;
  int64_t num_merges() const;
  // The id of "<|endoftext|>", or -1 when the vocabulary lacks it.
  int64_t eot_id() const;
  // The vocabulary entry of `id` (byte-level characters, e.g. "Ġthe"); IndexError when out of
  // range.
  const std::string& id_to_token(int64_t id) const;
  std::optional<int64_t> token_to_id(std::string_view token) const;

  // Text (valid UTF-8; attn::Error naming the byte offset otherwise) -> ids. A byte whose symbol
  // is not in the vocabulary is an attn::Error naming it (GPT-2's vocabulary has all 256).
  std::vector<int64_t> encode(std::string_view text) const;
  // GPT-2's pre-tokenisation alone (the words before BPE), for tests.
  std::vector<std::string> pretokenize(std::string_view text) const;
  // Ids -> bytes. Cutting a sequence may split a multi-byte character, so the result of a part
  // may be invalid UTF-8 (transformers' decode replaces such bytes with U+FFFD; this returns them
  // as they are, so that streamed pieces concatenate to the whole). IndexError for an id out of
  // range.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(int64_t id) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;  // immutable once built, but for its mutex-guarded cache
};

}  // namespace attn::data
