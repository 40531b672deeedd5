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
                                 key_padding_mask=None):
    """torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x semantics).

    attn_mask: bool (True = may attend) or float (added). enable_gqa: key/value may have fewer
    heads than query (torch 2.5). causal_bottom_right aligns the causal diagonal so the last query
    sees the last key when L_q != L_k. reference selects the naive kernel. window=(left, right)
    restricts each query to keys within left before / right after its diagonal (-1: unbounded).
    key_padding_mask: bool (B, L_k), True = ignore that key. A fully masked query row gives zeros,
    not NaN. Dropout on the fused path uses a counter-based mask (regenerated in the backward);
    the reference path with weights uses torch's Dropout stream."""
    return _F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, causal_bottom_right, reference, False,
                                           enable_gqa, window[0], window[1], key_padding_mask)


def scaled_dot_product_attention_with_weights(query, key, value, attn_mask=None, dropout_p=0.0,
                                              is_causal=False, scale=None, enable_gqa=False,
                                              *, causal_bottom_right=False, window=(-1, -1),
                                              key_padding_mask=None):
    """As scaled_dot_product_attention, also returning the attention weights (after dropout)."""
    return _F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, causal_bottom_right, True, True, enable_gqa,
                                           window[0], window[1], key_padding_mask)


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


__getattr__ = _unsupported.module_getattr("attn.nn.functional")
