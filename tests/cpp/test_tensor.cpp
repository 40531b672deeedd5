// Tests for the tensor core (src/tensor/, src/ops/{elementwise,reduce,linalg}.cpp and
// the softmax kernel) against PyTorch 1.13 semantics. Expected values come from naive loops over
// the raw storage (independent of the code under test) or, where marked "torch:", from PyTorch's
// own output for the same input.
#include <attn/device.h>
#include <attn/ops.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace attn {
namespace {

using indexing::Ellipsis;
using indexing::None;
using indexing::Slice;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- helpers -----------------------------------------------------------------------------------

// Calls f(idx) for every multi-index of `shape` in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& f) {
  for (auto s : shape)
    if (s == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    f(idx);
    int64_t d = int64_t(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Element of `t` at `idx` read straight from storage with t's strides. `idx` may be longer than
// t's dims (right-aligned) and may exceed size-1 dims: the numpy broadcasting rule.
double at(const Tensor& t, const Shape& idx) {
  int64_t off = t.storage_offset();
  const int64_t lead = int64_t(idx.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.shape()[i] != 1) off += idx[lead + i] * t.strides()[i];
  const void* base = t.impl()->storage->data;
  switch (t.dtype()) {
    case Dtype::Float32: return static_cast<const float*>(base)[off];
    case Dtype::Int64: return double(static_cast<const int64_t*>(base)[off]);
    case Dtype::Bool: return static_cast<const bool*>(base)[off] ? 1.0 : 0.0;
    case Dtype::BFloat16: return float(static_cast<const attn::BFloat16*>(base)[off]);
    case Dtype::Float16: return float(static_cast<const attn::Half*>(base)[off]);
  }
  return 0;
}

int64_t at_int(const Tensor& t, const Shape& idx) {
  int64_t off = t.storage_offset();
  for (int64_t i = 0; i < t.dim(); ++i) off += idx[i] * t.strides()[i];
  return static_cast<const int64_t*>(t.impl()->storage->data)[off];
}

// All elements, row-major, as doubles (read through the strides).
std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for_each_index(t.shape(), [&](const Shape& i) { out.push_back(at(t, i)); });
  return out;
}

std::vector<int64_t> int_values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), Dtype::Int64);
  std::vector<int64_t> out;
  for_each_index(t.shape(), [&](const Shape& i) { out.push_back(at_int(t, i)); });
  return out;
}

// Deterministic values in [-2, 2), exactly representable (multiples of 2^-10).
std::vector<float> lcg_values(int64_t n, uint32_t seed) {
  std::vector<float> out(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& v : out) {
    x = x * 1664525u + 1013904223u;
    v = float(int32_t(x >> 20) - 2048) / 1024.0f;
  }
  return out;
}

Tensor rnd(Shape shape, uint32_t seed) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return from_vector(lcg_values(n, seed), shape);
}

bool same_storage(const Tensor& a, const Tensor& b) {
  return a.impl()->storage->data == b.impl()->storage->data;
}

// Exact comparison of shape, dtype and values (NaN equal to NaN).
void expect_tensor(const Tensor& t, const Shape& shape, Dtype dtype,
                   const std::vector<double>& want) {
  ASSERT_EQ(t.shape(), shape) << shape_str(t.shape());
  ASSERT_EQ(t.dtype(), dtype) << dtype_name(t.dtype());
  auto got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " is " << got[i];
    else
      EXPECT_EQ(got[i], want[i]) << "element " << i;
  }
}

