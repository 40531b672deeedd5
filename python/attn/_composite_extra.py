"""More torch names composed of attn's ops: movedim / moveaxis, swapaxes / swapdims, as_tensor,
addcmul and addcdiv (with their in-place forms, which hand-written optimizers use), lerp_, unique
and unique_consecutive (dim=None), searchsorted and bucketize, median, kthvalue, quantile,
cdist, index_fill(_) and index_copy(_), aminmax, Tensor.unfold, and the mT / H / mH transposes.

addcmul and addcdiv round as torch's CPU kernels do, (value * t1) * t2 and (value * t1) / t2
before the addition; unique sorts (torch's CPU unique sorts whatever `sorted` says) and gives
torch's inverse indices and counts. Bad input gets torch's exception types.
"""
import builtins as _builtins
import numbers as _numbers

from . import _C

Tensor = _C.Tensor


def _dim_list(d, n, what):
    ds = [d] if isinstance(d, _numbers.Integral) else list(d)
    out = []
    for x in ds:
        if not -n <= x < _builtins.max(n, 1):
            raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but "
                             "got {})".format(-_builtins.max(n, 1), _builtins.max(n, 1) - 1, x))
        out.append(x % _builtins.max(n, 1))
    if len(set(out)) != len(out):
        raise RuntimeError("movedim: repeated dim in `{}` ({})".format(what, ds))
    return out


def movedim(input, source, destination):
    """The dims `source` moved to the places `destination`, the others kept in order."""
    n = input.dim()
    src, dst = _dim_list(source, n, "source"), _dim_list(destination, n, "destination")
    if len(src) != len(dst):
        raise RuntimeError("movedim: Invalid source or destination dims: source ({} dims) should "
                           "contain the same number of dims as destination ({} dims)".format(
                               list(src), list(dst)))
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    order = [next(rest) if o is None else o for o in order]
    return input.permute(*order) if n else input


moveaxis = movedim


def swapaxes(input, axis0, axis1):
    return input.transpose(axis0, axis1)


swapdims = swapaxes


def as_tensor(data, dtype=None, device=None):
    """The tensor itself where it already is one of that dtype (no copy); a NumPy array of a
    dtype attn holds (float32, int64, bool, float16) shares its memory, as torch's; else a new
    tensor."""
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == dtype else data.to(dtype)
    if type(data).__name__ == "ndarray" and type(data).__module__ == "numpy":
        shared = _C.from_numpy(data)
        if dtype is None or shared.dtype == dtype:
            return shared
        return shared.to(dtype)
    return _C.tensor(data, dtype=dtype) if dtype is not None else _C.tensor(data)


def _check_float(fn, *ts):
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError("{}(): argument must be Tensor, not {}".format(fn, type(t).__name__))


def addcmul(input, tensor1, tensor2, *, value=1):
    _check_float("addcmul", input, tensor1, tensor2)
    return input + (tensor1 * value if value != 1 else tensor1) * tensor2


def addcdiv(input, tensor1, tensor2, *, value=1):
    _check_float("addcdiv", input, tensor1, tensor2)
    if not input.is_floating_point() and not tensor1.is_floating_point() \
            and not tensor2.is_floating_point():
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future "
                           "release addcdiv will perform a true division of tensor1 and tensor2.")
    return input + (tensor1 * value if value != 1 else tensor1) / tensor2


def _addcmul_(self, tensor1, tensor2, *, value=1):
    _check_float("addcmul_", self, tensor1, tensor2)
    return self.add_((tensor1 * value if value != 1 else tensor1) * tensor2)


def _addcdiv_(self, tensor1, tensor2, *, value=1):
    _check_float("addcdiv_", self, tensor1, tensor2)
    return self.add_((tensor1 * value if value != 1 else tensor1) / tensor2)


def _lerp_(self, end, weight):
    from . import lerp
    return self.copy_(lerp(self, end, weight))


def _dtypes():
    from . import bool as bool_, int64  # attn's dtypes, defined before install() runs
    return int64, bool_


