// attn::Tensor: a strided view over shared storage, modelled on torch.Tensor.
//
// A Tensor is a cheap handle (a shared pointer to a TensorImpl). Views (view, transpose, permute,
// slicing, ...) share storage with their base, exactly as in PyTorch, so writing through a view
// writes the base. Every public function validates its arguments and throws attn::Error (or
// attn::IndexError for indices) naming the function and the offending shapes.
#pragma once

#include <attn/common.h>
#include <attn/device.h>
#include <attn/half.h>

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace attn {

// A Python-like number: float, int or bool. Arithmetic between a tensor and a Scalar follows
// PyTorch's promotion: an int64 tensor times a float scalar is float32, and so on.
class Scalar {
 public:
  enum class Kind { Float, Int, Bool };
  Scalar(double v) : kind_(Kind::Float), d_(v) {}                  // NOLINT
  Scalar(float v) : kind_(Kind::Float), d_(v) {}                   // NOLINT
  Scalar(int v) : kind_(Kind::Int), d_(v), i_(v) {}                // NOLINT
  Scalar(long v) : kind_(Kind::Int), d_(double(v)), i_(v) {}       // NOLINT
  Scalar(long long v) : kind_(Kind::Int), d_(double(v)), i_(v) {}  // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), d_(v ? 1.0 : 0.0), i_(v) {}  // NOLINT
  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return d_; }
  // A float is truncated towards zero; one outside int64's range (or NaN) throws attn::Error, as
  // PyTorch's "value cannot be converted to type int64_t without overflow".
  int64_t to_int() const { return kind_ == Kind::Float ? float_to_int(d_) : i_; }

 private:
  static int64_t float_to_int(double v);
  Kind kind_;
  double d_ = 0;
  int64_t i_ = 0;
};

// A nested list of numbers, the C++ spelling of Python's [[1.0, 2.0], [3.0, 4.0]]:
//   attn::tensor({{1.0, 2.0}, {3.0, 4.0}})
// Integers only give int64, bools only give bool, any float gives float32 (as torch.tensor).
class NestedList {
 public:
  NestedList(double v) : scalar_(v), is_leaf_(true) {}         // NOLINT
  NestedList(float v) : scalar_(double(v)), is_leaf_(true) {}  // NOLINT
  NestedList(int v) : scalar_(v), is_leaf_(true) {}            // NOLINT
  NestedList(long v) : scalar_(v), is_leaf_(true) {}           // NOLINT
  NestedList(long long v) : scalar_(v), is_leaf_(true) {}      // NOLINT
  NestedList(bool v) : scalar_(v), is_leaf_(true) {}           // NOLINT
  NestedList(std::initializer_list<NestedList> items) : items_(items) {}
  explicit NestedList(std::vector<NestedList> items) : items_(std::move(items)) {}
  bool is_leaf() const { return is_leaf_; }
  const Scalar& scalar() const { return scalar_; }
  const std::vector<NestedList>& items() const { return items_; }

 private:
  Scalar scalar_ = 0.0;
  bool is_leaf_ = false;
  std::vector<NestedList> items_;
};

// Reference-counted raw memory. `owner` keeps it alive (our own allocation, or a NumPy array).
struct Storage {
  void* data = nullptr;
  std::size_t nbytes = 0;
  std::shared_ptr<void> owner;
  // Bumped by every in-place write (autograd's version counter, shared by all views).
  uint64_t version = 0;
  // Where `data` lives: host memory, or a GPU's (a concrete index, never plain "cuda").
  Device device;
  // 64-byte aligned memory, zero-initialised unless `zero` is false (kernels that write every
  // element skip the memset).
  static std::shared_ptr<Storage> allocate(std::size_t nbytes, bool zero = true);
  // The same on `device` (resolved: "cuda" means the current GPU); `fn` names the caller in
  // errors (no GPU, out of GPU memory).
  static std::shared_ptr<Storage> allocate(std::size_t nbytes, const Device& device, bool zero,
                                           const char* fn);
};

// Reserved for reverse-mode autograd (grad, grad_fn); the forward-only core keeps the hook so
// that gradients can be added without changing the layout of TensorImpl.
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  Dtype dtype = Dtype::Float32;
  bool requires_grad = false;
  std::shared_ptr<AutogradMeta> autograd;
};