// |got - want| <= atol + rtol |want| elementwise, NaN only against NaN, inf exactly.
void expect_close(const Tensor& t, const std::vector<double>& want, double rtol, double atol) {
  auto got = values(t);
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (std::size_t i = 0; i < got.size() && failures < 5; ++i) {
    bool ok = std::isnan(want[i]) ? std::isnan(got[i])
              : std::isinf(want[i])
                  ? got[i] == want[i]
                  : std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
}

// The statement must throw E (IndexError is checked exactly; Error accepts any attn::Error)
// with a message starting with `prefix` and containing each of `parts`.
template <typename E, typename F>
void expect_error(F&& f, const std::string& prefix, const std::vector<std::string>& parts = {}) {
  try {
    f();
  } catch (const Error& e) {
    std::string what = e.what();
    if (std::is_same_v<E, IndexError>) {
      EXPECT_NE(dynamic_cast<const IndexError*>(&e), nullptr) << "not an IndexError: " << what;
    }
    EXPECT_EQ(what.rfind(prefix, 0), 0u)
        << "message \"" << what << "\" should start with " << prefix;
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "\"" << what << "\" lacks \"" << p << "\"";
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-attn exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

#define EXPECT_ERR(prefix, ...)                                \
  do {                                                         \
    SCOPED_TRACE(#__VA_ARGS__);                                \
    expect_error<Error>([&] { (void)(__VA_ARGS__); }, prefix); \
  } while (0)
#define EXPECT_INDEX_ERR(prefix, ...)                               \
  do {                                                              \
    SCOPED_TRACE(#__VA_ARGS__);                                     \
    expect_error<IndexError>([&] { (void)(__VA_ARGS__); }, prefix); \
  } while (0)

// ---- metadata -----------------------------------------------------------------------------------

TEST(TensorMeta, ShapesStridesContiguity) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_EQ(x.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.stride(-3), 12);
  EXPECT_EQ(x.storage_offset(), 0);
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.dtype(), Dtype::Float32);

  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.contiguous().is_contiguous());
  EXPECT_TRUE(x.contiguous().is_same(x));  // contiguous() of a contiguous tensor is itself

  // Size-1 dims may have any stride; empty tensors are contiguous whatever their strides.
  EXPECT_TRUE(zeros({3, 1}).transpose(0, 1).is_contiguous());
  EXPECT_TRUE(zeros({0, 3}).transpose(0, 1).is_contiguous());  // torch: True

  Tensor s = tensor(5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.strides().empty());
  EXPECT_INDEX_ERR("[size]", s.size(0));  // torch: IndexError, no dimensions
  EXPECT_INDEX_ERR("[stride]", s.stride(-1));
  EXPECT_INDEX_ERR("[size]", x.size(3));
  EXPECT_INDEX_ERR("[size]", x.size(-4));
  EXPECT_ERR("[Tensor]", Tensor().shape());
  EXPECT_ERR("[data_ptr]", x.data_ptr<int64_t>());
}

TEST(TensorMeta, ItemAndConversion) {
  EXPECT_EQ(tensor(2.5).item<float>(), 2.5f);
  EXPECT_EQ(tensor({7}).item<int64_t>(), 7);
  EXPECT_EQ(tensor(true).item<bool>(), true);
  EXPECT_ERR("[item]", zeros({2}).item<float>());
  expect_tensor(tensor({1.5, -2.7, 0.0}).to(Dtype::Int64), {3}, Dtype::Int64, {1, -2, 0});
  expect_tensor(tensor({1.5, 0.0, kNaN}).to(Dtype::Bool), {3}, Dtype::Bool, {1, 0, 1});
  expect_tensor(tensor({true, false}).float_(), {2}, Dtype::Float32, {1, 0});
  Tensor a = tensor({1.0, 2.0});
  EXPECT_TRUE(a.to(Dtype::Float32).is_same(a));
  Tensor c = a.clone();
  EXPECT_FALSE(same_storage(a, c));
  c.fill_(3);
  expect_tensor(a, {2}, Dtype::Float32, {1, 2});
  EXPECT_ERR("[copy_]", zeros({2, 3}).copy_(zeros({3, 2})));
  EXPECT_ERR("[copy_]", zeros({3}).copy_(zeros({2, 3})));
}

// ---- views --------------------------------------------------------------------------------------

TEST(TensorViews, ViewSharesStorageAndInfers) {
  Tensor x = arange(24).float_();
  Tensor v = x.view({2, -1, 4});
  EXPECT_EQ(v.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(same_storage(v, x));
  v.index_put_({1, 2, 3}, 100.0);
  EXPECT_EQ(x.index({23}).item<float>(), 100.0f);
  EXPECT_EQ(x.view({-1}).shape(), (Shape{24}));
  EXPECT_EQ(tensor(3.0).view({-1}).shape(), (Shape{1}));
  EXPECT_EQ(tensor(3.0).view({}).shape(), (Shape{}));
  EXPECT_EQ(zeros({0, 3}).view({-1, 2}).shape(), (Shape{0, 2}));

  EXPECT_ERR("[view]", x.view({-1, -1}));
  EXPECT_ERR("[view]", x.view({5, -1}));
  EXPECT_ERR("[view]", x.view({5, 5}));
  EXPECT_ERR("[view]", x.view({-2, 12}));
  EXPECT_ERR("[reshape]", zeros({0, 3}).reshape({0, -1}));  // -1 ambiguous for 0 elements
}

TEST(TensorViews, ViewOfTransposedThrowsReshapeCopies) {
  Tensor x = arange(6).view({2, 3});
  Tensor t = x.T();
  expect_error<Error>([&] { t.view({6}); }, "[view]", {"(6,)", "reshape"});
  Tensor r = t.reshape({6});
  EXPECT_FALSE(same_storage(r, x));
  EXPECT_EQ(int_values(r), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  // A transposed view that is still viewable: splitting a dim keeps the storage.
  Tensor y = zeros({4, 6}).transpose(0, 1);  // (6, 4) strides (1, 6)
  Tensor yv = y.view({2, 3, 4});
  EXPECT_TRUE(same_storage(yv, y));
  EXPECT_EQ(yv.strides(), (Shape{3, 1, 6}));
  // reshape of a contiguous tensor is a view
  EXPECT_TRUE(same_storage(x.reshape({3, 2}), x));
  EXPECT_EQ(x.flatten().shape(), (Shape{6}));
  EXPECT_EQ(zeros({2, 3, 4, 5}).flatten(1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(tensor(1.0).flatten().shape(), (Shape{1}));
  EXPECT_ERR("[flatten]", zeros({2, 3}).flatten(1, 0));
}

TEST(TensorViews, TransposePermuteShareStorage) {
  Tensor base = arange(24).view({2, 3, 4});
  Tensor t = base.transpose(0, 2);  // (4, 3, 2)
  t.index_put_({1, 2, 0}, 100);
  EXPECT_EQ(at_int(base, {0, 2, 1}), 100);
  Tensor p = base.permute({1, -1, 0});  // (3, 4, 2)
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(p.strides(), (Shape{4, 1, 12}));
  p.index_put_({0, 3, 1}, -5);
  EXPECT_EQ(at_int(base, {1, 0, 3}), -5);
  EXPECT_EQ(base.T().shape(), (Shape{4, 3, 2}));  // all dims reversed, as torch's deprecated .T
  EXPECT_EQ(zeros({3}).T().shape(), (Shape{3}));
  EXPECT_EQ(base.mT().shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(base.mT().strides(), (Shape{12, 1, 4}));
  EXPECT_ERR("[mT]", zeros({3}).mT());
  EXPECT_ERR("[permute]", base.permute({0, 0, 1}));
  EXPECT_ERR("[permute]", base.permute({0, 1}));
  EXPECT_INDEX_ERR("[permute]", base.permute({0, 1, 3}));
  EXPECT_INDEX_ERR("[transpose]", base.transpose(0, 3));
}

TEST(TensorViews, UnsqueezeSqueezeExpand) {
  Tensor base = arange(6).view({2, 3});
  Tensor u = base.unsqueeze(-1);
  EXPECT_EQ(u.shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(base.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(base.unsqueeze(1).strides(), (Shape{3, 3, 1}));
  EXPECT_EQ(tensor(1).unsqueeze(0).shape(), (Shape{1}));
  EXPECT_INDEX_ERR("[unsqueeze]", base.unsqueeze(3));
  u.index_put_({1, 2, 0}, 42);
  EXPECT_EQ(at_int(base, {1, 2}), 42);

  Tensor s = zeros({2, 1, 3, 1});
  EXPECT_EQ(s.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(s.squeeze(1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(s.squeeze(0).shape(), (Shape{2, 1, 3, 1}));  // not size 1: unchanged
  EXPECT_EQ(s.squeeze(-1).shape(), (Shape{2, 1, 3}));
  EXPECT_TRUE(same_storage(s.squeeze(), s));

  Tensor r = tensor({1.0, 2.0, 3.0});
  Tensor e = r.expand({2, -1});
  EXPECT_EQ(e.shape(), (Shape{2, 3}));
  EXPECT_EQ(e.strides(), (Shape{0, 1}));  // torch: (0, 1)
  EXPECT_TRUE(same_storage(e, r));
  r.index_put_({1}, 20.0);
  EXPECT_EQ(at(e, {1, 1}), 20.0);
  EXPECT_EQ(zeros({2, 1}).expand({3, 2, 4}).strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(zeros({2, 3}).expand({1, -1, 3}).shape(), (Shape{1, 2, 3}));
  EXPECT_ERR("[expand]", zeros({2, 3}).expand({3, 3}));
  EXPECT_ERR("[expand]", zeros({2, 3}).expand({3}));
  EXPECT_ERR("[expand]", zeros({2, 3}).expand({-1, 2, 3}));
}

TEST(TensorViews, SelectSliceNarrowShareStorage) {
  Tensor base = zeros({4, 5});
  base.select(1, -2).fill_(7.0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(at(base, {i, 3}), 7.0);
  Tensor sl = base.slice(0, 1, std::nullopt, 2);  // rows 1, 3
  EXPECT_EQ(sl.shape(), (Shape{2, 5}));
  EXPECT_EQ(sl.strides(), (Shape{10, 1}));
  EXPECT_EQ(sl.storage_offset(), 5);
  sl.fill_(1.0);
  expect_tensor(base.sum({1}), {4}, Dtype::Float32, {7, 5, 7, 5});
  Tensor n = base.narrow(1, -3, 2);  // columns 2, 3
  EXPECT_EQ(n.shape(), (Shape{4, 2}));
  EXPECT_EQ(n.storage_offset(), 2);
  n.zero_();
  EXPECT_EQ(at(base, {1, 2}), 0.0);
  EXPECT_EQ(at(base, {1, 4}), 1.0);
  // Python slice clamping.
  EXPECT_EQ(base.slice(0, -100, 100).shape(), (Shape{4, 5}));
  EXPECT_EQ(base.slice(0, 3, 1).shape(), (Shape{0, 5}));
  EXPECT_EQ(base.slice(1, 1, 100, 3).shape(), (Shape{4, 2}));
  EXPECT_EQ(base.slice(1, -1, std::nullopt).shape(), (Shape{4, 1}));
  EXPECT_INDEX_ERR("[select]", base.select(0, 4));
  EXPECT_INDEX_ERR("[select]", base.select(0, -5));
  EXPECT_INDEX_ERR("[select]", base.select(2, 0));
  EXPECT_ERR("[select]", tensor(1.0).select(0, 0));
  EXPECT_ERR("[slice]", base.slice(0, 0, 2, 0));
  EXPECT_ERR("[narrow]", base.narrow(1, 2, 4));
  EXPECT_EQ(base[2].shape(), (Shape{5}));
}

// ---- indexing -----------------------------------------------------------------------------------

TEST(TensorIndexing, BasicIndexing) {
  Tensor x = arange(24).view({2, 3, 4});
  // torch: x[-1, ::2, 1::2] == [[13, 15], [21, 23]]
  Tensor a = x.index({-1, Slice(None, None, 2), Slice(1, None, 2)});
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(int_values(a), (std::vector<int64_t>{13, 15, 21, 23}));
  EXPECT_TRUE(same_storage(a, x));
  EXPECT_EQ(x.index({None, Ellipsis, 1}).shape(), (Shape{1, 2, 3}));  // torch: (1, 2, 3)
  EXPECT_EQ(x.index({Ellipsis, None}).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.index({Slice(), None, 1}).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(x.index({1, Ellipsis, 2}).shape(), (Shape{3}));
  EXPECT_EQ(int_values(x.index({1, Ellipsis, 2})), (std::vector<int64_t>{14, 18, 22}));
  EXPECT_EQ(x.index({Ellipsis}).shape(), (Shape{2, 3, 4}));
  EXPECT_FALSE(x.index({Ellipsis}).is_same(x));  // a new view, like torch
  EXPECT_EQ(at_int(x.index({-2, -3, -4}), {}), 0);
  EXPECT_EQ(x.index({0, Slice(1, 3), Slice(None, -1)}).shape(), (Shape{2, 3}));
  EXPECT_EQ(x.index({tensor(1)}).shape(), (Shape{3, 4}));  // 0-dim index acts as an int
  // Errors (torch: IndexError for out of range, too many indices, bad index dtype).
  EXPECT_INDEX_ERR("[index]", x.index({2}));
  EXPECT_INDEX_ERR("[index]", x.index({Slice(), 7}));
  EXPECT_INDEX_ERR("[index]", x.index({0, 0, -5}));
  EXPECT_INDEX_ERR("[index]", x.index({0, 0, 0, 0}));
  EXPECT_INDEX_ERR("[index]", x.index({Ellipsis, 0, Ellipsis}));
  EXPECT_INDEX_ERR("[index]", x.index({tensor({0.0})}));
  EXPECT_ERR("[index]", x.index({Slice(0, 2, 0)}));
  EXPECT_ERR("[index]", x.index({Slice(0, 2, -1)}));
  // A bool mask must match the sizes of the dims it covers (torch: IndexError).
  EXPECT_INDEX_ERR("[index]", x.index({tensor({true, false, true})}));
  EXPECT_EQ(x.index({tensor({true, false})}).shape(), (Shape{1, 3, 4}));  // torch: (1, 3, 4)
}

TEST(TensorIndexing, IndexTensor) {
  Tensor r = arange(10);
  Tensor g = r.index({tensor({-1, 3, -10})});  // torch: [9, 3, 0]
  EXPECT_EQ(int_values(g), (std::vector<int64_t>{9, 3, 0}));
  EXPECT_FALSE(same_storage(g, r));  // advanced indexing copies
  Tensor m = arange(12).view({3, 4});
  Tensor c = m.index({Slice(1, None), tensor({3, 0})});  // torch: [[7, 4], [11, 8]]
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(int_values(c), (std::vector<int64_t>{7, 4, 11, 8}));
  Tensor x = arange(24).view({2, 3, 4});
  Tensor d = x.index({tensor({1, 0}), 0});  // torch: [[12..15], [0..3]]
  EXPECT_EQ(int_values(d), (std::vector<int64_t>{12, 13, 14, 15, 0, 1, 2, 3}));
  EXPECT_EQ(x.index({Ellipsis, tensor({0, 0, 3})}).shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(x.index({tensor(NestedList(std::vector<NestedList>{}), Dtype::Int64)}).shape(),
            (Shape{0, 3, 4}));
  EXPECT_INDEX_ERR("[index]", r.index({tensor({10})}));
  EXPECT_INDEX_ERR("[index]", r.index({tensor({-11})}));
  // Several index tensors: on adjacent dims (broadcast together), not separated by a slice.
  EXPECT_EQ(x.index({tensor({0}), tensor({0})}).shape(), (Shape{1, 4}));
  EXPECT_ERR("[index]", x.index({tensor({0}), Slice(), tensor({0})}));
}

// Seed 004's bag of words: x_bow[b, t] = mean(x[b, :t+1], 0) through index / index_put_, then
// the same through tril weights @ x and masked_fill + softmax. x is torch.manual_seed(42);
// torch.randn(4, 8, 2); want is torch's own x_bow.
TEST(TensorIndexing, IndexPutBagOfWordsSeed004) {
  const std::vector<float> xs = {
      1.92691529f,    1.48728406f,   0.900717199f,  -2.10552096f,  0.678418458f,   -1.23454487f,
      -0.0430674776f, -1.60466695f,  -0.752135277f, 1.64872301f,   -0.392478645f,  -1.40360713f,
      -0.727881312f,  -0.559430182f, -0.768838882f, 0.76244539f,   1.64231694f,    -0.159597471f,
      -0.497397542f,  0.439589262f,  -0.758131146f, 1.07831764f,   0.800800562f,   1.68062055f,
      1.27912438f,    1.29642284f,   0.61046648f,   1.33473778f,   -0.23162432f,   0.041759491f,
      -0.251575291f,  0.859858513f,  -1.38467371f,  -0.871236145f, -0.223365918f,  1.71736145f,
      0.31888032f,    -0.424518973f, 0.305720925f,  -0.774592519f, -1.55757248f,   0.995636106f,
      -0.879785836f,  -0.601142049f, -1.27415121f,  2.12278509f,   -1.23465312f,   -0.487913877f,
      -0.913823009f,  -0.658137262f, 0.0780238733f, 0.525808752f,  -0.48799172f,   1.19136906f,
      -0.81400764f,   -0.735992789f, -1.40324783f,  0.0360036679f, -0.0634772703f, 0.675614893f,
      -0.0978068933f, 1.844594f,     -1.18453741f,  1.38354933f};
  const std::vector<double> want = {
      1.92691529,   1.48728406,    1.41381621,   -0.30911845,   1.16868365,   -0.617593944,
      0.865745842,  -0.86436218,   0.542169631,  -0.361745149,  0.386394948,  -0.535388768,
      0.227212593,  -0.538823307,  0.102706164,  -0.376164705,  1.64231694,   -0.159597471,
      0.572459698,  0.139995903,   0.128929421,  0.452769846,   0.296897203,  0.759732485,
      0.493342578,  0.867070556,   0.512863278,  0.945015132,   0.406507939,  0.815978587,
      0.324247509,  0.821463585,   -1.38467371,  -0.871236145,  -0.804019809, 0.423062652,
      -0.429719776, 0.140535444,   -0.245859593, -0.0882465467, -0.508202195, 0.128529981,
      -0.570132732, 0.00691799307, -0.670706809, 0.3091847,     -0.741200089, 0.209547415,
      -0.913823009, -0.658137262,  -0.417899579, -0.0661642551, -0.441263646, 0.353013515,
      -0.534449637, 0.0807619393,  -0.708209336, 0.0718102679,  -0.600753963, 0.172444388,
      -0.528904378, 0.411322922,   -0.6108585,   0.532851219};
  const int64_t B = 4, T = 8, C = 2;
  Tensor x = from_vector(xs, {B, T, C});
  Tensor x_bow = zeros({B, T, C});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      Tensor x_prev = x.index({b, Slice(None, t + 1)});
      EXPECT_EQ(x_prev.shape(), (Shape{t + 1, C}));
      x_bow.index_put_({b, t}, mean(x_prev, {0}));
    }
  expect_close(x_bow, want, 0, 2e-7);

  Tensor weights = tril(ones({T, T}));
  weights = weights / weights.sum({1}, true);
  Tensor x_bow2 = matmul(weights, x);  // (T, T) @ (B, T, C): broadcast batch
  EXPECT_EQ(x_bow2.shape(), (Shape{B, T, C}));
  EXPECT_TRUE(allclose(x_bow, x_bow2));

  Tensor tr = tril(ones({T, T}));
  Tensor w3 = zeros({T, T}).masked_fill(tr == Scalar(0), -inf).softmax(-1);
  Tensor x_bow3 = w3.matmul(x);
  EXPECT_TRUE(allclose(x_bow, x_bow3));
}

TEST(TensorIndexing, IndexPutBroadcastAndErrors) {
  Tensor x = zeros({3, 4});
  x.index_put_({Slice(), 1}, tensor({1.0, 2.0, 3.0}));                 // (3,) into column 1
  x.index_put_({Slice(1, None), Slice(2, None)}, tensor({5.0, 6.0}));  // (2,) broadcast to (2, 2)
  x.index_put_({0, Slice(None, None, 3)}, 9);                          // scalar, int into float
  x.index_put_({Ellipsis, -1}, tensor({{-1.0}, {-2.0}, {-3.0}}).squeeze(1));
  expect_tensor(x, {3, 4}, Dtype::Float32, {9, 1, 0, -1, 0, 2, 5, -2, 0, 3, 5, -3});
  EXPECT_ERR("[index_put_]", x.index_put_({0}, tensor({1.0, 2.0})));
  EXPECT_ERR("[index_put_]", x.index_put_({0}, zeros({2, 4})));
  EXPECT_INDEX_ERR("[index_put_]", x.index_put_({3}, 1.0));
  // A value aliasing the destination is read before it is written.
  Tensor y = arange(5).float_();
  y.index_put_({Slice(1, None)}, y.index({Slice(None, 4)}));
  expect_tensor(y, {5}, Dtype::Float32, {0, 0, 1, 2, 3});
  // Through an index tensor: x[idx] = v with v broadcast to (len(idx), ...).
  Tensor z = zeros({4, 3}, Dtype::Int64);
  z.index_put_({tensor({2, -4})}, tensor({7, 8, 9}));
  z.index_put_({Slice(), tensor({1})}, tensor({{1}, {2}, {3}, {4}}));
  expect_tensor(z, {4, 3}, Dtype::Int64, {7, 1, 9, 0, 2, 0, 7, 3, 9, 0, 4, 0});
  EXPECT_ERR("[index_put_]", z.index_put_({tensor({0, 1})}, zeros({3, 3})));
  EXPECT_INDEX_ERR("[index_put_]", z.index_put_({tensor({4})}, 1));
}

// ---- creation -----------------------------------------------------------------------------------

TEST(TensorCreation, NestedLists) {
  expect_tensor(tensor({{1, 2}, {3, 4}}), {2, 2}, Dtype::Int64, {1, 2, 3, 4});
  expect_tensor(tensor({{1, 2.5}, {3, 4}}), {2, 2}, Dtype::Float32, {1, 2.5, 3, 4});
  expect_tensor(tensor({true, false}), {2}, Dtype::Bool, {1, 0});
  expect_tensor(tensor({true, 2}), {2}, Dtype::Int64, {1, 2});  // torch: int64
  expect_tensor(tensor(3), {}, Dtype::Int64, {3});
  expect_tensor(tensor(-0.5f), {}, Dtype::Float32, {-0.5});
  expect_tensor(tensor(NestedList(std::vector<NestedList>{})), {0}, Dtype::Float32, {});
  expect_tensor(tensor({{1.7, -1.7}}, Dtype::Int64), {1, 2}, Dtype::Int64, {1, -1});
  expect_tensor(tensor({0, 3}, Dtype::Bool), {2}, Dtype::Bool, {0, 1});
  expect_tensor(tensor({{{1}, {2}}, {{3}, {4}}}), {2, 2, 1}, Dtype::Int64, {1, 2, 3, 4});
  int64_t big = (int64_t(1) << 40) + 1;
  EXPECT_EQ(tensor({big}).item<int64_t>(), big);
  EXPECT_ERR("[tensor]", tensor({{1, 2}, {3}}));
  EXPECT_ERR("[tensor]", tensor({1, {2}}));
  EXPECT_ERR("[tensor]", tensor({{1}, 2}));
}

TEST(TensorCreation, FillsAndArange) {
  expect_tensor(zeros({2, 2}), {2, 2}, Dtype::Float32, {0, 0, 0, 0});
  expect_tensor(ones({3}, Dtype::Int64), {3}, Dtype::Int64, {1, 1, 1});
  expect_tensor(ones({2}, Dtype::Bool), {2}, Dtype::Bool, {1, 1});
  expect_tensor(full({2}, 1), {2}, Dtype::Int64, {1, 1});  // torch 1.13: int64
  expect_tensor(full({2}, 1.5), {2}, Dtype::Float32, {1.5, 1.5});
  expect_tensor(full({1}, true), {1}, Dtype::Bool, {1});
  expect_tensor(full({2}, 2.9, Dtype::Int64), {2}, Dtype::Int64, {2, 2});
  expect_tensor(zeros_like(tensor({1, 2})), {2}, Dtype::Int64, {0, 0});
  expect_tensor(full_like(tensor({1.0}), 4), {1}, Dtype::Float32, {4});
  EXPECT_EQ(zeros({0, 4}).numel(), 0);
  EXPECT_ERR("[zeros]", zeros({2, -1}));
  EXPECT_ERR("[ones]", ones({-3}));
  EXPECT_ERR("[full]", full({-3}, 1.0));
  EXPECT_ERR("[empty]", empty({-3}));

  expect_tensor(arange(5), {5}, Dtype::Int64, {0, 1, 2, 3, 4});
  expect_tensor(arange(5.0), {5}, Dtype::Float32, {0, 1, 2, 3, 4});
  expect_tensor(arange(2, -4, -2), {3}, Dtype::Int64, {2, 0, -2});
  expect_tensor(arange(1, 2, 0.25), {4}, Dtype::Float32, {1, 1.25, 1.5, 1.75});
  expect_tensor(arange(0, 0), {0}, Dtype::Int64, {});
  Tensor f = arange(0, 1, 0.1);  // torch: 10 elements, float(0.1 * i) computed in double
  ASSERT_EQ(f.numel(), 10);
  EXPECT_EQ(f.dtype(), Dtype::Float32);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(at(f, {i}), double(float(0.1 * double(i))));
  EXPECT_ERR("[arange]", arange(5, 0));
  EXPECT_ERR("[arange]", arange(0, 5, 0));
  EXPECT_ERR("[arange]", arange(0.0, inf));
}

TEST(TensorCreation, TrilTriu) {
  // Every diagonal from well below to well above, on 2-D and batched input, vs a naive mask.
  Tensor x2 = rnd({4, 5}, 1);
  Tensor xb = rnd({2, 3, 4, 5}, 2).transpose(0, 1);  // batched and non-contiguous
  for (const Tensor& x : {x2, xb}) {
    for (int64_t k = -5; k <= 6; ++k) {
      SCOPED_TRACE("diagonal " + std::to_string(k) + " shape " + shape_str(x.shape()));
      Tensor lo = tril(x, k), up = x.triu(k);
      ASSERT_EQ(lo.shape(), x.shape());
      std::vector<double> want_lo, want_up;
      for_each_index(x.shape(), [&](const Shape& i) {
        int64_t r = i[i.size() - 2], c = i[i.size() - 1];
        want_lo.push_back(c - r <= k ? at(x, i) : 0.0);
        want_up.push_back(c - r >= k ? at(x, i) : 0.0);
      });
      expect_tensor(lo, x.shape(), Dtype::Float32, want_lo);
      expect_tensor(up, x.shape(), Dtype::Float32, want_up);
    }
  }
  expect_tensor(tril(ones({2, 2}, Dtype::Bool)), {2, 2}, Dtype::Bool, {1, 0, 1, 1});
  expect_tensor(triu(arange(4).view({2, 2}), 1), {2, 2}, Dtype::Int64, {0, 1, 0, 0});
  EXPECT_EQ(tril(zeros({0, 3})).shape(), (Shape{0, 3}));  // torch: empty (0, 3)
  EXPECT_EQ(triu(zeros({2, 0, 3})).shape(), (Shape{2, 0, 3}));
  EXPECT_ERR("[tril]", tril(ones({3})));
  EXPECT_ERR("[triu]", triu(tensor(1.0)));
}

// ---- elementwise --------------------------------------------------------------------------------

struct BroadcastCase {
  Shape a, b;
  bool transpose_a;  // feed a as the transpose of a contiguous tensor (non-contiguous input)
};

std::string case_name(const BroadcastCase& c) {
  return shape_str(c.a) + (c.transpose_a ? "^T" : "") + " with " + shape_str(c.b);
}

TEST(TensorElementwise, BroadcastArithmeticVsNaiveLoops) {
  const std::vector<BroadcastCase> cases = {
      {{1}, {1}, false},
      {{7}, {1}, false},
      {{1, 129}, {7, 1}, false},
      {{65}, {7, 63, 65}, false},
      {{7, 1, 65}, {63, 1}, false},
      {{63, 1}, {1, 65}, false},
      {{7, 63}, {63}, true},
      {{129, 7}, {1, 129, 1}, true},
      {{}, {7, 65}, false},
      {{63, 65}, {}, true},
      {{0, 7}, {1, 7}, false},
      {{1, 1, 1}, {129}, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(case_name(c));
    Shape sa = c.a;
    if (c.transpose_a) std::swap(sa[sa.size() - 1], sa[sa.size() - 2]);
    Tensor a = rnd(sa, 3);
    if (c.transpose_a) a = a.mT();
    ASSERT_EQ(a.shape(), c.a);
    Tensor b = rnd(c.b, 4);
    Tensor pos_b = abs(b) + 0.25;
    Shape out = broadcast_shapes(c.a, c.b, "test");
    struct {
      const char* name;
      Tensor got;
      std::function<float(float, float)> f;
    } ops[] = {
        {"+", a + b, [](float x, float y) { return x + y; }},
        {"-", a - b, [](float x, float y) { return x - y; }},
        {"*", a * b, [](float x, float y) { return x * y; }},
        {"/", a / pos_b, [](float x, float y) { return x / (std::fabs(y) + 0.25f); }},
        {"pow", abs(a).pow(pos_b),
         [](float x, float y) { return std::pow(std::fabs(x), std::fabs(y) + 0.25f); }},
        {"maximum", maximum(a, b), [](float x, float y) { return x > y ? x : y; }},
    };
    for (auto& op : ops) {
      SCOPED_TRACE(op.name);
      std::vector<double> want;
      for_each_index(
          out, [&](const Shape& i) { want.push_back(op.f(float(at(a, i)), float(at(b, i)))); });
      expect_tensor(op.got, out, Dtype::Float32, want);
    }
    std::vector<double> want_lt;
    for_each_index(out, [&](const Shape& i) { want_lt.push_back(at(a, i) < at(b, i)); });
    expect_tensor(a < b, out, Dtype::Bool, want_lt);
  }
  EXPECT_ERR("[add]", zeros({2, 3}) + zeros({3, 2}));
  expect_error<Error>([] { zeros({7, 63}) * zeros({65}); }, "[mul]", {"(7, 63)", "(65,)"});
}

TEST(TensorElementwise, ScalarsAndPromotion) {
  Tensor i = tensor({1, 2, 3});
  Tensor b = tensor({true, false, true});
  Tensor f = tensor({0.5, -1.5, 2.0});
  expect_tensor(i * 0.5, {3}, Dtype::Float32, {0.5, 1, 1.5});
  expect_tensor(i / tensor({2, 2, 2}), {3}, Dtype::Float32, {0.5, 1, 1.5});
  expect_tensor(i / 2, {3}, Dtype::Float32, {0.5, 1, 1.5});
  expect_tensor(4 / i, {3}, Dtype::Float32, {4, 2, 4.0f / 3.0f});
  expect_tensor(b + i, {3}, Dtype::Int64, {2, 2, 4});
  expect_tensor(b + 1, {3}, Dtype::Int64, {2, 1, 2});
  expect_tensor(b + true, {3}, Dtype::Bool, {1, 1, 1});  // torch: bool
  expect_tensor(b * b, {3}, Dtype::Bool, {1, 0, 1});
  expect_tensor(b + 0.5, {3}, Dtype::Float32, {1.5, 0.5, 1.5});
  expect_tensor(i + f, {3}, Dtype::Float32, {1.5, 0.5, 5});
  expect_tensor(i * 2, {3}, Dtype::Int64, {2, 4, 6});
  expect_tensor(10 - i, {3}, Dtype::Int64, {9, 8, 7});
  expect_tensor(-i, {3}, Dtype::Int64, {-1, -2, -3});
  expect_tensor(-f, {3}, Dtype::Float32, {-0.5, 1.5, -2});
  // 0-dim tensors take part in promotion like scalars of their category (torch).
  expect_tensor(i + tensor(1.5), {3}, Dtype::Float32, {2.5, 3.5, 4.5});
  expect_tensor(tensor(3) + tensor({true}), {1}, Dtype::Int64, {4});
  expect_tensor(tensor(2) * f, {3}, Dtype::Float32, {1, -3, 4});
  // Division by zero, int64 wrap-around.
  expect_tensor(tensor({5.0, -2.0, 0.0}) / 0, {3}, Dtype::Float32, {kInf, -kInf, kNaN});
  expect_tensor(tensor({5, 2}) / 0, {2}, Dtype::Float32, {kInf, kInf});
  EXPECT_EQ(int_values(tensor({int64_t(1) << 62}) * 4), (std::vector<int64_t>{0}));  // torch: 0
  // pow: integer semantics of torch (negative exponents from tensors give 0 / 1 / -1).
  expect_tensor(i.pow(2), {3}, Dtype::Int64, {1, 4, 9});
  expect_tensor(i.pow(0), {3}, Dtype::Int64, {1, 1, 1});
  expect_tensor(i.pow(0.5), {3}, Dtype::Float32, {1, std::sqrt(2.0f), std::sqrt(3.0f)});
  expect_tensor(tensor({2, 3}).pow(2.0), {2}, Dtype::Float32, {4, 9});
  expect_tensor(b.pow(2), {3}, Dtype::Int64, {1, 0, 1});
  expect_tensor(tensor({2, 3, 1, -1, -1, 0}).pow(tensor({-1, -2, -5, -3, -2, -1})), {6},
                Dtype::Int64, {0, 0, 1, -1, 1, 0});
  expect_tensor(pow(2, tensor({-1, 0, 10})), {3}, Dtype::Int64, {0, 1, 1024});
  expect_tensor(pow(2.0, tensor({-1, 3})), {2}, Dtype::Float32, {0.5, 8});
  // torch: 3 ** 40 wraps to -6289078614652622815 in int64, from a tensor or a scalar exponent.
  EXPECT_EQ(int_values(tensor({3}).pow(tensor({40}))),
            (std::vector<int64_t>{-6289078614652622815}));
  EXPECT_EQ(int_values(tensor({3}).pow(40)), (std::vector<int64_t>{-6289078614652622815}));
  expect_tensor(f.pow(tensor({2, 3, 1})), {3}, Dtype::Float32, {0.25, -3.375, 2});
  EXPECT_ERR("[pow]", i.pow(-1));
  EXPECT_ERR("[pow]", b.pow(b));
  // Subtraction with any bool operand is refused (torch's sub_check).
  EXPECT_ERR("[sub]", b - b);
  EXPECT_ERR("[sub]", b - 1);
  EXPECT_ERR("[sub]", 1 - b);
  EXPECT_ERR("[sub]", b - i);
  EXPECT_ERR("[neg]", -b);
}

TEST(TensorElementwise, InPlace) {
  Tensor x = tensor({{1.0, 2.0}, {3.0, 4.0}});
  Tensor& r = x.add_(tensor({10.0, 20.0}));
  EXPECT_TRUE(r.is_same(x));
  expect_tensor(x, {2, 2}, Dtype::Float32, {11, 22, 13, 24});
  x -= 1;
  x *= tensor({{2.0}, {0.5}});
  x /= 2.0;
  expect_tensor(x, {2, 2}, Dtype::Float32, {10, 21, 3, 5.75});
  x += tensor({1, 1});  // int into float: fine
  expect_tensor(x, {2, 2}, Dtype::Float32, {11, 22, 4, 6.75});
  // In place through a view writes the base.
  Tensor base = zeros({3, 4});
  Tensor col = base.select(1, 2);
  col += tensor({1.0, 2.0, 3.0});
  base.T().index({1}).mul_(0).add_(5);
  expect_tensor(base, {3, 4}, Dtype::Float32, {0, 5, 1, 0, 0, 5, 2, 0, 0, 5, 3, 0});
  Tensor i = tensor({1, 2});
  i += 3;
  i *= tensor({true, false});
  expect_tensor(i, {2}, Dtype::Int64, {4, 0});
  Tensor b = tensor({true, false});
  b += tensor({false, true});
  b *= true;
  expect_tensor(b, {2}, Dtype::Bool, {1, 1});
  // Errors: the result type must fit self, the broadcast shape must be self's shape.
  EXPECT_ERR("[add]", i.add_(1.5));
  EXPECT_ERR("[mul]", i.mul_(tensor({0.5, 0.5})));
  EXPECT_ERR("[div]", i.div_(2));
  EXPECT_ERR("[add]", b.add_(tensor({1, 2})));
  EXPECT_ERR("[add]", zeros({2, 3}).add_(zeros({2, 2, 3})));
  EXPECT_ERR("[sub]", b.sub_(b));
}

TEST(TensorElementwise, ComparisonsAndLogic) {
  Tensor a = tensor({1.0, 2.0, kNaN, 4.0});
  Tensor b = tensor({1.0, 3.0, kNaN, 3.0});
  expect_tensor(a == b, {4}, Dtype::Bool, {1, 0, 0, 0});
  expect_tensor(a != b, {4}, Dtype::Bool, {0, 1, 1, 1});
  expect_tensor(a < b, {4}, Dtype::Bool, {0, 1, 0, 0});
  expect_tensor(a <= b, {4}, Dtype::Bool, {1, 1, 0, 0});
  expect_tensor(a > b, {4}, Dtype::Bool, {0, 0, 0, 1});
  expect_tensor(a >= 2, {4}, Dtype::Bool, {0, 1, 0, 1});
  expect_tensor(tensor({1, 2}) > 1.5, {2}, Dtype::Bool, {0, 1});
  expect_tensor(tensor({1, 2}) == tensor({1.0, 2.5}), {2}, Dtype::Bool, {1, 0});
  expect_tensor(tensor({true, false}) < 1, {2}, Dtype::Bool, {0, 1});
  Tensor p = tensor({true, true, false, false}), q = tensor({true, false, true, false});
  expect_tensor(p & q, {4}, Dtype::Bool, {1, 0, 0, 0});
  expect_tensor(p | q, {4}, Dtype::Bool, {1, 1, 1, 0});
  expect_tensor(~p, {4}, Dtype::Bool, {0, 0, 1, 1});
  expect_tensor(a.logical_not(), {4}, Dtype::Bool, {0, 0, 0, 0});
  expect_tensor(a.isnan(), {4}, Dtype::Bool, {0, 0, 1, 0});
  expect_tensor(tensor({kInf, -kInf, 1.0f}).isinf(), {3}, Dtype::Bool, {1, 1, 0});
  EXPECT_TRUE(equal(tensor({1, 2}), tensor({1, 2})));
  EXPECT_FALSE(equal(tensor({1, 2}), tensor({{1, 2}})));
  EXPECT_FALSE(equal(a, a));  // NaN != NaN
  EXPECT_ERR("[logical_and]", tensor({1}) & tensor({true}));
  EXPECT_ERR("[bitwise_not]", ~tensor({1.0}));
  EXPECT_ERR("[eq]", zeros({2}) == zeros({3}));
}

TEST(TensorElementwise, MaskedFillAndWhere) {
  Tensor x = arange(6).float_().view({2, 3});
  Tensor mask = tensor({true, false, true});
  expect_tensor(x.masked_fill(mask, -1.0), {2, 3}, Dtype::Float32, {-1, 1, -1, -1, 4, -1});
  expect_tensor(x, {2, 3}, Dtype::Float32, {0, 1, 2, 3, 4, 5});  // out of place
  // Out of place broadcasts self to the mask (torch): (1, 3) with (2, 3) mask.
  Tensor row = tensor({{1.0, 2.0, 3.0}});
  Tensor m2 = tensor({{true, false, false}, {false, false, true}});
  expect_tensor(masked_fill(row, m2, 0.0), {2, 3}, Dtype::Float32, {0, 2, 3, 1, 2, 0});
  // In place: the mask must broadcast to self, not the other way round.
  expect_error<Error>([&] { row.masked_fill_(m2, 0.0); }, "[masked_fill_]", {"(2, 3)", "(1, 3)"});
  EXPECT_ERR("[masked_fill_]", x.masked_fill_(tensor({true, false}), 1.0));
  EXPECT_ERR("[masked_fill]", x.masked_fill(tensor({1.0, 0.0, 1.0}), 1.0));
  EXPECT_ERR("[masked_fill]", x.masked_fill(tensor({true, false}), 1.0));
  // In place through a transposed view, -inf fill (the causal mask of the seeds).
  Tensor s = zeros({3, 3});
  s.T().masked_fill_(tril(ones({3, 3})) == Scalar(0), -inf);
  expect_tensor(s, {3, 3}, Dtype::Float32, {0, 0, 0, -kInf, 0, 0, -kInf, -kInf, 0});
  // Int tensors: float values truncate (torch), non-finite ones are refused.
  Tensor xi = zeros({3}, Dtype::Int64);
  expect_tensor(xi.masked_fill(mask, 2.0), {3}, Dtype::Int64, {2, 0, 2});
  expect_tensor(xi.masked_fill(mask, 0.5), {3}, Dtype::Int64, {0, 0, 0});
  EXPECT_ERR("[masked_fill_]", xi.masked_fill_(mask, -inf));
  expect_tensor(ones({2}, Dtype::Bool).masked_fill(tensor({true, false}), false), {2}, Dtype::Bool,
                {0, 1});

  Tensor c = tensor({{true}, {false}});
  expect_tensor(where(c, tensor({1.0, 2.0}), tensor(0.0)), {2, 2}, Dtype::Float32, {1, 2, 0, 0});
  expect_tensor(where(tensor({true, false}), tensor({1, 2}), tensor({0.5, 0.5})), {2},
                Dtype::Float32, {1, 0.5});  // torch 1.13 promotes
  expect_tensor(where(tensor({true, false}), tensor({1, 2}), tensor({true, true})), {2},
                Dtype::Int64, {1, 1});
  Tensor t = rnd({4, 3}, 7).mT();  // non-contiguous operands
  Tensor w = where(t > 0, t, zeros({1}));
  std::vector<double> want;
  for_each_index(t.shape(), [&](const Shape& i) { want.push_back(std::max(at(t, i), 0.0)); });
  expect_tensor(w, {3, 4}, Dtype::Float32, want);
  EXPECT_ERR("[where]", where(tensor({1}), tensor({1}), tensor({0})));
  EXPECT_ERR("[where]", where(tensor({true, false}), zeros({3}), zeros({3})));
}

TEST(TensorElementwise, UnaryMath) {
  Tensor x = rnd({7, 65}, 9).T();  // non-contiguous
  Tensor pos = abs(x) + 0.125;
  struct {
    const char* name;
    Tensor got;
    const Tensor& in;
    std::function<float(float)> f;
    double rtol;  // 0: the C library's bits; exp, log, tanh: vector polynomials (test_unary.cpp)
  } ops[] = {
      {"exp", exp(x), x, [](float v) { return std::exp(v); }, 2.5e-7},
      {"log", log(pos), pos, [](float v) { return std::log(v); }, 2.5e-7},
      {"sqrt", sqrt(pos), pos, [](float v) { return std::sqrt(v); }, 0},
      {"abs", abs(x), x, [](float v) { return std::fabs(v); }, 0},
      {"tanh", tanh(x), x, [](float v) { return std::tanh(v); }, 5e-7},
      {"relu", x.relu(), x, [](float v) { return v > 0 ? v : 0.0f; }, 0},
  };
  for (auto& op : ops) {
    SCOPED_TRACE(op.name);
    std::vector<double> want;
    for_each_index(op.in.shape(),
                   [&](const Shape& i) { want.push_back(op.f(float(at(op.in, i)))); });
    if (op.rtol == 0) {
      expect_tensor(op.got, {65, 7}, Dtype::Float32, want);
    } else {
      ASSERT_EQ(op.got.shape(), (Shape{65, 7}));
      expect_close(op.got, want, op.rtol, 0.0);
    }
  }
  expect_tensor(tensor({-1.0, 4.0}).sqrt(), {2}, Dtype::Float32, {kNaN, 2});
  expect_tensor(tensor({-1.0, 0.0}).log(), {2}, Dtype::Float32, {kNaN, -kInf});
  expect_tensor(tensor({0, 1}).exp(), {2}, Dtype::Float32, {1, std::exp(1.0f)});  // int -> float
  expect_tensor(tensor({-7, 3}).abs(), {2}, Dtype::Int64, {7, 3});                // int stays int
  expect_tensor(tensor({-1.5, 2.5}).floor(), {2}, Dtype::Float32, {-2, 2});
  expect_tensor(tensor({-1.5, 2.5}).ceil(), {2}, Dtype::Float32, {-1, 3});
  EXPECT_ERR("[abs]", tensor({true}).abs());
}

// ---- reductions ---------------------------------------------------------------------------------

// Naive reduction over `dims` of a (possibly non-contiguous) tensor, in double.
std::vector<double> naive_reduce(const Tensor& t, const std::vector<bool>& red,
                                 const std::function<double(const std::vector<double>&)>& f) {
  Shape outer;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (!red[d]) outer.push_back(t.shape()[d]);
  std::vector<double> out;
  for_each_index(outer, [&](const Shape& o) {
    std::vector<double> vals;
    for_each_index(t.shape(), [&](const Shape& i) {
      int64_t k = 0;
      for (int64_t d = 0; d < t.dim(); ++d)
        if (!red[d] && i[d] != o[k++]) return;
      vals.push_back(at(t, i));
    });
    out.push_back(f(vals));
  });
  return out;
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double var_of(const std::vector<double>& v, int correction) {
  double m = sum_of(v) / double(v.size()), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(int64_t(v.size()) - correction);
}

TEST(TensorReduce, SumMeanVarOverDimLists) {
  Tensor x = rnd({7, 13, 5}, 11).permute({1, 0, 2});  // (13, 7, 5), non-contiguous
  const std::vector<Shape> dim_lists = {{0}, {1}, {2}, {-1}, {0, 2}, {-1, -3}, {1, 0}, {0, 1, 2}};
  for (const auto& dims : dim_lists) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dims " + shape_str(dims) + (keepdim ? " keepdim" : ""));
      std::vector<bool> red(3, false);
      Shape out_shape;
      for (auto d : dims) red[(d + 3) % 3] = true;
      for (int64_t d = 0; d < 3; ++d)
        if (!red[d])
          out_shape.push_back(x.shape()[d]);
        else if (keepdim)
          out_shape.push_back(1);
      Tensor s = x.sum(dims, keepdim);
      ASSERT_EQ(s.shape(), out_shape);
      expect_close(s, naive_reduce(x, red, sum_of), 1e-6, 1e-5);
      expect_close(mean(x, dims, keepdim),
                   naive_reduce(x, red, [](const auto& v) { return sum_of(v) / v.size(); }), 1e-6,
                   1e-6);
      expect_close(x.var(dims, true, keepdim),
                   naive_reduce(x, red, [](const auto& v) { return var_of(v, 1); }), 1e-5, 1e-6);
      expect_close(var(x, dims, false, keepdim),
                   naive_reduce(x, red, [](const auto& v) { return var_of(v, 0); }), 1e-5, 1e-6);
    }
  }
  expect_close(x.sum(), {sum_of(values(x))}, 1e-6, 1e-5);
  EXPECT_EQ(x.sum().dim(), 0);
  EXPECT_EQ(x.sum({}).dim(), 0);  // an empty dim list reduces everything (torch 1.13)
  expect_close(x.var(), {var_of(values(x), 1)}, 1e-5, 1e-6);
  expect_close(x.var(false), {var_of(values(x), 0)}, 1e-5, 1e-6);
  expect_tensor(tensor({2.0}).var(), {}, Dtype::Float32, {kNaN});  // torch: nan (n - 1 = 0)
  expect_tensor(tensor({2.0}).var(false), {}, Dtype::Float32, {0});
  // An integer is a dim, as torch's x.var(1), never unbiased = true; {1} is a dim list.
  {
    const std::vector<bool> red1{false, true, false};
    const auto var1 = naive_reduce(x, red1, [](const auto& v) { return var_of(v, 1); });
    expect_close(x.var(1), var1, 1e-5, 1e-6);
    expect_close(x.var({1}), var1, 1e-5, 1e-6);
    expect_close(var(x, 1), var1, 1e-5, 1e-6);
    expect_close(var(x, {1}), var1, 1e-5, 1e-6);
    EXPECT_EQ(x.var(int64_t(-1), false, true).shape(), (Shape{x.size(0), x.size(1), 1}));
    EXPECT_EQ(var(x, true).dim(), 0);
  }
  expect_tensor(zeros({2, 0}).sum({1}), {2}, Dtype::Float32, {0, 0});
  expect_tensor(zeros({2, 0}).mean({1}), {2}, Dtype::Float32, {kNaN, kNaN});
  expect_tensor(tensor(3.0).sum({0}), {}, Dtype::Float32, {3});
  EXPECT_ERR("[sum]", x.sum({0, -3}));
  EXPECT_INDEX_ERR("[sum]", x.sum({3}));
  EXPECT_ERR("[mean]", tensor({1, 2}).mean());
  EXPECT_ERR("[var]", tensor({1, 2}).var());
}

TEST(TensorReduce, SumOfIntsAndBoolsIsInt64) {
  expect_tensor(tensor({{true, false}, {true, true}}).sum(), {}, Dtype::Int64, {3});
  expect_tensor(tensor({{true, false}, {true, true}}).sum({0}), {2}, Dtype::Int64, {2, 1});
  int64_t big = (int64_t(1) << 53) + 1;  // not representable in double or float
  Tensor s = tensor({big, int64_t(2)}).sum();
  EXPECT_EQ(s.dtype(), Dtype::Int64);
  EXPECT_EQ(s.item<int64_t>(), big + 2);
  expect_tensor(tensor(NestedList(std::vector<NestedList>{}), Dtype::Int64).sum(), {}, Dtype::Int64,
                {0});
  EXPECT_TRUE(tensor({1, 2}).all());
  EXPECT_FALSE(tensor({1, 0}).all());
  EXPECT_TRUE(tensor({0.0, kNaN}).any());
  EXPECT_FALSE(zeros({3}).any());
  EXPECT_TRUE(zeros({0}).all());
  EXPECT_FALSE(zeros({0}).any());
}

TEST(TensorReduce, MaxMinWithIndices) {
  // First index on ties; the first NaN wins (torch).
  Tensor x = tensor({{3.0, 1.0, 3.0, 1.0}, {1.0, kNaN, 5.0, kNaN}, {-kInf, -kInf, -kInf, -kInf}});
  auto [mv, mi] = x.max(1);
  expect_tensor(mv, {3}, Dtype::Float32, {3, kNaN, -kInf});
  expect_tensor(mi, {3}, Dtype::Int64, {0, 1, 0});
  auto [nv, ni] = x.min(-1, true);
  expect_tensor(nv, {3, 1}, Dtype::Float32, {1, kNaN, -kInf});
  expect_tensor(ni, {3, 1}, Dtype::Int64, {1, 1, 0});
  auto [cv, ci] = x.max(0);
  expect_tensor(cv, {4}, Dtype::Float32, {3, kNaN, 5, kNaN});
  expect_tensor(ci, {4}, Dtype::Int64, {0, 1, 1, 1});
  expect_tensor(x.argmax(1, true), {3, 1}, Dtype::Int64, {0, 1, 0});
  expect_tensor(x.amax({1}), {3}, Dtype::Float32, {3, kNaN, -kInf});
  expect_tensor(x.amax({0, 1}, true), {1, 1}, Dtype::Float32, {kNaN});
  expect_tensor(x.max(), {}, Dtype::Float32, {kNaN});
  expect_tensor(tensor({{1.0, 2.0}, {4.0, 3.0}}).max(), {}, Dtype::Float32, {4});
  expect_tensor(tensor({{1.0, 2.0}, {4.0, -3.0}}).min(), {}, Dtype::Float32, {-3});

  // Non-contiguous input, awkward sizes, against a naive loop.
  Tensor r = rnd({63, 7}, 13).T();  // (7, 63)
  auto [rv, ri] = r.max(1);
  for (int64_t i = 0; i < 7; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < 63; ++j)
      if (at(r, {i, j}) > at(r, {i, best})) best = j;
    EXPECT_EQ(at(ri, {i}), double(best));
    EXPECT_EQ(at(rv, {i}), at(r, {i, best}));
  }

  // int64 and bool keep their dtype and exact values.
  int64_t big = (int64_t(1) << 40) + 1;
  expect_tensor(tensor({big, big - 1, int64_t(5)}).max(), {}, Dtype::Int64, {double(big)});
  auto [iv, ii] = tensor({{big - 1, big, big}}).max(1);
  EXPECT_EQ(int_values(iv), (std::vector<int64_t>{big}));
  EXPECT_EQ(int_values(ii), (std::vector<int64_t>{1}));
  EXPECT_EQ(int_values(tensor({{big, big + 1}}).amax({1})), (std::vector<int64_t>{big + 1}));
  expect_tensor(tensor({true, false}).max(), {}, Dtype::Bool, {1});
  expect_tensor(tensor({{true, false}}).argmax(1), {1}, Dtype::Int64, {0});
  auto [sv, si] = tensor(2.0).max(0);  // 0-dim input: torch gives (2., 0)
  expect_tensor(sv, {}, Dtype::Float32, {2});
  expect_tensor(si, {}, Dtype::Int64, {0});

  // Empty reductions: torch refuses a zero-size reduced dim, accepts other zero-size dims.
  EXPECT_ERR("[max]", zeros({0}).max());
  EXPECT_INDEX_ERR("[max]", zeros({2, 0}).max(1));
  EXPECT_INDEX_ERR("[amax]", zeros({2, 0}).amax({1}));
  EXPECT_EQ(std::get<0>(zeros({2, 0}).max(0)).shape(), (Shape{0}));
  EXPECT_EQ(zeros({2, 0}).amax({0}).shape(), (Shape{0}));
  EXPECT_INDEX_ERR("[argmax]", x.argmax(2));
}

// ---- softmax ------------------------------------------------------------------------------------

// Softmax along `dim` in double, one row at a time, laid out row-major like `t`.
std::vector<double> naive_softmax(const Tensor& t, int64_t dim, bool log) {
  std::vector<double> out(std::size_t(t.numel()));
  Shape rows = t.shape(), stride(t.dim(), 1);
  rows[dim] = 1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) stride[d] = stride[d + 1] * t.shape()[d + 1];
  const int64_t n = t.shape()[dim];
  std::vector<double> x(n);
  for_each_index(rows, [&](const Shape& r) {
    Shape j = r;
    int64_t base = 0;
    for (int64_t d = 0; d < t.dim(); ++d) base += r[d] * stride[d];
    double m = -INFINITY, s = 0;
    for (j[dim] = 0; j[dim] < n; ++j[dim]) m = std::max(m, x[j[dim]] = at(t, j));
    for (int64_t k = 0; k < n; ++k) s += std::exp(x[k] - m);
    for (int64_t k = 0; k < n; ++k)
      out[base + k * stride[dim]] = log ? x[k] - m - std::log(s) : std::exp(x[k] - m) / s;
  });
  return out;
}

TEST(TensorSoftmax, EveryDimVsDoubleReference) {
  Tensor x = rnd({7, 63, 65}, 17) * 4.0;
  for (const Tensor& t : {x, x.transpose(0, 2)}) {
    for (int64_t d = -3; d < 3; ++d) {
      SCOPED_TRACE("dim " + std::to_string(d) + " of " + shape_str(t.shape()));
      int64_t dd = (d + 3) % 3;
      Tensor s = t.softmax(d);
      ASSERT_EQ(s.shape(), t.shape());
      expect_close(s, naive_softmax(t, dd, false), 2e-6, 1e-8);
      expect_close(log_softmax(t, d), naive_softmax(t, dd, true), 2e-6, 2e-6);
    }
  }
  EXPECT_INDEX_ERR("[softmax]", x.softmax(3));
  EXPECT_ERR("[softmax]", tensor({1, 2}).softmax(0));
  expect_tensor(tensor(5.0).softmax(0), {}, Dtype::Float32, {1});
  EXPECT_EQ(zeros({0, 3}).softmax(1).shape(), (Shape{0, 3}));
}

TEST(TensorSoftmax, HugeValuesAndInfinities) {
  // torch: softmax and log_softmax of these rows over the last dim.
  Tensor s = tensor({{-318.0, -318.5, -320.0, -1000.0},
                     {1000.0, 999.0, 0.0, -1000.0},
                     {0.0, 0.0, 0.0, 0.0},
                     {-inf, -inf, -inf, -inf},
                     {-inf, 3.0, -inf, 2.0}});
  expect_close(
      s.softmax(-1),
      {0.574096978, 0.348207414, 0.0776955783, 0,    0.731058598, 0.268941432, 0,    0, 0.25,
       0.25,        0.25,        0.25,         kNaN, kNaN,        kNaN,        kNaN, 0, 0.731058598,
       0,           0.268941432},
      1e-6, 1e-7);
  expect_close(
      s.log_softmax(-1),
      {-0.554956973, -1.05495691, -2.55495691, -682.554932,  -0.313261658, -1.31326163, -1000.31323,
       -2000.31323,  -1.38629436, -1.38629436, -1.38629436,  -1.38629436,  kNaN,        kNaN,
       kNaN,         kNaN,        -kInf,       -0.313261658, -kInf,        -1.31326163},
      1e-6, 1e-6);
  // torch: +inf or NaN anywhere in the row makes the whole row NaN.
  expect_tensor(tensor({kInf, 1.0f}).softmax(0), {2}, Dtype::Float32, {kNaN, kNaN});
  expect_tensor(tensor({kNaN, 1.0f}).softmax(0), {2}, Dtype::Float32, {kNaN, kNaN});
  // The all -inf row along dim 0 of a column layout as well.
  Tensor c = tensor({{-inf, 0.0}, {-inf, 0.0}}).softmax(0);
  expect_tensor(c, {2, 2}, Dtype::Float32, {kNaN, 0.5, kNaN, 0.5});
}

// ---- matmul -------------------------------------------------------------------------------------

// Naive matmul in double with torch's 1-D promotion and batch broadcasting; also returns
// sum |a||b| per element for the error bound.
void naive_matmul(const Tensor& a_in, const Tensor& b_in, Shape* shape, std::vector<double>* out,
                  std::vector<double>* mag) {
  Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(-1) : b_in;
  int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2), "naive");
  Shape full = batch;
  full.push_back(M);
  full.push_back(N);
  out->clear();
  mag->clear();
  for_each_index(full, [&](const Shape& i) {
    Shape ia(i.begin(), i.end() - 2), ib = ia;
    ia.push_back(i[i.size() - 2]);
    ia.push_back(0);
    ib.push_back(0);
    ib.push_back(i.back());
    double s = 0, m = 0;
    for (int64_t k = 0; k < K; ++k) {
      ia.back() = k;
      ib[ib.size() - 2] = k;
      double p = at(a, ia) * at(b, ib);
      s += p;
      m += std::fabs(p);
    }
    out->push_back(s);
    mag->push_back(m);
  });
  *shape = batch;
  if (a_in.dim() > 1) shape->push_back(M);
  if (b_in.dim() > 1) shape->push_back(N);
}

void check_matmul(const Tensor& a, const Tensor& b) {
  SCOPED_TRACE(shape_str(a.shape()) + " @ " + shape_str(b.shape()));
  Shape shape;
  std::vector<double> want, mag;
  naive_matmul(a, b, &shape, &want, &mag);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), shape);
  ASSERT_EQ(c.dtype(), Dtype::Float32);
  auto got = values(c);
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (std::size_t i = 0; i < got.size() && failures < 5; ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-6 * mag[i] + 1e-7)) {
      ++failures;
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
}

TEST(TensorMatmul, ShapesVsNaive) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{7}, {7}},
      {{1}, {1}},
      {{63}, {63, 65}},
      {{65, 63}, {63}},
      {{7, 63}, {63, 65}},
      {{1, 129}, {129, 1}},
      {{2, 1, 7, 63}, {3, 63, 65}},  // broadcast batch dims
      {{7, 63}, {2, 3, 63, 1}},
      {{3, 7, 65}, {65, 63}},  // shared right operand
      {{65}, {3, 65, 7}},
      {{3, 7, 65}, {65}},
      {{7, 0}, {0, 5}},  // K = 0 gives zeros
      {{0, 7}, {7, 5}},
      {{2, 0, 3}, {3, 4}},
      {{0}, {0}},
  };
  uint32_t seed = 100;
  for (const auto& c : cases) {
    Tensor a = rnd(c.a, seed++);
    check_matmul(a, rnd(c.b, seed++));
  }
  expect_tensor(matmul(zeros({2, 0}), zeros({0, 3})), {2, 3}, Dtype::Float32, {0, 0, 0, 0, 0, 0});
}

TEST(TensorMatmul, NonContiguousOperands) {
  // Transposed operands (read by BLAS in place), (B, L, H, D) viewed as (B, H, L, D), slices with
  // steps and stride-0 expands (no BLAS layout: packed).
  Tensor p = rnd({63, 7}, 1).T();   // (7, 63), column-major
  Tensor q = rnd({65, 63}, 2).T();  // (63, 65), column-major
  check_matmul(p, q);
  check_matmul(p, rnd({63, 65}, 3));
  check_matmul(rnd({7, 63}, 4), q);
  Tensor qkv = rnd({2, 65, 3, 7}, 5);  // (B, L, H, D)
  Tensor qh = qkv.transpose(1, 2);     // (B, H, L, D) non-contiguous
  check_matmul(qh, qh.mT());           // scores (B, H, L, L)
  check_matmul(qh.mT(), qh);
  Tensor stepped = rnd({14, 130}, 6).index({Slice(None, None, 2), Slice(None, None, 2)});
  check_matmul(stepped, rnd({65, 3}, 7));  // (7, 65) with strides (260, 2)
  check_matmul(rnd({3, 7}, 8), stepped);
  check_matmul(rnd({1, 63}, 9).expand({7, 63}), rnd({63, 5}, 10));
  check_matmul(rnd({7, 1}, 11).expand({7, 63}), rnd({63, 5}, 12).T().contiguous().T());
  check_matmul(rnd({7, 63}, 13), rnd({63}, 14).unsqueeze(1).expand({63, 5}));
  check_matmul(rnd({3, 5, 7}, 15).permute({1, 0, 2}), rnd({7, 4}, 16));  // unmergeable rows
  check_matmul(rnd({5, 2, 3, 7}, 17).select(1, 1), rnd({5, 7, 2}, 18));  // offset views
  // Shared right operand with (batch..., M) rows that merge: one GEMM over strided rows.
  check_matmul(rnd({2, 3, 7, 130}, 22).slice(-1, 0, 65), rnd({65, 5}, 23));
  check_matmul(rnd({1, 3, 7, 65}, 24), rnd({65, 5}, 25).T().contiguous().T());
  check_matmul(rnd({3, 1, 65}, 26).expand({3, 7, 65}), rnd({1, 65, 5}, 27));
  Tensor v = rnd({9}, 19).slice(0, 1, std::nullopt, 2);  // (4,) stride 2
  check_matmul(v, rnd({4, 6}, 20));
  check_matmul(rnd({6, 4}, 21), v);
  check_matmul(v, v);
}

TEST(TensorMatmul, OneRowLargeVsNaive) {
  // One row against a matrix large enough for BLAS and for splitting across threads (a decoding
  // step's projections: sgemv split by columns), the right operand stored both ways (x W^T with
  // W (N, K) as nn.Linear holds it, and x B with B (K, N)), the row itself strided.
  const int threads = get_num_threads();
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    SCOPED_TRACE("threads " + std::to_string(nt));
    Tensor x = rnd({1, 300}, 40);
    check_matmul(x, rnd({300, 5001}, 41));                      // B (K, N)
    check_matmul(x, rnd({5001, 300}, 42).T());                  // W^T: B stored (N, K)
    check_matmul(rnd({300, 1}, 43).T(), rnd({300, 4099}, 44));  // the row with stride 1 of a column
    check_matmul(rnd({300, 3}, 45).T().slice(0, 1, 2), rnd({4099, 300}, 46).T());  // row stride 3
    check_matmul(rnd({3, 1, 300}, 47), rnd({300, 3000}, 48));  // batched single rows
  }
  set_num_threads(threads);
}

TEST(TensorMatmul, Int64IsExact) {
  // torch: integer matmul in int64 arithmetic, exact beyond 2^24 and wrapping on overflow.
  int64_t big = (int64_t(1) << 40) + 1;
  EXPECT_EQ(int_values(matmul(tensor({big}), tensor({3}))),
            (std::vector<int64_t>{3 * big}));  // 3298534883331
  EXPECT_EQ(int_values(matmul(tensor({{int64_t(1) << 40}}), tensor({{int64_t(1) << 40}}))),
            (std::vector<int64_t>{0}));  // torch: 0 (2^80 wraps)
  expect_tensor(tensor({{1, 2}, {3, 4}}).matmul(tensor({{1, 2}, {3, 4}})), {2, 2}, Dtype::Int64,
                {7, 10, 15, 22});
  expect_tensor(tensor({{1, 2}, {3, 4}}).T().matmul(tensor({1, 1})), {2}, Dtype::Int64, {4, 6});
  expect_tensor(dot(tensor({1, 2}), tensor({3, 4})), {}, Dtype::Int64, {11});
  // Random ints around 2^30 through transposed, batched, broadcast operands vs a naive loop.
  auto ints = [](Shape s, uint32_t seed) {
    Tensor f = rnd(s, seed);
    return (f * 1024.0).to(Dtype::Int64) * (int64_t(1) << 20) + 12345;
  };
  Tensor a = ints({2, 63, 7}, 30).mT();  // (2, 7, 63)
  Tensor b = ints({63, 5}, 31);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 7, 5}));
  for_each_index(c.shape(), [&](const Shape& i) {
    uint64_t s = 0;
    for (int64_t k = 0; k < 63; ++k)
      s += uint64_t(at_int(a, {i[0], i[1], k})) * uint64_t(at_int(b, {k, i[2]}));
    EXPECT_EQ(at_int(c, i), int64_t(s));
  });
  EXPECT_EQ(matmul(zeros({2, 0}, Dtype::Int64), zeros({0, 3}, Dtype::Int64)).sum().item<int64_t>(),
            0);
}

TEST(TensorMatmul, Errors) {
  expect_error<Error>(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      "[matmul]", {"(2, 3)", "(4, 5)"});
  expect_error<Error>([] { matmul(zeros({3}), zeros({4})); }, "[matmul]", {"(3,)", "(4,)"});
  expect_error<Error>(
      [] {
        matmul(zeros({2, 2, 3}), zeros({3, 3, 4}));
      },
      "[matmul]", {"(2, 2, 3)", "(3, 3, 4)"});
  EXPECT_ERR("[matmul]", matmul(tensor(1.0), zeros({2})));
  EXPECT_ERR("[matmul]", matmul(zeros({2, 3}), zeros({3}, Dtype::Int64)));
  EXPECT_ERR("[matmul]", matmul(tensor({true}), tensor({true})));
  EXPECT_ERR("[matmul]", matmul(Tensor(), zeros({2})));
  expect_close(dot(tensor({1.0, 2.0, 3.0}), tensor({4.0, -5.0, 6.0})), {12}, 0, 0);
  EXPECT_EQ(dot(tensor({1.0}), tensor({2.0})).dim(), 0);
  EXPECT_ERR("[dot]", dot(tensor({{1, 2}}), tensor({1})));
  EXPECT_ERR("[dot]", dot(tensor({1, 2}), tensor({1})));
  EXPECT_ERR("[dot]", dot(tensor({1, 2}), tensor({1.0, 2.0})));
}

// ---- cat / stack --------------------------------------------------------------------------------

TEST(TensorJoin, CatAndStack) {
  Tensor a = arange(6).view({2, 3}), b = arange(6, 10).view({2, 2});
  expect_tensor(cat({a, b}, 1), {2, 5}, Dtype::Int64, {0, 1, 2, 6, 7, 3, 4, 5, 8, 9});
  expect_tensor(cat({a, a.index({Slice(None, 1)})}, -2), {3, 3}, Dtype::Int64,
                {0, 1, 2, 3, 4, 5, 0, 1, 2});
  expect_tensor(cat({a.T(), b.T()}), {5, 2}, Dtype::Int64, {0, 3, 1, 4, 2, 5, 6, 8, 7, 9});
  expect_tensor(cat({tensor({1}), tensor({1.5})}), {2}, Dtype::Float32, {1, 1.5});     // promotes
  expect_tensor(cat({zeros({0}), tensor({{1, 2}})}), {1, 2}, Dtype::Float32, {1, 2});  // legacy
  expect_tensor(cat({zeros({0}), zeros({0})}), {0}, Dtype::Float32, {});
  Tensor s = stack({a, a * 10}, -1);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(int_values(s), (std::vector<int64_t>{0, 0, 1, 10, 2, 20, 3, 30, 4, 40, 5, 50}));
  EXPECT_EQ(stack({a, a}).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(stack({tensor(1.0), tensor(2.0)}).shape(), (Shape{2}));
  expect_error<Error>([&] { cat({a, b}, 0); }, "[cat]", {"(2, 3)", "(2, 2)"});
  EXPECT_ERR("[cat]", cat({a, tensor({1, 2, 3})}));
  EXPECT_ERR("[cat]", cat({}));
  EXPECT_ERR("[cat]", cat({tensor(1), tensor(2)}));
  EXPECT_INDEX_ERR("[cat]", cat({a, a}, 2));
  EXPECT_ERR("[stack]", stack({a, b}));
  EXPECT_ERR("[stack]", stack({}));
  EXPECT_INDEX_ERR("[stack]", stack({a, a}, 3));
}

// ---- allclose -----------------------------------------------------------------------------------

TEST(TensorAllclose, InfNanAndTolerances) {
  EXPECT_TRUE(allclose(tensor({1.0, kInf, -kInf}), tensor({1.0, kInf, -kInf})));
  EXPECT_FALSE(allclose(tensor({kInf}), tensor({-kInf})));
  EXPECT_FALSE(allclose(tensor({kInf}), tensor({1e30})));
  EXPECT_FALSE(allclose(tensor({kNaN}), tensor({kNaN})));
  EXPECT_TRUE(allclose(tensor({kNaN}), tensor({kNaN}), 1e-5, 1e-8, true));
  EXPECT_FALSE(allclose(tensor({kNaN}), tensor({1.0}), 1e-5, 1e-8, true));
  EXPECT_TRUE(allclose(tensor({1.0 + 9e-6}), tensor({1.0})));  // within rtol |b| + atol
  EXPECT_FALSE(allclose(tensor({1.0 + 2e-5}), tensor({1.0})));
  EXPECT_TRUE(allclose(tensor({100.0}), tensor({101.0}), 0.01, 0));
  EXPECT_FALSE(allclose(tensor({101.0}), tensor({100.0}), 0.0099, 0));  // relative to b
  EXPECT_TRUE(allclose(tensor({0.0}), tensor({1e-9})));
  EXPECT_TRUE(allclose(ones({2, 3}), ones({3})));  // broadcasts
  EXPECT_ERR("[allclose]", allclose(ones({2, 3}), ones({2})));
}

// The vectorised float add/sub/mul/div loops, element by element against the scalar operation:
// out of place, in place (self is the first operand, and both operands), a repeated second or
// first operand (a bias row), at lengths around the vector widths.
TEST(TensorBinaryFloat, InPlaceAndRepeatedOperandsMatchScalarOps) {
  Generator gen(7);
  const std::vector<std::function<float(float, float)>> scalar = {
      [](float x, float y) { return x + y; }, [](float x, float y) { return x - y; },
      [](float x, float y) { return x * y; }, [](float x, float y) { return x / y; }};
  const std::vector<std::function<Tensor(const Tensor&, const Tensor&)>> op = {
      [](const Tensor& x, const Tensor& y) { return x + y; },
      [](const Tensor& x, const Tensor& y) { return x - y; },
      [](const Tensor& x, const Tensor& y) { return x * y; },
      [](const Tensor& x, const Tensor& y) { return x / y; }};
  const std::vector<std::function<void(Tensor&, const Tensor&)>> op_ = {
      [](Tensor& x, const Tensor& y) { x.add_(y); }, [](Tensor& x, const Tensor& y) { x.sub_(y); },
      [](Tensor& x, const Tensor& y) { x.mul_(y); }, [](Tensor& x, const Tensor& y) { x.div_(y); }};
  for (int64_t rows : {1, 3, 70}) {
    for (int64_t cols : {1, 7, 15, 16, 17, 33, 1001}) {
      const Tensor a = randn({rows, cols}, &gen), b = randn({rows, cols}, &gen) + 3.0;
      const Tensor row = randn({cols}, &gen) + 3.0, row2 = row.neg() + 6.0;
      const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>(), *pr = row.data_ptr<float>(),
                  *pr2 = row2.data_ptr<float>();
      for (std::size_t k = 0; k < op.size(); ++k) {
        const Tensor full = op[k](a, b), rep_b = op[k](a, row), rep_a = op[k](row2, b);
        Tensor in_place = a.clone(), self_self = b.clone(), in_place_rep = a.clone();
        op_[k](in_place, b);
        op_[k](self_self, self_self);
        op_[k](in_place_rep, row);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const int64_t c = i % cols;
          const float want = scalar[k](pa[i], pb[i]);
          ASSERT_EQ(full.data_ptr<float>()[i], want) << k << " " << rows << "x" << cols << " " << i;
          ASSERT_EQ(in_place.data_ptr<float>()[i], want) << k << " " << i;
          ASSERT_EQ(self_self.data_ptr<float>()[i], scalar[k](pb[i], pb[i])) << k << " " << i;
          ASSERT_EQ(rep_b.data_ptr<float>()[i], scalar[k](pa[i], pr[c])) << k << " " << i;
          ASSERT_EQ(in_place_rep.data_ptr<float>()[i], scalar[k](pa[i], pr[c])) << k << " " << i;
          ASSERT_EQ(rep_a.data_ptr<float>()[i], scalar[k](pr2[c], pb[i])) << k << " " << i;
        }
      }
    }
  }
}

// One element against many (x * 2, a 0-dim tensor, a Python scalar), float32 and bfloat16, at
// sizes that run on one thread and on several: each element the scalar op's, rounded once.
TEST(TensorBinaryFloat, OneElementOperandsMatchScalarOps) {
  Generator gen(9);
  for (int64_t n : {1, 7, 1001, 70000}) {
    SCOPED_TRACE(n);
    const Tensor a = randn({n}, &gen) + 0.5;
    const Tensor s = tensor(1.75);
    const std::vector<std::pair<Tensor, std::function<float(float)>>> cases = {
        {a + s, [](float x) { return x + 1.75f; }},  {s - a, [](float x) { return 1.75f - x; }},
        {a * 2.5, [](float x) { return x * 2.5f; }}, {3.0 / a, [](float x) { return 3.0f / x; }},
        {a / s, [](float x) { return x / 1.75f; }},  {a - 0.25, [](float x) { return x - 0.25f; }}};
    const float* pa = a.data_ptr<float>();
    for (const auto& [got, f] : cases)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.data_ptr<float>()[i], f(pa[i])) << i;
    const Tensor h = a.to(Dtype::BFloat16);
    const Tensor hp = h * 2.5, hq = 3.0 / h;
    for (int64_t i = 0; i < n; ++i) {
      const float x = float(h.data_ptr<BFloat16>()[i]);
      ASSERT_EQ(hp.data_ptr<BFloat16>()[i].bits, BFloat16(x * 2.5f).bits) << i;
      ASSERT_EQ(hq.data_ptr<BFloat16>()[i].bits, BFloat16(3.0f / x).bits) << i;
    }
  }
}

// x ** e for one exponent, as torch's CPU kernel computes it: products and quotients for 2, 3,
// -1, -2, sqrt for 0.5 and 1 / sqrt for -0.5 (so -0 and -inf follow those), std::pow otherwise;
// on one thread and on several.
TEST(TensorBinaryFloat, PowToOneExponentAsTorch) {
  Generator gen(11);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {9, 70000}) {
    std::vector<float> xs = {0.0f, -0.0f, inf, -inf, std::nanf(""), -2.5f, 1e-40f, 3e38f, 7.0f};
    const Tensor r = randn({n - 9}, &gen) * 3.0;
    for (int64_t i = 0; i < n - 9; ++i) xs.push_back(r.data_ptr<float>()[i]);
    const Tensor x = from_vector(xs, {n});
    const std::vector<std::pair<float, std::function<float(float)>>> cases = {
        {2.0f, [](float v) { return v * v; }},
        {3.0f, [](float v) { return v * v * v; }},
        {0.5f, [](float v) { return std::sqrt(v); }},
        {-0.5f, [](float v) { return 1.0f / std::sqrt(v); }},
        {-1.0f, [](float v) { return 1.0f / v; }},
        {-2.0f, [](float v) { return 1.0f / (v * v); }},
        {1.7f, [](float v) { return std::pow(v, 1.7f); }},
        {0.0f, [](float v) { return std::pow(v, 0.0f); }},
        {1.0f, [](float v) { return v; }}};
    for (const auto& [e, f] : cases) {
      SCOPED_TRACE(e);
      const Tensor got = x.pow(double(e));
      for (int64_t i = 0; i < n; ++i) {
        const float want = f(xs[i]), g = got.data_ptr<float>()[i];
        ASSERT_TRUE(std::memcmp(&want, &g, 4) == 0 || (std::isnan(want) && std::isnan(g)))
            << i << ": " << xs[i] << " ** " << e << " = " << g << ", want " << want;
      }
    }
  }
}

