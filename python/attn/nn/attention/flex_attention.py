"""torch.nn.attention.flex_attention on attn: flex_attention, create_block_mask, BlockMask,
and_masks, or_masks, noop_mask, with PyTorch 2.x's signatures.

A score_mod(score, b, h, q_idx, kv_idx) or mask_mod(b, h, q_idx, kv_idx) is called once, with
traced values (attn._C.flex.Expr) in place of torch's 0-dim tensors: its arithmetic, comparisons,
torch.where, the usual math functions (torch.exp, tanh, abs, ... and the same methods) and indexing
of captured tensors with those values (bias[h, q_idx - kv_idx]) record a program that attn's fused
CPU kernels evaluate tile by tile, forward and backward; captured float tensors that require grad
get their gradients. Python control flow on traced values (if, and, or, not, bool(), float(),
math.*) cannot be traced and is refused with a TypeError naming it.

`return_aux=AuxRequest(lse=True, max_scores=True)` returns (out, AuxOutput(lse, max_scores)) as
torch 2.x does: the log-sum-exp and the largest score after score_mod and the mask of each row
(-inf where every key is masked), in natural log; max_scores is not differentiable. (torch 2.15
refuses max_scores on the CPU; attn computes it in the same pass.) return_lse, deprecated in
torch, still returns (out, lse).

Differences from PyTorch: CPU and float32 only; no torch.compile is needed (or used:
`kernel_options` are checked as torch checks them, a mapping with a known BACKEND, and otherwise
ignored, since they tune Triton kernels); integer values are 32-bit (int64 captured tensors are
read as int32); BlockMask's index tensors are int64.
"""
import functools as _functools
import math as _math
from collections.abc import Mapping as _Mapping
from typing import NamedTuple as _NamedTuple

from ... import _C
from ..._C import Tensor as _Tensor

Expr = _C.flex.Expr

__all__ = ["BlockMask", "flex_attention", "create_block_mask", "create_mask", "and_masks",
           "or_masks", "noop_mask", "AuxRequest", "AuxOutput"]


class AuxRequest(_NamedTuple):
    """torch's AuxRequest: which auxiliary outputs flex_attention returns (return_aux=)."""
    lse: bool = False
    max_scores: bool = False


class AuxOutput(_NamedTuple):
    """torch's AuxOutput: the auxiliary outputs asked for, None for the others."""
    lse: object = None
    max_scores: object = None


_BACKENDS = ("AUTO", "TRITON", "FLASH", "TRITON_DECODE")  # torch 2.x's kernel_options BACKEND

_DEFAULT_SPARSE_BLOCK_SIZE = 128


def _as_value(x, context):
    """An operand of a traced operation: traced values and Python numbers as they are, a 0-dim
    (one-element) tensor as a captured value."""
    if isinstance(x, _Tensor):
        if x.dim() != 0:
            raise TypeError(
                f"flex_attention: a captured tensor of shape {tuple(x.shape)} used as a value; "
                "index it with the traced indices (bias[h, q_idx, kv_idx])")
        return _C.flex.load(x, [], context)
    return x


def _wrap_operator(name):
    original = getattr(Expr, name)

    @_functools.wraps(original)
    def op(self, other):
        return original(self, _as_value(other, self))
    setattr(Expr, name, op)


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__rpow__", "__eq__", "__ne__", "__lt__", "__le__",
              "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__", "__xor__",
              "__rxor__"):
    _wrap_operator(_name)


def _has_traced(index):
    if type(index) is Expr:
        return True
    return type(index) is tuple and any(type(i) is Expr for i in index)


_tensor_getitem = _Tensor.__getitem__


def _getitem(self, index):
    """Tensor indexing; with traced indices, a captured tensor's element (one index per dim)."""
    if _has_traced(index):
        items = list(index) if type(index) is tuple else [index]
        context = next(i for i in items if type(i) is Expr)
        for i in items:
            if not isinstance(i, (Expr, int)) or isinstance(i, bool):
                raise TypeError(
                    f"flex_attention: captured tensor indexed with {type(i).__name__}: a traced "
                    "modifier reads single elements, one integer index per dimension")
        return _C.flex.load(self, items, context)
    return _tensor_getitem(self, index)


_Tensor.__getitem__ = _getitem


def _trace(fn, mask):
    kind = "mask_mod" if mask else "score_mod"
    name = getattr(fn, "__name__", type(fn).__name__)
    leaves = _C.flex.begin_trace(mask)
    try:
        out = fn(*leaves)
    except TypeError as e:
        raise TypeError(f"flex_attention: {kind} {name!r} cannot be traced: {e}") from None
    if isinstance(out, _Tensor):
        out = _as_value(out, leaves[0])
    if isinstance(out, (bool, int, float)):
        out = Expr(out)
    if not isinstance(out, Expr):
        raise TypeError(f"flex_attention: {kind} {name!r} returned {type(out).__name__}, not a "
                        "value computed from its arguments")
    return _C.flex.finish_trace(leaves, out, mask)


def noop_mask(batch, head, token_q, token_kv):
    """A mask_mod that masks nothing."""
    return Expr(True)


def _noop_score(score, batch, head, token_q, token_kv):
    return score


def _combine(mask_mods, start, op, name):
    if not all(callable(m) for m in mask_mods):
        raise RuntimeError(f"All inputs should be callable mask_mods: {mask_mods}")

    def combined(b, h, q_idx, kv_idx):
        result = Expr(start)
        for m in mask_mods:
            result = op(result, m(b, h, q_idx, kv_idx))
        return result
    combined.__name__ = name
    return combined


