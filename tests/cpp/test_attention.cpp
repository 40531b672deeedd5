// scaled_dot_product_attention against a naive triple loop in double precision, over a table of
// shapes crossed with masks, causal alignments and layouts; edge cases; dropout; every error path.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using attn::CausalAlign;
using attn::Dtype;
using attn::SdpaOptions;
using attn::Shape;
using attn::Tensor;

// ---- the naive reference: plain loops in double over (B, H, L_q, L_k) ---------------------------

// Element [b, h, i, j] of a tensor broadcast (by its strides) to 4-D (B, H, R, C).
double at4(const Tensor& t4, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t off = b * t4.stride(0) + h * t4.stride(1) + i * t4.stride(2) + j * t4.stride(3);
  if (t4.dtype() == Dtype::Bool) return t4.data_ptr<bool>()[off] ? 1.0 : 0.0;
  return double(t4.data_ptr<float>()[off]);
}

// q (B, H, L_q, D), k (B, H, L_k, D), v (B, H, L_k, D_v); mask broadcastable to (B, H, L_q, L_k).
// Returns {out (B, H, L_q, D_v), weights (B, H, L_q, L_k)} as double vectors, row-major.
struct Naive {
  std::vector<double> out, weights;
};
Naive naive_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                 CausalAlign align, double scale) {
  const int64_t B = q.size(0), H = q.size(1), L_q = q.size(2), D = q.size(3);
  const int64_t L_k = k.size(2), D_v = v.size(3);
  Tensor m4;
  if (mask.defined()) m4 = mask.expand({B, H, L_q, L_k});
  Naive r;
  r.out.assign(size_t(B * H * L_q * D_v), 0.0);
  r.weights.assign(size_t(B * H * L_q * L_k), 0.0);
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L_q; ++i) {
        std::vector<double> s(static_cast<size_t>(L_k));
        double mx = ninf;
        for (int64_t j = 0; j < L_k; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at4(q, b, h, i, d) * at4(k, b, h, j, d);
          s[j] = dot * scale;
          if (m4.defined()) {
            if (m4.dtype() == Dtype::Bool) {
              if (at4(m4, b, h, i, j) == 0.0) s[j] = ninf;
            } else {
              s[j] += at4(m4, b, h, i, j);
            }
          }
          if (causal) {
            const int64_t shift = align == CausalAlign::BottomRight ? L_k - L_q : 0;
            if (j > i + shift) s[j] = ninf;
          }
          mx = std::max(mx, s[j]);
        }
        if (mx == ninf) continue;  // fully masked: zeros
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < L_k; ++j) {
          const double w = s[j] / sum;
          r.weights[size_t(((b * H + h) * L_q + i) * L_k + j)] = w;
          for (int64_t e = 0; e < D_v; ++e)
            r.out[size_t(((b * H + h) * L_q + i) * D_v + e)] += w * at4(v, b, h, j, e);
        }
      }
  return r;
}

// Largest |a - b| / (atol + rtol |b|) over all elements; <= 1 means "close".
double worst(const Tensor& got, const std::vector<double>& want, double atol, double rtol) {
  std::vector<float> g = got.contiguous().to_float_vector();
  EXPECT_EQ(g.size(), want.size());
  double w = 0;
  for (size_t i = 0; i < g.size() && i < want.size(); ++i) {
    if (std::isnan(g[i])) return std::numeric_limits<double>::infinity();
    w = std::max(w, std::abs(double(g[i]) - want[i]) / (atol + rtol * std::abs(want[i])));
  }
  return w;
}

bool has_nan(const Tensor& t) {
  for (float x : t.contiguous().to_float_vector())
    if (std::isnan(x)) return true;
  return false;
}

// Throws attn::Error (not some other exception) whose message names `fn` and contains `part`.
template <typename F>
void expect_error(F&& f, const std::string& fn, const std::string& part = "") {
  try {
    f();
    ADD_FAILURE() << "expected attn::Error from " << fn;
  } catch (const attn::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[" + fn + "]"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
  }
}

// ---- the table ----------------------------------------------------------------------------------

enum class MaskCase { None, BoolRow, BoolKeyPad, FloatPerHead, FloatFull, TopLeft, BottomRight };