// Rows against one value each (x * col), against a block repeated along a middle dim, and with
// the operands swapped (col - x): each element the scalar op's, on one thread and on several.
TEST(TensorBinaryFloat, RowBroadcastsMatchScalarOps) {
  Generator gen(12);
  for (int64_t rows : {3, 300}) {
    const Tensor x = randn({rows, 4, 40}, &gen), col = randn({rows, 4, 1}, &gen) + 4.0;
    const Tensor mid = randn({1, 4, 1}, &gen) + 4.0, plane = randn({rows, 1, 40}, &gen) + 4.0;
    const std::vector<std::tuple<Tensor, Tensor, int>> cases = {
        {x * col, col, 0}, {col - x, col, 1}, {x / mid, mid, 2}, {plane + x, plane, 3}};
    for (const auto& [got, other, k] : cases) {
      SCOPED_TRACE(k);
      const Tensor g = got.contiguous(), o = other.contiguous();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t c = 0; c < 40; ++c) {
            const float v = x.data_ptr<float>()[(r * 4 + h) * 40 + c];
            const int64_t oi = (o.size(0) == 1 ? 0 : r) * o.stride(0) +
                               (o.size(1) == 1 ? 0 : h) * o.stride(1) +
                               (o.size(2) == 1 ? 0 : c) * o.stride(2);
            const float w = o.data_ptr<float>()[oi];
            const float want = k == 0 ? v * w : k == 1 ? w - v : k == 2 ? v / w : w + v;
            ASSERT_EQ(g.data_ptr<float>()[(r * 4 + h) * 40 + c], want) << r << " " << h << " " << c;
          }
    }
  }
}

