// Ring attention against single-process attention. Every rank builds the same full inputs from a
// fixed seed, takes its shard, runs ring_attention (forward and, through autograd, backward) and
// compares its shard of the output and of the gradients with scaled_dot_product_attention on the
// full sequence, computed in the same process. The suite runs alone (a world of one, where Zigzag
// still merges two chunks) and under mpirun with 2, 3 and 4 ranks.
//
// Tolerance: |ring - full| <= 1e-5 + 1e-5 |full| per element. Both sides run the same fp32 fused
// kernel; they differ only in how the softmax is accumulated (the ring merges per-block partial
// results through their log-sum-exp, the single kernel runs one online softmax over its tiles) and
// in the order in which dk, dv are summed over query blocks. Each is a few float ulps (6e-8
// relative) per term on O(1) values (randn inputs, at most a few hundred keys per row), so the
// observed differences are ~1e-6 at most; a real fault (a missed or doubled block, a wrong
// causal boundary, a wrong merge weight) moves results by 1e-2 or more.
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/distributed.h>
#include <attn/ops.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using attn::Error;
using attn::Generator;
using attn::Shape;
using attn::Tensor;
using attn::distributed::Communicator;
using attn::distributed::RingOptions;
using attn::distributed::shard_positions;
using attn::distributed::shard_sequence;
using attn::distributed::Sharding;
using attn::distributed::unshard_sequence;
using attn::distributed::world;

constexpr double kRtol = 1e-5, kAtol = 1e-5;

const char* name_of(Sharding s) { return s == Sharding::Zigzag ? "Zigzag" : "Contiguous"; }

// Runs f and returns the attn::Error message; fails the test when f does not throw one.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected attn::Error";
  return "";
}

// Element-wise |got - want| <= atol + rtol |want|, no NaN; reports the largest difference.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << " is undefined";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_float_vector(), w = want.to_float_vector();
  double max_err = 0;
  int64_t bad = 0, first_bad = -1;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double e = std::abs(double(g[i]) - double(w[i]));
    if (!(e <= kAtol + kRtol * std::abs(double(w[i])))) {
      if (first_bad < 0) first_bad = int64_t(i);
      ++bad;
    }
    if (std::isfinite(e)) max_err = std::max(max_err, e);
  }
  EXPECT_EQ(bad, 0) << what << " on rank " << world().rank() << ": " << bad << " of " << g.size()
                    << " elements differ; first at flat index " << first_bad << ": "
                    << (first_bad >= 0 ? g[first_bad] : 0.0f) << " vs "
                    << (first_bad >= 0 ? w[first_bad] : 0.0f) << " (max |diff| " << max_err << ")";
}

// ---- sharding ----------------------------------------------------------------------------------

