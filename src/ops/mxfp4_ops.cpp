// include/attn/mxfp4.h: the checks, and the choice between the streaming kernel and matmul.
#include <attn/autograd.h>
#include <attn/mxfp4.h>
#include <attn/ops.h>

#include "../backend/cpu/gemm_rows.h"
#include "../backend/cpu/mxfp4.h"
#include "../tensor/internal.h"

namespace attn {

Mxfp4Matrices::Mxfp4Matrices(int64_t count_, int64_t rows_, int64_t cols_,
                             std::vector<uint8_t> blocks_, std::vector<uint8_t> scales_)
    : count(count_), rows(rows_), cols(cols_) {
  const char* fn = "Mxfp4Matrices";
  if (count < 1 || rows < 1 || cols < 1 || cols % 32 != 0)
    detail::fail(fn, "count, rows and cols must be >= 1 and cols a multiple of 32, got ", count,
                 ", ", rows, ", ", cols);
  const auto want_blocks = uint64_t(count) * uint64_t(rows) * uint64_t(cols) / 2;
  if (blocks_.size() != want_blocks || scales_.size() != want_blocks / 16)
    detail::fail(fn, "(", count, ", ", rows, ", ", cols, ") needs ", want_blocks,
                 " bytes of blocks and ", want_blocks / 16, " of scales, got ", blocks_.size(),
                 " and ", scales_.size());
  blocks = std::make_shared<const std::vector<uint8_t>>(std::move(blocks_));
  scales = std::make_shared<const std::vector<uint8_t>>(std::move(scales_));
}

Mxfp4Matrices Mxfp4Matrices::zeros(int64_t count, int64_t rows, int64_t cols) {
  const auto n = std::size_t(count * rows * cols / 2);
  return Mxfp4Matrices(count, rows, cols, std::vector<uint8_t>(n, 0),
                       std::vector<uint8_t>(n / 16, 127));
}

int64_t Mxfp4Matrices::nbytes() const {
  return defined() ? int64_t(blocks->size() + scales->size()) : 0;
}

namespace {

void check(const Mxfp4Matrices& w, int64_t e, const char* fn) {
  if (!w.defined()) detail::fail(fn, "the matrices are empty");
  if (e < 0 || e >= w.count)
    detail::fail(fn, "matrix ", e, " out of range for ", w.count, " matrices");
}

// Matrix e's codes and scales.
struct Matrix {
  const uint8_t* blocks;
  const uint8_t* scales;
};
Matrix matrix(const Mxfp4Matrices& w, int64_t e) {
  const int64_t offset = e * w.rows * w.cols;  // in weights: 2 a byte of blocks, 32 a scale
  return {w.blocks->data() + offset / 2, w.scales->data() + offset / 32};
}

}  // namespace

Tensor mxfp4_dequantize(const Mxfp4Matrices& w, int64_t e, Dtype dtype) {
  const char* fn = "mxfp4_dequantize";
  check(w, e, fn);
  if (!is_floating_point(dtype))
    detail::fail(fn, "dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  Tensor out = empty({w.rows, w.cols});
  const Matrix m = matrix(w, e);
  kernels::mxfp4_dequantize(w.rows, w.cols, m.blocks, m.scales, out.data_ptr<float>());
  return dtype == Dtype::Float32 ? out : out.to(dtype);
}

namespace {

// mxfp4_linear's product, in x's dtype, recording nothing.
Tensor product(const Tensor& x, const Mxfp4Matrices& w, int64_t e, bool int8_activations) {
  NoGradGuard no_grad;
  const int64_t N = x.size(0);
  const auto [blocks, scales] = matrix(w, e);
  if (N > kernels::kGemmRowsMax && x.dtype() == Dtype::BFloat16) {  // a prompt, bfloat16 products
    const Tensor xc = x.contiguous();
    Tensor y16 = empty({N, w.rows}, Dtype::BFloat16);
    if (kernels::mxfp4_gemm_bf16(N, w.rows, w.cols, static_cast<const uint16_t*>(xc.raw_data()),
                                 blocks, scales, static_cast<uint16_t*>(y16.raw_data()), w.rows))
      return y16;
  }
  const Tensor xf = x.to(Dtype::Float32).contiguous();
  Tensor y = empty({N, w.rows});
  if (N > kernels::kGemmRowsMax)
    kernels::mxfp4_gemm(N, w.rows, w.cols, xf.data_ptr<float>(), w.cols, blocks, scales,
                        y.data_ptr<float>(), w.rows);
  else  // x held in bfloat16 / float16: rounded to 16-bit integers per group, finer than its own
    kernels::mxfp4_rows(N, w.rows, w.cols, xf.data_ptr<float>(), w.cols, blocks, scales,
                        y.data_ptr<float>(), w.rows,
                        int8_activations              ? kernels::Mxfp4X::Int8
                        : x.dtype() != Dtype::Float32 ? kernels::Mxfp4X::Int16
                                                      : kernels::Mxfp4X::Float);
  return x.dtype() == Dtype::Float32 ? y : y.to(x.dtype());
}

}  // namespace

Tensor mxfp4_linear(const Tensor& x, const Mxfp4Matrices& w, int64_t e, bool int8_activations) {
  const char* fn = "mxfp4_linear";
  check(w, e, fn);
  if (!x.defined() || !x.is_cpu() || !is_floating_point(x.dtype()) || x.dim() != 2 ||
      x.size(1) != w.cols)
    detail::fail(
        fn, "x must be a CPU float tensor (N, ", w.cols, ") for matrices of (", w.rows, ", ",
        w.cols, "), got ",
        x.defined() ? shape_str(x.shape()) + " " + dtype_name(x.dtype()) + " on " + x.device().str()
                    : std::string("an undefined tensor"));
  // The same product whether or not a gradient is recorded (but for int8_activations' rounding,
  // taken only without one): the matrices stay encoded.
  const bool record = detail::should_record({&x});
  Tensor y = product(x, w, e, int8_activations && !record);
  if (!record) return y;
  // x's gradient, g W, with W decoded a block of columns at a time (mxfp4_gemm_w).
  const Dtype x_dtype = x.dtype();
  return detail::record(
      std::move(y), "Mxfp4LinearBackward", {&x}, [w, e, x_dtype](const Node&, const Tensor& g) {
        const Tensor gf = g.to(Dtype::Float32).contiguous();
        const Matrix m = matrix(w, e);
        Tensor dx = empty({gf.size(0), w.cols});
        kernels::mxfp4_gemm_w(gf.size(0), w.rows, w.cols, gf.data_ptr<float>(), w.rows, m.blocks,
                              m.scales, dx.data_ptr<float>(), w.cols);
        return std::vector<Tensor>{dx.to(x_dtype)};
      });
}

}  // namespace attn
