// Programmable attention: PyTorch's FlexAttention (torch.nn.attention.flex_attention) in attn,
// forward and backward on the CPU.
//
//   out = softmax(score_mod(scale * q . k, b, h, q_idx, kv_idx), masked by mask_mod) @ v
//
// score_mod and mask_mod are ordinary C++ functions of traced values (flex::Expr): called once,
// they record what they compute (arithmetic, comparisons, where, math functions, elements of
// captured tensors at computed indices) into a program that the fused kernels evaluate tile by
// tile, one operation over a whole 64 x 64 tile at a time: there is no call per score. The
// backward differentiates the same program: gradients reach q, k, v and every captured float
// tensor that requires grad, summed in a fixed order (the same bits for any number of threads).
//
//   flex::Captured bias(table);  // (H, 2 R + 1), requires grad
//   auto score_mod = [&](Expr s, Expr b, Expr h, Expr q, Expr kv) {
//     return s + bias(h, flex::clamp(kv - q, -R, R) + R);
//   };
//   auto causal = [](Expr b, Expr h, Expr q, Expr kv) { return q >= kv; };
//   BlockMask mask = create_block_mask(causal, 1, 1, L, L);
//   Tensor out = flex_attention(q, k, v, score_mod, &mask);
//
// Types follow torch's: b, h, q_idx and kv_idx are int32, the score float32; int op float gives
// float, / is true division, // (floor_divide) and % (remainder) round toward -inf, comparisons
// give bool. The block mask classifies blocks of Q_BLOCK_SIZE x KV_BLOCK_SIZE entries once (empty,
// partial, full): empty blocks are never computed, full ones skip mask_mod.
// Differences from PyTorch: integer values are 32-bit throughout (int64 captured tensors are read
// as int32); mask_mod needs no block mask here when none is given (then it is not applied at all,
// as in torch, where the mask only enters through the block mask). CPU and float32 only; the
// GPU runs no traced modifiers yet.
#pragma once

#include <attn/tensor.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace attn {

namespace flex {

struct Trace;  // the program being recorded (src/ops/flex.cpp)

// A traced value: a node of the program, or a constant not yet placed in one.
class Expr {
 public:
  enum class Type : uint8_t { Bool, Int, Float };
  Expr(double value);   // NOLINT: a constant (Float)
  Expr(float value);    // NOLINT
  Expr(int value);      // NOLINT: a constant (Int, 32-bit)
  Expr(int64_t value);  // NOLINT
  Expr(bool value);     // NOLINT: a constant (Bool)

  Type type() const { return type_; }
  bool is_constant() const { return !trace_; }
  // The node (traced values) or the constant (for messages).
  std::string str() const;

  // Internal: the value's trace and node.
  Expr(std::shared_ptr<Trace> trace, int32_t node, Type type)
      : trace_(std::move(trace)), node_(node), type_(type) {}
  const std::shared_ptr<Trace>& trace() const { return trace_; }
  int32_t node() const { return node_; }
  double constant() const { return value_; }

 private:
  std::shared_ptr<Trace> trace_;
  int32_t node_ = -1;
  Type type_ = Type::Float;
  double value_ = 0.0;
};

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);  // true division: always Float
Expr operator%(const Expr& a, const Expr& b);  // torch.remainder: the sign of b
Expr operator-(const Expr& a);
Expr operator==(const Expr& a, const Expr& b);
Expr operator!=(const Expr& a, const Expr& b);
Expr operator<(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, const Expr& b);
Expr operator&(const Expr& a, const Expr& b);  // logical on Bool, bitwise on Int
Expr operator|(const Expr& a, const Expr& b);
Expr operator^(const Expr& a, const Expr& b);
Expr operator!(const Expr& a);  // logical not (Bool)
Expr operator~(const Expr& a);  // logical not on Bool, as torch's ~ on bool tensors