TEST(RingSharding, ZigzagPositions) {
  // L = 8 over 2 ranks: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  auto as_vector = [](const Tensor& t) {
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  };
  EXPECT_EQ(as_vector(shard_positions(8, 0, 2, Sharding::Zigzag)),
            (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(as_vector(shard_positions(8, 1, 2, Sharding::Zigzag)),
            (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(as_vector(shard_positions(6, 1, 3, Sharding::Contiguous)),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(shard_positions(0, 0, 2, Sharding::Zigzag).numel(), 0);
}

TEST(RingSharding, ShardsCoverTheSequenceAndRoundTrip) {
  for (Sharding s : {Sharding::Contiguous, Sharding::Zigzag})
    for (int P = 1; P <= 5; ++P) {
      const int64_t L = 2 * P * 3;
      // (2, L, 3): the sequence on dim 1, values that name their position.
      Tensor x = attn::arange(int64_t(2 * L * 3)).reshape({2, L, 3}).float_();
      std::vector<int> seen(std::size_t(L), 0);
      std::vector<Tensor> shards;
      for (int r = 0; r < P; ++r) {
        Tensor pos = shard_positions(L, r, P, s);
        ASSERT_EQ(pos.numel(), L / P);
        Tensor sh = shard_sequence(x, 1, r, P, s);
        ASSERT_EQ(sh.shape(), (Shape{2, L / P, 3}));
        for (int64_t i = 0; i < pos.numel(); ++i) {
          const int64_t p = pos.data_ptr<int64_t>()[i];
          ++seen[std::size_t(p)];
          EXPECT_TRUE(attn::equal(sh.select(1, i), x.select(1, p)))
              << name_of(s) << " P " << P << " rank " << r << " position " << p;
        }
        shards.push_back(sh);
      }
      for (int64_t p = 0; p < L; ++p) EXPECT_EQ(seen[std::size_t(p)], 1) << "position " << p;
      EXPECT_TRUE(attn::equal(unshard_sequence(shards, 1, s), x)) << name_of(s) << " P " << P;
      EXPECT_TRUE(attn::equal(unshard_sequence(shards, -2, s), x)) << name_of(s) << " P " << P;
    }
}

TEST(RingSharding, BadArguments) {
  Tensor x = attn::zeros({2, 6, 4});
  EXPECT_NE(
      error_of([&] { shard_sequence(x, 1, 0, 4, Sharding::Contiguous); }).find("[shard_sequence]"),
      std::string::npos);
  EXPECT_NE(error_of([&] { shard_sequence(x, 1, 0, 2, Sharding::Zigzag); }).find("multiple of 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { shard_sequence(x, 1, 3, 3, Sharding::Zigzag); }).find("rank 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { shard_sequence(x, 3, 0, 1, Sharding::Zigzag); }), "");
  EXPECT_NE(
      error_of([&] { shard_positions(10, 0, 3, Sharding::Contiguous); }).find("[shard_positions]"),
      std::string::npos);
  EXPECT_NE(error_of([&] { shard_positions(6, 0, 0, Sharding::Zigzag); }).find("world size"),
            std::string::npos);
  EXPECT_NE(error_of([&] { unshard_sequence({}, 0, Sharding::Zigzag); }).find("no shards"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              unshard_sequence({attn::zeros({2, 2}), attn::zeros({2, 4})}, 1, Sharding::Contiguous);
            }).find("shard 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              unshard_sequence({attn::zeros({2, 3})}, 1, Sharding::Zigzag);
            }).find("odd length"),
            std::string::npos);
}

// ---- ring attention against the single-process kernel ------------------------------------------

enum class Pad {
  None,
  Some,  // random keys (about 30%) and the first two: under causal masking rows 0, 1 see nothing
  All,   // as Some, and every key of the last batch: that batch's output and gradients are zero
};

// An attention mask over the full (L, L) problem: random masked entries (about 25%) and one
// query row masked against every key (per mask matrix); Float also adds random values in [-1, 1)
// to the scores it keeps. Each rank passes its query rows of it, with every key column.
enum class Mask { None, Float, Bool };
enum class MaskShape {
  Rows,   // (L, L): shared by batches and heads
  Batch,  // (B, 1, L, L)
  Heads,  // (1, H, L, L)
};

struct Case {
  Sharding sharding = Sharding::Zigzag;
  bool causal = false;
  int64_t B = 1, H = 2, H_kv = 2, L_local = 6, D = 8, D_v = 8;  // L = P * L_local
  Pad pad = Pad::None;
  Mask mask = Mask::None;
  MaskShape mask_shape = MaskShape::Rows;
  bool strided = false;  // q, k, v are (B, L, H, D) tensors seen as (B, H, L, D): not contiguous
  std::optional<double> scale;

  std::string name() const {
    std::ostringstream os;
    os << name_of(sharding) << (causal ? "_Causal" : "_Full") << "_B" << B << "_H" << H;
    if (H_kv != H) os << "_Hkv" << H_kv;
    os << "_Lloc" << L_local << "_D" << D;
    if (D_v != D) os << "_Dv" << D_v;
    if (pad == Pad::Some) os << "_Pad";
    if (pad == Pad::All) os << "_PadAll";
    if (mask != Mask::None) {
      os << (mask == Mask::Float ? "_FloatMask" : "_BoolMask");
      os << (mask_shape == MaskShape::Rows    ? "LL"
             : mask_shape == MaskShape::Batch ? "B1LL"
                                              : "1HLL");
    }
    if (strided) os << "_Strided";
    if (scale) os << "_Scale" << int(std::lround(*scale * 100));
    return os.str();
  }
};

// The same full inputs on every rank: seeded generator, fixed draw order.
struct Inputs {
  Tensor q4, k4, v4;  // as generated: (B, L, H, D) when strided, else (B, H, L, D)
  Tensor q, k, v;     // (B, H, L, D) views of them
  Tensor dout;        // (B, H, L, D_v)
  Tensor pad;         // bool (B, L), or undefined
  Tensor mask;        // bool or float (L, L), (B, 1, L, L) or (1, H, L, L), or undefined
};

Inputs make_inputs(const Case& c, int64_t L) {
  Generator gen(20240611);
  Inputs in;
  auto gen4 = [&](int64_t H, int64_t D) {
    return c.strided ? attn::randn({c.B, L, H, D}, &gen) : attn::randn({c.B, H, L, D}, &gen);
  };
  in.q4 = gen4(c.H, c.D), in.k4 = gen4(c.H_kv, c.D), in.v4 = gen4(c.H_kv, c.D_v);
  auto heads_first = [&](const Tensor& t) { return c.strided ? t.transpose(1, 2) : t; };
  in.q = heads_first(in.q4), in.k = heads_first(in.k4), in.v = heads_first(in.v4);
  in.dout = attn::randn({c.B, c.H, L, c.D_v}, &gen);
  if (c.pad != Pad::None) {
    Tensor u = attn::rand({c.B, L}, &gen);
    in.pad = attn::empty({c.B, L}, attn::Dtype::Bool);
    const float* pu = u.data_ptr<float>();
    bool* pp = in.pad.data_ptr<bool>();
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = 0; j < L; ++j)
        pp[b * L + j] = pu[b * L + j] < 0.3f || j < 2 || (c.pad == Pad::All && b == c.B - 1);
  }
  if (c.mask != Mask::None) {
    const Shape shape = c.mask_shape == MaskShape::Rows    ? Shape{L, L}
                        : c.mask_shape == MaskShape::Batch ? Shape{c.B, 1, L, L}
                                                           : Shape{1, c.H, L, L};
    const Tensor u = attn::rand(shape, &gen), w = attn::rand(shape, &gen);
    const float* pu = u.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    const bool is_bool = c.mask == Mask::Bool;
    in.mask = attn::empty(shape, is_bool ? attn::Dtype::Bool : attn::Dtype::Float32);
    for (int64_t e = 0, n = u.numel(); e < n; ++e) {
      const int64_t m = e / std::max<int64_t>(L * L, 1), i = (e / std::max<int64_t>(L, 1)) % L;
      const bool masked = pu[e] < 0.25f || i == (L / 2 + 3 * m) % L;  // one dead row per matrix
      if (is_bool)
        in.mask.data_ptr<bool>()[e] = !masked;
      else
        in.mask.data_ptr<float>()[e] =
            masked ? -std::numeric_limits<float>::infinity() : 2 * pw[e] - 1;
    }
  }
  return in;
}

class RingAttentionTable : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTable, MatchesSingleProcess) {
  const Case& c = GetParam();
  Communicator& comm = world();
  const int P = comm.size(), r = comm.rank();
  const int64_t L = P * c.L_local;
  const Inputs in = make_inputs(c, L);