// masked_fill_ through a transposed view and where with broadcast operands, above the size that
// shares the elements among threads: each element the naive loop's.
TEST(TensorElementwise, MaskedFillAndWhereOnThreadsAsNaive) {
  Generator gen(13);
  const int64_t rows = 300, cols = 400;
  Tensor base = randn({cols, rows}, &gen);
  Tensor view = base.transpose(0, 1);  // (rows, cols), column-major
  const Tensor before = view.contiguous();
  const Tensor mask = randn({rows, cols}, &gen) > 0.3;
  view.masked_fill_(mask, -7.5);
  const Tensor after = view.contiguous();
  const Tensor a = randn({rows, cols}, &gen), b = randn({1, cols}, &gen);
  const Tensor cond = randn({rows, 1}, &gen) > 0.0;
  const Tensor w = where(cond, a, b);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      ASSERT_EQ(after.data_ptr<float>()[i],
                mask.data_ptr<bool>()[i] ? -7.5f : before.data_ptr<float>()[i])
          << r << " " << c;
      ASSERT_EQ(w.data_ptr<float>()[i],
                cond.data_ptr<bool>()[r] ? a.data_ptr<float>()[i] : b.data_ptr<float>()[c])
          << r << " " << c;
    }
}

// where() and masked_fill() read every operand where it lies (transposed, broadcast, one value)
// in one pass: each element the naive loop's, bit for bit, in float32, int64, bfloat16 and bool,
// on 1 and 2 threads; masked_fill broadcasting the tensor to the mask's shape sums its gradient
// back; a mask in the filled tensor's own memory is read as it was before the fill.
TEST(TensorElementwise, WhereAndMaskedFillReadStridedOperandsAsNaive) {
  const int threads = get_num_threads();
  Generator gen(15);
  const int64_t rows = 130, cols = 300;  // above the size that shares elements among threads
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    SCOPED_TRACE("threads " + std::to_string(nt));
    const Tensor cond = randn({1, cols}, &gen) > 0.2;  // broadcast over rows
    const Tensor base = randn({cols, rows}, &gen) * 100.0;
    const Tensor b0 = full({}, 2.5);  // one value
    for (Dtype dt : {Dtype::Float32, Dtype::Int64, Dtype::BFloat16, Dtype::Bool}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor a = base.to(dt).transpose(0, 1);  // (rows, cols), transposed
      ASSERT_FALSE(a.is_contiguous());
      const Tensor b = b0.to(dt);
      const Tensor w = where(cond, a, b).to(Dtype::Float32).contiguous();
      const Tensor ac = a.to(Dtype::Float32).contiguous();
      const float bv = b.to(Dtype::Float32).item<float>();
      ASSERT_EQ(w.shape(), (Shape{rows, cols}));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(w.data_ptr<float>()[r * cols + c],
                    cond.data_ptr<bool>()[c] ? ac.data_ptr<float>()[r * cols + c] : bv)
              << r << " " << c;
    }
    // The tensor broadcast to the mask's shape; its gradient summed back over the rows.
    const Tensor x = randn({cols}, &gen).requires_grad_(true);
    const Tensor mask = randn({rows, cols}, &gen) > 0.0;
    const Tensor y = x.masked_fill(mask, -3.0);
    ASSERT_EQ(y.shape(), (Shape{rows, cols}));
    y.sum().backward();
    for (int64_t c = 0; c < cols; ++c) {
      float kept = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const bool m = mask.data_ptr<bool>()[r * cols + c];
        ASSERT_EQ(y.data_ptr<float>()[r * cols + c], m ? -3.0f : x.data_ptr<float>()[c]);
        kept += m ? 0.0f : 1.0f;
      }
      ASSERT_EQ(x.grad().data_ptr<float>()[c], kept) << c;
    }
    // x.masked_fill_(x.transpose(0, 1), true): the mask is x as it was (x | x^T).
    Tensor sq = randn({cols, cols}, &gen) > 1.0;
    const Tensor old = sq.clone();
    sq.masked_fill_(sq.transpose(0, 1), true);
    for (int64_t r = 0; r < cols; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(sq.data_ptr<bool>()[r * cols + c],
                  old.data_ptr<bool>()[r * cols + c] || old.data_ptr<bool>()[c * cols + r])
            << r << " " << c;
  }
  set_num_threads(threads);
}