Expr floor_divide(const Expr& a, const Expr& b);  // Python's //: rounds toward -inf
Expr where(const Expr& condition, const Expr& a, const Expr& b);
Expr minimum(const Expr& a, const Expr& b);
Expr maximum(const Expr& a, const Expr& b);
Expr clamp(const Expr& x, const std::optional<Expr>& lo, const std::optional<Expr>& hi);
Expr pow(const Expr& a, const Expr& b);
Expr abs(const Expr& a);
Expr exp(const Expr& a);
Expr log(const Expr& a);
Expr sqrt(const Expr& a);
Expr rsqrt(const Expr& a);
Expr tanh(const Expr& a);
Expr sigmoid(const Expr& a);
Expr sin(const Expr& a);
Expr cos(const Expr& a);
Expr floor(const Expr& a);
Expr ceil(const Expr& a);
Expr to(const Expr& a, Expr::Type type);  // .to(torch.float32 / int32 / bool)

// A tensor read by a modifier: float32, int32, int64 or bool, on the CPU. Indexing it with as
// many values as it has dimensions reads one element (an index outside its dimension is an
// attn::Error when the kernel meets it; negative indices count from the end). A float32 tensor
// that requires grad receives its gradient from flex_attention's backward.
class Captured {
 public:
  explicit Captured(Tensor tensor);
  Expr operator()(std::initializer_list<Expr> index) const { return at(std::vector<Expr>(index)); }
  template <typename... I>
  Expr operator()(const I&... index) const {
    return at(std::vector<Expr>{Expr(index)...});
  }
  Expr at(const std::vector<Expr>& index) const { return at(index, Expr(0)); }
  // The same, in the trace of `context` when no index is traced (a 0-dim tensor read as a value:
  // score * temperature).
  Expr at(const std::vector<Expr>& index, const Expr& context) const;
  const Tensor& tensor() const { return tensor_; }

 private:
  Tensor tensor_;
};

using ScoreMod = std::function<Expr(Expr score, Expr b, Expr h, Expr q_idx, Expr kv_idx)>;
using MaskMod = std::function<Expr(Expr b, Expr h, Expr q_idx, Expr kv_idx)>;

// A traced modifier: the program and the tensors it captured. Tracing happens once; the result
// can be reused across calls (the captured tensors are read at each call).
class Modifier {
 public:
  Modifier() = default;
  bool defined() const { return bool(impl_); }
  bool is_mask() const;
  // The captured tensors, in the order the program reads them.
  std::vector<Tensor> captured() const;
  // The program, one operation per line (for debugging and error messages).
  std::string str() const;
  std::shared_ptr<const Trace> impl() const { return impl_; }
  explicit Modifier(std::shared_ptr<const Trace> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Trace> impl_;
};

// Traces a function (an attn::Error naming the construct when it cannot be traced, e.g. a result
// that is not a single value of the right kind).
Modifier trace_score_mod(const ScoreMod& fn);
Modifier trace_mask_mod(const MaskMod& fn);
// The mask of both / either / none (torch's and_masks, or_masks, noop_mask).
MaskMod and_masks(std::vector<MaskMod> masks);
MaskMod or_masks(std::vector<MaskMod> masks);
MaskMod noop_mask();

// Starts and ends a trace driven from outside C++ (the Python tracer): begin returns the leaves
// (score, b, h, q_idx, kv_idx; score only for score traces), finish takes the result.
std::vector<Expr> begin_trace(bool mask);
Modifier finish_trace(const std::vector<Expr>& leaves, const Expr& result, bool mask);

}  // namespace flex