  // The full problem in this process.
  Tensor qf = in.q.detach().requires_grad_(), kf = in.k.detach().requires_grad_(),
         vf = in.v.detach().requires_grad_();
  attn::SdpaOptions so;
  so.is_causal = c.causal;
  so.scale = c.scale;
  so.enable_gqa = c.H != c.H_kv;
  so.key_padding_mask = in.pad;
  if (in.mask.defined()) {
    // SdpaOptions refuses is_causal with attn_mask: the reference folds causal into the mask.
    so.attn_mask = in.mask;
    if (c.causal) {
      const Tensor tri = attn::causal_mask(L, L);
      so.attn_mask = in.mask.dtype() == attn::Dtype::Bool
                         ? in.mask & tri
                         : in.mask.masked_fill(~tri, -std::numeric_limits<double>::infinity());
      so.is_causal = false;
    }
  }
  Tensor ref = attn::scaled_dot_product_attention(qf, kf, vf, so);
  ref.backward(in.dout);

  // This rank's shard, through the ring. Leaves are the shards as generated (strided: the
  // (B, L_local, H, D) shard, viewed as (B, H, L_local, D)).
  const int64_t seq_dim = c.strided ? 1 : 2;
  auto leaf = [&](const Tensor& t4) {
    return shard_sequence(t4, seq_dim, r, P, c.sharding).detach().requires_grad_();
  };
  Tensor ql = leaf(in.q4), kl = leaf(in.k4), vl = leaf(in.v4);
  auto heads_first = [&](const Tensor& t) { return c.strided ? t.transpose(1, 2) : t; };
  RingOptions ro;
  ro.is_causal = c.causal;
  ro.sharding = c.sharding;
  ro.scale = c.scale;
  ro.enable_gqa = c.H != c.H_kv;
  if (in.pad.defined()) ro.key_padding_mask = shard_sequence(in.pad, 1, r, P, c.sharding);
  // This rank's query rows, every key column in global order.
  if (in.mask.defined()) ro.attn_mask = shard_sequence(in.mask, -2, r, P, c.sharding);
  Tensor out = attn::distributed::ring_attention(heads_first(ql), heads_first(kl), heads_first(vl),
                                                 ro, comm);
  ASSERT_EQ(out.shape(), (Shape{c.B, c.H, c.L_local, c.D_v}));
  ASSERT_TRUE(attn::grad_fn(out));
  EXPECT_EQ(attn::grad_fn(out)->name, "RingAttentionBackward0");
  out.backward(shard_sequence(in.dout, 2, r, P, c.sharding));

