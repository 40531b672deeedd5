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
                                 is_causal=False, scale=None, *, causal_bottom_right=False,
                                 reference=False):
    """torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x semantics).

    attn_mask: bool (True = may attend) or float (added). causal_bottom_right aligns the causal
    diagonal so the last query sees the last key when L_q != L_k. reference selects the naive
    kernel. A fully masked query row gives zeros, not NaN."""
    return _F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, causal_bottom_right, reference, False)


def scaled_dot_product_attention_with_weights(query, key, value, attn_mask=None, dropout_p=0.0,
                                              is_causal=False, scale=None, *,
                                              causal_bottom_right=False):
    """As scaled_dot_product_attention, also returning the attention weights (after dropout)."""
    return _F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, causal_bottom_right, True, True)


def causal_mask(L_q, L_k, bottom_right=False):
    """The bool (L_q, L_k) mask of allowed positions under causal masking."""
    return _F.causal_mask(L_q, L_k, bottom_right)
