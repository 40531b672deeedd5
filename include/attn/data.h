// Text data for character-level language models: a tokenizer over the Unicode code points of a
// UTF-8 corpus, and nanoGPT-style random batches.
#pragma once

#include <attn/random.h>
#include <attn/tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::data {

// Reads a UTF-8 text file for training. Throws attn::Error naming the path when it is missing,
// unreadable, a directory, empty, or not text (a NUL byte or invalid UTF-8, reported with the
// byte offset).
std::string read_text_file(const std::string& path);

// One token per distinct code point, ids in code-point order (nanoGPT's sorted(set(text))).
class CharTokenizer {
 public:
  CharTokenizer() = default;
  // Throws attn::Error on invalid UTF-8 or empty text.
  static CharTokenizer from_text(std::string_view utf8_text);
  // The code points (each as its UTF-8 string), strictly increasing. Throws on duplicates or
  // entries that are not exactly one valid code point.
  explicit CharTokenizer(std::vector<std::string> chars);

  int64_t vocab_size() const { return int64_t(chars_.size()); }
  const std::vector<std::string>& chars() const { return chars_; }
  // Throws attn::Error naming the first character outside the vocabulary and its position.
  std::vector<int64_t> encode(std::string_view utf8_text) const;
  // Throws attn::IndexError for an id outside [0, vocab_size).
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(int64_t id) const;

  // JSON {"type": "char", "chars": [...]}; from_json validates it (attn::Error on defects:
  // invalid JSON, repeated or unknown keys, a wrong type, no chars, bad chars as above).
  std::string to_json() const;
  static CharTokenizer from_json(std::string_view json);

 private:
  std::vector<std::string> chars_;
  std::vector<std::pair<uint32_t, int64_t>> index_;  // code point -> id, sorted
};

// A token stream split into the first train_fraction for training and the rest for validation.
class TextDataset {
 public:
  // The first int(len(tokens) * train_fraction) tokens train, as nanoGPT's int(n * 0.9).
  // Throws attn::Error when train_fraction is outside [0, 1].
  TextDataset(std::vector<int64_t> tokens, double train_fraction = 0.9);
  const std::vector<int64_t>& train() const { return train_; }
  const std::vector<int64_t>& val() const { return val_; }
  // nanoGPT's get_batch: offsets ix = randint(len(split) - block_size, (batch_size,)) drawn from
  // gen (as torch.randint does), x[b] = split[ix[b] : ix[b] + block_size], y shifted by one.
  // Both int64 (batch_size, block_size). Throws attn::Error when the split has no more than
  // block_size tokens.
  std::pair<Tensor, Tensor> batch(bool train, int64_t batch_size, int64_t block_size,
                                  Generator* gen) const;

  // ---- packed documents (`attn train --pack`) ----
  // Cuts both splits into documents: one ends after every occurrence of `separator` (a non-empty
  // token sequence, kept as the end of the document it closes), the next begins with the token
  // that follows. Each split is searched on its own (a separator across the 90% cut is not seen).
  // Returns the number of documents of the two splits together. Throws attn::Error for an empty
  // separator.
  int64_t set_document_separator(const std::vector<int64_t>& separator);
  bool has_documents() const { return !separator_.empty(); }
  // batch()'s rows (the same draws from gen, so the same tokens), each cut at the document
  // boundaries inside it, in Hugging Face's position_ids convention for packed sequences:
  // positions (batch_size, block_size) int64 counts from 0 at the row's start and again at every
  // document start, and y is -100 (cross_entropy's ignore_index) at a document's last token,
  // whose next token begins another document that the model does not see. Rows start in the
  // middle of a document like batch()'s windows. nn::GPT::forward_packed takes the three.
  // Throws attn::Error before set_document_separator, and as batch() does.
  struct PackedBatch {
    Tensor x, y, positions;
  };
  PackedBatch packed_batch(bool train, int64_t batch_size, int64_t block_size,
                           Generator* gen) const;

 private:
  std::pair<Tensor, Tensor> rows(const char* fn, bool train, int64_t batch_size, int64_t block_size,
                                 Generator* gen, Tensor* offsets) const;
  std::vector<int64_t> train_, val_;
  std::vector<int64_t> separator_;
  // train_starts_[i]: token i of the training split begins a document (val_starts_ likewise).
  std::vector<uint8_t> train_starts_, val_starts_;
};

}  // namespace attn::data