// Advanced indexing along one dim of a strided view (x[:, idx]), its gradient, index_add and
// index_add_ with repeated and negative indices, and nonzero: each element the naive loop's, on 1
// and 2 threads (the threads share each slice's elements; repeats are added in index order).
TEST(TensorIndex, SlicesAlongOneDimAsNaive) {
  const int threads = get_num_threads();
  Generator gen(16);
  const int64_t A = 6, N = 50, C = 40, M = 700;
  std::vector<int64_t> iv(M);
  for (int64_t i = 0; i < M; ++i)
    iv[std::size_t(i)] = (i * 37) % N - (i % 3 == 0 ? N : 0);  // < 0 too
  Tensor idx = zeros({M}, Dtype::Int64);
  for (int64_t i = 0; i < M; ++i) idx.data_ptr<int64_t>()[i] = iv[std::size_t(i)];
  const auto at = [&](int64_t i) { return (iv[std::size_t(i)] + N) % N; };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    SCOPED_TRACE("threads " + std::to_string(nt));
    const Tensor base = randn({A, C, N}, &gen).requires_grad_(true);
    const Tensor x = base.transpose(1, 2);  // (A, N, C), not contiguous
    const Tensor y = x.index({Slice(), idx});
    ASSERT_EQ(y.shape(), (Shape{A, M, C}));
    const Tensor xc = x.contiguous(), yc = y.contiguous();
    for (int64_t a = 0; a < A; ++a)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(yc.data_ptr<float>()[(a * M + i) * C + c],
                    xc.data_ptr<float>()[(a * N + at(i)) * C + c]);
    const Tensor g = randn({A, M, C}, &gen);
    y.backward(g);
    std::vector<float> want(std::size_t(A * N * C), 0.0f);  // (A, N, C)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t c = 0; c < C; ++c)
          want[std::size_t((a * N + at(i)) * C + c)] += g.data_ptr<float>()[(a * M + i) * C + c];
    const Tensor gx = base.grad().transpose(1, 2).contiguous();
    for (std::size_t k = 0; k < want.size(); ++k) ASSERT_EQ(gx.data_ptr<float>()[k], want[k]) << k;
    // index_add along dim 1 of the same view, repeats summed in index order, times alpha; and in
    // place into a copy.
    const Tensor pos = idx.remainder(N);
    const Tensor src = randn({A, M, C}, &gen);
    const Tensor xd = x.detach();
    const Tensor z = index_add(xd, 1, pos, src, 0.5);
    std::vector<float> sum(std::size_t(A * N * C));
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] = xc.data_ptr<float>()[k];
    for (int64_t a = 0; a < A; ++a)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t c = 0; c < C; ++c)
          sum[std::size_t((a * N + at(i)) * C + c)] +=
              src.data_ptr<float>()[(a * M + i) * C + c] * 0.5f;
    const Tensor zc = z.contiguous();
    Tensor w = xd.clone();
    index_add_(w, 1, pos, src, 0.5);
    const Tensor wc = w.contiguous();
    for (std::size_t k = 0; k < sum.size(); ++k) {
      ASSERT_EQ(zc.data_ptr<float>()[k], sum[k]) << k;
      ASSERT_EQ(wc.data_ptr<float>()[k], sum[k]) << k;
    }
  }
  set_num_threads(threads);
  // A bfloat16 tensor's gradient is bfloat16: each row's count of picks.
  const Tensor hb = zeros({N, 3}, Dtype::BFloat16).requires_grad_(true);
  hb.index({idx}).sum().backward();
  ASSERT_EQ(hb.grad().dtype(), Dtype::BFloat16);
  const Tensor counts = hb.grad().to(Dtype::Float32).contiguous();
  std::vector<float> picks(std::size_t(N), 0.0f);
  for (int64_t i = 0; i < M; ++i) picks[std::size_t(at(i))] += 1.0f;
  for (int64_t r = 0; r < N; ++r) ASSERT_EQ(counts.data_ptr<float>()[r * 3], picks[r]) << r;
  EXPECT_THROW(index_add(zeros({3}), 0, tensor({-1}, Dtype::Int64), ones({1})), IndexError);
  EXPECT_THROW(index_add(zeros({3}), 0, tensor({1}, Dtype::Int64), ones({2})), Error);
  const Tensor nz = nonzero(from_vector({0, 1.5f, 0, -2, 0, 0}, {2, 3}));
  ASSERT_EQ(nz.shape(), (Shape{2, 2}));
  EXPECT_EQ(nz.data_ptr<int64_t>()[0], 0);
  EXPECT_EQ(nz.data_ptr<int64_t>()[1], 1);
  EXPECT_EQ(nz.data_ptr<int64_t>()[2], 1);
  EXPECT_EQ(nz.data_ptr<int64_t>()[3], 0);
}

