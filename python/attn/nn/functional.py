"""attn.nn.functional: torch.nn.functional's names over the C++ kernels."""
from .. import _C, _unsupported

_F = _C.functional


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        raise ValueError("[softmax] dim must be given (implicit dims are deprecated in torch)")
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(input, dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        raise ValueError("[log_softmax] dim must be given")
    if dtype is not None:
        input = input.to(dtype)
    return _C.log_softmax(input, dim)


def linear(input, weight, bias=None):
    if bias is None:
        return _F.linear(input, weight)
    return _F.linear(input, weight, bias)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if padding_idx is not None or max_norm is not None:
        raise ValueError("[embedding] padding_idx and max_norm are not supported")
    return _F.embedding(input, weight)


def dropout(input, p=0.5, training=True, inplace=False):
    out = _F.dropout(input, p, training)
    if inplace:
        input.copy_(out)
        return input
    return out


def relu(input, inplace=False):
    out = input.relu()
    if inplace:
        input.copy_(out)
        return input
    return out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal_bottom_right=False, reference=False, window=(-1, -1),
                                 key_padding_mask=None, softcap=0.0, alibi_slopes=None,
                                 relative_bias=None, sinks=None):
    """torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x semantics).

    attn_mask: bool (True = may attend) or float (added). enable_gqa: key/value may have fewer
    heads than query (torch 2.5). causal_bottom_right aligns the causal diagonal so the last query
    sees the last key when L_q != L_k. reference selects the naive kernel. window=(left, right)
    restricts each query to keys within left before / right after its diagonal (-1: unbounded).
    key_padding_mask: bool (B, L_k), True = ignore that key. A fully masked query row gives zeros,
    not NaN. Dropout on the fused path uses a counter-based mask (regenerated in the backward);
    the reference path with weights uses torch's Dropout stream.

    attn's score modifiers (keyword-only, not in torch; applied to scale * q.k in this order,
    before the masks, with off = L_k - L_q under causal_bottom_right, else 0):
      softcap > 0           s = softcap * tanh(s / softcap)  (Gemma 2; FlashAttention's softcap)
      alibi_slopes (H) or (B, H)   s -= slope * |i + off - j|  (FlashAttention's alibi_slopes)
      relative_bias (H, 2R+1) or (1, 2R+1)   s += relative_bias[h, clamp(j - i - off, -R, R) + R]
      sinks (H)             a per-head logit joining each row's softmax with a zero value row
                            (gpt-oss)
    The tensors may require grad: the fused backward computes their gradients."""
    return _F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, causal_bottom_right, reference, False,
                                           enable_gqa, window[0], window[1], key_padding_mask,
                                           float(softcap), alibi_slopes, relative_bias, sinks)


def scaled_dot_product_attention_with_weights(query, key, value, attn_mask=None, dropout_p=0.0,
                                              is_causal=False, scale=None, enable_gqa=False,
                                              *, causal_bottom_right=False, window=(-1, -1),
                                              key_padding_mask=None):
    """As scaled_dot_product_attention, also returning the attention weights (after dropout)."""
    return _F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, causal_bottom_right, True, True, enable_gqa,
                                           window[0], window[1], key_padding_mask)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                     softcap=0.0, alibi_slopes=None, sinks=None, return_lse=False,
                     generator=None):
    """Packed variable-length attention with FlashAttention's flash_attn_varlen_func arguments.

    q (total_q, H, D), k and v (total_k, H_kv, D); cu_seqlens_* int64 (N + 1) offsets of the N
    sequences; each sequence attends to its own keys only (no padding computed). causal and
    window_size are aligned bottom-right, as FlashAttention does. alibi_slopes (H) or (N, H),
    softcap and sinks as in scaled_dot_product_attention; all may require grad. return_lse also
    returns the (H, total_q) log-sum-exp."""
    out, lse = _F.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                   int(max_seqlen_k), float(dropout_p), softmax_scale,
                                   bool(causal), int(window_size[0]), int(window_size[1]),
                                   float(softcap), alibi_slopes, sinks, generator)
    return (out, lse) if return_lse else out


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale=None,
                           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           sinks=None, return_softmax_lse=False):
    """Attention against a paged key/value cache with FlashAttention's flash_attn_with_kvcache
    arguments (without appending new keys: write them into the cache first).

    q (B, L_q, H, D); k_cache, v_cache (num_pages, page_size, H_kv, D), float32, bfloat16 or
    float16;
    block_table int64 (B, max_pages) (FlashAttention's is int32); cache_seqlens int64 (B): the
    keys of each sequence. The queries are each sequence's last L_q positions (causal and the
    window aligned bottom-right); window_size (left, right) takes right only as causal's 0.
    Inference only (no autograd). return_softmax_lse also returns the (B, H, L_q) lse."""
    if window_size[1] not in (-1, 0) or (window_size[1] == 0 and not causal):
        raise ValueError("attention_with_kvcache: window_size right must be -1, or 0 with causal")
    out, lse = _F.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                                         softmax_scale, bool(causal), int(window_size[0]),
                                         float(softcap), alibi_slopes, sinks)
    return (out, lse) if return_softmax_lse else out