  auto mine = [&](const Tensor& full) { return shard_sequence(full, 2, r, P, c.sharding); };
  expect_close(out, mine(ref), "out");
  expect_close(heads_first(ql.grad()), mine(qf.grad()), "dq");
  expect_close(heads_first(kl.grad()), mine(kf.grad()), "dk");
  expect_close(heads_first(vl.grad()), mine(vf.grad()), "dv");

  if (c.pad == Pad::All) {  // a batch whose keys are all padded: zeros, never NaN
    const int64_t b = c.B - 1;
    for (const Tensor& t : {out, ql.grad(), kl.grad(), vl.grad()}) {
      const Tensor last = t.select(0, b);
      EXPECT_TRUE(attn::equal(last, attn::zeros(last.shape()))) << "batch " << b;
    }
  }
}

std::vector<Case> table() {
  std::vector<Case> cs;
  auto mk = [](Sharding s, bool causal, int64_t L_local) {
    Case c;
    c.sharding = s, c.causal = causal, c.L_local = L_local;
    return c;
  };
  const Sharding Z = Sharding::Zigzag, C = Sharding::Contiguous;
  // Both shardings, causal or not, with 2 (Zigzag: chunks of 1), 6 and 10 positions per rank.
  for (Sharding s : {C, Z})
    for (bool causal : {false, true})
      for (int64_t L_local : {2, 6, 10}) cs.push_back(mk(s, causal, L_local));
  // Empty shards, 1 or 7 positions per rank (Contiguous), chunks of 7 (Zigzag).
  for (int64_t L_local : {0, 1, 7}) cs.push_back(mk(C, true, L_local));
  for (int64_t L_local : {0, 14}) cs.push_back(mk(Z, true, L_local));
  // Batch 2, grouped- and multi-query attention.
  for (Sharding s : {C, Z}) {
    Case c = mk(s, true, 8);
    c.B = 2, c.H = 4, c.H_kv = 2, c.D = 16, c.D_v = 16;
    cs.push_back(c);
    c.H_kv = 1, c.causal = false;
    cs.push_back(c);
  }
  // D_v != D.
  for (Sharding s : {C, Z}) {
    Case c = mk(s, true, 6);
    c.D = 8, c.D_v = 12;
    cs.push_back(c);
    c.D = 12, c.D_v = 5, c.causal = false;
    cs.push_back(c);
  }
  // Key padding (travelling with its keys), including fully masked rows and a fully padded batch.
  for (Sharding s : {C, Z})
    for (bool causal : {false, true})
      for (Pad pad : {Pad::Some, Pad::All}) {
        Case c = mk(s, causal, 6);
        c.B = 2, c.pad = pad;
        cs.push_back(c);
      }
  // Attention masks (this rank's rows, global key columns): additive float and bool, shared or
  // per batch, with causal masking and key padding folded in.
  for (Mask mask : {Mask::Float, Mask::Bool})
    for (MaskShape shape : {MaskShape::Rows, MaskShape::Batch})
      for (Sharding s : {C, Z})
        for (bool causal : {false, true})
          for (Pad pad : {Pad::None, Pad::Some}) {
            Case c = mk(s, causal, 6);
            c.B = 2, c.pad = pad, c.mask = mask, c.mask_shape = shape;
            cs.push_back(c);
          }
  // Strided inputs and an explicit scale.
  for (Sharding s : {C, Z}) {
    Case c = mk(s, true, 4);
    c.B = 2, c.strided = true, c.scale = 0.3;
    cs.push_back(c);
  }
  // Everything at once, with blocks longer than the kernel's 64-row tiles.
  {
    Case c = mk(Z, true, 70);
    c.B = 2, c.H = 4, c.H_kv = 2, c.D = 32, c.D_v = 24, c.pad = Pad::Some, c.strided = true;
    cs.push_back(c);
    c.sharding = C, c.causal = false, c.L_local = 66;
    cs.push_back(c);
    // With a per-head float mask (GQA: H query heads, H_kv key/value heads) and a bool one.
    c.mask = Mask::Float, c.mask_shape = MaskShape::Heads, c.L_local = 34;
    cs.push_back(c);
    c.sharding = Z, c.causal = true, c.mask = Mask::Bool, c.mask_shape = MaskShape::Batch;
    cs.push_back(c);
  }
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Table, RingAttentionTable, ::testing::ValuesIn(table()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name();
                         });

