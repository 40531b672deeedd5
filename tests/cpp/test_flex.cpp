// flex_attention (include/attn/flex.h): traced score_mod / mask_mod and block masks, forward and
// backward, against the same attention written densely with attn's tensor ops and autograd
// (q k^T, the modifier as tensor arithmetic, masked_fill, softmax, @ v): a separate code path.
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/flex.h>
#include <attn/ops.h>
#include <attn/random.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using attn::BlockMask;
using attn::Tensor;
using attn::flex::Captured;
using attn::flex::Expr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Coordinates of the dense (L_q, L_k) matrix as int64 tensors broadcastable against (B, H, L_q,
// L_k): q index (1, 1, L_q, 1), kv index (1, 1, 1, L_k).
struct Dense {
  Tensor qi, ki;
  Dense(int64_t Lq, int64_t Lk)
      : qi(attn::arange(Lq).reshape({1, 1, Lq, 1})), ki(attn::arange(Lk).reshape({1, 1, 1, Lk})) {}
};

// The dense reference: softmax(mod(scale q k^T) masked) @ v, k and v repeated for GQA.
// `mod` and `keep` take and return (B, H, L_q, L_k) tensors (keep: bool, or undefined = all).
// lse and row_max, when given, receive each row's log-sum-exp and largest masked score.
Tensor reference(const Tensor& q, Tensor k, Tensor v, double scale,
                 const std::function<Tensor(const Tensor&)>& mod, const Tensor& keep,
                 Tensor* lse = nullptr, Tensor* row_max = nullptr) {
  const int64_t G = q.size(1) / k.size(1);
  if (G > 1) {
    auto rep = [&](const Tensor& t) {
      return t.unsqueeze(2)
          .expand({t.size(0), t.size(1), G, t.size(2), t.size(3)})
          .reshape({t.size(0), t.size(1) * G, t.size(2), t.size(3)});
    };
    k = rep(k), v = rep(v);
  }
  Tensor s = attn::matmul(q, k.transpose(-2, -1)) * scale;
  if (mod) s = mod(s);
  if (keep.defined()) s = s.masked_fill(keep.logical_not(), -kInf);
  if (lse) {
    const Tensor m = s.amax({-1}, true);
    *lse = ((s - m).exp().sum(-1, true).log() + m).squeeze(-1);
  }
  if (row_max) *row_max = s.detach().amax({-1});
  return attn::matmul(s.softmax(-1), v);
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const Tensor d = (a - b).abs().max();
  EXPECT_LT(d.item<float>(), tol) << what;
}

// a and b equal to tol where finite, and infinite at the same places (fully masked rows).
void expect_close_or_inf(const Tensor& a, const Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const Tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
  const float *x = ac.data_ptr<float>(), *y = bc.data_ptr<float>();
  for (int64_t i = 0; i < ac.numel(); ++i) {
    if (std::isinf(y[i]))
      ASSERT_EQ(x[i], y[i]) << what << " at " << i;
    else
      ASSERT_NEAR(x[i], y[i], tol) << what << " at " << i;
  }
}

struct Inputs {
  Tensor q, k, v;
  Inputs(int64_t B, int64_t H, int64_t H_kv, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv,
         uint64_t seed, double amp = 1.0) {
    attn::manual_seed(seed);
    q = (attn::randn({B, H, Lq, D}) * amp).detach().requires_grad_(true);
    k = attn::randn({B, H_kv, Lk, D}).requires_grad_(true);
    v = attn::randn({B, H_kv, Lk, Dv}).requires_grad_(true);
  }
};

// Runs flex and the reference, forward and backward (with the same upstream gradient), and
// compares out, lse and the gradients of q, k, v and of `extra` (captured tensors).
void check(Inputs& in, const attn::flex::ScoreMod& sm,
           const std::function<Tensor(const Tensor&)>& ref_mod, const BlockMask* bm,
           const Tensor& ref_keep, std::vector<Tensor> extra = {}, bool gqa = false,
           double tol = 2e-5) {
  attn::FlexOptions o;
  o.enable_gqa = gqa;
  const double scale = 1.0 / std::sqrt(double(in.q.size(3)));
  Tensor max_scores;
  auto [out, lse] = attn::flex_attention_with_lse(in.q, in.k, in.v, attn::flex::trace_score_mod(sm),
                                                  bm, o, &max_scores);
  Tensor ref_lse, ref_max;
  Tensor ref = reference(in.q, in.k, in.v, scale, ref_mod, ref_keep, &ref_lse, &ref_max);
  expect_close(out, ref, tol, "out");
  expect_close(lse, ref_lse, tol, "lse");
  expect_close_or_inf(max_scores, ref_max, tol, "max_scores");
  EXPECT_FALSE(max_scores.requires_grad());

  attn::manual_seed(99);
  const Tensor g = attn::randn(out.shape());
  std::vector<Tensor> leaves{in.q, in.k, in.v};
  for (const Tensor& t : extra) leaves.push_back(t);
  auto grads = [&](const Tensor& y) {
    for (Tensor& t : leaves) t.set_grad(Tensor());
    (y * g).sum().backward();
    std::vector<Tensor> r;
    for (const Tensor& t : leaves) r.push_back(t.grad().clone());
    return r;
  };
  const std::vector<Tensor> a = grads(out), b = grads(ref);
  const char* names[] = {"dq", "dk", "dv", "dextra0", "dextra1"};
  for (size_t i = 0; i < a.size(); ++i)
    expect_close(a[i], b[i], 5 * tol, names[std::min<size_t>(i, 4)]);
}

TEST(Flex, NoModifiersIsAttention) {
  Inputs in(2, 3, 3, 70, 90, 16, 24, 1);
  check(in, {}, {}, nullptr, Tensor());
}

// Few rows against many keys: the forward cuts the keys into ranges (split-K) and merges the
// ranges' lse and row maxima.
TEST(Flex, DecodingRowsOverSplitKeysGiveTheirLseAndMaxScores) {
  Inputs in(1, 2, 1, 1, 4100, 16, 16, 12);
  auto window = [](Expr, Expr, Expr q, Expr kv) { return kv >= q + 100; };
  const BlockMask bm = attn::create_block_mask(window, 1, 1, 1, 4100, 64);
  auto softcap = [](Expr s, Expr, Expr, Expr, Expr) { return 4.0 * attn::flex::tanh(s / 4.0); };
  const Dense d(1, 4100);
  check(
      in, softcap, [](const Tensor& s) { return (s / 4.0).tanh() * 4.0; }, &bm, d.ki >= d.qi + 100,
      {}, /*gqa=*/true);
}

TEST(Flex, CausalBlockMaskPartialTiles) {
  Inputs in(1, 2, 2, 200, 200, 32, 32, 2);
  auto causal = [](Expr, Expr, Expr q, Expr kv) { return q >= kv; };
  const BlockMask bm = attn::create_block_mask(causal, 1, 1, 200, 200, 64);
  EXPECT_EQ(bm.num_q_blocks(), 4);
  // Blocks above the diagonal are empty, on it partial, below full.
  EXPECT_EQ(bm.kinds()[0 * 4 + 1], 0);
  EXPECT_EQ(bm.kinds()[1 * 4 + 1], 1);
  EXPECT_EQ(bm.kinds()[2 * 4 + 0], 2);
  const Dense d(200, 200);
  check(in, {}, {}, &bm, d.qi >= d.ki);
}

TEST(Flex, SoftcapScoreMod) {
  Inputs in(1, 2, 2, 65, 130, 8, 8, 3, 6.0);
  auto softcap = [](Expr s, Expr, Expr, Expr, Expr) { return 5.0 * attn::flex::tanh(s / 5.0); };
  check(
      in, softcap, [](const Tensor& s) { return (s / 5.0).tanh() * 5.0; }, nullptr, Tensor());
}

TEST(Flex, LearnableRelativeBiasTableGetsItsGradient) {
  const int64_t H = 3, R = 20, L = 100;
  Inputs in(2, H, H, L, L, 16, 16, 4);
  attn::manual_seed(5);
  Tensor table = attn::randn({H, 2 * R + 1}).requires_grad_(true);
  Captured bias(table);
  auto sm = [&](Expr s, Expr, Expr h, Expr q, Expr kv) {
    return s + bias(h, attn::flex::clamp(kv - q, Expr(-R), Expr(R)) + R);
  };
  const Dense d(L, L);
  const Tensor col = (d.ki - d.qi).clamp(-R, R) + R;  // (1, 1, L, L) int64
  auto ref = [&](const Tensor& s) {
    Tensor b = attn::index_select(table, 1, col.reshape({L * L})).reshape({1, H, L, L});
    return s + b;
  };
  check(in, sm, ref, nullptr, Tensor(), {table});
}

TEST(Flex, AlibiWithLearnableSlopesAndCausalMask) {
  const int64_t H = 4, L = 150;
  Inputs in(1, H, H, L, L, 16, 16, 6);
  Tensor slopes = (attn::arange(1, H + 1).to(attn::Dtype::Float32) * -0.5).exp().detach();
  slopes.requires_grad_(true);
  Captured sl(slopes);
  auto sm = [&](Expr s, Expr, Expr h, Expr q, Expr kv) {
    return s - sl(h) * attn::flex::abs(q - kv);
  };
  auto causal = [](Expr, Expr, Expr q, Expr kv) { return q >= kv; };
  const BlockMask bm = attn::create_block_mask(causal, 1, 1, L, L, 32);
  const Dense d(L, L);
  auto ref = [&](const Tensor& s) {
    return s - slopes.reshape({1, H, 1, 1}) * (d.qi - d.ki).abs().to(attn::Dtype::Float32);
  };
  check(in, sm, ref, &bm, d.qi >= d.ki, {slopes});
}

// Values of q_idx - kv_idx alone are computed once per diagonal of a tile when q_idx and kv_idx
// count up along its two dimensions (the forward's tiles have keys outer, the backward's rows
// outer), and element by element otherwise (heads packed into one tile for GQA decoding, a
// single query row, padding rows). Every comparison, both orders of the difference, a constant
// on either side and a table indexed by it, in each of those layouts, against the dense reference.
TEST(Flex, ValuesOfTheDiagonalMatchTheReferenceInEveryTileLayout) {
  const int64_t R = 12;
  attn::manual_seed(13);
  Tensor table = attn::randn({2 * R + 1}).requires_grad_(true);
  Captured tab(table);
  namespace fx = attn::flex;
  auto sm = [&](Expr s, Expr, Expr, Expr q, Expr kv) {
    const Expr far = fx::where((q - kv) > 3, Expr(0.5), Expr(-0.25)) * (kv - q);
    const Expr near = fx::where((kv - q) >= -1, Expr(0.125), Expr(0.0)) +
                      fx::where(q == kv, Expr(0.25), Expr(0.0)) +
                      fx::where(q != kv + 2, Expr(0.0), Expr(-0.5));
    return s + far / 8.0 + near + tab(fx::clamp(R - (q - kv), Expr(0), Expr(2 * R)));
  };
  auto mask = [](Expr, Expr, Expr q, Expr kv) {
    return ((kv <= q) & (kv > q - 40)) | (kv - q == 5) | ((q < kv) & (kv < q + 2));
  };
  struct Case {
    int64_t B, H, H_kv, Lq, Lk;
    bool gqa;
  };
  for (const Case& c : {Case{1, 2, 2, 150, 150, false}, Case{2, 4, 1, 3, 200, true},
                        Case{1, 2, 2, 1, 130, false}, Case{1, 3, 3, 70, 90, false}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " H_kv " +
                 std::to_string(c.H_kv) + " L_q " + std::to_string(c.Lq) + " L_k " +
                 std::to_string(c.Lk));
    Inputs in(c.B, c.H, c.H_kv, c.Lq, c.Lk, 16, 16, 14);
    const BlockMask bm = attn::create_block_mask(mask, 1, 1, c.Lq, c.Lk, 32);
    const Dense d(c.Lq, c.Lk);
    const Tensor diff = d.qi - d.ki;  // (1, 1, L_q, L_k) int64
    const Tensor keep = ((d.ki <= d.qi) & (d.ki > d.qi - 40)) | (d.ki - d.qi == 5) |
                        ((d.qi < d.ki) & (d.ki < d.qi + 2));
    auto ref = [&](const Tensor& s) {
      auto f32 = [](const Tensor& t) { return t.to(attn::Dtype::Float32); };
      const Tensor far = (f32(diff > 3) * 0.75 - 0.25) * f32(-diff);
      const Tensor near = f32(-diff >= -1) * 0.125 + f32(diff == 0) * 0.25 + f32(diff == 2) * -0.5;
      const Tensor col = (-diff + R).clamp(0, 2 * R).reshape({c.Lq * c.Lk});
      const Tensor bias = attn::index_select(table, 0, col).reshape({1, 1, c.Lq, c.Lk});
      return s + far / 8.0 + near + bias;
    };
    check(in, sm, ref, &bm, keep.expand({c.B, c.H, c.Lq, c.Lk}), {table}, c.gqa);
  }
}

TEST(Flex, DocumentMaskFromACapturedIdTensorSkipsEmptyBlocks) {
  const int64_t L = 256;
  Inputs in(2, 2, 1, L, L, 16, 16, 7);  // GQA: 2 query heads per key/value head
  std::vector<float> ids(L);
  for (int64_t i = 0; i < L; ++i)
    ids[size_t(i)] = i < 50 ? 0.0f : i < 130 ? 1.0f : i < 200 ? 2.0f : 3.0f;
  const Tensor doc = attn::from_vector(ids, {L}).to(attn::Dtype::Int64);
  Captured dc(doc);
  auto mask = [&](Expr, Expr, Expr q, Expr kv) { return (dc(q) == dc(kv)) & (q >= kv); };
  const BlockMask bm = attn::create_block_mask(mask, 1, 1, L, L, 32);
  EXPECT_GT(bm.sparsity(), 50.0);
  const Tensor dq = doc.reshape({1, 1, L, 1}), dk = doc.reshape({1, 1, 1, L});
  const Dense d(L, L);
  check(in, {}, {}, &bm, (dq == dk) & (d.qi >= d.ki), {}, true);
}

TEST(Flex, PerBatchAndHeadMaskAndWhereInScoreMod) {
  const int64_t B = 2, H = 2, L = 80;
  Inputs in(B, H, H, L, L, 8, 8, 8);
  // Batch 1 sees a prefix of 20 keys plus causal; head 1 adds a bonus where kv is even.
  auto mask = [](Expr b, Expr, Expr q, Expr kv) { return (kv < 20) | (q >= kv) | (b == 0); };
  auto sm = [](Expr s, Expr, Expr h, Expr, Expr kv) {
    return attn::flex::where((h == 1) & (kv % 2 == 0), s + 0.5, s);
  };
  const BlockMask bm = attn::create_block_mask(mask, B, 1, L, L, 16);
  const Dense d(L, L);
  const Tensor bidx = attn::arange(B).reshape({B, 1, 1, 1});
  const Tensor hidx = attn::arange(H).reshape({1, H, 1, 1});
  const Tensor keep = (d.ki < 20) | (d.qi >= d.ki) | (bidx == 0);
  std::vector<float> even(L);
  for (int64_t j = 0; j < L; ++j) even[size_t(j)] = j % 2 == 0 ? 1.0f : 0.0f;
  const Tensor is_even = attn::from_vector(even, {1, 1, 1, L}).to(attn::Dtype::Bool);
  auto ref = [&](const Tensor& s) {
    const Tensor c = ((hidx == 1) & is_even).expand(s.shape());
    return attn::where(c, s + 0.5, s);
  };
  check(in, sm, ref, &bm, keep.expand({B, H, L, L}));
}

TEST(Flex, CapturedGradientsAreTheSameBitsForAnyThreadCount) {
  const int64_t H = 2, L = 300;
  Inputs in(2, H, H, L, L, 16, 16, 9);
  Tensor bias = attn::randn({H, L}).requires_grad_(true);
  Captured bc(bias);
  auto sm = [&](Expr s, Expr, Expr h, Expr, Expr kv) { return s + bc(h, kv); };
  auto run = [&](int threads) {
    attn::set_num_threads(threads);
    bias.set_grad(Tensor()), in.q.set_grad(Tensor());
    attn::flex_attention(in.q, in.k, in.v, sm).sum().backward();
    return std::vector<Tensor>{bias.grad().clone(), in.q.grad().clone()};
  };
  const int before = attn::get_num_threads();
  const std::vector<Tensor> one = run(1), two = run(2);
  attn::set_num_threads(before);
  EXPECT_TRUE(attn::equal(one[0], two[0]));
  EXPECT_TRUE(attn::equal(one[1], two[1]));
}

TEST(Flex, FullyMaskedRowsGiveZerosAndMinusInfLse) {
  Inputs in(1, 1, 1, 40, 40, 8, 8, 10);
  auto mask = [](Expr, Expr, Expr q, Expr kv) { return (q >= 10) & (q >= kv); };
  const BlockMask bm = attn::create_block_mask(mask, 1, 1, 40, 40, 16);
  Tensor max_scores;
  auto [out, lse] =
      attn::flex_attention_with_lse(in.q, in.k, in.v, attn::flex::Modifier(), &bm, {}, &max_scores);
  EXPECT_TRUE(std::isinf(lse.index({0, 0, 3}).item<float>()));
  EXPECT_EQ(max_scores.index({0, 0, 3}).item<float>(), -kInf);
  EXPECT_TRUE(std::isfinite(max_scores.index({0, 0, 10}).item<float>()));
  EXPECT_EQ(out.narrow(2, 0, 10).abs().sum().item<float>(), 0.0f);
  out.sum().backward();
  EXPECT_TRUE(std::isfinite(in.q.grad().sum().item<float>()));
}

TEST(Flex, BadInputIsRefusedNamingIt) {
  Inputs in(1, 2, 2, 30, 30, 8, 8, 11);
  Tensor small = attn::randn({2, 10});
  Captured sc(small);
  auto oob = [&](Expr s, Expr, Expr h, Expr q, Expr) { return s + sc(h, q); };
  EXPECT_ERROR_HAS(attn::flex_attention(in.q, in.k, in.v, oob), "out of range");
  try {
    attn::flex_attention(in.q, in.k, in.v, oob);
  } catch (const attn::IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("score_mod reads captured tensor 0"), std::string::npos)
        << e.what();
  }
  EXPECT_ERROR_HAS(
      attn::create_block_mask([](Expr, Expr, Expr q, Expr) { return q * 1.5; }, 1, 1, 30, 30),
      "mask_mod returned a float32 value");
  auto causal = [](Expr, Expr, Expr q, Expr kv) { return q >= kv; };
  const BlockMask bm = attn::create_block_mask(causal, 1, 1, 64, 64);
  EXPECT_ERROR_HAS(attn::flex_attention(in.q, in.k, in.v, nullptr, &bm), "made for Q_LEN 64");
  EXPECT_ERROR_HAS(attn::flex_attention(
                       in.q, in.k, in.v,
                       [&](Expr s, Expr, Expr, Expr q, Expr) { return s + sc(Expr(0), q / 2); }),
                   "indexed with float");
  EXPECT_ERROR_HAS(
      attn::flex_attention(in.q, in.k, in.v,
                           [&](Expr s, Expr, Expr h, Expr, Expr) { return s + sc(h); }),
      "indexed with 1 indices");
  Inputs gqa(1, 4, 2, 30, 30, 8, 8, 12);
  EXPECT_ERROR_HAS(attn::flex_attention(gqa.q, gqa.k, gqa.v), "enable_gqa");
  EXPECT_ERROR_HAS(attn::flex_attention(in.q.reshape({2, 30, 8}), in.k, in.v), "(B, H, L, D)");
  EXPECT_ERROR_HAS(attn::create_block_mask(causal, 1, 1, 0, 64), "must be positive");
}

TEST(Flex, TracedProgramPrintsAndFoldsConstants) {
  const attn::flex::Modifier m = attn::flex::trace_score_mod(
      [](Expr s, Expr, Expr, Expr q, Expr kv) { return s * (Expr(2) + 3) + (q - kv); });
  const std::string text = m.str();
  EXPECT_NE(text.find("constant 5"), std::string::npos) << text;
  EXPECT_NE(text.find("sub"), std::string::npos) << text;
  EXPECT_EQ(text.find("constant 2"), std::string::npos) << text;
}

}  // namespace