// sum / mean over a run of dims with kept dims after it (sum(0), sum(1) of a 3-d tensor), of a
// contiguous tensor, read column by column where they lie: the bits of the same reduction of a
// non-contiguous copy (the kernel's other path, through a transposed copy; torch's order for
// both), on 1 and 2 threads, for blocks of 32 columns, blocks of 4, the columns left over, and
// dims of size 1 (which torch's order ignores) anywhere.
TEST(TensorReduce, RunsOfDimsReducedInPlaceAsThroughACopy) {
  const int threads = get_num_threads();
  Generator gen(14);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{300, 1000}, {0}},      {{70, 7}, {0}},
      {{3, 50, 45}, {0}},      {{0, 40}, {0}},
      {{3, 50, 45}, {0, 1}},   {{5, 70, 40}, {1}},
      {{4, 9, 3, 37}, {1, 2}}, {{6, 33, 1}, {1}},
      {{2, 1, 60, 1, 7}, {2}}, {{2, 1, 60, 1, 7}, {1, 2, 3}},
      {{4, 0, 6}, {1}},        {{40, 1}, {0}}};
  for (const auto& [shape, dims] : cases) {
    SCOPED_TRACE(shape_str(shape) + " over " + shape_str(dims));
    // The same values twice: a view that skips the last element of each row (not contiguous),
    // and its contiguous copy.
    const int64_t last = int64_t(shape.size()) - 1;
    Shape wider = shape;
    ++wider[last];
    const Tensor strided = randn(wider, &gen).narrow(last, 0, shape[last]);
    const Tensor x = strided.contiguous();
    ASSERT_TRUE(x.numel() == 0 || !strided.is_contiguous());
    for (int nt : {1, 2}) {
      set_num_threads(nt);
      for (bool mean : {false, true}) {
        const Tensor got = mean ? x.mean(dims) : x.sum(dims);
        const Tensor want = mean ? strided.mean(dims) : strided.sum(dims);
        ASSERT_EQ(got.shape(), want.shape());
        for (int64_t i = 0; i < got.numel(); ++i) {
          const float g = got.data_ptr<float>()[i], w = want.data_ptr<float>()[i];
          ASSERT_TRUE(std::memcmp(&g, &w, 4) == 0 || (std::isnan(g) && std::isnan(w)))
              << nt << " " << mean << " " << i << ": " << g << " vs " << w;
        }
      }
    }
  }
  set_num_threads(threads);
}

