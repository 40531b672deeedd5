"""cummax / cummin and scatter_reduce (with scatter_reduce_), composed of attn's ops.

cummax and cummin return torch.return_types-like (values, indices) pairs with torch 1.13's CPU
semantics: where equal values tie, the index is the LAST of them (torch compares with >= / <=),
and nan propagates (once a nan is seen the value stays nan, its index that of the latest nan).
The indices come from a log-step (Hillis-Steele) scan over (value, index) pairs: ceil(log2 n)
steps for a dim of length n, each a few elementwise ops and a cat over the whole tensor, so
O(numel x log n) time and O(numel) memory (no n x n temporary). The values are then
`input.gather(dim, indices)`, so their gradient is scattered (added) into the arg positions,
as torch's is.

scatter_reduce (torch 1.13 / 2.x): reduce "sum", "prod", "mean", "amax" or "amin", include_self
True or False, int64 index of the same number of dims as self and src (only the part of src the
index covers is read). "sum" and "mean" go through scatter_add (torch's order of additions);
"prod", "amax" and "amin" sort the targets of the scattered elements (O(m log m) for m index
elements) and combine them in rounds, one per duplicate rank, in torch's order (self first, then
the src elements in index order): exact as torch's kernel, nan propagating in amax / amin as in
torch. Where more than 32 elements go to one position, the rounds give way to a log-step
segmented scan (ceil(log2 k) steps for k duplicates), whose products may differ from torch's in
the last bits. Integer "mean" rounds down (floor), as torch's. Bool: sum / prod / amax / amin are
or / and / or / and, "mean" raises as torch does.

Gradients flow to self and src (floating point) by torch's own formulas (an autograd.Function):
sum, mean, prod (a single zero among a position's factors gets the product of the others) and
amax / amin (shared evenly among the elements equal to the result). Unlike torch, which raises,
a src larger than the index gets zero gradient where the index does not reach. attn has no
double backward. Bad input gets torch's exception types and messages.
"""
import builtins as _builtins
import numbers as _numbers

from . import _C

Tensor = _C.Tensor

_REDUCES = ("sum", "prod", "mean", "amax", "amin")
_ROUNDS_MAX = 32  # beyond this many duplicates of one position, a log-step scan


def _int64():
    from . import int64
    return int64


def _dim_check(d, n):
    if not isinstance(d, _numbers.Integral) or isinstance(d, bool):
        raise TypeError("dim must be an int, not {}".format(type(d).__name__))
    m = _builtins.max(n, 1)
    if not -m <= d < m:
        raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but got "
                         "{})".format(-m, m - 1, d))
    return d % m


def _is_float(t):
    return t.is_floating_point()


# ---- cummax / cummin ---------------------------------------------------------------------------

def _scan_indices(x, d, greater):
    """The index of the running max (greater) or min along d: ties to the latest, nan wins."""
    n = x.shape[d]
    shape = [1] * x.dim()
    shape[d] = n
    idx = _C.arange(n).reshape(shape).expand(*x.shape).clone()
    if x.dtype == _C.tensor(True).dtype:
        x = x.long()
    flt = _is_float(x)
    v = x
    s = 1
    while s < n:
        a_v, b_v = v.narrow(d, 0, n - s), v.narrow(d, s, n - s)
        a_i, b_i = idx.narrow(d, 0, n - s), idx.narrow(d, s, n - s)
        take_b = b_v >= a_v if greater else b_v <= a_v
        if flt:
            take_b = b_v.isnan() | (take_b & ~a_v.isnan())
        v = _C.cat([v.narrow(d, 0, s), _C.where(take_b, b_v, a_v)], d)
        idx = _C.cat([idx.narrow(d, 0, s), _C.where(take_b, b_i, a_i)], d)
        s *= 2
    return idx


def _cum_ext(input, dim, greater, kind):
    from . import no_grad, return_types
    if not isinstance(input, Tensor):
        raise TypeError("{}(): argument 'input' (position 1) must be Tensor, not {}".format(
            kind, type(input).__name__))
    cls = getattr(return_types, kind)
    if input.dim() == 0 or input.numel() == 0:  # torch 1.13 takes any dim for these
        if not isinstance(dim, _numbers.Integral) or isinstance(dim, bool):
            raise TypeError("dim must be an int, not {}".format(type(dim).__name__))
        return cls(input.clone(), _C.zeros(tuple(input.shape), dtype=_int64()))
    d = _dim_check(dim, input.dim())
    with no_grad():
        idx = _scan_indices(input.detach(), d, greater)
    return cls(input.gather(d, idx), idx)