const char* mask_name(MaskCase m) {
  switch (m) {
    case MaskCase::None: return "nomask";
    case MaskCase::BoolRow: return "boolLqLk";
    case MaskCase::BoolKeyPad: return "boolB11Lk";
    case MaskCase::FloatPerHead: return "float1HLqLk";
    case MaskCase::FloatFull: return "floatBHLqLk";
    case MaskCase::TopLeft: return "causalTL";
    case MaskCase::BottomRight: return "causalBR";
  }
  return "?";
}

struct Case {
  int64_t B, H, L_q, L_k, D, D_v;
  MaskCase mask;
  bool transposed_layout;  // q, k, v given as (B, L, H, D) memory transposed to (B, H, L, D)
};

std::string case_string(const Case& c) {
  return "B" + std::to_string(c.B) + "_H" + std::to_string(c.H) + "_Lq" + std::to_string(c.L_q) +
         "_Lk" + std::to_string(c.L_k) + "_D" + std::to_string(c.D) + "_Dv" +
         std::to_string(c.D_v) + "_" + mask_name(c.mask) +
         (c.transposed_layout ? "_BLHD" : "_BHLD");
}
std::string case_name(const testing::TestParamInfo<Case>& info) { return case_string(info.param); }
void PrintTo(const Case& c, std::ostream* os) { *os << case_string(c); }

std::vector<Case> table() {
  const int64_t shapes[][6] = {
      {1, 1, 1, 1, 1, 1},   {2, 3, 7, 7, 16, 16},     {1, 2, 63, 65, 32, 16},
      {2, 1, 65, 63, 7, 9}, {1, 1, 129, 127, 64, 64}, {1, 2, 1, 129, 65, 1},
      {3, 2, 7, 1, 5, 5},   {1, 1, 129, 65, 1, 3},
  };
  const MaskCase masks[] = {MaskCase::None,         MaskCase::BoolRow,   MaskCase::BoolKeyPad,
                            MaskCase::FloatPerHead, MaskCase::FloatFull, MaskCase::TopLeft,
                            MaskCase::BottomRight};
  std::vector<Case> cases;
  for (auto& s : shapes)
    for (MaskCase m : masks)
      for (bool t : {false, true}) cases.push_back({s[0], s[1], s[2], s[3], s[4], s[5], m, t});
  return cases;
}

// (B, H, L, D) values, either contiguous or as a transposed view of (B, L, H, D) memory.
Tensor make_input(int64_t B, int64_t H, int64_t L, int64_t D, bool transposed, attn::Generator& g) {
  if (transposed) return attn::randn({B, L, H, D}, &g).transpose(1, 2);
  return attn::randn({B, H, L, D}, &g);
}

class SdpaTable : public testing::TestWithParam<Case> {};

TEST_P(SdpaTable, MatchesNaiveLoops) {
  const Case c = GetParam();
  attn::Generator g(1000 + c.B * 7 + c.H * 11 + c.L_q * 13 + c.L_k * 17 + c.D);
  Tensor q = make_input(c.B, c.H, c.L_q, c.D, c.transposed_layout, g);
  Tensor k = make_input(c.B, c.H, c.L_k, c.D, c.transposed_layout, g);
  Tensor v = make_input(c.B, c.H, c.L_k, c.D_v, c.transposed_layout, g);
  SdpaOptions o;
  switch (c.mask) {
    case MaskCase::None: break;
    case MaskCase::BoolRow: o.attn_mask = attn::rand({c.L_q, c.L_k}, &g) > 0.3; break;
    case MaskCase::BoolKeyPad: o.attn_mask = attn::rand({c.B, 1, 1, c.L_k}, &g) > 0.2; break;
    case MaskCase::FloatPerHead: o.attn_mask = attn::randn({1, c.H, c.L_q, c.L_k}, &g); break;
    case MaskCase::FloatFull:
      o.attn_mask = attn::randn({c.B, c.H, c.L_q, c.L_k}, &g)
                        .masked_fill(attn::rand({c.B, c.H, c.L_q, c.L_k}, &g) < 0.25, -attn::inf);
      break;
    case MaskCase::TopLeft: o.is_causal = true; break;
    case MaskCase::BottomRight:
      o.is_causal = true;
      o.causal_align = CausalAlign::BottomRight;
      break;
  }
  const double scale = 1.0 / std::sqrt(double(c.D));
  Naive want = naive_sdpa(q, k, v, o.attn_mask, o.is_causal, o.causal_align, scale);

  Tensor out = attn::scaled_dot_product_attention(q, k, v, o);
  EXPECT_EQ(out.shape(), (Shape{c.B, c.H, c.L_q, c.D_v}));
  EXPECT_LE(worst(out, want.out, 2e-6, 2e-5), 1.0);
  auto [out2, w] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  EXPECT_EQ(w.shape(), (Shape{c.B, c.H, c.L_q, c.L_k}));
  // The default (fused) kernel agrees with the reference to fp32 rounding; the reference backend
  // reproduces the weights variant's output exactly.
  EXPECT_TRUE(attn::allclose(out, out2, 1e-5, 1e-6));
  SdpaOptions ref = o;
  ref.backend = attn::SdpaBackend::Reference;
  EXPECT_TRUE(attn::equal(attn::scaled_dot_product_attention(q, k, v, ref), out2));
  EXPECT_LE(worst(w, want.weights, 1e-7, 1e-5), 1.0);
  EXPECT_FALSE(has_nan(out));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaTable, testing::ValuesIn(table()), case_name);

