// bfloat16 and float16 (attn/half.h, Dtype::BFloat16 / Dtype::Float16): the conversions against
// references computed here from the formats' definitions (every one of the 65536 bit patterns
// back to float; float -> 2 bytes on every tie, overflow and subnormal boundary and on millions of
// random floats against a nearest-value search), then tensors of them: creation, to() both ways,
// copies, views, indexing, printing, elementwise arithmetic through float32, the ops that refuse
// them, safetensors and torch.save archives. (Bit-for-bit against PyTorch 1.13 itself:
// tests/python/test_dtypes_vs_torch.py.)
#include <attn/attn.h>
#include <attn/io.h>
#include <attn/torch_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using attn::BFloat16;
using attn::Dtype;
using attn::Half;
using attn::Tensor;
using attn::testing::contains;
using attn::testing::error_of;

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// float16's value from its definition: (-1)^s * 2^(e - 15) * 1.m, subnormal 2^-14 * 0.m.
double fp16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL;
  return s ? -v : v;
}

// bfloat16's value: (-1)^s * 2^(e - 127) * 1.m with 7 mantissa bits.
double bf16_value(uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 0xFF, m = b & 0x7F;
  double v = e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(128 + m), e - 134);
  if (e == 255) v = m ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL;
  return s ? -v : v;
}

// The 2-byte pattern nearest to f among the finite values `sorted` (the non-negative ones, in
// increasing order, with `beyond` the first value past the largest, which rounds to infinity):
// ties go to the even pattern. The sign is applied last.
template <typename Value>
uint16_t nearest(float f, const std::vector<std::pair<double, uint16_t>>& sorted, double beyond,
                 uint16_t inf) {
  const double a = std::fabs(double(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (a >= beyond) return uint16_t(sign | inf);
  auto it = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(a, uint16_t(0)));
  uint16_t pick;
  if (it == sorted.end()) {  // between the largest finite value and `beyond`
    const double lo = sorted.back().first;
    const double dlo = a - lo, dhi = beyond - a;
    pick = dlo < dhi || (dlo == dhi && !(sorted.back().second & 1)) ? sorted.back().second : inf;
  } else if (it->first == a || it == sorted.begin()) {
    pick = it->second;
  } else {
    const auto lo = *(it - 1), hi = *it;
    const double dlo = a - lo.first, dhi = hi.first - a;
    pick = dlo < dhi ? lo.second : dhi < dlo ? hi.second : (lo.second & 1) ? hi.second : lo.second;
  }
  return uint16_t(sign | pick);
}

std::vector<std::pair<double, uint16_t>> positive_values(double (*value)(uint16_t), uint16_t inf) {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t b = 0; b < inf; ++b) v.emplace_back(value(uint16_t(b)), uint16_t(b));
  return v;
}

// Floats that probe the rounding: every 2-byte value, the midpoints between neighbours and the
// floats just beside those midpoints, plus random bit patterns.
std::vector<float> probe_floats(double (*value)(uint16_t), uint16_t inf, int random_count) {
  std::vector<float> out;
  for (uint32_t b = 0; b < inf; ++b) {
    const double v = value(uint16_t(b));
    const double next =
        b + 1 < inf ? value(uint16_t(b + 1)) : 2 * value(uint16_t(b)) - value(uint16_t(b - 1));
    const float mid = float((v + next) / 2);  // exact: one bit more than the 2-byte mantissa
    for (float f : {float(v), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, HUGE_VALF)})
      out.insert(out.end(), {f, -f});
  }
  std::mt19937 rng(7);
  for (int i = 0; i < random_count; ++i) {
    const float f = float_of(rng());
    if (!std::isnan(f)) out.push_back(f);
  }
  for (float f : {0.0f, -0.0f, HUGE_VALF, -HUGE_VALF, 65504.0f, 65519.996f, 65520.0f, 65536.0f,
                  1e-8f, 5.96e-8f, 2.98e-8f, 2.9802322e-8f, 6.1e-5f, 3.4e38f, 1e-45f})
    out.insert(out.end(), {f, -f});
  return out;
}

TEST(Half, EveryFloat16PatternToFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = uint16_t(b);
    const float f = attn::fp16_bits_to_float(h);
    const double want = fp16_value(h);
    if (std::isnan(want)) {
      // A quiet NaN of the same sign keeping the 10 payload bits (as F16C and torch's code do).
      EXPECT_EQ(bits_of(f),
                (uint32_t(h & 0x8000) << 16) | 0x7FC00000u | (uint32_t(h & 0x3FF) << 13))
          << std::hex << b;
    } else {
      ASSERT_EQ(double(f), want) << std::hex << b;
      ASSERT_EQ(std::signbit(f), bool(h & 0x8000)) << std::hex << b;
    }
    EXPECT_EQ(bits_of(float(Half::from_bits(h))), bits_of(f));
  }
}