def and_masks(*mask_mods):
    """The mask_mod that is the intersection of the given ones."""
    return _combine(mask_mods, True, lambda a, b: a & b, "and_mask")


def or_masks(*mask_mods):
    """The mask_mod that is the union of the given ones."""
    return _combine(mask_mods, False, lambda a, b: a | b, "or_mask")


class BlockMask:
    """Which blocks of each (batch, head)'s attention matrix a mask_mod leaves empty, partial or
    full (torch's BlockMask). Built by create_block_mask."""

    def __init__(self, impl, mask_mod):
        self._impl = impl
        self.mask_mod = mask_mod

    @property
    def shape(self):
        return (self._impl.B, self._impl.H, self._impl.Q_LEN, self._impl.KV_LEN)

    @property
    def seq_lengths(self):
        return (self._impl.Q_LEN, self._impl.KV_LEN)

    @property
    def BLOCK_SIZE(self):  # noqa: N802 (torch's name)
        return (self._impl.Q_BLOCK_SIZE, self._impl.KV_BLOCK_SIZE)

    kv_num_blocks = property(lambda self: self._impl.kv_num_blocks)
    kv_indices = property(lambda self: self._impl.kv_indices)
    full_kv_num_blocks = property(lambda self: self._impl.full_kv_num_blocks)
    full_kv_indices = property(lambda self: self._impl.full_kv_indices)

    def to_dense(self):
        """(B, H, num_q_blocks, num_kv_blocks): 1 where a block is computed, else 0."""
        return self._impl.to_dense().long()

    def sparsity(self):
        """Percentage of blocks that are skipped."""
        return self._impl.sparsity()

    def to(self, device):
        return self

    def __repr__(self):
        return repr(self._impl)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu",  # noqa: N803
                      BLOCK_SIZE=_DEFAULT_SPARSE_BLOCK_SIZE, _compile=False):
    """torch's create_block_mask: B or H of None share the mask across that dimension."""
    if isinstance(BLOCK_SIZE, int):
        q_block = kv_block = BLOCK_SIZE
    else:
        q_block, kv_block = BLOCK_SIZE
    program = _trace(mask_mod, True)
    impl = _C.flex.create_block_mask(program, 1 if B is None else int(B),
                                     1 if H is None else int(H), int(Q_LEN), int(KV_LEN),
                                     int(q_block), int(kv_block))
    return BlockMask(impl, mask_mod)


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device="cpu"):
    """The dense bool (B, H, Q_LEN, KV_LEN) mask of a mask_mod (torch's create_mask), evaluated
    with attn's tensor ops (for checks; flex_attention never forms it)."""
    from ... import arange
    b = arange(1 if B is None else B).reshape(-1, 1, 1, 1)
    h = arange(1 if H is None else H).reshape(1, -1, 1, 1)
    q = arange(Q_LEN).reshape(1, 1, -1, 1)
    kv = arange(KV_LEN).reshape(1, 1, 1, -1)
    return mod_fn(b, h, q, kv).expand(1 if B is None else B, 1 if H is None else H, Q_LEN, KV_LEN)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None, *, return_aux=None):
    """torch.nn.attention.flex_attention.flex_attention: query (B, H, L_q, D), key and value
    (B, H_kv, L_k, D[_v]) float32 on the CPU; returns out (B, H, L_q, D_v); with return_lse,
    (out, lse (B, H, L_q)); with return_aux=AuxRequest(...), (out, AuxOutput(lse, max_scores))."""
    program = _trace(score_mod, False) if score_mod is not None else _C.flex.Modifier()
    if block_mask is not None and not isinstance(block_mask, BlockMask):
        raise TypeError(f"flex_attention: block_mask must be a BlockMask, got "
                        f"{type(block_mask).__name__}")
    if scale is not None and not (isinstance(scale, (int, float)) and _math.isfinite(scale)):
        raise ValueError(f"flex_attention: scale must be a finite number, got {scale!r}")
    if return_aux is not None and not isinstance(return_aux, AuxRequest):
        raise TypeError(f"flex_attention: return_aux must be an AuxRequest or None, got "
                        f"{type(return_aux).__name__}")
    if return_lse and return_aux is not None:
        raise ValueError("Cannot specify both return_lse and return_aux. return_lse is deprecated, "
                         "please use return_aux=AuxRequest(lse=True) instead.")
    if kernel_options is not None:
        if not isinstance(kernel_options, _Mapping):
            raise TypeError(f"flex_attention: kernel_options must be a dict or None, got "
                            f"{type(kernel_options).__name__}")
        if "BACKEND" in kernel_options and kernel_options["BACKEND"] not in _BACKENDS:
            raise ValueError(f"Invalid BACKEND value '{kernel_options['BACKEND']}'. "
                             f"Must be one of {_BACKENDS}")
    want_max = return_aux is not None and bool(return_aux.max_scores)
    out, lse, max_scores = _C.flex.flex_attention(
        query, key, value, program, None if block_mask is None else block_mask._impl,
        None if scale is None else float(scale), bool(enable_gqa), want_max)
    if return_aux is not None:
        return out, AuxOutput(lse=lse if return_aux.lse else None, max_scores=max_scores)
    return (out, lse) if return_lse else out