// ---- layouts and broadcasting -------------------------------------------------------------------

TEST(Sdpa, BroadcastBatchDimsAndRanks) {
  attn::Generator g(5);
  Tensor q = attn::randn({2, 3, 5, 8}, &g);
  Tensor k = attn::randn({1, 3, 6, 8}, &g);  // broadcast over batch
  Tensor v = attn::randn({6, 4}, &g);        // shared by every batch and head
  Tensor out = attn::scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 5, 4}));
  Naive want = naive_sdpa(q, k.expand({2, 3, 6, 8}), v.expand({2, 3, 6, 4}), Tensor(), false,
                          CausalAlign::TopLeft, 1 / std::sqrt(8.0));
  EXPECT_LE(worst(out, want.out, 2e-6, 2e-5), 1.0);
}

TEST(Sdpa, UnbatchedTwoDimensional) {
  attn::Generator g(6);
  Tensor q = attn::randn({7, 3}, &g), k = attn::randn({9, 3}, &g), v = attn::randn({9, 2}, &g);
  Tensor out = attn::scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(out.shape(), (Shape{7, 2}));
  Naive want = naive_sdpa(q.view({1, 1, 7, 3}), k.view({1, 1, 9, 3}), v.view({1, 1, 9, 2}),
                          Tensor(), false, CausalAlign::TopLeft, 1 / std::sqrt(3.0));
  EXPECT_LE(worst(out, want.out, 2e-6, 2e-5), 1.0);
}

TEST(Sdpa, FiveDimensionalInputsLoopOverOuterDims) {
  attn::Generator g(7);
  Tensor q = attn::randn({2, 3, 2, 4, 5}, &g), k = attn::randn({2, 1, 2, 6, 5}, &g);
  Tensor v = attn::randn({2, 3, 2, 6, 3}, &g);
  Tensor mask = attn::rand({3, 1, 4, 6}, &g) > 0.3;
  SdpaOptions o;
  o.attn_mask = mask;
  Tensor out = attn::scaled_dot_product_attention(q, k, v, o);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 2, 4, 3}));
  // Per outer index, compare with the 4-D computation.
  for (int64_t a = 0; a < 2; ++a) {
    Tensor qa = q[a], ka = k[a].expand({3, 2, 6, 5}), va = v[a];
    Naive want = naive_sdpa(qa, ka, va, mask, false, CausalAlign::TopLeft, 1 / std::sqrt(5.0));
    EXPECT_LE(worst(out[a], want.out, 2e-6, 2e-5), 1.0) << "outer index " << a;
  }
}

TEST(Sdpa, NonUnitInnerStrideIsHandled) {
  attn::Generator g(8);
  Tensor q = attn::randn({2, 6, 4}, &g).transpose(1, 2);  // (2, 4, 6) with inner stride 4
  Tensor k = attn::randn({2, 6, 5}, &g).transpose(1, 2).transpose(1, 2).transpose(1, 2);
  Tensor v = attn::randn({2, 5, 3}, &g);
  Tensor out = attn::scaled_dot_product_attention(q, k, v);
  Tensor ref = attn::scaled_dot_product_attention(q.contiguous(), k.contiguous(), v);
  EXPECT_TRUE(attn::equal(out, ref));
}