// Two ring attentions in a row (the second's queries are the first's output): the backward passes
// of the two nodes run the ring one after the other, in the same order on every rank.
TEST(RingAttention, TwoLayersInARow) {
  Communicator& comm = world();
  const int P = comm.size(), r = comm.rank();
  const Sharding s = Sharding::Zigzag;
  const int64_t L = 4 * P;
  Generator gen(7);
  Tensor q = attn::randn({1, 2, L, 8}, &gen), k = attn::randn({1, 2, L, 8}, &gen),
         v = attn::randn({1, 2, L, 8}, &gen), dout = attn::randn({1, 2, L, 8}, &gen);

  Tensor qf = q.detach().requires_grad_(), kf = k.detach().requires_grad_(),
         vf = v.detach().requires_grad_();
  attn::SdpaOptions so;
  so.is_causal = true;
  Tensor ref = attn::scaled_dot_product_attention(
      attn::scaled_dot_product_attention(qf, kf, vf, so), kf, vf, so);
  ref.backward(dout);

  auto leaf = [&](const Tensor& t) {
    return shard_sequence(t, 2, r, P, s).detach().requires_grad_();
  };
  Tensor ql = leaf(q), kl = leaf(k), vl = leaf(v);
  RingOptions ro;
  ro.is_causal = true, ro.sharding = s;
  using attn::distributed::ring_attention;
  Tensor out = ring_attention(ring_attention(ql, kl, vl, ro), kl, vl, ro);
  out.backward(shard_sequence(dout, 2, r, P, s));
  auto mine = [&](const Tensor& t) { return shard_sequence(t, 2, r, P, s); };
  expect_close(out, mine(ref), "out");
  expect_close(ql.grad(), mine(qf.grad()), "dq");
  expect_close(kl.grad(), mine(kf.grad()), "dk");
  expect_close(vl.grad(), mine(vf.grad()), "dv");
}

// Only q requires grad: k and v get no gradient, and the ring still runs on every rank.
TEST(RingAttention, GradientOfQOnly) {
  Communicator& comm = world();
  const int P = comm.size(), r = comm.rank();
  const Sharding s = Sharding::Contiguous;
  const int64_t L = 3 * P;
  Generator gen(11);
  Tensor q = attn::randn({1, 2, L, 4}, &gen), k = attn::randn({1, 2, L, 4}, &gen),
         v = attn::randn({1, 2, L, 4}, &gen);
  Tensor qf = q.detach().requires_grad_();
  attn::SdpaOptions so;
  so.is_causal = true;
  attn::scaled_dot_product_attention(qf, k, v, so).sum().backward();

  Tensor ql = shard_sequence(q, 2, r, P, s).detach().requires_grad_();
  Tensor kl = shard_sequence(k, 2, r, P, s), vl = shard_sequence(v, 2, r, P, s);
  RingOptions ro;
  ro.is_causal = true, ro.sharding = s;
  attn::distributed::ring_attention(ql, kl, vl, ro).sum().backward();
  expect_close(ql.grad(), shard_sequence(qf.grad(), 2, r, P, s), "dq");
  EXPECT_FALSE(kl.grad().defined());
  EXPECT_FALSE(vl.grad().defined());
}