// FlexAttention's BlockMask: which blocks of the (Q_LEN, KV_LEN) attention matrix of each
// (batch, head) are empty, partial or full under a mask_mod, computed once by evaluating it
// everywhere. B and H are 1 when the mask is the same for every batch / head (torch's None).
class BlockMask {
 public:
  BlockMask() = default;
  int64_t B = 1, H = 1, Q_LEN = 0, KV_LEN = 0, Q_BLOCK_SIZE = 128, KV_BLOCK_SIZE = 128;
  const flex::Modifier& mask_mod() const { return mask_mod_; }
  // (B, H, nq, nkv) bytes: 0 empty, 1 partial, 2 full.
  const std::vector<uint8_t>& kinds() const { return kinds_; }
  // The same at the kernels' granularity: blocks of fine_q x fine_kv (64 where the block sizes
  // are multiples of 64, else the block sizes), so that the 64 x 64 tiles of a partial block are
  // skipped or unmasked on their own. (B, H, ceil(Q_LEN / fine_q), ceil(KV_LEN / fine_kv)).
  const std::vector<uint8_t>& fine_kinds() const { return fine_kinds_; }
  int64_t fine_q() const { return fine_q_; }
  int64_t fine_kv() const { return fine_kv_; }
  int64_t num_q_blocks() const { return (Q_LEN + Q_BLOCK_SIZE - 1) / Q_BLOCK_SIZE; }
  int64_t num_kv_blocks() const { return (KV_LEN + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE; }
  // torch's fields: kv_num_blocks (B, H, nq) and kv_indices (B, H, nq, nkv) of the partial blocks,
  // full_kv_num_blocks and full_kv_indices of the full ones (int32, indices in ascending order,
  // padded with 0).
  Tensor kv_num_blocks() const;
  Tensor kv_indices() const;
  Tensor full_kv_num_blocks() const;
  Tensor full_kv_indices() const;
  // Bool (B, H, nq, nkv): the non-empty blocks (torch's to_dense() is their count as int).
  Tensor to_dense() const;
  // Percentage of empty blocks (torch's sparsity()).
  double sparsity() const;
  std::string str() const;

  // Internal: built by create_block_mask.
  BlockMask(flex::Modifier mask_mod, int64_t B, int64_t H, int64_t Q_LEN, int64_t KV_LEN,
            int64_t q_block, int64_t kv_block, std::vector<uint8_t> fine_kinds, int64_t fine_q,
            int64_t fine_kv);

 private:
  flex::Modifier mask_mod_;
  std::vector<uint8_t> kinds_, fine_kinds_;
  int64_t fine_q_ = 0, fine_kv_ = 0;
};

// torch's create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE): B or H of 1 (torch's None)
// share the mask across that dimension. Throws attn::Error for non-positive sizes or block sizes,
// and for a mask_mod that reads a captured tensor out of range.
BlockMask create_block_mask(const flex::MaskMod& mask_mod, int64_t B, int64_t H, int64_t Q_LEN,
                            int64_t KV_LEN, int64_t BLOCK_SIZE = 128);
BlockMask create_block_mask(const flex::Modifier& mask_mod, int64_t B, int64_t H, int64_t Q_LEN,
                            int64_t KV_LEN, int64_t Q_BLOCK_SIZE = 128,
                            int64_t KV_BLOCK_SIZE = 128);

struct FlexOptions {
  std::optional<double> scale;  // default 1 / sqrt(D)
  bool enable_gqa = false;      // q (B, H, L_q, D) with k, v (B, H_kv, L_k, D), H % H_kv == 0
};

// torch.nn.attention.flex_attention.flex_attention: q (B, H, L_q, D), k (B, H_kv, L_k, D),
// v (B, H_kv, L_k, D_v) float32 on the CPU (B of k and v may be 1 to broadcast). Returns out
// (B, H, L_q, D_v) and, from the _with_lse form, lse (B, H, L_q) in natural log (-inf for a row
// whose keys are all masked; its output row is zeros, as torch's) and, given max_scores, each
// row's largest score after score_mod and the mask there (B, H, L_q) (-inf for a row whose keys
// are all masked; torch's AuxRequest(max_scores=True)). Differentiable in q, k, v and the captured
// float tensors that require grad (max_scores is not).
// Throws attn::Error naming the argument for: wrong ranks, dtypes or devices; head dims or
// lengths that differ; GQA head counts without enable_gqa or not a multiple; a block mask whose
// lengths differ from L_q / L_k, or whose B / H is neither 1 nor the call's; a modifier of the
// wrong kind; a captured tensor read out of range (with the tensor, the dimension and the index).
Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const flex::Modifier& score_mod, const BlockMask* block_mask = nullptr,
                      const FlexOptions& options = {});
Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const flex::ScoreMod& score_mod = {}, const BlockMask* block_mask = nullptr,
                      const FlexOptions& options = {});
std::tuple<Tensor, Tensor> flex_attention_with_lse(const Tensor& q, const Tensor& k,
                                                   const Tensor& v, const flex::Modifier& score_mod,
                                                   const BlockMask* block_mask = nullptr,
                                                   const FlexOptions& options = {},
                                                   Tensor* max_scores = nullptr);

}  // namespace attn