// As torch's: a new result takes the layout of its operands (the first where they differ), and
// each element is the one of the contiguous copies'; in-place ops write through any layout.
TEST(TensorBinaryFloat, ResultsFollowTheOperandsLayout) {
  Generator gen(10);
  const Tensor x = randn({53, 37}, &gen), y = randn({53, 37}, &gen);
  const Tensor xt = x.transpose(0, 1), yt = y.transpose(0, 1), yc = yt.contiguous();
  const Tensor xc = xt.contiguous();
  auto same = [](const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.shape(), want.shape());
    const Tensor g = got.contiguous(), w = want.contiguous();
    for (int64_t i = 0; i < g.numel(); ++i)
      ASSERT_EQ(g.data_ptr<float>()[i], w.data_ptr<float>()[i]) << i;
  };
  const Tensor scaled = xt * 2.0, summed = xt + yt, mixed = xt - yc, mixed_first = yc - xt;
  EXPECT_EQ(scaled.strides(), xt.strides());
  EXPECT_EQ(summed.strides(), xt.strides());
  EXPECT_EQ(mixed.strides(), xt.strides());
  EXPECT_TRUE(mixed_first.is_contiguous());
  same(scaled, xc * 2.0);
  same(summed, xc + yc);
  same(mixed, xc - yc);
  same(mixed_first, yc - xc);
  const Tensor col = randn({37, 1}, &gen);
  const Tensor broadcast = xt * col;
  EXPECT_EQ(broadcast.strides(), xt.strides());
  same(broadcast, xc * col);
  EXPECT_EQ((xt < yt).strides(), xt.strides());
  same((xt < yt).to(Dtype::Float32), (xc < yc).to(Dtype::Float32));

  Tensor z = randn({53, 37}, &gen).transpose(0, 1);
  const Tensor before = z.contiguous();
  z.add_(yc);
  same(z, before + yc);
}

}  // namespace
}  // namespace attn

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>

