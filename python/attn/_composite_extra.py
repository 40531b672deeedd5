"""More torch names composed of attn's ops: movedim / moveaxis, swapaxes / swapdims, as_tensor,
addcmul and addcdiv (with their in-place forms, which hand-written optimizers use), lerp_, unique
and unique_consecutive (dim=None).

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
    """The tensor itself where it already is one of that dtype (no copy), else a new one."""
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == dtype else data.to(dtype)
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


def install(module):
    """Puts the functions above into `module` (attn) and the methods onto Tensor."""
    for name in ("movedim moveaxis swapaxes swapdims as_tensor addcmul addcdiv unique "
                 "unique_consecutive").split():
        if name not in vars(module):
            setattr(module, name, globals()[name])
    methods = {"movedim": movedim, "moveaxis": moveaxis, "swapaxes": swapaxes,
               "swapdims": swapdims, "addcmul": addcmul, "addcdiv": addcdiv,
               "addcmul_": _addcmul_, "addcdiv_": _addcdiv_, "lerp_": _lerp_,
               "unique": unique, "unique_consecutive": unique_consecutive}
    for name, fn in methods.items():
        if not any(name in vars(k) for k in Tensor.__mro__ if k is not object):
            setattr(Tensor, name, fn)