def _unique_sorted(input, return_inverse, return_counts):
    int64, bool_ = _dtypes()
    flat = input.flatten()
    n = flat.numel()
    if n == 0:
        empty = _C.zeros(0, dtype=int64)
        return flat, empty.reshape(tuple(input.shape)), empty
    vals, idx = flat.sort()
    change = _C.cat([_C.ones(1, dtype=bool_), vals[1:] != vals[:-1]])
    uniq = vals[change]
    inverse = counts = None
    if return_inverse:
        group = change.long().cumsum(0) - 1
        inverse = _C.zeros(n, dtype=int64).scatter(0, idx, group).reshape(tuple(input.shape))
    if return_counts:
        from ._model_ops import nonzero
        starts = nonzero(change).flatten()
        ends = _C.cat([starts[1:], _C.tensor([n])])
        counts = ends - starts
    return uniq, inverse, counts


def _pack(uniq, inverse, counts, return_inverse, return_counts):
    out = (uniq,)
    if return_inverse:
        out += (inverse,)
    if return_counts:
        out += (counts,)
    return out[0] if len(out) == 1 else out


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """torch.unique over all elements (dim=None): the sorted distinct values, and optionally the
    index of each element's value among them and how often each occurs."""
    if dim is not None:
        raise NotImplementedError("attn.unique: dim= is not supported by attn (dim=None is)")
    uniq, inverse, counts = _unique_sorted(input, return_inverse, return_counts)
    return _pack(uniq, inverse, counts, return_inverse, return_counts)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """torch.unique_consecutive (dim=None): each run of equal neighbours once."""
    if dim is not None:
        raise NotImplementedError("attn.unique_consecutive: dim= is not supported by attn")
    int64, bool_ = _dtypes()
    flat = input.flatten()
    n = flat.numel()
    if n == 0:
        empty = _C.zeros(0, dtype=int64)
        return _pack(flat, empty.reshape(tuple(input.shape)), empty, return_inverse,
                     return_counts)
    change = _C.cat([_C.ones(1, dtype=bool_), flat[1:] != flat[:-1]])
    uniq = flat[change]
    inverse = (change.long().cumsum(0) - 1).reshape(tuple(input.shape))
    from ._model_ops import nonzero
    starts = nonzero(change).flatten()
    counts = _C.cat([starts[1:], _C.tensor([n])]) - starts
    return _pack(uniq, inverse, counts, return_inverse, return_counts)


# ---- searching and order statistics ----------------------------------------------------------

def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """torch.searchsorted: for each value, how many entries of the (last-dim) sorted sequence are
    below it (right=False / side="left") or not above it. Compares every value with every entry:
    O(len(sequence) x len(values)) time and memory."""
    from . import int64
    if sorter is not None:
        raise NotImplementedError("attn.searchsorted: sorter= is not supported by attn")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError("torch.searchsorted(): side can only be 'left' or 'right' but "
                               "got {}".format(side))
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                               "got side of left while right was True")
        right = side == "right"
    scalar = not isinstance(input, Tensor)
    values = _C.full((), input, dtype=sorted_sequence.dtype) if scalar else input
    seq = sorted_sequence
    if seq.dim() > 1 and (values.dim() != seq.dim() or
                          tuple(values.shape[:-1]) != tuple(seq.shape[:-1])):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the "
                           "first N-1 dimensions of boundaries tensor and input value tensor "
                           "must match, but we got boundaries tensor {} and input value tensor "
                           "{}".format(list(seq.shape), list(values.shape)))
    if seq.dim() == 1:
        cmp = seq <= values.unsqueeze(-1) if right else seq < values.unsqueeze(-1)
    else:
        s = seq.unsqueeze(-2)
        v = values.unsqueeze(-1)
        cmp = s <= v if right else s < v
    out = cmp.long().sum(-1)
    if out_int32:
        raise NotImplementedError("attn.searchsorted: out_int32=True needs int32, which attn "
                                  "does not have")
    return out.to(int64)


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """torch.bucketize: the index of each value's bucket among the 1-D sorted boundaries."""
    if boundaries.dim() != 1:
        raise RuntimeError("boundaries tensor must be 1 dimension, but got dim({})".format(
            boundaries.dim()))
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def _select_sorted(input, dim, pos, keepdim, kind):
    from . import return_types
    d = dim % _builtins.max(input.dim(), 1)
    if input.dim() == 0:
        return getattr(return_types, kind)(input.clone(), _C.zeros((), dtype=_dtypes()[0]))
    vals, idx = input.sort(d)
    v = vals.narrow(d, pos, 1)
    i = idx.narrow(d, pos, 1)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return getattr(return_types, kind)(v, i)