// How many pages of [p, p + bytes) are resident (mincore; p page-aligned).
static int64_t resident_pages(const void* p, std::size_t bytes) {
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, v.data()) != 0) return -1;
  int64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(TensorMemory, BigZeroedTensorsHoldNoMemoryUntilWritten) {
  // zeros() of 512 MiB: mapped zero pages, resident only where written (a model built to be
  // overwritten by a checkpoint holds none of its zeros). Its own pages are asked (mincore), not
  // the process's resident size, which allocators and sanitizers move.
  // A block kept by the host cache from an earlier test would be taken and cleared (resident, by
  // design: storage.cpp), so the cache is emptied first, as a process that has freed nothing is.
  attn::cpu::empty_cache();
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  const int64_t n = int64_t(1) << 27;  // float32
  attn::Tensor t = attn::zeros({n});
  float* p = t.data_ptr<float>();
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % page, 0u);  // a mapping of its own
  const std::size_t bytes = std::size_t(n) * 4, quarter = bytes / 4;
  EXPECT_EQ(resident_pages(p, bytes), 0);
  for (int64_t i = 0; i < n / 4; ++i) p[i] = 1.0f;  // the first 128 MiB written
  EXPECT_EQ(resident_pages(p, quarter), int64_t(quarter / page));
  EXPECT_EQ(resident_pages(reinterpret_cast<char*>(p) + quarter, bytes - quarter), 0);
  EXPECT_EQ(t.sum().item<double>(), double(n / 4));  // the rest reads as zeros
  attn::Tensor e = attn::empty({int64_t(1) << 26}, attn::Dtype::BFloat16);
  EXPECT_EQ(e.sum().item<double>(), 0.0);
}
#endif
