"""attn.nn.functional: torch.nn.functional's names over the C++ kernels."""
from .. import _C

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