TEST(RingAttention, NoGraphWithoutGrad) {
  Tensor x = attn::ones({1, 1, 2, 4});
  Tensor out = attn::distributed::ring_attention(x, x, x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_FALSE(attn::grad_fn(out));
  // Every key has the same value row: the output is that row.
  EXPECT_TRUE(attn::allclose(out, x));
}

// ---- bad input: the same error on every rank, so that no rank waits for the others -------------

TEST(RingAttention, BadInputThrowsOnEveryRank) {
  auto t = [](Shape s) { return attn::zeros(s); };
  auto expect_error = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find("[ring_attention]"), std::string::npos) << message;
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  using attn::distributed::ring_attention;
  const Tensor q = t({2, 4, 6, 8}), k = t({2, 4, 6, 8}), v = t({2, 4, 6, 8});
  expect_error(error_of([&] { ring_attention(q.long_(), k, v); }), "must be float32");
  expect_error(error_of([&] { ring_attention(q, k, Tensor()); }), "undefined");
  expect_error(error_of([&] {
                 ring_attention(t({4, 6, 8}), t({4, 6, 8}), t({4, 6, 8}));
               }),
               "must have 4 dims");
  expect_error(error_of([&] {
                 ring_attention(q, t({2, 4, 4, 8}), t({2, 4, 4, 8}));
               }),
               "sequence lengths");
  expect_error(error_of([&] {
                 ring_attention(q, t({1, 4, 6, 8}), t({1, 4, 6, 8}));
               }),
               "batch sizes");
  expect_error(error_of([&] { ring_attention(q, t({2, 4, 6, 4}), v); }), "head dims");
  expect_error(error_of([&] { ring_attention(q, k, t({2, 2, 6, 8})); }), "key/value heads");
  expect_error(error_of([&] {
                 ring_attention(q, t({2, 2, 6, 8}), t({2, 2, 6, 8}));
               }),
               "set enable_gqa");
  {
    RingOptions o;
    o.enable_gqa = true;
    expect_error(error_of([&] { ring_attention(t({2, 3, 6, 8}), k, v, o); }), "multiple");
  }
  {
    RingOptions o;  // Zigzag: two equal chunks per rank
    expect_error(error_of([&] {
                   ring_attention(t({1, 1, 5, 8}), t({1, 1, 5, 8}), t({1, 1, 5, 8}), o);
                 }),
                 "even local length");
  }
  {
    RingOptions o;
    o.scale = -1.0;
    expect_error(error_of([&] { ring_attention(q, k, v, o); }), "scale");
  }
  {
    RingOptions o;
    o.key_padding_mask = t({2, 6});
    expect_error(error_of([&] { ring_attention(q, k, v, o); }), "must be bool");
    o.key_padding_mask = attn::zeros({2, 5}, attn::Dtype::Bool);
    expect_error(error_of([&] { ring_attention(q, k, v, o); }), "key_padding_mask (2, 5)");
  }
  {
    // attn_mask: (B, H, L_local, P * L_local) = (2, 4, 6, 6P) with its broadcasts.
    const int64_t L = 6 * world().size();
    const std::string target = "does not broadcast to (2, 4, 6, " + std::to_string(L) + ")";
    RingOptions o;
    o.attn_mask = attn::zeros({6, L}).long_();
    expect_error(error_of([&] { ring_attention(q, k, v, o); }), "attn_mask must be bool");
    auto bad_shape = [&](Shape s) {
      o.attn_mask = attn::zeros(s, attn::Dtype::Bool);
      const std::string message = error_of([&] { ring_attention(q, k, v, o); });
      expect_error(message, "attn_mask " + attn::shape_str(s));
      expect_error(message, target);
    };
    bad_shape({6, L + 1});       // key dim: not the global length
    bad_shape({12, L});          // query dim: not this rank's L_local
    bad_shape({3, 1, 6, L});     // batch
    bad_shape({2, 3, 6, L});     // heads
    bad_shape({1, 2, 4, 6, L});  // more dims than (B, H, L_local, L)
    // Broadcastable shapes are accepted.
    for (Shape s : {Shape{L}, Shape{1, L}, Shape{6, 1}, Shape{2, 1, 1, L}, Shape{1, 4, 6, L}}) {
      o.attn_mask = attn::ones(s, attn::Dtype::Bool);
      EXPECT_EQ(ring_attention(q, k, v, o).shape(), (Shape{2, 4, 6, 8})) << attn::shape_str(s);
    }
  }
  // The ring still works afterwards.
  RingOptions o;
  o.sharding = Sharding::Contiguous;
  EXPECT_EQ(ring_attention(t({1, 1, 3, 4}), t({1, 1, 3, 4}), t({1, 1, 3, 4}), o).shape(),
            (Shape{1, 1, 3, 4}));
}

