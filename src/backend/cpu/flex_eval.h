// Evaluation of flex_attention's traced modifiers (backend/flex_program.h) over a tile of scores,
// forward and backward, for the fused attention kernels (sdpa_fused.cpp, sdpa_fused_backward.cpp).
//
// A program is evaluated one operation at a time over the whole tile: each operation is one loop
// over the tile's elements in a register of its own (no call per score; the loops vectorise), so
// a modifier costs a few passes over 4096 floats per 64 x 64 tile. The backward is reverse-mode
// differentiation of the same program on the same tile: the adjoint of each Float node, the
// gradient of the score, and the captured tensors' gradients added element by element in a fixed
// order into double sums (the caller keeps one set of sums per work unit and adds them in unit
// order: the same bits for any number of threads).
//
// Coordinates: b is one value per tile; h, q_idx and kv_idx come per row or per column of the
// tile (Grid). Padding elements of a tile must carry valid coordinates (callers repeat a valid
// row or key): every element is evaluated.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../flex_program.h"

namespace attn::kernels::flex {

// Element (o, i) of a tile, o < n_outer, i < ld, lies at o * ld + i. Each coordinate array has
// n_outer entries (when its flag says it runs along the outer dimension) or ld entries.
struct Grid {
  int n_outer = 0, ld = 0;
  int32_t b = 0;
  const int32_t* h = nullptr;
  const int32_t* q = nullptr;
  const int32_t* kv = nullptr;
  bool h_outer = false, q_outer = false, kv_outer = false;
  int n() const { return n_outer * ld; }

  // Filled by the evaluator from the coordinates (flex_eval.cpp: described()): a coordinate with
  // one value over the whole tile is evaluated as a scalar; q_idx and kv_idx that count up by one
  // along different dimensions make q_idx - kv_idx constant along the tile's diagonals, so values
  // of that difference alone (ALiBi's distance, a bias table's column, a sliding window's test)
  // are computed once per diagonal.
  bool h_uniform = false, q_uniform = false, kv_uniform = false;
  bool q_step1 = false, kv_step1 = false;
};

// The first out-of-range index a program met (reported by the caller as an attn::Error).
struct IndexError {
  bool set = false;
  const Program* program = nullptr;  // the program that read it
  int32_t tensor = 0, dim = 0;
  int64_t index = 0, size = 0;
};

// Shared by every thread of one kernel call: the first index error wins.
class ErrorSlot {
 public:
  void report(const IndexError& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.set) error_ = e;
  }
  const IndexError& error() const { return error_; }

 private:
  std::mutex mutex_;
  IndexError error_;
};

// The gradient sums of a program's captured tensors (one vector per tensor; empty when it needs
// none), in double.
struct TensorGradSums {
  std::vector<std::vector<double>> sums;
  TensorGradSums() = default;
  explicit TensorGradSums(const Program& prog) {
    for (const Captured& t : prog.tensors)
      sums.emplace_back(t.requires_grad ? size_t(t.numel()) : size_t(0), 0.0);
  }
  bool empty() const {
    for (const auto& s : sums)
      if (!s.empty()) return false;
    return true;
  }
};

class Evaluator {
 public:
  // Registers for tiles of up to `capacity` elements.
  Evaluator(const Program& program, int capacity);

  // score_mod: s[e] = program(s[e], coordinates of e), for the grid's n() elements.
  void apply_score(const Grid& g, float* s);
  // mask_mod: s[e] = -inf wherever the program is false.
  void apply_mask(const Grid& g, float* s);
  // The program's output over the grid, as 0 / 1 (mask programs; for block classification).
  const int32_t* eval_mask(const Grid& g);

  // The backward of score_mod on a tile: `s` holds the scores the forward gave the program (the
  // scaled q . k), `g` the gradient of the loss with respect to its output; afterwards `g` holds
  // the gradient with respect to s, and the captured tensors' gradients are added to `sums`.
  // Where g is 0 nothing flows (no 0 * inf).
  void backward(const Grid& g, const float* s, float* grad, TensorGradSums* sums);

  const IndexError& error() const { return error_; }

 private:
  // The shapes of the nodes' values over tiles like g (compact false: every value per element).
  void shapes(const Grid& g, bool compact);
  // The program over g at those shapes; a full output computed by the last node is written to
  // `out` when given (out_aliased_).
  void run(const Grid& g, const float* s, float* out = nullptr);
  const int32_t* mask_values(const Grid& g);
  int strip_rows(const Grid& g) const;
  void backward_strip(const Grid& g, const float* s, float* grad, TensorGradSums* sums);
  float* f(int32_t node) {
    if (prog_.nodes[size_t(node)].op == Op::Score) return const_cast<float*>(score_);
    return fregs_.get() + size_t(slot_[size_t(node)]) * cap_;
  }
  int32_t* i(int32_t node) { return iregs_.get() + size_t(slot_[size_t(node)]) * cap_; }
  float* adj(int32_t node) { return adjs_.get() + size_t(adj_slot_[size_t(node)]) * cap_; }
  void load(const Node& node, int n, const int32_t* const* index, uint32_t scalars, size_t out_at);