TEST(Sdpa, NonContiguousMaskAndThreadCountIndependence) {
  attn::Generator g(19);
  Tensor q = attn::randn({2, 4, 33, 16}, &g), k = attn::randn({2, 4, 40, 16}, &g);
  Tensor v = attn::randn({2, 4, 40, 8}, &g);
  Tensor mask = attn::randn({40, 33}, &g).T();  // (L_q, L_k) view with strides (1, 33)
  SdpaOptions o;
  o.attn_mask = mask;
  Naive want = naive_sdpa(q, k, v, mask, false, CausalAlign::TopLeft, 0.25);
  const int threads = attn::get_num_threads();
  attn::set_num_threads(1);
  Tensor one = attn::scaled_dot_product_attention(q, k, v, o);
  attn::set_num_threads(4);
  Tensor four = attn::scaled_dot_product_attention(q, k, v, o);
  attn::set_num_threads(threads);
  EXPECT_TRUE(attn::equal(one, four));  // rows are independent: bitwise the same
  EXPECT_LE(worst(one, want.out, 2e-6, 2e-5), 1.0);
}

TEST(Sdpa, GroupedQueryAttention) {
  attn::Generator g(9);
  Tensor q = attn::randn({2, 6, 5, 8}, &g), k = attn::randn({2, 2, 7, 8}, &g);
  Tensor v = attn::randn({2, 2, 7, 4}, &g);
  SdpaOptions o;
  o.enable_gqa = true;
  o.is_causal = true;
  Tensor out = attn::scaled_dot_product_attention(q, k, v, o);
  ASSERT_EQ(out.shape(), (Shape{2, 6, 5, 4}));
  // Query head h uses key/value head h / 3: the same as repeating each kv head 3 times.
  Tensor k_rep = k.unsqueeze(2).expand({2, 2, 3, 7, 8}).reshape({2, 6, 7, 8});
  Tensor v_rep = v.unsqueeze(2).expand({2, 2, 3, 7, 4}).reshape({2, 6, 7, 4});
  Naive want =
      naive_sdpa(q, k_rep, v_rep, Tensor(), true, CausalAlign::TopLeft, 1 / std::sqrt(8.0));
  EXPECT_LE(worst(out, want.out, 2e-6, 2e-5), 1.0);
}

TEST(Sdpa, ExplicitScaleAndReferenceBackendAgree) {
  attn::Generator g(10);
  Tensor q = attn::randn({1, 2, 5, 4}, &g), k = attn::randn({1, 2, 5, 4}, &g);
  Tensor v = attn::randn({1, 2, 5, 4}, &g);
  SdpaOptions o;
  o.scale = 0.3;
  Naive want = naive_sdpa(q, k, v, Tensor(), false, CausalAlign::TopLeft, 0.3);
  EXPECT_LE(worst(attn::scaled_dot_product_attention(q, k, v, o), want.out, 2e-6, 2e-5), 1.0);
  SdpaOptions r = o;
  r.backend = attn::SdpaBackend::Reference;
  EXPECT_LE(worst(attn::scaled_dot_product_attention(q, k, v, r), want.out, 2e-6, 2e-5), 1.0);
  // Fused (the default) and Reference agree to fp32 rounding, not bitwise.
  EXPECT_TRUE(attn::allclose(attn::scaled_dot_product_attention(q, k, v, o),
                             attn::scaled_dot_product_attention(q, k, v, r), 1e-5, 1e-6));
}

TEST(Sdpa, MatchesCompositionOfOps) {
  // softmax(q k^T * scale + mask) v with the core's matmul and softmax.
  attn::Generator g(11);
  Tensor q = attn::randn({2, 3, 9, 6}, &g), k = attn::randn({2, 3, 11, 6}, &g);
  Tensor v = attn::randn({2, 3, 11, 5}, &g), mask = attn::randn({9, 11}, &g);
  SdpaOptions o;
  o.attn_mask = mask;
  Tensor ref =
      attn::matmul(attn::softmax(attn::matmul(q, k.mT()) * (1 / std::sqrt(6.0)) + mask, -1), v);
  EXPECT_TRUE(attn::allclose(attn::scaled_dot_product_attention(q, k, v, o), ref, 1e-5, 1e-6));
}