class TensorIndex;
class Generator;

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  // True when both handles refer to the same TensorImpl (Python's `is`).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata -------------------------------------------------------------------------------
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const;
  int64_t dim() const { return int64_t(shape().size()); }
  int64_t ndim() const { return dim(); }
  int64_t numel() const;
  Dtype dtype() const;
  // float32, bfloat16 or float16.
  bool is_floating_point() const { return attn::is_floating_point(dtype()); }
  bool is_contiguous() const;
  // Where the elements live (include/attn/device.h); views share their base's device.
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  // Pointer to element [0, 0, ...] (storage data plus offset). T must match dtype: float,
  // int64_t, bool, BFloat16 or Half. CPU tensors only: a CUDA tensor throws attn::DeviceError (the
  // CPU must not dereference GPU memory), which is how every operation without a CUDA
  // implementation refuses CUDA tensors.
  template <typename T>
  T* data_ptr() const;
  void* raw_data() const;
  // The address of element [0, 0, ...] on the tensor's own device (a GPU address for a CUDA
  // tensor), for kernels and libraries that run there.
  void* device_data() const;

  // ---- autograd (include/attn/autograd.h) ------------------------------------------------------
  bool requires_grad() const;
  // Sets the flag on a leaf; on a result (a tensor with a grad_fn) only true is accepted (a no-op).
  Tensor& requires_grad_(bool value = true);
  Tensor detach() const;  // shares storage, requires_grad false, outside the graph
  // torch's `t.data = src` (set_data): t now holds src's elements (its storage, shape, strides and
  // dtype, shared), keeping its own identity, so every handle on t (a module's parameter) sees
  // them; its gradient is dropped. No gradients: t must not be part of a graph (a leaf is fine).
  void set_data(const Tensor& src);
  // No recorded op produced it (tensors that do not require grad are leaves too).
  bool is_leaf() const;
  // The gradient that backward passes accumulated into this leaf; undefined before the first pass
  // (and for results, as PyTorch's .grad of a non-leaf is None).
  Tensor grad() const;
  // Replaces the accumulated gradient; an undefined tensor clears it (Python's `t.grad = None`).
  // The gradient must be float32 with this tensor's shape.
  void set_grad(const Tensor& grad);
  // Runs the backward pass from this tensor (attn::backward): gradient defaults to 1 for a
  // one-element tensor; retain_graph defaults to false (the graph's saved tensors are freed).
  void backward(const Tensor& gradient = Tensor(),
                std::optional<bool> retain_graph = std::nullopt) const;
  // The storage's version counter (torch's t._version): how many in-place writes it has seen.
  uint64_t version() const;

  // ---- conversion and copies -------------------------------------------------------------------
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Dtype dtype) const;  // returns *this when the dtype already matches
  // A copy on `device` ("cpu", "cuda", "cuda:1"), or *this when it is there already; gradients
  // flow back to this tensor's device. Throws attn::DeviceError when the device cannot be used.
  Tensor to(const Device& device) const;
  Tensor to(const Device& device, Dtype dtype) const;
  Tensor cuda(int index = -1) const { return to(Device(DeviceType::CUDA, index)); }
  Tensor cpu() const { return to(Device()); }
  Tensor float_() const { return to(Dtype::Float32); }
  Tensor long_() const { return to(Dtype::Int64); }
  Tensor bool_() const { return to(Dtype::Bool); }
  Tensor bfloat16() const { return to(Dtype::BFloat16); }
  Tensor half() const { return to(Dtype::Float16); }
  // Copies `src` (broadcast to this shape, converted to this dtype) into this tensor's elements;
  // src may be on another device.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(Scalar value);
  Tensor& zero_() { return fill_(0.0); }
  // The single element of a one-element tensor (T: float, double, int64_t or bool; a bfloat16 or
  // float16 element is converted through float).
  template <typename T>
  T item() const;
  double item_double() const;
  // Row-major copy of the elements as float (other dtypes are converted as to(Float32) does).
  std::vector<float> to_float_vector() const;

  // ---- views (share storage) -------------------------------------------------------------------
  Tensor view(Shape shape) const;     // one -1 allowed; fails if strides do not allow a view
  Tensor reshape(Shape shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(Shape dims) const;
  Tensor T() const;   // all dims reversed (a matrix transpose for 2-D)
  Tensor mT() const;  // last two dims swapped
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(Shape shape) const;  // -1 keeps a size; stride 0 for broadcast dims
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop,
               int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // x[i] (select along dim 0) and Python-style multi-indexing x[b, :t+1], x[..., None].
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor index(const std::vector<TensorIndex>& indices) const;
  // x[indices] = value
  Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& value);
  Tensor& index_put_(const std::vector<TensorIndex>& indices, Scalar value);

  // ---- elementwise ------------------------------------------------------------------------------
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor tanh() const;
  Tensor cos() const;
  Tensor sin() const;
  Tensor sigmoid() const;
  // The inverse error function (torch's rational approximation and two Newton steps, float32).
  Tensor erfinv() const;
  // torch's special and trigonometric functions (src/ops/special.cpp): computed in float32 (ints
  // become float32, bfloat16 and float16 are rounded back), with their gradients.
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor exp2() const;
  Tensor erf() const;
  Tensor erfc() const;
  Tensor tan() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor atan() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor atanh() const;
  Tensor& erfinv_();
  Tensor relu() const;
  Tensor ceil() const;
  Tensor floor() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor logical_not() const;
  Tensor pow(Scalar exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor& masked_fill_(const Tensor& mask, Scalar value);
  Tensor& add_(const Tensor& other);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  // Division rounded as torch.div's rounding_mode: "floor" (toward -inf, Python's //), "trunc"
  // (toward 0) or none (true division). Integer operands stay integers under a rounding mode; an
  // integer divisor of 0 throws attn::Error (torch's ZeroDivisionError). Its gradient is zero.
  Tensor div(const Tensor& other, std::optional<std::string_view> rounding_mode) const;
  Tensor div(Scalar other, std::optional<std::string_view> rounding_mode) const;
  Tensor& div_(const Tensor& other, std::optional<std::string_view> rounding_mode);
  Tensor& div_(Scalar other, std::optional<std::string_view> rounding_mode);
  // torch.floor_divide (Python's //: div with rounding_mode "floor"; no derivative, as torch's:
  // a backward pass through it throws NotImplementedError), torch.remainder (Python's %: the sign
  // of the divisor) and torch.fmod (C's fmod: the sign of the dividend).
  Tensor floor_divide(const Tensor& other) const;
  Tensor floor_divide(Scalar other) const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(Scalar other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(Scalar other) const;
  Tensor& floor_divide_(const Tensor& other);
  Tensor& floor_divide_(Scalar other);
  Tensor& remainder_(const Tensor& other);
  Tensor& remainder_(Scalar other);
  Tensor& fmod_(const Tensor& other);
  Tensor& fmod_(Scalar other);
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator+=(Scalar o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator-=(Scalar o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator*=(Scalar o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator/=(Scalar o) { return div_(o); }

  // ---- reductions (dims may be negative; keepdim keeps reduced dims with size 1) ----------------
  Tensor sum() const;
  Tensor sum(Shape dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(Shape dims, bool keepdim = false) const;
  // Variance with Bessel's correction by default (torch's unbiased=True, correction=1).
  // var() and var(false) reduce everything; var(1), var({1}) and var({0, 2}) reduce dims, as
  // torch's t.var(1). (Only a real bool selects the first form: var(1) is a dim, never
  // unbiased = true.)
  Tensor var() const { return var(Shape{}, true, false); }
  template <std::same_as<bool> B>
  Tensor var(B unbiased) const {
    return var(Shape{}, unbiased, false);
  }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor var(I dim, bool unbiased = true, bool keepdim = false)
  const { return var(Shape{int64_t(dim)}, unbiased, keepdim); }
  Tensor var(Shape dims, bool unbiased = true, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  // (values, indices) along `dim`, as torch.max(x, dim).
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor amax(Shape dims, bool keepdim = false) const;
  bool all() const;  // every element non-zero
  bool any() const;

  // ---- linear algebra and softmax ---------------------------------------------------------------
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor dot(const Tensor& other) const;
  // torch.outer: self (n) times other (m) into (n, m), each element one product.
  Tensor outer(const Tensor& other) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

  // ---- sorting, selection, scans, clamping, gather / scatter, splitting, sampling ---------------
  // (src/ops/sort.cpp, scan_clamp.cpp, gather_scatter.cpp, src/tensor/sampling.cpp; the free
  // functions of the same names are in attn/ops.h.)
  // sum(1), sum(-1, true), mean(0, true): one dim, as torch's t.sum(dim, keepdim). (A real bool is
  // never taken for a dim.)
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor sum(I dim, bool keepdim = false)
  const { return sum(Shape{int64_t(dim)}, keepdim); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) Tensor mean(I dim, bool keepdim = false)
  const { return mean(Shape{int64_t(dim)}, keepdim); }
  Tensor argmax() const;  // index into the flattened tensor (torch's dim=None)
  Tensor argmin() const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  // (values, indices) of the k largest (smallest) entries along dim, in torch's order.
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                  bool sorted = true) const;
  // (values, indices) sorted along dim; NaN sorts above every number, as in torch.
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false,
                                  bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  // Elementwise min(max(x, min), max); an unset bound (nullopt, undefined tensor) is open.
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor clamp(const Tensor& min, const Tensor& max = Tensor()) const;
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& clamp_(const Tensor& min, const Tensor& max = Tensor());
  Tensor clip(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const {
    return clamp(min, max);
  }
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, Scalar value) const;
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t dim, const Tensor& index, Scalar value);
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  // Views of consecutive pieces along dim (the last one may be smaller).
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const Shape& sizes, int64_t dim = 0) const;  // split_with_sizes
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  // In-place elementwise math (bump the version counter; refused on leaves that require grad).
  Tensor& exp_();
  Tensor& log_();
  Tensor& sqrt_();
  Tensor& rsqrt_();
  Tensor& tanh_();
  Tensor& cos_();
  Tensor& sin_();
  Tensor& sigmoid_();
  Tensor& relu_();
  Tensor& abs_();
  Tensor& neg_();
  Tensor& pow_(Scalar exponent);
  Tensor& pow_(const Tensor& exponent);
  Tensor square() const;  // pow(2)
  Tensor index_select(int64_t dim, const Tensor& index) const;
  // Fills with Exp(lambd) samples drawn as torch's CPU kernel does (same stream, contiguous).
  Tensor& exponential_(double lambd = 1.0, Generator* gen = nullptr);
  // num_samples category indices per row of a 1-D or 2-D tensor of (unnormalised) probabilities,
  // bit for bit torch.multinomial's CPU stream for the same generator state.
  Tensor multinomial(int64_t num_samples, bool replacement = false, Generator* gen = nullptr) const;

  // PyTorch's repr: tensor([[0.2996, 0.8053], ...]) with the current print options.
  std::string repr() const;

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- indexing helpers, as in libtorch: x.index({b, Slice(None, t + 1)})
// ---------------------------
namespace indexing {
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop, step;
};
struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};
inline constexpr std::nullopt_t None = std::nullopt;  // a new axis of size 1 (or an open slice end)
}  // namespace indexing

class TensorIndex {
 public:
  enum class Kind { Integer, Slice, None, Ellipsis, Tensor };
  TensorIndex(int v) : kind_(Kind::Integer), integer_(v) {}              // NOLINT
  TensorIndex(long v) : kind_(Kind::Integer), integer_(v) {}             // NOLINT
  TensorIndex(long long v) : kind_(Kind::Integer), integer_(v) {}        // NOLINT
  TensorIndex(indexing::Slice s) : kind_(Kind::Slice), slice_(s) {}      // NOLINT
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}                     // NOLINT
  TensorIndex(indexing::EllipsisIndexType) : kind_(Kind::Ellipsis) {}    // NOLINT
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT
  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  const indexing::Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  indexing::Slice slice_;
  Tensor tensor_;
};

// ---- operators (broadcasting, PyTorch type promotion)
// ---------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);  // true division: ints give float32
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator&(const Tensor& a, const Tensor& b);  // logical and of bool tensors
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& a);  // logical not of a bool tensor

}  // namespace attn