def causal_mask(L_q, L_k, bottom_right=False):
    """The bool (L_q, L_k) mask of allowed positions under causal masking."""
    return _F.causal_mask(L_q, L_k, bottom_right)


def _normalized_dim(normalized_shape, fn):
    if isinstance(normalized_shape, int):
        return normalized_shape
    shape = tuple(normalized_shape)
    if len(shape) != 1:
        raise ValueError("[{}] only normalisation over the last dim is supported, got "
                         "normalized_shape {}".format(fn, shape))
    return int(shape[0])


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the last dim (one fused kernel each way)."""
    return _F.layer_norm(input, _normalized_dim(normalized_shape, "layer_norm"), weight, bias,
                         float(eps))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm over the trailing dims normalized_shape:
    input * rsqrt(mean(input^2) + eps) * weight, eps None meaning float32's machine epsilon."""
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else [
        int(n) for n in normalized_shape]
    return _F.rms_norm(input, shape, weight, None if eps is None else float(eps))


def one_hot(tensor, num_classes=-1):
    """torch.nn.functional.one_hot: int64 (..., num_classes) with a 1 at each class index;
    num_classes -1 means the largest index + 1."""
    if tensor.dtype != _C.dtype.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type int64, got "
                           "{}".format(tensor.dtype))
    if tensor.numel() == 0:
        if num_classes < 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
    else:
        lo, hi = int(tensor.min().item()), int(tensor.max().item())
        if lo < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes < 0:
            num_classes = hi + 1
        elif hi >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    return (tensor.unsqueeze(-1) == _C.arange(int(num_classes))).long()


def pad(input, pad, mode="constant", value=None):  # noqa: A002  (torch's names)
    """torch.nn.functional.pad, constant mode: pad = (left, right) for the last dim, then the dim
    before it, ...; negative amounts crop. Differentiable (narrow and cat)."""
    if mode != "constant":
        raise NotImplementedError("[pad] mode {!r} is not supported (constant only)".format(mode))
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise ValueError("[pad] padding length must be even and at most twice the dims of input "
                         "{}, got {}".format(tuple(input.shape), len(pad)))
    x = input
    fill = 0 if value is None else value
    for k in range(len(pad) // 2):
        d = x.dim() - 1 - k
        left, right = pad[2 * k], pad[2 * k + 1]
        size = x.shape[d]
        if size + min(left, 0) + min(right, 0) < 0:
            raise RuntimeError("[pad] the padded size of dim {} ({} {:+d} {:+d}) would be "
                               "negative".format(d, size, left, right))
        if left < 0 or right < 0:
            start = -left if left < 0 else 0
            x = x.narrow(d, start, size + min(left, 0) + min(right, 0))
        parts = []
        for amount in (left, None, right):
            if amount is None:
                parts.append(x)
            elif amount > 0:
                shape = list(x.shape)
                shape[d] = amount
                parts.append(_C.full(shape, fill, dtype=x.dtype))
        if len(parts) > 1:
            x = _C.cat(parts, d)
    return x if x is not input else input.clone()


def gelu(input, approximate="none"):
    """torch.nn.functional.gelu: exact (erf) or approximate="tanh"."""
    return _F.gelu(input, approximate)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy for (N, C) or (C) logits and int64 class targets."""
    if weight is not None or size_average is not None or reduce is not None:
        raise ValueError("[cross_entropy] weight, size_average and reduce are not supported")
    if label_smoothing != 0.0:
        raise ValueError("[cross_entropy] label_smoothing is not supported, got {}".format(
            label_smoothing))
    return _F.cross_entropy(input, target, reduction, int(ignore_index))


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def silu(input, inplace=False):
    """torch.nn.functional.silu: x * sigmoid(x)."""
    out = _F.silu(input)
    if inplace:
        input.copy_(out)
        return input
    return out


from ._composite import (binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: E402
                         celu, cosine_similarity, elu, glu, hardsigmoid, hardswish, hardtanh,
                         huber_loss, kl_div, l1_loss, leaky_relu, logsigmoid, mish, mse_loss,
                         nll_loss, normalize, pairwise_distance, relu6, selu, smooth_l1_loss,
                         softmin, softplus, softsign, threshold)

__getattr__ = _unsupported.module_getattr("attn.nn.functional")
