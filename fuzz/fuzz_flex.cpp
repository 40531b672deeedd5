// flex_attention (include/attn/flex.h) on score_mod and mask_mod programs decoded from the input:
// tracing, create_block_mask and the fused forward and backward either succeed or throw
// attn::Error (a float index, a mask of the wrong type, a captured tensor read out of range, ...),
// and never read or write outside a tensor (ASan, UBSan).
//
// Input grammar: bytes 0-4 shape the call (L_q, L_k 1..40, B 1..2, H 1..3, D 1..9, block size
// 1..70); bytes 5-8 shape two captured tensors (a float32 one of rank 1..3 and an int64 one of
// rank 1..2, sizes 1..6; the int64 values come from the input and may be any index); then two
// programs, the score_mod's and the mask_mod's, each a length byte (at most 24 operations) and
// that many operations of a stack machine over the traced values: one byte picks the operation,
// the next bytes its operands (stack positions, modulo the stack's size) or constants.
#include <functional>
#include <vector>

#include "fuzz_util.h"

namespace {

using attn::Tensor;
using attn::flex::Expr;

Expr operation(attn_fuzz::ByteReader& in, std::vector<Expr>& st, const attn::flex::Captured& fc,
               const attn::flex::Captured& ic, int64_t f_rank, int64_t i_rank) {
  auto pick = [&]() -> const Expr& { return st[in.byte() % st.size()]; };
  namespace fx = attn::flex;
  switch (in.byte() % 32) {
    case 0: return pick() + pick();
    case 1: return pick() - pick();
    case 2: return pick() * pick();
    case 3: return pick() / pick();
    case 4: return pick() % pick();
    case 5: return fx::floor_divide(pick(), pick());
    case 6: return pick() == pick();
    case 7: return pick() < pick();
    case 8: return pick() >= pick();
    case 9: return pick() & pick();
    case 10: return pick() | pick();
    case 11: return ~pick();
    case 12: return -pick();
    case 13: return fx::where(pick(), pick(), pick());
    case 14: return fx::minimum(pick(), pick());
    case 15: return fx::maximum(pick(), pick());
    case 16: return fx::abs(pick());
    case 17: return fx::exp(pick());
    case 18: return fx::log(pick());
    case 19: return fx::tanh(pick());
    case 20: return fx::sqrt(pick());
    case 21: return fx::sigmoid(pick());
    case 22: return fx::pow(pick(), pick());
    case 23: return fx::floor(pick());
    case 24: return Expr(int64_t(int8_t(in.byte())));
    case 25: return Expr(double(int8_t(in.byte())) / 8.0);
    case 26: return Expr(bool(in.byte() & 1));
    case 27: return fx::to(pick(), Expr::Type(in.byte() % 3));
    case 28:
    case 29: {
      std::vector<Expr> idx;
      for (int64_t d = 0; d < f_rank; ++d) idx.push_back(pick());
      return fc.at(idx, st[0]);
    }
    case 30: {
      std::vector<Expr> idx;
      for (int64_t d = 0; d < i_rank; ++d) idx.push_back(pick());
      return ic.at(idx, st[0]);
    }
    default: return fx::clamp(pick(), pick(), pick());
  }
}

// The stack machine's program from the input, on the given leaves.
Expr program(attn_fuzz::ByteReader& in, std::vector<Expr> st, const attn::flex::Captured& fc,
             const attn::flex::Captured& ic, int64_t f_rank, int64_t i_rank) {
  const int n = in.byte() % 25;
  for (int k = 0; k < n; ++k) st.push_back(operation(in, st, fc, ic, f_rank, i_rank));
  return st.back();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attn_fuzz::ByteReader in(data, size);
  const int64_t L_q = 1 + in.byte() % 40, L_k = 1 + in.byte() % 40;
  const uint8_t bh = in.byte();
  const int64_t B = 1 + bh % 2, H = 1 + (bh / 2) % 3;
  const int64_t D = 1 + in.byte() % 9, block = 1 + in.byte() % 70;
  attn::Shape f_shape, i_shape;
  for (int d = 0, r = 1 + in.byte() % 3; d < r; ++d) f_shape.push_back(1 + in.byte() % 6);
  for (int d = 0, r = 1 + in.byte() % 2; d < r; ++d) i_shape.push_back(1 + in.byte() % 6);
  Tensor ft = attn::empty(f_shape);
  for (int64_t i = 0; i < ft.numel(); ++i) ft.data_ptr<float>()[i] = float(int8_t(in.byte())) / 16;
  ft.requires_grad_(true);
  Tensor it = attn::empty(i_shape, attn::Dtype::Int64);
  for (int64_t i = 0; i < it.numel(); ++i) it.data_ptr<int64_t>()[i] = int8_t(in.byte());
  const attn::flex::Captured fc(ft), ic(it);
  const int64_t f_rank = int64_t(f_shape.size()), i_rank = int64_t(i_shape.size());

  try {
    // Both programs are decoded here, once, and replayed by the traced lambdas.
    const std::vector<uint8_t> rest(data + (size - in.left()), data + size);
    attn_fuzz::ByteReader score_in(rest.data(), rest.size());
    const attn::flex::Modifier score_mod =
        attn::flex::trace_score_mod([&](Expr s, Expr b, Expr h, Expr q, Expr kv) {
          return program(score_in, {s, b, h, q, kv}, fc, ic, f_rank, i_rank);
        });
    const size_t used = rest.size() - score_in.left();
    attn_fuzz::ByteReader mask_in(rest.data() + used, rest.size() - used);
    std::optional<attn::BlockMask> mask;
    if (!mask_in.empty())
      mask =
          attn::create_block_mask(attn::flex::trace_mask_mod([&](Expr b, Expr h, Expr q, Expr kv) {
                                    return program(mask_in, {b, h, q, kv}, fc, ic, f_rank, i_rank);
                                  }),
                                  B, mask_in.byte() & 1 ? H : 1, L_q, L_k, block, block);
    attn::manual_seed(0);
    Tensor q = attn::randn({B, H, L_q, D}).requires_grad_(true);
    Tensor k = attn::randn({B, H, L_k, D}), v = attn::randn({B, H, L_k, D});
    Tensor out = attn::flex_attention(q, k, v, score_mod, mask ? &*mask : nullptr);
    FUZZ_CHECK(out.shape() == attn::Shape({B, H, L_q, D}));
    out.sum().backward();
    FUZZ_CHECK(q.grad().defined());
  } catch (const attn::Error&) {
  }
  return 0;
}