// ---- edge cases ---------------------------------------------------------------------------------

TEST(Sdpa, FullyMaskedRowsGiveZerosNeverNaN) {
  attn::Generator g(12);
  Tensor q = attn::randn({1, 2, 4, 3}, &g), k = attn::randn({1, 2, 5, 3}, &g);
  Tensor v = attn::randn({1, 2, 5, 3}, &g);
  // Bool mask with row 1 all false.
  Tensor bm = attn::ones({4, 5}, Dtype::Bool);
  bm.index_put_({1}, false);
  SdpaOptions o;
  o.attn_mask = bm;
  auto [out, w] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  EXPECT_FALSE(has_nan(out));
  EXPECT_FALSE(has_nan(w));
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_TRUE(attn::equal(out[0][h][1], attn::zeros({3})));
    EXPECT_TRUE(attn::equal(w[0][h][1], attn::zeros({5})));
    EXPECT_NEAR(w[0][h][0].sum().item_double(), 1.0, 1e-6);
  }
  // Float mask with a row of -inf.
  Tensor fm = attn::zeros({4, 5});
  fm.index_put_({2}, -attn::inf);
  o.attn_mask = fm;
  Tensor out2 = attn::scaled_dot_product_attention(q, k, v, o);
  EXPECT_FALSE(has_nan(out2));
  EXPECT_TRUE(attn::equal(out2[0][1][2], attn::zeros({3})));
  // Bottom-right causal with L_q > L_k: the first L_q - L_k rows see nothing.
  Tensor q6 = attn::randn({1, 1, 6, 3}, &g);
  SdpaOptions c;
  c.is_causal = true;
  c.causal_align = CausalAlign::BottomRight;
  auto [out3, w3] = attn::scaled_dot_product_attention_with_weights(q6, k[0][0], v[0][0], c);
  EXPECT_FALSE(has_nan(out3));
  EXPECT_TRUE(attn::equal(out3[0][0][0], attn::zeros({3})));
  EXPECT_NEAR(w3[0][0][1].sum().item_double(), 1.0, 1e-6);
  EXPECT_EQ(w3[0][0][1][0].item_double(), 1.0);  // row 1 sees only key 0
  // No keys at all (L_k == 0): zeros.
  Tensor out4 =
      attn::scaled_dot_product_attention(q, attn::zeros({1, 2, 0, 3}), attn::zeros({1, 2, 0, 7}));
  EXPECT_EQ(out4.shape(), (Shape{1, 2, 4, 7}));
  EXPECT_TRUE(attn::equal(out4, attn::zeros({1, 2, 4, 7})));
}

TEST(Sdpa, HugeScoresAreStable) {
  // Scores of -318 (seed 001) and of +-1e4: the max-subtracted softmax stays exact.
  Tensor q = attn::tensor({{{1.0}, {1.0}, {-1.0}}});        // (1, 3, 1)
  Tensor k = attn::tensor({{{-318.0}, {-21.0}, {-48.0}}});  // (1, 3, 1)
  Tensor v = attn::tensor({{{1.0, 0.0}, {0.0, 1.0}, {2.0, 2.0}}});
  SdpaOptions o;
  o.scale = 1.0;
  auto [out, w] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  EXPECT_FALSE(has_nan(out));
  Naive want = naive_sdpa(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), Tensor(), false,
                          CausalAlign::TopLeft, 1.0);
  EXPECT_LE(worst(out, want.out, 1e-6, 1e-6), 1.0);
  EXPECT_LE(worst(w, want.weights, 1e-7, 1e-6), 1.0);
  EXPECT_EQ(w[0][2][0].item_double(), 1.0);  // -1 * -318 dominates completely

  attn::Generator g(13);
  Tensor qb = attn::randn({1, 1, 16, 8}, &g) * 100.0, kb = attn::randn({1, 1, 16, 8}, &g) * 100.0;
  Tensor vb = attn::randn({1, 1, 16, 4}, &g);
  Tensor ob = attn::scaled_dot_product_attention(qb, kb, vb);
  EXPECT_FALSE(has_nan(ob));
  Naive wb = naive_sdpa(qb, kb, vb, Tensor(), false, CausalAlign::TopLeft, 1 / std::sqrt(8.0));
  EXPECT_LE(worst(ob, wb.out, 1e-5, 1e-4), 1.0);
}

