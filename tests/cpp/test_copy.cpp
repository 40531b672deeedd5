// Copies between layouts (src/backend/cpu/strided.h: copy_strided; transpose.cpp): transposed,
// permuted, sliced and broadcast views made contiguous or converted to another dtype, and copies
// into views, against each element worked out from its index, on every instruction set. The
// transposes cover sizes below, at and past the register tiles and the 64 x 64 blocks.
#include <attn/ops.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "isa_scope.h"

namespace attn {
namespace {

namespace K = kernels;
using testing::IsaScope;

// A tensor holding 0, 1, 2, ... in row-major order (in `dtype`: rounded): an element's value is its
// offset in the storage, so a view's element at index m is (offset + sum m[d] * stride[d]).
Tensor copy_test_numbered(const Shape& shape, Dtype dtype) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return arange(n).to(dtype).reshape(shape);
}
Tensor numbered(const Shape& shape) { return copy_test_numbered(shape, Dtype::Float32); }

// The storage offsets of a view's elements in row-major order of its shape.
std::vector<int64_t> offsets_of(const Tensor& v) {
  std::vector<int64_t> out;
  const Shape& shape = v.shape();
  if (v.numel() == 0) return out;
  Shape idx(shape.size(), 0);
  while (true) {
    int64_t off = v.storage_offset();
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * v.stride(int64_t(d));
    out.push_back(off);
    int64_t d = int64_t(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
    if (d < 0) return out;
  }
}

// got[i] as a float, read from its own dtype.
float element(const Tensor& got, int64_t i) {
  switch (got.dtype()) {
    case Dtype::Float32: return got.data_ptr<float>()[i];
    case Dtype::Int64: return float(got.data_ptr<int64_t>()[i]);
    case Dtype::Bool: return got.data_ptr<bool>()[i] ? 1.0f : 0.0f;
    case Dtype::BFloat16: return float(got.data_ptr<BFloat16>()[i]);
    case Dtype::Float16: return float(got.data_ptr<Half>()[i]);
  }
  return 0.0f;
}

// v converted to `dtype` by half.h's scalar conversions (the definition), and back to float.
float converted(float v, Dtype dtype) {
  switch (dtype) {
    case Dtype::BFloat16: return float(BFloat16(v));
    case Dtype::Float16: return float(Half(v));
    case Dtype::Bool: return v != 0.0f ? 1.0f : 0.0f;
    default: return v;  // float32, and int64 of these whole numbers: exact
  }
}

// got (contiguous, of view's shape) holds view's elements of a numbered tensor, converted from
// view's dtype to got's.
void expect_elements(const Tensor& got, const Tensor& view, const std::string& what) {
  ASSERT_TRUE(got.is_contiguous()) << what;
  ASSERT_EQ(got.shape(), view.shape()) << what;
  const std::vector<int64_t> offs = offsets_of(view);
  ASSERT_EQ(int64_t(offs.size()), got.numel()) << what;
  for (size_t i = 0; i < offs.size(); ++i)
    ASSERT_EQ(element(got, int64_t(i)),
              converted(converted(float(offs[i]), view.dtype()), got.dtype()))
        << what << ": element " << i << " (storage offset " << offs[i] << ")";
}

std::string shape_str(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

// Views of numbered tensors: transposes of many sizes, permutations of 3 and 4 dims (attention's
// head split and merge), slices with steps and offsets, size-1 dims, broadcasts.
std::vector<std::pair<std::string, Tensor>> views(Dtype dtype) {
  const auto numbered = [dtype](const Shape& s) { return copy_test_numbered(s, dtype); };
  std::vector<std::pair<std::string, Tensor>> v;
  for (int64_t r : {1, 5, 16, 31, 32, 33, 64, 70})
    for (int64_t c : {1, 7, 32, 45, 96, 130}) {
      const Shape s{r, c};
      v.emplace_back("t" + shape_str(s), numbered(s).transpose(0, 1));
    }
  v.emplace_back("batched transpose", numbered({3, 70, 80}).transpose(1, 2));
  v.emplace_back("permute(1,2,0)", numbered({70, 2, 80}).permute({1, 2, 0}));
  v.emplace_back("permute(0,2,1,3)", numbered({2, 40, 3, 16}).permute({0, 2, 1, 3}));
  v.emplace_back("permute(0,2,3,1)", numbered({2, 33, 3, 40}).permute({0, 2, 3, 1}));
  v.emplace_back("permute(3,1,0,2)", numbered({35, 2, 3, 64}).permute({3, 1, 0, 2}));
  v.emplace_back("permute(1,0,2) of 1-wide",
                 numbered({64, 1, 48}).permute({1, 0, 2}).transpose(1, 2));
  v.emplace_back("transposed slice",
                 numbered({80, 100}).slice(0, 3, 77, 2).slice(1, 5, 95, 1).transpose(0, 1));
  v.emplace_back("stepped inner", numbered({50, 90}).slice(1, 1, 90, 3));
  v.emplace_back("offset rows", numbered({70, 66}).narrow(0, 9, 40).narrow(1, 2, 60));
  v.emplace_back("broadcast", numbered({1, 37}).expand({45, 37}));
  v.emplace_back("broadcast rows transposed", numbered({1, 70}).expand({80, 70}).transpose(0, 1));
  v.emplace_back("broadcast transposed", numbered({37, 1}).expand({37, 45}).transpose(0, 1));
  v.emplace_back("0-dim", numbered({1}).reshape({}));
  v.emplace_back("empty", numbered({0, 5}).transpose(0, 1));
  return v;
}

TEST(Copy, ViewsMadeContiguousAndConvertedOnEveryInstructionSet) {
  int tried = 0;
  for (K::Isa isa : {K::Isa::Scalar, K::Isa::Avx2, K::Isa::Avx512, K::Isa::Neon, K::Isa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    ++tried;
    for (Dtype from : {Dtype::Float32, Dtype::BFloat16}) {
      for (const auto& [name, view] : views(from)) {
        const std::string what =
            std::string(K::isa_name(isa)) + " " + dtype_name(from) + " " + name;
        expect_elements(view.contiguous(), view, what + " contiguous");
        for (Dtype to :
             {Dtype::Float32, Dtype::BFloat16, Dtype::Float16, Dtype::Int64, Dtype::Bool})
          expect_elements(view.to(to).contiguous(), view, what + " to " + dtype_name(to));
      }
    }
  }
  EXPECT_GE(tried, 2);  // the baseline and the machine's own
}

TEST(Copy, IntoViewsOfAnotherLayout) {
  // dst a transposed view (written along src's rows), src contiguous; and both strided.
  for (int64_t n : {3, 33, 100}) {
    SCOPED_TRACE(n);
    const Tensor src = numbered({n, 70});
    Tensor dst = zeros({70, n});
    dst.transpose(0, 1).copy_(src);
    expect_elements(dst, src.transpose(0, 1), "into a transposed view");
    Tensor wide = zeros({2 * n, 140});
    Tensor part = wide.slice(0, 0, 2 * n, 2).slice(1, 0, 140, 2);
    part.copy_(numbered({70, n}).transpose(0, 1));
    expect_elements(part.contiguous(), numbered({70, n}).transpose(0, 1),
                    "between two strided views");
    // the rows in between are untouched
    EXPECT_EQ(wide.slice(0, 1, 2 * n, 2).abs().sum().item<float>(), 0.0f);
  }
}

// The blocks of a transpose and the parts of a long row shared among threads: the same elements
// at any count (threads are not started under the AArch64 emulation; see test_aarch64.sh).
TEST(Copy, AnyThreadCount) {
  const int before = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const Tensor x = numbered({300, 520});
    expect_elements(x.transpose(0, 1).contiguous(), x.transpose(0, 1),
                    "transpose, " + std::to_string(threads));
    expect_elements(x.to(Dtype::BFloat16), x, "to bfloat16, " + std::to_string(threads));
    const Tensor h = numbered({2, 300, 4, 64});
    expect_elements(h.transpose(1, 2).contiguous(), h.transpose(1, 2), "heads");
    const Tensor row = numbered({1, 200000});
    expect_elements(row.to(Dtype::Float16), row, "one long row to half");
  }
  set_num_threads(before);
}

}  // namespace
}  // namespace attn
