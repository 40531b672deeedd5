// The words a tokenizer has already split into ids (bpe.cpp, tokenizer.cpp), shared by the threads
// that encode with one tokenizer. Bounded: past `kLimit` words it starts over.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attn::data {

class WordCache {
 public:
  static constexpr std::size_t kLimit = 1 << 18;

  // Appends the ids of `word` to `out`: the cached ones, or compute(word)'s (then cached).
  template <typename Compute>
  void append(std::string_view word, std::vector<int64_t>& out, const Compute& compute) const {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = words_.find(std::string(word));
      if (it != words_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int64_t> ids = compute(word);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(mutex_);
    if (words_.size() >= kLimit) words_.clear();
    words_.emplace(std::string(word), std::move(ids));
  }

 private:
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> words_;
};

}  // namespace attn::data
