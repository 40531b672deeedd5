// Tensor printing that reproduces PyTorch 1.13's repr (torch/_tensor_str.py) character for
// character: the same element formatting (integer, fixed and scientific modes), the same line
// wrapping, summarization with "..." and suffixes such as "requires_grad=True".
#pragma once

#include <attn/common.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn {

// torch's PRINT_OPTS. `sci_mode` unset means "chosen automatically from the values".
struct PrintOptions {
  int precision = 4;
  int64_t threshold = 1000;  // summarize when numel > threshold; "full" uses INT64_MAX (torch: inf)
  int64_t edgeitems = 3;
  int64_t linewidth = 80;
  std::optional<bool> sci_mode;
};

// The global options every format_tensor call reads.
PrintOptions& print_options();

// torch.set_printoptions. `profile` ("default", "short" or "full") is applied first, then every
// given field. Like torch, sci_mode is always assigned: leaving it out (or passing an empty
// optional) resets it to automatic. An unknown profile is ignored, as in torch. Throws attn::Error
// (and changes nothing) for a negative precision or a negative edgeitems.
void set_printoptions(std::optional<int> precision = {}, std::optional<int64_t> threshold = {},
                      std::optional<int64_t> edgeitems = {}, std::optional<int64_t> linewidth = {},
                      std::optional<std::optional<bool>> sci_mode = {},
                      std::optional<std::string> profile = {});

// Full repr, e.g. "tensor([[0.2996, 0.8053],\n        [0.1234, 0.5678]])", with suffixes
// appended the way _add_suffixes does (wrapped onto a new line past linewidth).
// `data` points to numel contiguous row-major elements of `dtype` (float for Float32, int64_t for
// Int64, one byte 0/1 for Bool, BFloat16 and Half for the 2-byte floats); it may be null when
// numel is 0. `suffixes` are extra suffixes such as "requires_grad=True" or
// "grad_fn=<MmBackward0>", placed after the size/dtype suffixes (empty tensors get both; bfloat16
// and float16 tensors always get "dtype=torch.bfloat16" / "dtype=torch.float16").
std::string format_tensor(const Shape& shape, Dtype dtype, const void* data,
                          const std::vector<std::string>& suffixes = {});

}  // namespace attn
