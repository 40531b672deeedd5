// randperm and Tensor.random_: integer draws from the CPU generator in torch 1.13's order.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <limits>
#include <mutex>

#include "internal.h"

namespace attn {

using detail::fail;

namespace {

Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

constexpr int64_t kFloatExact = int64_t{1} << 24;  // the largest run of integers float32 holds

// Writes value(i) for every element of t in row-major order (the memory order of a contiguous
// tensor, which is the order torch draws in).
template <typename F>
Tensor& fill_ints(Tensor& t, const char* fn, F&& draw) {
  if (!t.defined()) fail(fn, "undefined tensor");
  detail::check_not_reduced(t, fn);
  detail::check_inplace(t, fn);
  Tensor dst = t.is_contiguous() ? t : detail::make_tensor(fn, t.shape(), t.dtype(), false);
  const int64_t n = dst.numel();
  switch (dst.dtype()) {
    case Dtype::Int64: {
      int64_t* p = dst.data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = draw(Dtype::Int64);
      break;
    }
    case Dtype::Float32: {
      float* p = dst.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(draw(Dtype::Float32));
      break;
    }
    case Dtype::Bool: {
      bool* p = dst.data_ptr<bool>();
      for (int64_t i = 0; i < n; ++i) p[i] = draw(Dtype::Bool) != 0;
      break;
    }
    case Dtype::BFloat16:
    case Dtype::Float16: detail::fail_reduced(dst.dtype(), fn);
  }
  if (!t.is_contiguous()) {
    NoGradGuard no_grad;
    t.copy_(dst);
  }
  detail::bump_version(t);
  return t;
}

}  // namespace

Tensor randperm(int64_t n, Generator* gen, Dtype dtype) {
  const char* fn = "randperm";
  if (n < 0) fail(fn, "n must be non-negative, got ", n);
  if (dtype == Dtype::Bool) fail(fn, "dtype torch.bool cannot hold a permutation of ", n);
  if (is_reduced_float(dtype)) detail::fail_reduced(dtype, fn);
  if (dtype == Dtype::Float32 && n > kFloatExact)
    fail(fn, "n ", n, " is too large for torch.float32, which holds integers exactly only up to ",
         kFloatExact);
  std::vector<int64_t> r(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[std::size_t(i)] = i;
  {
    Generator& g = gen_or_default(gen);
    std::lock_guard<std::mutex> lock(g.mutex());
    // Fisher-Yates from the front: position i swaps with i + (32-bit draw % (n - i)).
    for (int64_t i = 0; i + 1 < n; ++i) {
      const int64_t z = static_cast<int64_t>(static_cast<uint64_t>(g.random()) % uint64_t(n - i));
      std::swap(r[std::size_t(i)], r[std::size_t(i + z)]);
    }
  }
  Tensor out = detail::make_tensor(fn, {n}, dtype, false);
  if (dtype == Dtype::Int64) {
    int64_t* p = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = r[std::size_t(i)];
  } else {
    float* p = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(r[std::size_t(i)]);
  }
  return out;
}

Tensor& random_(Tensor& t, Generator* gen) {
  Generator& g = gen_or_default(gen);
  std::lock_guard<std::mutex> lock(g.mutex());
  return fill_ints(t, "random_", [&g](Dtype d) -> int64_t {
    switch (d) {
      case Dtype::Int64:  // [0, 2^63 - 1]
        return static_cast<int64_t>(g.random64() % (uint64_t{1} << 63));
      case Dtype::Float32:  // [0, 2^24]
        return static_cast<int64_t>(static_cast<uint64_t>(g.random()) % uint64_t(kFloatExact + 1));
      case Dtype::Bool: return static_cast<int64_t>(g.random() & 1u);
      case Dtype::BFloat16:
      case Dtype::Float16: break;  // refused by fill_ints before any draw
    }
    return 0;
  });
}

Tensor& random_(Tensor& t, int64_t from, std::optional<int64_t> to, Generator* gen) {
  const char* fn = "random_";
  if (!t.defined()) fail(fn, "undefined tensor");
  detail::check_not_reduced(t, fn);
  const Dtype d = t.dtype();
  // The dtype's exclusive upper end when `to` is not given.
  const int64_t top = d == Dtype::Float32 ? kFloatExact : d == Dtype::Bool ? 1 : 0;
  uint64_t range;
  if (to) {
    if (from >= *to)
      fail(fn, "expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
    range = static_cast<uint64_t>(*to) - static_cast<uint64_t>(from);
  } else if (d == Dtype::Int64) {
    // [from, 2^63 - 1]; from = INT64_MIN draws the full 64 bits.
    range = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) -
            static_cast<uint64_t>(from) + 1;
  } else {
    if (from > top)
      fail(fn, "expects 'from' to be less than or equal to 'to', but got from=", from,
           " > to=", top);
    range = static_cast<uint64_t>(top) - static_cast<uint64_t>(from) + 1;
  }
  if (d == Dtype::Float32) {
    const int64_t hi = to ? *to - 1 : top;
    if (from < -kFloatExact || hi > kFloatExact)
      fail(fn, "from=", from, " and to=", hi + 1, " must lie within [-2^24, 2^24] for float32, ",
           "where every integer is exact");
  } else if (d == Dtype::Bool) {
    const int64_t hi = to ? *to - 1 : top;
    if (from < 0 || hi > 1)
      fail(fn, "from=", from, " and to=", hi + 1, " must lie within [0, 2) for torch.bool");
  }
  Generator& g = gen_or_default(gen);
  std::lock_guard<std::mutex> lock(g.mutex());
  const uint64_t base = static_cast<uint64_t>(from);
  if (range == 0)  // the full 64-bit range: from = INT64_MIN, to = None
    return fill_ints(t, fn, [&g](Dtype) { return static_cast<int64_t>(g.random64()); });
  const bool wide = range >= (uint64_t{1} << 32) && d != Dtype::Bool;
  return fill_ints(t, fn, [&g, range, base, wide](Dtype) {
    const uint64_t v = wide ? g.random64() : static_cast<uint64_t>(g.random());
    return static_cast<int64_t>(v % range + base);
  });
}

}  // namespace attn