TEST(Sdpa, LengthOne) {
  Tensor q = attn::tensor({{0.5, -1.0}}), k = attn::tensor({{2.0, 3.0}}),
         v = attn::tensor({{4.0, 5.0, 6.0}});
  EXPECT_TRUE(attn::equal(attn::scaled_dot_product_attention(q, k, v), v));
}

TEST(Sdpa, NaNInputsPropagate) {
  Tensor q = attn::tensor({{attn::nan, 1.0}}), k = attn::tensor({{1.0, 1.0}, {0.0, 1.0}});
  Tensor v = attn::tensor({{1.0}, {2.0}});
  EXPECT_TRUE(has_nan(attn::scaled_dot_product_attention(q, k, v)));
}

TEST(CausalMask, TopLeftAndBottomRight) {
  Tensor tl = attn::causal_mask(2, 4);
  Tensor br = attn::causal_mask(2, 4, CausalAlign::BottomRight);
  EXPECT_TRUE(
      attn::equal(tl, attn::tensor({{true, false, false, false}, {true, true, false, false}})));
  EXPECT_TRUE(attn::equal(br, attn::tensor({{true, true, true, false}, {true, true, true, true}})));
  EXPECT_TRUE(attn::equal(attn::causal_mask(3, 3), attn::tril(attn::ones({3, 3})).to(Dtype::Bool)));
  EXPECT_EQ(attn::causal_mask(0, 5).shape(), (Shape{0, 5}));
  // is_causal is the same as passing causal_mask as a bool mask.
  attn::Generator g(14);
  Tensor q = attn::randn({2, 5, 4}, &g), k = attn::randn({2, 8, 4}, &g),
         v = attn::randn({2, 8, 3}, &g);
  for (CausalAlign a : {CausalAlign::TopLeft, CausalAlign::BottomRight}) {
    SdpaOptions c, m;
    c.is_causal = true;
    c.causal_align = a;
    m.attn_mask = attn::causal_mask(5, 8, a);
    EXPECT_TRUE(attn::equal(attn::scaled_dot_product_attention(q, k, v, c),
                            attn::scaled_dot_product_attention(q, k, v, m)));
  }
}

// ---- dropout ------------------------------------------------------------------------------------

TEST(SdpaDropout, FractionDroppedAndSurvivorsScaled) {
  attn::Generator g(15);
  Tensor q = attn::randn({2, 4, 64, 16}, &g), k = attn::randn({2, 4, 96, 16}, &g);
  Tensor v = attn::randn({2, 4, 96, 8}, &g);
  const double p = 0.3;
  SdpaOptions o;
  auto [out0, w0] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  o.dropout_p = p;
  attn::Generator dg(99);
  o.generator = &dg;
  auto [out1, w1] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  std::vector<float> a = w0.to_float_vector(), b = w1.to_float_vector();
  const float keep_scale = 1.0f / float(1.0 - p);
  int64_t dropped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (b[i] == 0.0f) {
      ++dropped;
    } else {
      ASSERT_EQ(b[i], a[i] * keep_scale) << "survivor " << i << " not scaled by 1/(1-p)";
    }
  }
  const double n = double(a.size()), frac = double(dropped) / n;
  const double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(frac, p, 5 * sigma) << "fraction dropped";
  // The output is exactly the dropped weights times v.
  EXPECT_TRUE(attn::allclose(out1, attn::matmul(w1, v), 1e-5, 1e-5));
}