def median(input, dim=None, keepdim=False):
    """torch.median: the lower of the two middle values; with dim, (values, indices). Where
    several elements equal the median, the index is the one a stable sort puts in the middle
    (torch's may be another of them)."""
    if dim is None:
        flat = input.flatten()
        if flat.numel() == 0:
            return _C.full((), float("nan"), dtype=input.dtype)
        return flat.sort(0)[0][(flat.numel() - 1) // 2]
    n = input.shape[dim] if input.dim() else 1
    if n == 0:
        raise IndexError("median(): Expected reduction dim {} to have non-zero size.".format(dim))
    return _select_sorted(input, dim, (n - 1) // 2, keepdim, "median")


def kthvalue(input, k, dim=-1, keepdim=False):
    """torch.kthvalue: the k-th smallest element along dim and its index."""
    n = input.shape[dim] if input.dim() else 1
    if not 1 <= k <= n:
        raise RuntimeError("kthvalue(): selected number k out of range for dimension {}".format(
            dim))
    return _select_sorted(input, dim, k - 1, keepdim, "kthvalue")


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """torch.quantile: the q-th quantiles (q a number or a 1-D tensor in [0, 1]) along dim (of
    the flattened input when None), interpolated as torch does."""
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise ValueError("quantile() interpolation must be one of linear, lower, higher, "
                         "midpoint or nearest. Got {}".format(interpolation))
    qs = q.tolist() if isinstance(q, Tensor) else q
    scalar = not isinstance(qs, list)
    qs = [qs] if scalar else qs
    if any(not 0 <= x <= 1 for x in qs):
        raise RuntimeError("quantile() q values must be in the range [0, 1]")
    x = input.flatten() if dim is None else input
    d = 0 if dim is None else dim % x.dim()
    n = x.shape[d]
    if n == 0:
        raise IndexError("quantile() input tensor must be non-empty")
    vals = x.sort(d)[0]
    outs = []
    for qq in qs:
        pos = (_C.full((), float(qq), dtype=input.dtype) * (n - 1)).item()  # torch's rounding
        lo = int(pos // 1)
        hi = _builtins.min(-int(-pos // 1), n - 1)  # ceil: lo itself at a whole rank
        frac = pos - lo
        if interpolation == "lower" or (interpolation == "nearest" and
                                        round(pos) == lo):  # round half to even, as torch
            r = vals.narrow(d, lo, 1)
        elif interpolation in ("higher", "nearest"):
            r = vals.narrow(d, hi, 1)
        elif interpolation == "midpoint":
            r = vals.narrow(d, lo, 1) + (vals.narrow(d, hi, 1) - vals.narrow(d, lo, 1)) * 0.5
        else:
            from . import lerp
            r = lerp(vals.narrow(d, lo, 1), vals.narrow(d, hi, 1), float(frac))
        if dim is None:
            r = r.reshape([1] * input.dim()) if keepdim else r.reshape(())
        elif not keepdim:
            r = r.squeeze(d)
        outs.append(r)
    return outs[0] if scalar else _C.stack(outs, 0)


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """torch.cdist: the p-norm distance of every row of x1 (..., P, M) to every row of x2
    (..., R, M), computed from the differences (no matrix-product shortcut: exact, with
    O(P x R x M) memory); the gradient is 0 where two rows coincide, as torch's."""
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError("cdist only supports at least 2D tensors, X1 got: {}D".format(
            x1.dim()) if x1.dim() < 2 else "cdist only supports at least 2D tensors, X2 got: "
            "{}D".format(x2.dim()))
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError("X1 and X2 must have the same number of columns. X1: {} X2: {}"
                           .format(x1.shape[-1], x2.shape[-1]))
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    from .nn._composite import vector_norm
    return vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, -1)


# ---- index_fill / index_copy, aminmax, matrix transposes --------------------------------------

def _index_key(self, dim, index, fn):
    if not isinstance(index, Tensor) or index.dim() > 1:
        raise IndexError("{}(): Index is supposed to be a vector".format(fn))
    d = dim % _builtins.max(self.dim(), 1)
    return (slice(None),) * d + (index.reshape(-1),)


def _index_fill_(self, dim, index, value):
    self[_index_key(self, dim, index, "index_fill_")] = value
    return self


def _index_copy_(self, dim, index, source):
    key = _index_key(self, dim, index, "index_copy_")
    if source.dim() and source.shape[dim] != index.numel():
        raise RuntimeError("index_copy_(): Number of indices ({}) should be equal to "
                           "source.size(dim) ({})".format(index.numel(), source.shape[dim]))
    self[key] = source
    return self


def index_fill(input, dim, index, value):
    return _index_fill_(input.clone(), dim, index, value)


def index_copy(input, dim, index, source):
    return _index_copy_(input.clone(), dim, index, source)


def aminmax(input, *, dim=None, keepdim=False):
    """torch.aminmax: (min, max) of all elements, or along dim."""
    from . import return_types
    if dim is None:
        lo, hi = -((-input).amax()), input.amax()
        if keepdim:
            lo, hi = lo.reshape([1] * input.dim()), hi.reshape([1] * input.dim())
        return return_types.aminmax(lo, hi)
    return return_types.aminmax(-((-input).amax(dim, keepdim=keepdim)),
                                input.amax(dim, keepdim=keepdim))


def _mT(self):  # noqa: N802 (torch's name)
    if self.dim() < 2:
        raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. Got "
                           "{}-D tensor.".format(self.dim()))
    return self.transpose(-2, -1)


def _mH(self):  # noqa: N802
    if self.dim() < 2:
        raise RuntimeError("tensor.mH is only supported on matrices or batches of matrices. Got "
                           "{}-D tensor.".format(self.dim()))
    return self.transpose(-2, -1)


def _H(self):  # noqa: N802
    if self.dim() not in (0, 2):
        raise RuntimeError("tensor.H is only supported on matrices (2-D tensors). Got {}-D "
                           "tensor. For batches of matrices, consider using tensor.mH".format(
                               self.dim()))
    return self.transpose(0, 1) if self.dim() == 2 else self


def _unfold(self, dimension, size, step):
    """Tensor.unfold: every slice of `size` elements along `dimension`, `step` apart, as a new
    last dim. A copy (torch's is a view of self), made of `size` strided slices, so its gradient
    comes from the ops."""
    n = self.dim()
    if n == 0:
        if dimension not in (0, -1):
            raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but "
                             "got {})".format(dimension))
        if size > 1:
            raise RuntimeError("maximum size for tensor at dimension 0 is 1 but size is "
                               "{}".format(size))
        if step <= 0:
            raise RuntimeError("step is {} but must be > 0".format(step))
        return self.reshape(1)
    d = _dim_list(dimension, n, "dimension")[0]
    length = self.shape[d]
    if size > length:
        raise RuntimeError("maximum size for tensor at dimension {} is {} but size is {}".format(
            d, length, size))
    if step <= 0:
        raise RuntimeError("step is {} but must be > 0".format(step))
    if size < 0:
        raise RuntimeError("unfold: size is {} but must be >= 0".format(size))
    count = (length - size) // step + 1
    if size == 0:
        shape = list(self.shape)
        shape[d] = count
        return _C.zeros(shape + [0], dtype=self.dtype)
    slices = []
    for j in range(size):
        idx = [slice(None)] * n
        idx[d] = slice(j, j + step * (count - 1) + 1, step)
        slices.append(self[tuple(idx)])
    return _C.stack(slices, n)


def install(module):
    """Puts the functions above into `module` (attn) and the methods onto Tensor."""
    for name in ("movedim moveaxis swapaxes swapdims as_tensor addcmul addcdiv unique "
                 "unique_consecutive searchsorted bucketize median kthvalue quantile "
                 "cdist index_fill index_copy aminmax").split():
        if name not in vars(module):
            setattr(module, name, globals()[name])
    methods = {"movedim": movedim, "moveaxis": moveaxis, "swapaxes": swapaxes,
               "swapdims": swapdims, "addcmul": addcmul, "addcdiv": addcdiv,
               "addcmul_": _addcmul_, "addcdiv_": _addcdiv_, "lerp_": _lerp_,
               "unique": unique, "unique_consecutive": unique_consecutive,
               "median": median, "kthvalue": kthvalue, "quantile": quantile,
               "index_fill": index_fill, "index_copy": index_copy, "index_fill_": _index_fill_,
               "index_copy_": _index_copy_, "aminmax": aminmax, "unfold": _unfold}
    for name, fn in methods.items():
        if not any(name in vars(k) for k in Tensor.__mro__ if k is not object):
            setattr(Tensor, name, fn)
    for name, fn in (("H", _H), ("mH", _mH)):  # real tensors: H and mH transpose
        if not any(name in vars(k) for k in Tensor.__mro__ if k is not object):
            setattr(Tensor, name, property(fn))
    Tensor.mT = property(_mT)  # over the C++ property: torch's RuntimeError below 2 dims