  const Program& prog_;
  int cap_;
  std::vector<int32_t> slot_, adj_slot_;  // per node: its register (float or int) and adjoint
  std::vector<char> needs_grad_;          // per node: some gradient flows through it
  int32_t n_adj_ = 0;
  const float* score_ = nullptr;  // the scores of the evaluation under way (the Score node)
  std::unique_ptr<float[]> fregs_, adjs_;  // adjs_: allocated by the first backward
  std::unique_ptr<int32_t[]> iregs_;
  std::unique_ptr<int32_t[]> offsets_;   // a Load's element offsets
  std::vector<uint8_t> shape_;           // per node: the shape it was computed at (flex_eval.cpp)
  std::vector<char> diagonal_seed_;      // per node: q_idx - kv_idx (or a comparison) per diagonal
  std::unique_ptr<int32_t[]> mask_out_;  // a mask's output broadcast to the tile
  std::unique_ptr<int32_t[]> idx_tmp_;   // a Load's indices broadcast to its shape
  bool out_aliased_ = false;             // run() wrote the output where it was asked to
  IndexError error_;
};

// Reports the evaluators' index errors (those that exist) to `slot` (null: nowhere).
inline void report_errors(ErrorSlot* slot, const std::optional<Evaluator>& a,
                          const std::optional<Evaluator>& b) {
  for (const std::optional<Evaluator>* e : {&a, &b})
    if (slot && *e && (*e)->error().set) slot->report((*e)->error());
}

// The block mask of a mask program (FlexAttention's create_block_mask): kinds (B, H, nq, nkv)
// (TileKind: 0 empty, 1 partial, 2 full) of the blocks of q_block x kv_block entries of the
// (Q_LEN, KV_LEN) matrix of each (b, h), from the program evaluated at every entry. Parallel over
// the blocks; an index out of range is reported to `errors`.
void classify_blocks(const Program& mask, int64_t B, int64_t H, int64_t Q_LEN, int64_t KV_LEN,
                     int64_t q_block, int64_t kv_block, uint8_t* kinds, ErrorSlot& errors);

// What a block of the attention matrix holds under a block mask (FlexAttention's BlockMask):
// nothing visible (skipped), some entries visible (mask_mod evaluated), or all (mask skipped).
enum class TileKind : uint8_t { Empty = 0, Partial = 1, Full = 2 };

// A flex_attention call as the fused kernels see it (SdpaParams::flex).
struct FlexCall {
  const Program* score = nullptr;  // score_mod; null: the scores unchanged
  const Program* mask = nullptr;   // mask_mod; null: nothing masked
  // The block mask's classification (blocks_B, blocks_H, nq, nkv) of blocks of q_block x
  // kv_block entries, blocks_B and blocks_H being 1 (shared) or B and H; null: every tile is
  // partial (mask_mod evaluated everywhere).
  const uint8_t* blocks = nullptr;
  int64_t blocks_B = 1, blocks_H = 1, nq = 0, nkv = 0, q_block = 128, kv_block = 128;
  ErrorSlot* errors = nullptr;  // where the kernels report an index out of range
  // The backward adds the captured tensors' gradients here (one per score tensor; null where
  // none is wanted), contiguous in the tensor's sizes.
  std::vector<float*> tensor_grads;

  // The kind of the tile of rows [i_lo, i_hi] of heads [h_lo, h_hi] and keys [j_lo, j_hi] of
  // batch b: Empty or Full only when every block it touches is.
  TileKind classify(int64_t b, int64_t h_lo, int64_t h_hi, int64_t i_lo, int64_t i_hi, int64_t j_lo,
                    int64_t j_hi) const {
    if (!blocks) return mask ? TileKind::Partial : TileKind::Full;
    const int64_t bb = blocks_B == 1 ? 0 : b;
    if (blocks_H == 1) h_lo = h_hi = 0;
    bool all_empty = true, all_full = true;
    for (int64_t h = h_lo; h <= h_hi; ++h)
      for (int64_t qb = i_lo / q_block; qb <= i_hi / q_block; ++qb) {
        const uint8_t* row = blocks + ((bb * blocks_H + h) * nq + qb) * nkv;
        for (int64_t kb = j_lo / kv_block; kb <= j_hi / kv_block; ++kb) {
          const auto kind = TileKind(row[kb]);
          all_empty &= kind == TileKind::Empty;
          all_full &= kind == TileKind::Full;
        }
      }
    return all_empty ? TileKind::Empty : all_full ? TileKind::Full : TileKind::Partial;
  }
};

}  // namespace attn::kernels::flex