TEST(SdpaDropout, SameDrawsAsTorchDropoutOnTheWeights) {
  // torch: weights = softmax(...); dropout(weights, p) draws bernoulli(1 - p) over the weights in
  // row-major order; the factors are what fill_dropout_mask gives for the same generator state.
  attn::Generator g(16);
  Tensor q = attn::randn({3, 2, 5, 4}, &g), k = attn::randn({3, 2, 6, 4}, &g);
  Tensor v = attn::randn({3, 2, 6, 3}, &g);
  SdpaOptions o;
  auto [out0, w0] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  attn::Generator g1(1234), g2(1234);
  o.dropout_p = 0.4;
  o.generator = &g1;
  auto [out1, w1] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
  std::vector<float> factors(size_t(w0.numel()));
  attn::fill_dropout_mask(factors.data(), int64_t(factors.size()), 0.4, g2);
  Tensor expected = w0 * attn::from_vector(factors, w0.shape());
  EXPECT_TRUE(attn::equal(w1, expected));
  EXPECT_EQ(g1.random(), g2.random()) << "both generators consumed the same number of draws";
  // scaled_dot_product_attention (no weights; the fused kernel) uses the counter-based mask
  // instead (attention.h): one random64() from the generator is its seed, and the reference
  // backend applies the same mask.
  attn::Generator g3(1234), g4(1234), g5(1234);
  o.generator = &g3;
  Tensor fused = attn::scaled_dot_product_attention(q, k, v, o);
  EXPECT_EQ(g3.random(), (g4.random64(), g4.random())) << "one random64() per call";
  SdpaOptions r = o;
  r.backend = attn::SdpaBackend::Reference;
  r.generator = &g5;
  EXPECT_TRUE(attn::allclose(fused, attn::scaled_dot_product_attention(q, k, v, r), 1e-5, 1e-6));
  // The default generator is used when none is given.
  attn::manual_seed(77);
  o.generator = nullptr;
  Tensor a = attn::scaled_dot_product_attention(q, k, v, o);
  attn::manual_seed(77);
  EXPECT_TRUE(attn::equal(attn::scaled_dot_product_attention(q, k, v, o), a));
}

TEST(SdpaDropout, ZeroProbabilityDrawsNothing) {
  attn::Generator g(17), ref(17);
  Tensor q = attn::ones({2, 3, 4});
  SdpaOptions o;
  o.generator = &g;
  attn::scaled_dot_product_attention(q, q, q, o);
  EXPECT_EQ(g.random(), ref.random());
}

// ---- autograd graph -----------------------------------------------------------------------------

TEST(SdpaAutograd, RecordsPyTorchMathBackendNodeNames) {
  attn::Generator g(18);
  Tensor q = attn::randn({2, 3, 4}, &g), k = attn::randn({2, 5, 4}, &g),
         v = attn::randn({2, 5, 2}, &g);
  EXPECT_FALSE(attn::scaled_dot_product_attention(q, k, v).requires_grad());
  Tensor qg = q.clone().requires_grad_();
  Tensor out = attn::scaled_dot_product_attention(qg, k, v);
  EXPECT_TRUE(out.requires_grad());
  ASSERT_TRUE(attn::grad_fn(out) != nullptr);
  EXPECT_EQ(attn::grad_fn(out)->name, "UnsafeViewBackward0");  // matmul(weights, v), 3-D
  auto [o2, w2] = attn::scaled_dot_product_attention_with_weights(qg[0], k[0], v[0]);
  EXPECT_EQ(attn::grad_fn(o2)->name, "MmBackward0");
  EXPECT_EQ(attn::grad_fn(w2)->name, "SoftmaxBackward0");
  SdpaOptions d;
  d.dropout_p = 0.5;
  EXPECT_EQ(attn::grad_fn(std::get<1>(attn::scaled_dot_product_attention_with_weights(qg, k, v, d)))
                ->name,
            "MulBackward0");
  SdpaOptions m;  // a float mask that requires grad also makes the output require grad
  m.attn_mask = attn::zeros({3, 5}).requires_grad_();
  EXPECT_TRUE(attn::scaled_dot_product_attention(q, k, v, m).requires_grad());
  attn::NoGradGuard no_grad;
  EXPECT_FALSE(attn::scaled_dot_product_attention(qg, k, v).requires_grad());
}

// ---- every error path ---------------------------------------------------------------------------