def cummax(input, dim):
    """torch.cummax: the running maximum along dim and the index where it was (the last of equal
    maxima; nan propagates). O(numel x log n) time, O(numel) memory."""
    return _cum_ext(input, dim, True, "cummax")


def cummin(input, dim):
    """torch.cummin: the running minimum along dim and its index (the last of equal minima; nan
    propagates)."""
    return _cum_ext(input, dim, False, "cummin")


# ---- scatter_reduce ----------------------------------------------------------------------------

def _check_scatter(self, dim, index, src, reduce, include_self):
    for name, pos, t in (("index", 2, index), ("src", 3, src)):
        if not isinstance(t, Tensor):
            raise TypeError("scatter_reduce(): argument '{}' (position {}) must be Tensor, not "
                            "{}".format(name, pos, type(t).__name__))
    if not isinstance(reduce, str):
        raise TypeError("scatter_reduce(): argument 'reduce' (position 4) must be str, not "
                        "{}".format(type(reduce).__name__))
    if not isinstance(include_self, bool):
        raise TypeError("scatter_reduce(): argument 'include_self' must be bool, not {}".format(
            type(include_self).__name__))
    d = _dim_check(dim, self.dim())
    if index.dtype != _int64():
        raise RuntimeError("scatter(): Expected dtype int64 for index")
    if self.dtype != src.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    nd = _builtins.max(self.dim(), 1)
    if _builtins.max(index.dim(), 1) != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if _builtins.max(src.dim(), 1) != _builtins.max(index.dim(), 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    ish = list(index.shape) or [1]
    ssh, rsh = list(self.shape) or [1], list(src.shape) or [1]
    if index.numel() and any(ish[k] > rsh[k] or (k != d and ish[k] > ssh[k])
                             for k in range(nd)):
        raise RuntimeError("Expected index {} to be smaller than self {} apart from dimension {} "
                           "and to be smaller size than src {}".format(
                               list(index.shape), list(self.shape), d, list(src.shape)))
    if reduce not in _REDUCES:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin.")
    if index.numel():
        size = ssh[d]
        lo, hi = index.min().item(), index.max().item()
        if lo < 0 or hi >= size:
            raise RuntimeError("index {} is out of bounds for dimension {} with size {}".format(
                lo if lo < 0 else hi, d, size))
    if reduce == "mean" and self.dtype == _C.tensor(True).dtype:
        raise RuntimeError('"scatter_gather_tensor_cpu_reduce_mean" not implemented for '
                           "'Bool'")
    return d


def _covered(src, index):
    """The part of src that index covers (src may be larger in every dim)."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    for k, n in enumerate(index.shape):
        if src.shape[k] != n:
            src = src.narrow(k, 0, n)
    return src


def _combine(reduce, cur, new):
    """torch's CPU reduction of `new` into `cur`: cur * new, or max / min keeping cur on ties
    and taking a nan from either."""
    if reduce == "prod":
        return cur * new
    pick = new > cur if reduce == "amax" else new < cur
    if _is_float(new):
        pick = pick | new.isnan()
    return _C.where(pick, new, cur)


def _targets(self, d, index):
    """The flat (C-order) position in self that each element of index sends its value to."""
    ssh = list(self.shape) or [1]
    ish = list(index.shape) or [1]
    strides = [1] * len(ssh)
    for k in range(len(ssh) - 2, -1, -1):
        strides[k] = strides[k + 1] * ssh[k + 1]
    lin = index.reshape(ish) * strides[d]
    for k, n in enumerate(ish):
        if k != d and n > 1:
            shape = [1] * len(ish)
            shape[k] = n
            lin = lin + _C.arange(n).reshape(shape) * strides[k]
    return lin.reshape(-1)


def _segment_reduce(self, d, index, src, reduce, include_self):
    """prod / amax / amin: the src values combined into a flat copy of self, in torch's order."""
    tgt = _targets(self, d, index)
    vals = src.reshape(-1)
    out = self.reshape(-1).clone()
    m = tgt.numel()
    tgt_s, order = tgt.sort(0, stable=True)
    vals_s = vals.gather(0, order)
    first = _C.cat([_C.ones(1, dtype=_C.tensor(True).dtype), tgt_s[1:] != tgt_s[:-1]])
    pos = _C.arange(m)
    from ._model_ops import nonzero
    starts = nonzero(first).reshape(-1)
    group = first.long().cumsum(0) - 1
    rank = pos - starts.gather(0, group)
    k = rank.max().item() + 1
    if k <= _ROUNDS_MAX:
        rank_s, perm = rank.sort(0, stable=True)
        counts = _C.zeros(k, dtype=_int64()).scatter_add(0, rank_s, _C.ones(m, dtype=_int64()))
        t_all, v_all = tgt_s.gather(0, perm), vals_s.gather(0, perm)
        off = 0
        for r, c in enumerate(counts.tolist()):
            t, v = t_all.narrow(0, off, c), v_all.narrow(0, off, c)
            off += c
            if r > 0 or include_self:
                v = _combine(reduce, out.gather(0, t), v)
            out.scatter_(0, t, v)
        return out.reshape(tuple(self.shape))
    # Segmented inclusive scan over the sorted elements: after it, the last of each group holds
    # the group's reduction.
    cur = vals_s
    s = 1
    while s < k:
        a, b = cur.narrow(0, 0, m - s), cur.narrow(0, s, m - s)
        same = rank.narrow(0, s, m - s) >= s
        cur = _C.cat([cur.narrow(0, 0, s), _C.where(same, _combine(reduce, a, b), b)])
        s *= 2
    last = _C.cat([first[1:], _C.ones(1, dtype=first.dtype)])
    t, v = tgt_s[last], cur[last]
    if include_self:
        v = _combine(reduce, out.gather(0, t), v)
    out.scatter_(0, t, v)
    return out.reshape(tuple(self.shape))


def _forward(self, d, index, src, reduce, include_self):
    """scatter_reduce's result, no graph recorded (the caller holds no_grad)."""
    if index.numel() == 0:
        return self.clone()
    srcc = _covered(src, index)
    if self.dtype == _C.tensor(True).dtype:
        r = _forward(self.long(), d, index, srcc.long(), reduce, include_self)
        return r != 0
    if reduce in ("sum", "mean"):
        base = self if include_self else self.scatter(d, index, 0)
        out = base.scatter_add(d, index, srcc)
        if reduce == "sum":
            return out
        count = _count(self, d, index, srcc, include_self)
        if _is_float(out):
            return out / count
        return out.div(count, rounding_mode="floor")
    return _segment_reduce(self, d, index, srcc, reduce, include_self)


def _count(self, d, index, srcc, include_self):
    """How many values each position of the result averages (at least 1), in self's dtype."""
    base = _C.ones_like(self) if include_self else _C.zeros_like(self)
    count = base.scatter_add(d, index, _C.ones_like(srcc))
    return count.masked_fill(count == 0, 1)


def _pad_to(g, shape):
    """g (the index's shape) in a zero tensor of src's shape."""
    if tuple(g.shape) == tuple(shape):
        return g
    for k, n in enumerate(shape):
        if g.shape[k] != n:
            extra = list(g.shape)
            extra[k] = n - g.shape[k]
            g = _C.cat([g, _C.zeros(tuple(extra), dtype=g.dtype)], k)
    return g


def _backward(g, self, d, index, src, reduce, include_self, result):
    """torch's scatter_reduce_backward (FunctionsManual.cpp), for self and the covered src."""
    srcc = _covered(src, index)
    if index.numel() == 0:
        return g, _C.zeros_like(src)
    if reduce == "sum":
        g_self, g_src = g, g.gather(d, index)
    elif reduce == "mean":
        n = _count(self, d, index, srcc, include_self)
        g_self, g_src = g / n, g.gather(d, index) / n.gather(d, index)
    elif reduce == "prod":
        masked_self = self.masked_fill(self == 0, 1)
        g_self = g * _forward(masked_self, d, index, srcc, reduce, include_self) / masked_self
        src_zero = srcc == 0
        nzero = _C.zeros_like(self).scatter_add(d, index, src_zero.to(self.dtype))
        single = src_zero & (nzero.gather(d, index) == 1)
        masked_src_result = _forward(self, d, index, srcc.masked_fill(single, 1), reduce,
                                     include_self)
        g_src = _C.where(single, (g * masked_src_result).gather(d, index),
                         (g * result).gather(d, index) / srcc.masked_fill(src_zero, 1))
    else:  # amax / amin: shared evenly among the elements equal to the result
        value = result.gather(d, index)
        self_is = (self == result).to(self.dtype)
        src_is = (srcc == value).to(self.dtype)
        shared = g / self_is.scatter_add(d, index, src_is)
        g_self = self_is * shared
        g_src = src_is * shared.gather(d, index)
    if not include_self:
        g_self = g_self.scatter(d, index, 0)
    return g_self, _pad_to(g_src, tuple(src.shape))


def _function():
    global _ScatterReduce
    if _ScatterReduce is None:
        from .autograd import Function

        class ScatterReduce(Function):
            _backward_name = "ScatterReduceBackward0"

            @staticmethod
            def forward(ctx, self, d, index, src, reduce, include_self):
                out = _forward(self, d, index, src, reduce, include_self)
                ctx.save_for_backward(self, index, src, out)
                ctx.args = (d, reduce, include_self)
                return out

            @staticmethod
            def backward(ctx, g):
                self, index, src, out = ctx.saved_tensors
                d, reduce, include_self = ctx.args
                g_self, g_src = _backward(g, self, d, index, src, reduce, include_self, out)
                return (g_self if ctx.needs_input_grad[0] else None, None, None,
                        g_src if ctx.needs_input_grad[3] else None, None, None)

        _ScatterReduce = ScatterReduce
    return _ScatterReduce


_ScatterReduce = None


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """torch.scatter_reduce: input with the src values each index element points at reduced
    into it ("sum", "prod", "mean", "amax", "amin"; include_self: whether input's own value
    takes part at the positions scattered to)."""
    if not isinstance(input, Tensor):
        raise TypeError("scatter_reduce(): argument 'input' (position 1) must be Tensor, not "
                        "{}".format(type(input).__name__))
    d = _check_scatter(input, dim, index, src, reduce, include_self)
    return _apply(input, d, index, src, reduce, include_self)


def _apply(self, d, index, src, reduce, include_self):
    if self.dim() and index.dim() and src.dim():
        return _function().apply(self, d, index, src, reduce, include_self)
    # a 0-d tensor among them counts as 1-d of one element, as in torch
    one = [(t.reshape(1) if t.dim() == 0 else t) for t in (self, index, src)]
    out = _function().apply(one[0], d, one[1], one[2], reduce, include_self)
    return out.reshape(tuple(self.shape))


def _scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
    """Tensor.scatter_reduce_: scatter_reduce written into self (in the graph, through copy_)."""
    from . import is_grad_enabled
    d = _check_scatter(self, dim, index, src, reduce, include_self)
    if self.requires_grad and self.is_leaf and is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    # the Function keeps its input for backward: a copy, since copy_ then overwrites self
    base = self.clone() if self.requires_grad and is_grad_enabled() else self
    return self.copy_(_apply(base, d, index, src, reduce, include_self))


def _return_types():
    from . import return_types as rt
    for kind in ("cummax", "cummin"):
        if not hasattr(rt, kind):
            setattr(rt, kind, type(kind, (rt._ValuesIndices,), {"_name": kind,
                                                               "__module__": rt.__name__}))


def install(module):
    """Puts the functions above into `module` (attn), the return types into
    attn.return_types and the methods onto Tensor."""
    _return_types()
    for name in ("cummax", "cummin", "scatter_reduce"):
        if name not in vars(module):
            setattr(module, name, globals()[name])
    methods = {"cummax": cummax, "cummin": cummin, "scatter_reduce": scatter_reduce,
               "scatter_reduce_": _scatter_reduce_}
    for name, fn in methods.items():
        if not any(name in vars(k) for k in Tensor.__mro__ if k is not object):
            setattr(Tensor, name, fn)