TEST(Half, EveryBfloat16PatternToFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = uint16_t(b);
    const float f = attn::bf16_bits_to_float(h);
    EXPECT_EQ(bits_of(f), b << 16);  // the exact bits, NaN payloads included
    const double want = bf16_value(h);
    if (!std::isnan(want)) ASSERT_EQ(double(f), want) << std::hex << b;
    EXPECT_EQ(bits_of(float(BFloat16::from_bits(h))), bits_of(f));
  }
}

TEST(Half, FloatToFloat16RoundsToNearestEven) {
  const auto table = positive_values(fp16_value, 0x7C00);
  std::size_t n = 0;
  for (float f : probe_floats(fp16_value, 0x7C00, 2'000'000)) {
    const uint16_t got = attn::float_to_fp16_bits(f);
    const uint16_t want = nearest<Half>(f, table, 65536.0, 0x7C00);
    ASSERT_EQ(got, want) << "f = " << f << " (0x" << std::hex << bits_of(f) << ")";
    ++n;
  }
  EXPECT_GT(n, 2'000'000u);
  // The boundaries, spelled out: the largest finite value, the tie with "65536" (even: inf),
  // the smallest subnormal and the ties below and above it.
  EXPECT_EQ(attn::float_to_fp16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(attn::float_to_fp16_bits(65519.996f), 0x7BFF);
  EXPECT_EQ(attn::float_to_fp16_bits(65520.0f), 0x7C00);
  EXPECT_EQ(attn::float_to_fp16_bits(-1e30f), 0xFC00);
  EXPECT_EQ(attn::float_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(attn::float_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie: even (zero)
  EXPECT_EQ(attn::float_to_fp16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(attn::float_to_fp16_bits(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 units: even (2)
  EXPECT_EQ(attn::float_to_fp16_bits(std::ldexp(1023.5f, -24)), 0x0400);      // into the normals
  EXPECT_EQ(attn::float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie: even
  EXPECT_EQ(attn::float_to_fp16_bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie: even (up)
  EXPECT_EQ(attn::float_to_fp16_bits(-0.0f), 0x8000);
  // NaN stays NaN, sign kept.
  EXPECT_EQ(attn::float_to_fp16_bits(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  EXPECT_EQ(attn::float_to_fp16_bits(float_of(0xFF800001u)), 0xFE00);
}

TEST(Half, FloatToBfloat16RoundsToNearestEven) {
  const auto table = positive_values(bf16_value, 0x7F80);
  const double beyond = std::ldexp(1.0, 128);
  for (float f : probe_floats(bf16_value, 0x7F80, 2'000'000)) {
    const uint16_t got = attn::float_to_bf16_bits(f);
    ASSERT_EQ(got, nearest<BFloat16>(f, table, beyond, 0x7F80))
        << "f = " << f << " (0x" << std::hex << bits_of(f) << ")";
  }
  EXPECT_EQ(attn::float_to_bf16_bits(float_of(0x3F808000u)), 0x3F80);  // tie: even (down)
  EXPECT_EQ(attn::float_to_bf16_bits(float_of(0x3F818000u)), 0x3F82);  // tie: even (up)
  EXPECT_EQ(attn::float_to_bf16_bits(float_of(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX: infinity
  EXPECT_EQ(attn::float_to_bf16_bits(float_of(0x00008000u)), 0x0000);  // subnormal tie: even
  EXPECT_EQ(attn::float_to_bf16_bits(float_of(0x00018000u)), 0x0002);
  // NaN stays NaN (every payload, even one the rounding would carry into infinity), sign kept.
  for (uint32_t u : {0x7F800001u, 0x7FFFFFFFu, 0x7FC00000u, 0xFF800001u, 0xFFFFFFFFu}) {
    const uint16_t b = attn::float_to_bf16_bits(float_of(u));
    EXPECT_TRUE(std::isnan(attn::bf16_bits_to_float(b))) << std::hex << u;
    EXPECT_EQ(b >> 15, u >> 31);
  }
}

// ---- tensors ------------------------------------------------------------------------------------

TEST(Dtypes, NamesSizesAndFloatingPoint) {
  EXPECT_EQ(attn::dtype_name(Dtype::BFloat16), "torch.bfloat16");
  EXPECT_EQ(attn::dtype_name(Dtype::Float16), "torch.float16");
  EXPECT_EQ(attn::itemsize(Dtype::BFloat16), 2u);
  EXPECT_EQ(attn::itemsize(Dtype::Float16), 2u);
  EXPECT_TRUE(attn::zeros({2}, Dtype::BFloat16).is_floating_point());
  EXPECT_TRUE(attn::zeros({2}, Dtype::Float16).is_floating_point());
  EXPECT_FALSE(attn::zeros({2}, Dtype::Int64).is_floating_point());
}

TEST(Dtypes, CreationFunctions) {
  for (Dtype dt : {Dtype::BFloat16, Dtype::Float16}) {
    Tensor z = attn::zeros({2, 3}, dt), o = attn::ones({4}, dt), e = attn::empty({3}, dt);
    Tensor f = attn::full({2}, 0.1, dt), t = attn::tensor({{1.5, -2.0}, {3.0, 1e-3}}, dt);
    for (const Tensor* x : {&z, &o, &e, &f, &t}) EXPECT_EQ(x->dtype(), dt);
    EXPECT_EQ(z.numel(), 6);
    EXPECT_EQ(z.to_float_vector(), std::vector<float>(6, 0.0f));
    EXPECT_EQ(o.to_float_vector(), std::vector<float>(4, 1.0f));
    // 0.1 rounded once to the 2-byte type (through float).
    const float tenth = dt == Dtype::BFloat16 ? float(BFloat16(0.1f)) : float(Half(0.1f));
    EXPECT_EQ(f.to_float_vector(), std::vector<float>(2, tenth));
    EXPECT_EQ(t.to_float_vector()[0], 1.5f);
    EXPECT_EQ(t.index({1, 1}).item<float>(),
              dt == Dtype::BFloat16 ? float(BFloat16(1e-3f)) : float(Half(1e-3f)));
    EXPECT_EQ(attn::zeros_like(t).dtype(), dt);
    EXPECT_EQ(attn::full_like(t, 2).dtype(), dt);
    EXPECT_EQ(attn::full({1}, 2.5, dt).item<double>(), 2.5);
  }
  EXPECT_EQ(attn::ones({2}, Dtype::BFloat16).data_ptr<BFloat16>()[1].bits, 0x3F80);
  EXPECT_EQ(attn::ones({2}, Dtype::Float16).data_ptr<Half>()[0].bits, 0x3C00);
  EXPECT_TRUE(contains(error_of([] { attn::ones({2}, Dtype::Float16).data_ptr<float>(); }),
                       "tensor has dtype torch.float16, asked for torch.float32"));
}

TEST(Dtypes, ConversionsBetweenAllDtypes) {
  const Tensor f = attn::tensor({0.0, -1.75, 3.3, 70000.0, 1e-7, -0.0});
  // float32 -> 2 bytes -> float32 is the rounding of each value; bool and int64 as torch.
  for (Dtype dt : {Dtype::BFloat16, Dtype::Float16}) {
    Tensor h = f.to(dt);
    EXPECT_EQ(h.dtype(), dt);
    const std::vector<float> back = h.to(Dtype::Float32).to_float_vector();
    const std::vector<float> src = f.to_float_vector();
    for (std::size_t i = 0; i < src.size(); ++i) {
      const float want = dt == Dtype::BFloat16 ? float(BFloat16(src[i])) : float(Half(src[i]));
      EXPECT_EQ(bits_of(back[i]), bits_of(want)) << i;
    }
    EXPECT_TRUE(
        attn::equal(h.to(Dtype::Bool), attn::tensor({false, true, true, true, true, false})))
        << h.to(Dtype::Bool);
    // To int64: truncated towards zero (70000 is inf in float16, left out).
    Tensor ints = h.slice(0, 0, 3).to(Dtype::Int64);
    EXPECT_TRUE(attn::equal(ints, attn::tensor({int64_t(0), int64_t(-1), int64_t(3)}))) << ints;
    // From int64 and bool.
    Tensor from_int = attn::tensor({int64_t(-3), int64_t(257), int64_t(4097)}).to(dt);
    const float want257 = dt == Dtype::BFloat16 ? 256.0f : 257.0f;
    const float want4097 = dt == Dtype::BFloat16 ? 4096.0f : 4096.0f;
    EXPECT_EQ(from_int.to_float_vector(), (std::vector<float>{-3.0f, want257, want4097}));
    EXPECT_EQ(attn::tensor({true, false}).to(dt).to_float_vector(),
              (std::vector<float>{1.0f, 0.0f}));
    // Between the two 2-byte types: through float (bfloat16's 1/3 is not a float16).
    const Dtype other = dt == Dtype::BFloat16 ? Dtype::Float16 : Dtype::BFloat16;
    Tensor third = attn::full({1}, 1.0 / 3.0, dt);
    const float v = third.item<float>();
    EXPECT_EQ(third.to(other).item<float>(),
              other == Dtype::BFloat16 ? float(BFloat16(v)) : float(Half(v)));
    EXPECT_TRUE(third.to(dt).is_same(third));  // same dtype: the tensor itself
  }
}

TEST(Dtypes, CopyCloneContiguousViewsAndIndexing) {
  Tensor base = attn::arange(0, 12).to(Dtype::BFloat16).reshape({3, 4});
  Tensor t = base.transpose(0, 1);
  EXPECT_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.dtype(), Dtype::BFloat16);
  EXPECT_EQ(c.to_float_vector(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(t.clone().to_float_vector(), c.to_float_vector());
  EXPECT_EQ(base[1][2].item<float>(), 6.0f);
  EXPECT_EQ(base.index({attn::indexing::Slice(), 1}).to_float_vector(),
            (std::vector<float>{1, 5, 9}));
  EXPECT_EQ(base.view({12}).narrow(0, 10, 2).to_float_vector(), (std::vector<float>{10, 11}));
  EXPECT_EQ(base.unsqueeze(0).expand({2, 3, 4}).contiguous().numel(), 24);
  EXPECT_EQ(base.permute({1, 0}).flatten().numel(), 12);
  EXPECT_EQ(base.select(1, 3).squeeze().to_float_vector(), (std::vector<float>{3, 7, 11}));
  // A view writes its base; copy_ converts from any dtype, broadcasting.
  base[0].copy_(attn::tensor({1.0, 2.0, 3.0, 0.1}));
  EXPECT_EQ(base[0].to_float_vector(), (std::vector<float>{1, 2, 3, float(BFloat16(0.1f))}));
  Tensor f32 = attn::zeros({3, 4});
  f32.copy_(base);
  EXPECT_EQ(f32.to_float_vector(), base.to_float_vector());
  Tensor h = attn::zeros({2, 2}, Dtype::Float16);
  h.copy_(attn::tensor({int64_t(5), int64_t(-6)}));
  EXPECT_EQ(h.to_float_vector(), (std::vector<float>{5, -6, 5, -6}));
  h.fill_(0.5);
  EXPECT_EQ(h.to_float_vector(), std::vector<float>(4, 0.5f));
  h.zero_();
  EXPECT_EQ(h.to_float_vector(), std::vector<float>(4, 0.0f));
  // Advanced indexing: gathers and puts 2-byte elements.
  Tensor idx = attn::tensor({int64_t(2), int64_t(0)});
  EXPECT_EQ(base.index({idx}).dtype(), Dtype::BFloat16);
  EXPECT_EQ(base.index({idx, 1}).to_float_vector(), (std::vector<float>{9, 2}));
  Tensor mask = base > attn::Scalar(8);
  EXPECT_EQ(base.index({mask}).to_float_vector(), (std::vector<float>{9, 10, 11}));
  base.index_put_({mask}, 0.25);
  EXPECT_EQ(base.index({2}).to_float_vector(), (std::vector<float>{8, 0.25, 0.25, 0.25}));
  EXPECT_EQ(base.masked_fill(base == attn::Scalar(8), -1).index({2, 0}).item<float>(), -1.0f);
  EXPECT_EQ(attn::where(mask, base, attn::zeros({3, 4}, Dtype::BFloat16)).dtype(), Dtype::BFloat16);
  // cat, stack, split, gather / scatter, index_select, tril: data movement in the 2-byte type.
  Tensor cat = attn::cat({base, base}, 0);
  EXPECT_EQ(cat.dtype(), Dtype::BFloat16);
  EXPECT_EQ(cat.shape(), (attn::Shape{6, 4}));
  EXPECT_EQ(attn::stack({base, base}).shape(), (attn::Shape{2, 3, 4}));
  EXPECT_EQ(base.split(2, 1)[1].to_float_vector(),
            base.slice(1, 2, 4).contiguous().to_float_vector());
  Tensor g = base.gather(1, attn::tensor({{int64_t(3)}, {int64_t(0)}, {int64_t(0)}}));
  EXPECT_EQ(g.to_float_vector(), (std::vector<float>{float(BFloat16(0.1f)), 4, 8}));
  EXPECT_EQ(base.index_select(0, attn::tensor({int64_t(1)})).to_float_vector(),
            (std::vector<float>{4, 5, 6, 7}));
  Tensor sc = attn::zeros({3}, Dtype::Float16)
                  .scatter_add(0, attn::tensor({int64_t(1), int64_t(1)}),
                               attn::tensor({0.5, 0.25}).to(Dtype::Float16));
  EXPECT_EQ(sc.to_float_vector(), (std::vector<float>{0, 0.75, 0}));
  EXPECT_EQ(attn::ones({2, 2}, Dtype::Float16).tril().to_float_vector(),
            (std::vector<float>{1, 0, 1, 1}));
}

TEST(Dtypes, ItemComparisonsEqualAllclose) {
  Tensor a = attn::tensor({1.0, 2.0, 3.0}, Dtype::Float16);
  Tensor b = attn::tensor({1.0, 2.0, 3.0}, Dtype::BFloat16);
  EXPECT_EQ(a[2].item<float>(), 3.0f);
  EXPECT_EQ(a[2].item<double>(), 3.0);
  EXPECT_EQ(a[2].item<int64_t>(), 3);
  EXPECT_TRUE(a[2].item<bool>());
  EXPECT_TRUE(attn::equal(a, a.clone()));
  EXPECT_TRUE(attn::equal(a, b));  // compared in float32
  EXPECT_TRUE(attn::allclose(a, attn::tensor({1.0, 2.0, 3.00001})));
  EXPECT_TRUE(attn::equal(a < attn::Scalar(2.5), attn::tensor({true, true, false})));
  EXPECT_TRUE(attn::equal(a == b, attn::tensor({true, true, true})));
  EXPECT_TRUE(
      attn::equal(attn::tensor({1.0, NAN}, Dtype::BFloat16).isnan(), attn::tensor({false, true})));
}

TEST(Dtypes, ElementwiseArithmeticRoundsEachResultOnce) {
  std::mt19937 rng(3);
  std::normal_distribution<float> N(0, 3);
  std::vector<float> xs(257), ys(257);
  for (auto& v : xs) v = N(rng);
  for (auto& v : ys) v = N(rng);
  for (Dtype dt : {Dtype::BFloat16, Dtype::Float16}) {
    const auto round = [dt](float v) {
      return dt == Dtype::BFloat16 ? float(BFloat16(v)) : float(Half(v));
    };
    Tensor x = attn::from_vector(xs, {257}).to(dt), y = attn::from_vector(ys, {257}).to(dt);
    const std::vector<float> fx = x.to_float_vector(), fy = y.to_float_vector();
    struct Case {
      Tensor got;
      float (*f)(float, float);
    };
    const std::vector<Case> cases = {
        {x + y, [](float p, float q) { return p + q; }},
        {x - y, [](float p, float q) { return p - q; }},
        {x * y, [](float p, float q) { return p * q; }},
        {x / y, [](float p, float q) { return p / q; }},
        {attn::maximum(x, y), [](float p, float q) { return std::max(p, q); }},
    };
    for (const auto& c : cases) {
      ASSERT_EQ(c.got.dtype(), dt);
      const std::vector<float> got = c.got.to_float_vector();
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(bits_of(got[i]), bits_of(round(c.f(fx[i], fy[i])))) << i;
    }
    // A Python-like float scalar keeps the dtype; the scalar is rounded to it first (as torch).
    Tensor s = x * 0.1;
    EXPECT_EQ(s.dtype(), dt);
    EXPECT_EQ(s.to_float_vector()[3], round(fx[3] * round(0.1f)));
    EXPECT_EQ((x + 1).dtype(), dt);
    EXPECT_EQ((x / 2).dtype(), dt);
    EXPECT_EQ((x + attn::tensor(0.5)).dtype(), dt);  // a 0-dim float32 tensor: like a scalar
    EXPECT_EQ((x + attn::ones({257})).dtype(), Dtype::Float32);
    EXPECT_EQ((x + attn::ones({257}, Dtype::Int64)).dtype(), dt);
    EXPECT_EQ((attn::arange(0, 3) * attn::tensor(2.0, dt)).dtype(), dt);
    EXPECT_EQ((x.exp()).dtype(), dt);
    EXPECT_EQ(x.exp().to_float_vector()[5], round(std::exp(fx[5])));
    EXPECT_EQ(x.abs().to_float_vector()[0], std::fabs(fx[0]));
    EXPECT_EQ((-x).to_float_vector()[1], -fx[1]);
    EXPECT_EQ(x.relu().dtype(), dt);
    EXPECT_EQ(x.clamp(-1.0, 1.0).dtype(), dt);
    EXPECT_EQ(x.clamp(-1.0, 1.0).to_float_vector()[7], std::clamp(fx[7], -1.0f, 1.0f));
    Tensor z = x.clone();
    z.add_(1.5);
    EXPECT_EQ(z.to_float_vector()[2], round(fx[2] + 1.5f));
    z.mul_(attn::ones({257}));  // a float32 operand written into the 2-byte tensor
    EXPECT_EQ(z.dtype(), dt);
    z.exp_();
    EXPECT_EQ(z.dtype(), dt);
    // Exact selections: max, min, sort, topk through float32.
    auto [mv, mi] = x.max(0);
    EXPECT_EQ(mv.dtype(), dt);
    EXPECT_EQ(mv.item<float>(), *std::max_element(fx.begin(), fx.end()));
    EXPECT_EQ(std::get<0>(x.sort()).dtype(), dt);
    EXPECT_EQ(std::get<0>(x.topk(3)).to_float_vector()[0], mv.item<float>());
    // bfloat16 with float16 meets in float32, as torch promotes them.
    const Dtype other = dt == Dtype::BFloat16 ? Dtype::Float16 : Dtype::BFloat16;
    EXPECT_EQ((x + y.to(other)).dtype(), Dtype::Float32);
  }
  // An int64 tensor cannot hold a float result in place.
  Tensor ints = attn::ones({2}, Dtype::Int64);
  EXPECT_TRUE(
      contains(error_of([&] { ints.add_(attn::ones({2}, Dtype::BFloat16)); }),
               "result type BFloat16 can't be cast to the desired output type torch.int64"));
}

// bfloat16 / float16 values rounded from float (as Tensor::to rounds), and back.
std::vector<float> rounded(const std::vector<float>& v, Dtype dt) {
  return attn::from_vector(v, {int64_t(v.size())}).to(dt).to_float_vector();
}

// The ops that compute take the 2-byte floats with PyTorch's CPU semantics: each result is the
// float computation rounded once to the dtype (here: against a naive double loop, rounded).
TEST(Dtypes, OpsComputeThemInFloatAndRoundOnce) {
  for (const Dtype dt : {Dtype::BFloat16, Dtype::Float16}) {
    const int64_t M = 5, N = 37, K = 70;
    std::vector<float> xv(M * K), wv(N * K), bv(N);
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * float(i));
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11f * float(i)) * 0.5f;
    for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = 0.01f * float(i);
    xv = rounded(xv, dt), wv = rounded(wv, dt), bv = rounded(bv, dt);
    const Tensor x = attn::from_vector(xv, {M, K}).to(dt), w = attn::from_vector(wv, {N, K}).to(dt),
                 b = attn::from_vector(bv, {N}).to(dt);
    std::vector<float> want(M * N), row_sum(M);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double s = bv[n];
        for (int64_t k = 0; k < K; ++k) s += double(xv[m * K + k]) * wv[n * K + k];
        want[m * N + n] = float(s);
      }
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += xv[m * K + k];
      row_sum[m] = float(s);
    }
    const auto close = [dt](const std::vector<float>& got, const std::vector<float>& exact) {
      const std::vector<float> ref = rounded(exact, dt);
      const float ulp = dt == Dtype::BFloat16 ? 1.0f / 128 : 1.0f / 1024;
      for (std::size_t i = 0; i < ref.size(); ++i)
        if (std::abs(got[i] - ref[i]) > ulp * std::abs(ref[i])) return false;
      return true;
    };
    const Tensor y = attn::nn::functional::linear(x, w, b);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(close(y.to_float_vector(), want)) << dtype_name(dt);
    EXPECT_TRUE(close(x.sum({1}).to_float_vector(), row_sum)) << dtype_name(dt);
    for (const Tensor& r : {attn::matmul(x, w.T()), x.softmax(-1), x.cumsum(1),
                            attn::nn::functional::layer_norm(x, K), attn::nn::functional::gelu(x)})
      EXPECT_EQ(r.dtype(), dt);
    // Mixed 2-byte and float32 operands of a product are refused, as torch does.
    EXPECT_TRUE(contains(error_of([&] { attn::matmul(attn::ones({2, K}), w.T()); }), "same dtype"));
    // Gradients flow in the dtype.
    Tensor xg = x.clone().requires_grad_();
    attn::nn::functional::linear(xg, w, b).sum().backward();
    EXPECT_EQ(xg.grad().dtype(), dt);
  }
}

// x @ W with a 2-byte W used as stored (K, N) or transposed (x @ W.T), no gradient to record: W
// is read in its dtype (streamed for few rows of x; oneDNN's bfloat16 matmul, or sgemm over
// widened blocks, for more) with the widening path's arithmetic, float sums rounded once; with a
// gradient to record, the widening path itself.
TEST(Dtypes, RowsTimesAHalfMatrixRoundOnceInEveryLayout) {
  const int64_t K = 70, N = 45;  // N not a multiple of the kernel's column blocks
  for (const Dtype dt : {Dtype::BFloat16, Dtype::Float16}) {
    std::vector<float> wv(K * N);
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.13f * float(i)) * 0.5f;
    wv = rounded(wv, dt);
    const Tensor w = attn::from_vector(wv, {K, N}).to(dt);  // (K, N)
    const Tensor wt = w.T().contiguous();                   // (N, K): wt.T() is w
    for (const int64_t M : {1, 2, 5, 8, 9, 12, 33, 100}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " M " + std::to_string(M));
      std::vector<float> xv(M * K), want(M * N);
      for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.29f * float(i) + M);
      xv = rounded(xv, dt);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += double(xv[m * K + k]) * wv[k * N + n];
          want[m * N + n] = float(s);
        }
      const std::vector<float> ref = rounded(want, dt);
      const float ulp = dt == Dtype::BFloat16 ? 1.0f / 128 : 1.0f / 1024;
      const Tensor x = attn::from_vector(xv, {M, K}).to(dt);
      for (const Tensor& y : {attn::matmul(x, w), attn::matmul(x, wt.T()),
                              attn::matmul(x.view({1, M, K}), w).view({M, N})}) {
        EXPECT_EQ(y.dtype(), dt);
        const std::vector<float> got = y.to_float_vector();
        ASSERT_EQ(got.size(), ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i)
          EXPECT_LE(std::abs(got[i] - ref[i]), ulp * std::abs(ref[i]) + 1e-6f) << i;
      }
    }
    // A vector times the matrix: (K) @ (K, N) is (N).
    const Tensor v = attn::from_vector(std::vector<float>(K, 0.5f), {K}).to(dt);
    EXPECT_EQ(attn::matmul(v, w).shape(), (attn::Shape{N}));
    // With a gradient to record, the gradient reaches x in the dtype.
    Tensor xg = attn::ones({3, K}).to(dt).requires_grad_();
    attn::matmul(xg, w).sum().backward();
    EXPECT_EQ(xg.grad().dtype(), dt);
    EXPECT_TRUE(attn::allclose(xg.grad().to(Dtype::Float32),
                               w.to(Dtype::Float32).sum({1}).view({1, K}).expand({3, K}), 1e-2,
                               1e-2));
  }
}

// torch.autocast("cpu"): the products convert float32 operands, the graph brings gradients back
// in float32, guards nest and restore.
TEST(Dtypes, AutocastGuardRunsProductsInItsDtype) {
  Tensor w = attn::ones({3, 4}).requires_grad_();
  const Tensor x = attn::ones({2, 4});
  {
    attn::AutocastGuard on(Dtype::BFloat16);
    const Tensor y = attn::nn::functional::linear(x, w);
    EXPECT_EQ(y.dtype(), Dtype::BFloat16);
    EXPECT_EQ(attn::matmul(x, x.T()).dtype(), Dtype::BFloat16);
    {
      attn::AutocastGuard off(std::nullopt);
      EXPECT_EQ(attn::matmul(x, x.T()).dtype(), Dtype::Float32);
    }
    EXPECT_EQ(attn::autocast_dtype(), Dtype::BFloat16);
    y.sum().backward();
  }
  EXPECT_FALSE(attn::autocast_dtype().has_value());
  EXPECT_EQ(w.grad().dtype(), Dtype::Float32);
  EXPECT_EQ(w.grad().to_float_vector(), std::vector<float>(12, 2.0f));
  EXPECT_TRUE(contains(error_of([] { attn::set_autocast_dtype(Dtype::Int64); }), "bfloat16"));
}

// What still refuses the 2-byte floats: drawing random numbers into them.
TEST(Dtypes, RandomDrawsRefuseThemNamingFunctionAndDtype) {
  const Tensor x = attn::ones({2, 3}, Dtype::BFloat16), h = attn::ones({2, 3}, Dtype::Float16);
  struct Case {
    const char* fn;
    std::function<void()> call;
  };
  const std::vector<Case> cases = {
      {"random_",
       [&] {
         Tensor y = x.clone();
         attn::random_(y);
       }},
      {"randperm", [&] { attn::randperm(4, nullptr, Dtype::Float16); }},
      {"uniform_",
       [&] {
         Tensor y = h.clone();
         attn::uniform_(y);
       }},
      {"multinomial", [&] { h[0].multinomial(1); }},
      {"exponential_", [&] { x.clone().exponential_(); }},
  };
  for (const auto& c : cases) {
    const std::string m = error_of(c.call);
    EXPECT_TRUE(contains(m, std::string("[") + c.fn + "]") && contains(m, "torch.") &&
                (contains(m, "bfloat16") || contains(m, "float16")) && contains(m, ".float()"))
        << c.fn << ": " << m;
  }
  // Integer tensors cannot require grad.
  EXPECT_TRUE(
      contains(error_of([&] { attn::ones({2}, Dtype::Int64).requires_grad_(); }), "torch.int64"));
}

TEST(Dtypes, PrintingMatchesTorch) {
  // Strings printed by PyTorch 1.13 for the same tensors.
  EXPECT_EQ(attn::tensor({1.0, 2.0}, Dtype::BFloat16).repr(),
            "tensor([1., 2.], dtype=torch.bfloat16)");
  EXPECT_EQ(attn::tensor({1.0, 2.5, -3.14159, 1e-5}, Dtype::BFloat16).repr(),
            "tensor([ 1.0000e+00,  2.5000e+00, -3.1406e+00,  1.0014e-05],\n"
            "       dtype=torch.bfloat16)");
  EXPECT_EQ(attn::tensor(3.5, Dtype::Float16).repr(), "tensor(3.5000, dtype=torch.float16)");
  EXPECT_EQ(attn::zeros({0}, Dtype::Float16).repr(), "tensor([], dtype=torch.float16)");
  EXPECT_EQ(attn::zeros({2, 0}, Dtype::BFloat16).repr(),
            "tensor([], size=(2, 0), dtype=torch.bfloat16)");
  EXPECT_EQ(attn::tensor({{1.0, 65504.0, 70000.0}, {1e-8, -0.0, NAN}}, Dtype::Float16).repr(),
            "tensor([[1.0000e+00, 6.5504e+04,        inf],\n"
            "        [0.0000e+00, -0.0000e+00,        nan]], dtype=torch.float16)");
  EXPECT_EQ(attn::tensor({0.1, 0.2, 0.3}, Dtype::Float16).repr(),
            "tensor([0.1000, 0.2000, 0.3000], dtype=torch.float16)");
  EXPECT_EQ(attn::tensor({0.3}, Dtype::BFloat16).repr(), "tensor([0.3008], dtype=torch.bfloat16)");
}

TEST(Dtypes, SafetensorsRoundTripKeepsTheBytes) {
  const Tensor b = attn::tensor({{1.0, -2.5}, {0.1, 1e30}}, Dtype::BFloat16);
  const Tensor h = attn::tensor({65504.0, 1e-7, -0.0}, Dtype::Float16);
  const std::string bytes =
      attn::io::to_safetensors({{"b", b.T()}, {"h", h}});  // a strided one made contiguous
  EXPECT_TRUE(contains(bytes, R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]})"))
      << bytes;
  EXPECT_TRUE(contains(bytes, R"("h":{"dtype":"F16","shape":[3],"data_offsets":[8,14]})"));
  // The raw little-endian 2-byte patterns.
  const std::size_t data = bytes.size() - 14;
  uint16_t first;
  std::memcpy(&first, bytes.data() + data, 2);
  EXPECT_EQ(first, 0x3F80);  // bfloat16 1.0
  std::memcpy(&first, bytes.data() + data + 8, 2);
  EXPECT_EQ(first, 0x7BFF);  // float16 65504
  const attn::io::SafeTensors st = attn::io::from_safetensors(bytes);
  EXPECT_EQ(st.at("b").dtype(), Dtype::BFloat16);
  EXPECT_EQ(st.at("h").dtype(), Dtype::Float16);
  EXPECT_TRUE(attn::equal(st.at("b"), b.T()));
  EXPECT_TRUE(attn::equal(st.at("h"), h));
  // Loading into a float32 model converts, as load_state_dict copies (torch's copy_).
  attn::nn::Linear lin(2, 2, /*bias=*/false);
  lin.load_state_dict({{"weight", b}});
  EXPECT_EQ(lin.weight.dtype(), Dtype::Float32);
  EXPECT_EQ(lin.weight.to_float_vector(), b.to_float_vector());
}

TEST(Dtypes, TorchArchivesHoldHalfAndBfloat16Storages) {
  const Tensor b = attn::tensor({{1.0, -2.5}, {0.1, 3.0}}, Dtype::BFloat16);
  const Tensor h = attn::tensor({65504.0, 1e-7, -0.0}, Dtype::Float16);
  using attn::io::Value;
  const Value root = Value::dict({{"b", Value(b.T())}, {"h", Value(h)}}, true);
  const std::string bytes = attn::io::to_torch_archive(root);
  EXPECT_TRUE(contains(bytes, "BFloat16Storage"));
  EXPECT_TRUE(contains(bytes, "HalfStorage"));
  const Value got = attn::io::from_torch_archive(bytes, "mem");
  const Tensor& gb = got.at("b").as_tensor();
  EXPECT_EQ(gb.dtype(), Dtype::BFloat16);
  EXPECT_EQ(gb.strides(), (attn::Shape{1, 2}));  // the view, as written
  EXPECT_TRUE(attn::equal(gb, b.T()));
  EXPECT_EQ(got.at("h").as_tensor().dtype(), Dtype::Float16);
  EXPECT_TRUE(attn::equal(got.at("h").as_tensor(), h));
}

}  // namespace