TEST(SdpaErrors, EveryInvalidInputThrows) {
  const std::string fn = "scaled_dot_product_attention";
  auto sdpa = [](const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions o = {}) {
    return attn::scaled_dot_product_attention(q, k, v, o);
  };
  Tensor q = attn::zeros({2, 4, 8, 16}), k = attn::zeros({2, 4, 9, 16}),
         v = attn::zeros({2, 4, 9, 5});
  // The message the design doc promises, verbatim.
  expect_error(
      [&] {
        sdpa(q, attn::zeros({2, 4, 9, 32}), v);
      },
      fn, "q (2, 4, 8, 16) and k (2, 4, 9, 32) differ in head dim");
  expect_error([&] { sdpa(Tensor(), k, v); }, fn, "undefined");
  expect_error([&] { sdpa(q, Tensor(), v); }, fn, "undefined");
  expect_error([&] { sdpa(q, k, Tensor()); }, fn, "undefined");
  expect_error([&] { sdpa(q.to(Dtype::Int64), k, v); }, fn, "float32");
  expect_error([&] { sdpa(q, k.to(Dtype::Bool), v); }, fn, "float32");
  expect_error([&] { sdpa(q, k, v.to(Dtype::Int64)); }, fn, "float32");
  expect_error([&] { sdpa(attn::zeros({16}), k, v); }, fn, "at least 2 dims");
  expect_error([&] { sdpa(q, attn::zeros({16}), v); }, fn, "at least 2 dims");
  expect_error([&] { sdpa(q, k, attn::zeros({5})); }, fn, "at least 2 dims");
  expect_error(
      [&] {
        sdpa(q, k, attn::zeros({2, 4, 10, 5}));
      },
      fn, "k (2, 4, 9, 16) and v (2, 4, 10, 5) differ in sequence length");
  expect_error([&] { sdpa(q, attn::zeros({3, 4, 9, 16}), v); }, fn, "do not broadcast");
  expect_error([&] { sdpa(q, k, attn::zeros({2, 3, 9, 5})); }, fn, "do not broadcast");

  SdpaOptions o;
  o.attn_mask = attn::zeros({8, 9}, Dtype::Int64);
  expect_error([&] { sdpa(q, k, v, o); }, fn, "bool or float32");
  o.attn_mask = attn::zeros({8, 10}, Dtype::Bool);
  expect_error([&] { sdpa(q, k, v, o); }, fn, "attn_mask (8, 10) does not broadcast");
  o.attn_mask = attn::zeros({3, 1, 8, 9});
  expect_error([&] { sdpa(q, k, v, o); }, fn, "does not broadcast");
  o.attn_mask = attn::zeros({1, 2, 4, 8, 9});  // would enlarge the output
  expect_error([&] { sdpa(q, k, v, o); }, fn, "does not broadcast");
  o.attn_mask = attn::ones({8, 9}, Dtype::Bool);
  o.is_causal = true;
  expect_error([&] { sdpa(q, k, v, o); }, fn, "is_causal");

  for (double p : {-0.1, 1.0, 1.5, attn::nan}) {
    SdpaOptions d;
    d.dropout_p = p;
    expect_error([&] { sdpa(q, k, v, d); }, fn, "dropout_p");
  }
  for (double s : {0.0, -1.0, attn::nan, attn::inf}) {
    SdpaOptions d;
    d.scale = s;
    expect_error([&] { sdpa(q, k, v, d); }, fn, "scale");
  }
  expect_error(
      [&] {
        sdpa(attn::zeros({2, 0}), attn::zeros({3, 0}), attn::zeros({3, 1}));
      },
      fn, "head dim 0");

  SdpaOptions gqa;
  gqa.enable_gqa = true;
  expect_error(
      [&] {
        sdpa(attn::zeros({8, 4}), attn::zeros({9, 4}), attn::zeros({9, 4}), gqa);
      },
      fn, "enable_gqa");
  expect_error(
      [&] {
        sdpa(attn::zeros({6, 8, 4}), attn::zeros({4, 9, 4}), attn::zeros({4, 9, 4}), gqa);
      },
      fn, "multiple");
  expect_error(
      [&] {
        sdpa(attn::zeros({6, 8, 4}), attn::zeros({2, 9, 4}), attn::zeros({3, 9, 4}), gqa);
      },
      fn, "key/value heads");

  // The weights variant names itself.
  expect_error(
      [&] {
        attn::scaled_dot_product_attention_with_weights(q, attn::zeros({2, 4, 9, 32}), v);
      },
      "scaled_dot_product_attention_with_weights", "differ in head dim");
  expect_error([&] { attn::causal_mask(-1, 3); }, "causal_mask", "non-negative");
}

}  // namespace