// The attention mask is a constant of the ring: a float mask that requires grad gets none, and
// broadcast masks ((L), (L_local, 1), ...) mean what they mean to scaled_dot_product_attention.
TEST(RingAttention, AttnMaskBroadcastsAndGetsNoGradient) {
  Communicator& comm = world();
  const int P = comm.size(), r = comm.rank();
  const Sharding s = Sharding::Zigzag;
  const int64_t L = 4 * P;
  Generator gen(23);
  Tensor q = attn::randn({2, 2, L, 4}, &gen), k = attn::randn({2, 2, L, 4}, &gen),
         v = attn::randn({2, 2, L, 4}, &gen);
  // (L): one additive bias per key; (L, 1): per query row (rows L/2 see nothing).
  Tensor key_bias = attn::randn({L}, &gen);
  Tensor row_mask = attn::ones({L, 1}, attn::Dtype::Bool);
  row_mask.data_ptr<bool>()[L / 2] = false;
  for (const Tensor& full : {key_bias, row_mask})
    for (bool causal : {false, true}) {
      Tensor qf = q.detach().requires_grad_();
      attn::SdpaOptions so;
      so.attn_mask = full;
      if (causal) {
        const Tensor tri = attn::causal_mask(L, L);
        so.attn_mask = full.dtype() == attn::Dtype::Bool
                           ? full & tri
                           : full.masked_fill(~tri, -std::numeric_limits<double>::infinity());
      }
      attn::scaled_dot_product_attention(qf, k, v, so).sum().backward();

      Tensor ql = shard_sequence(q, 2, r, P, s).detach().requires_grad_();
      RingOptions ro;
      ro.is_causal = causal, ro.sharding = s;
      ro.attn_mask = full.dim() == 2 ? shard_sequence(full, 0, r, P, s) : full;
      if (ro.attn_mask.dtype() == attn::Dtype::Float32)
        ro.attn_mask = ro.attn_mask.detach().requires_grad_();
      Tensor out = attn::distributed::ring_attention(ql, shard_sequence(k, 2, r, P, s),
                                                     shard_sequence(v, 2, r, P, s), ro);
      out.sum().backward();
      const std::string what =
          std::string(full.dim() == 1 ? "(L)" : "(L, 1)") + (causal ? " causal" : "");
      expect_close(ql.grad(), shard_sequence(qf.grad(), 2, r, P, s), "dq " + what);
      EXPECT_FALSE(ro.attn_mask.grad().defined()) << what;
    }
}

// Ranks that pass different shapes get an error on every rank, not a hang.
TEST(RingAttention, RanksThatDisagreeThrowEverywhere) {
  Communicator& comm = world();
  if (comm.size() == 1) GTEST_SKIP() << "needs 2 or more ranks";
  const int64_t L_local = comm.rank() == 0 ? 4 : 6;
  Tensor x = attn::zeros({1, 1, L_local, 4});
  const std::string message =
      error_of([&] { attn::distributed::ring_attention(x, x, x, {}, comm); });
  EXPECT_NE(message.find("ring_attention"), std::string::npos) << message;
  EXPECT_NE(message.find("differs across ranks"), std::string::npos) << message;
  // The attention mask is part of the agreement: rank 0 passes a bool mask, the others a float.
  Tensor y = attn::zeros({1, 1, 4, 4});
  RingOptions o;
  o.attn_mask = comm.rank() == 0 ? attn::ones({4, 4 * comm.size()}, attn::Dtype::Bool)
                                 : attn::zeros({4, 4 * comm.size()});
  const std::string mask_message =
      error_of([&] { attn::distributed::ring_attention(y, y, y, o, comm); });
  EXPECT_NE(mask_message.find("differs across ranks"), std::string::npos) << mask_message;
  EXPECT_NE(mask_message.find("attn_mask"), std::string::npos) << mask_message;
}

}  // namespace
