"""torch names that are compositions of attn's ops, written here in Python: comparisons and logical
ops by name, rounding (trunc, round, sign), reciprocal, flip, roll, repeat and tile, the *_as
views, meshgrid, eye, isclose, nan_to_num, count_nonzero, logsumexp, std, prod and lerp.

Each is built from ops whose results are correctly rounded, so most give torch's bits (the
comparisons, logical ops, trunc, round, sign, reciprocal, flip, roll, repeat, tile, meshgrid,
eye, isclose, nan_to_num, count_nonzero); logsumexp, std, prod and lerp round like any sequence
of float32 ops and agree with torch to a few ulps. Gradients flow through the ops they are made
of: zero through trunc and round (as torch's), none through sign (torch's is zero too).
"""
import builtins as _builtins
import math as _math

from . import _C
from ._model_ops import finfo, nonzero

Tensor = _C.Tensor


def _tensor(x, like=None):
    if isinstance(x, Tensor):
        return x
    if like is not None and not isinstance(x, bool):
        return _C.full((), x, dtype=like.dtype)
    return _C.tensor(x)


# ---- comparisons and logical ops by name -------------------------------------------------------

def eq(input, other):
    return input == other


def ne(input, other):
    return input != other


def lt(input, other):
    return input < other


def le(input, other):
    return input <= other


def gt(input, other):
    return input > other


def ge(input, other):
    return input >= other


greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def _truth(x):
    x = _tensor(x)
    return x if x.dtype == _C.dtype.bool else x != 0


def logical_not(input):
    return ~_truth(input)


def logical_and(input, other):
    return _truth(input) & _truth(other)


def logical_or(input, other):
    return _truth(input) | _truth(other)


def logical_xor(input, other):
    return _truth(input) != _truth(other)


# ---- rounding ------------------------------------------------------------------------------------

def _is_float(x):
    return x.dtype in (_C.dtype.float32, _C.dtype.bfloat16, _C.dtype.float16)


def floor(input):
    return input.floor()


def ceil(input):
    return input.ceil()


def trunc(input):
    """torch.trunc: toward zero; integers are returned as they are (a copy). Zero gradient."""
    if not _is_float(input):
        return input.clone()
    return input.div(1, rounding_mode="trunc")


_TWO_23 = 8388608.0  # from 2**23 on, every float32 is an integer


def round(input, *, decimals=0):  # noqa: A001 (torch's name)
    """torch.round: to the nearest integer, halves to even, the sign of zero kept; with decimals,
    torch's own scaling (x * 10**d, rounded, / 10**d). Zero gradient, as torch's."""
    if not _is_float(input):
        return input.clone()
    if decimals:
        if decimals > 0:
            return round(input * float(10 ** decimals)) / float(10 ** decimals)
        return round(input / float(10 ** -decimals)) * float(10 ** -decimals)
    dtype = input.dtype
    x = input.float() if dtype != _C.dtype.float32 else input
    a = x.abs()
    r = (a + _TWO_23) - _TWO_23  # float32's round-to-nearest-even does the rounding
    r = _C.where(x < 0, -r, r)
    r = _C.where(a < _TWO_23, r, x)  # large values, inf and nan as they are
    r = _C.where(x == 0, x, r)  # -0.0 stays -0.0
    r = r.div(1, rounding_mode="trunc")  # an integer already: only the zero gradient
    return r.to(dtype) if dtype != _C.dtype.float32 else r


def sign(input):
    """torch.sign: -1, 0 or 1 in the input's dtype (0 for nan and for -0.0, as torch). The result
    is not in the autograd graph (torch's gradient of sign is zero)."""
    if input.dtype == _C.dtype.bool:
        return input.clone()
    return (input > 0).to(input.dtype) - (input < 0).to(input.dtype)


def reciprocal(input):
    """torch.reciprocal: 1 / x, integers to float32."""
    return 1.0 / input if _is_float(input) else 1.0 / input.float()


# ---- reordering and repetition -------------------------------------------------------------------

def _dims(dims, n):
    if isinstance(dims, int):
        dims = (dims,)
    out = []
    for d in dims:
        if not -n <= d < _builtins.max(n, 1):
            raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but got "
                             "{})".format(-n, n - 1, d))
        out.append(d % n if n else 0)
    return out


def flip(input, dims):
    """torch.flip: the elements in reverse order along each of dims (a copy)."""
    out = input
    for d in _dims(dims, input.dim()):
        n = input.shape[d]
        out = out.index_select(d, _C.arange(n - 1, -1, -1))
    return out if out is not input else input.clone()


def fliplr(input):
    return flip(input, 1)


def flipud(input):
    return flip(input, 0)


def roll(input, shifts, dims=None):
    """torch.roll: elements shifted along dims (cyclically); without dims, over the flattened tensor."""
    if dims is None:
        if not isinstance(shifts, int):
            if len(shifts) != 1:
                raise RuntimeError("roll(): shifts without dims must be one number, got {}".format(
                    shifts))
            shifts = shifts[0]
        return roll(input.flatten(), shifts, 0).reshape(tuple(input.shape))
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = _dims(dims, input.dim())
    if len(shifts) != len(dims):
        raise RuntimeError("roll(): shifts and dimensions must align. shifts: {}, dims: {}".format(
            len(shifts), len(dims)))
    out = input
    for s, d in zip(shifts, dims):
        n = input.shape[d]
        if n:
            out = out.index_select(d, (_C.arange(n) - s) % n)
    return out if out is not input else input.clone()


def _repeat(self, *sizes):
    """Tensor.repeat: the tensor tiled sizes[i] times along each dim (leading new dims allowed)."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    if len(sizes) < self.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of "
                           "dimensions of tensor")
    if any(s < 0 for s in sizes):
        raise RuntimeError("Trying to create tensor with negative dimension: {}".format(sizes))
    shape = (1,) * (len(sizes) - self.dim()) + tuple(self.shape)
    # each dim s as (1, s), expanded to (r, s), then merged: r copies of the whole dim in turn
    inter, expanded = [], []
    for r, s in zip(sizes, shape):
        inter += [1, s]
        expanded += [r, s]
    out = self.reshape(tuple(inter)).expand(*expanded)
    return out.reshape(tuple(r * s for r, s in zip(sizes, shape)))


def tile(input, dims):
    dims = tuple(dims)
    if len(dims) < input.dim():
        dims = (1,) * (input.dim() - len(dims)) + dims
    return _repeat(input, *dims)


def _expand_as(self, other):
    return self.expand(*other.shape)


def _view_as(self, other):
    return self.view(*other.shape)


def _reshape_as(self, other):
    return self.reshape(tuple(other.shape))


def _where(self, condition, y):
    return _C.where(condition, self, _tensor(y, self))


def broadcast_shapes(*shapes):
    n = _builtins.max([len(s) if not isinstance(s, int) else 1 for s in shapes] + [0])
    out = [1] * n
    for s in shapes:
        s = (s,) if isinstance(s, int) else tuple(s)
        for i, v in enumerate(s):
            j = n - len(s) + i
            if out[j] == 1:
                out[j] = v
            elif v != 1 and v != out[j]:
                raise RuntimeError("Shape mismatch: objects cannot be broadcast to a single shape")
    return tuple(out)


def broadcast_to(input, size):
    return input.expand(*size)


def t(input):
    return input.t()


def narrow(input, dim, start, length):
    return input.narrow(dim, start, length)


def meshgrid(*tensors, indexing="ij"):
    """torch.meshgrid: indexing "ij" (the default) or "xy" (the first two inputs' roles swapped,
    as torch does it)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError("torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: "
                         "{}".format(indexing))
    for x in tensors:
        if x.dtype != tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
        if x.dim() > 1:
            raise RuntimeError("torch.meshgrid: Expected 0D or 1D tensor in the tensor list but "
                               "got: {}".format(x.shape))
    ts = [x.reshape(-1) for x in tensors]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    sizes = [x.shape[0] for x in ts]
    out = []
    for i, x in enumerate(ts):
        shape = [1] * len(ts)
        shape[i] = sizes[i]
        out.append(x.reshape(tuple(shape)).expand(*sizes))
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def eye(n, m=None, *, dtype=None, requires_grad=False):
    m = n if m is None else m
    out = (_C.arange(n).unsqueeze(1) == _C.arange(m).unsqueeze(0)).to(dtype or _C.dtype.float32)
    return out.requires_grad_() if requires_grad else out


# ---- tests and replacements ----------------------------------------------------------------------

def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.isclose: |input - other| <= atol + rtol * |other|, infinities equal only to
    themselves, nan to nan only with equal_nan."""
    other = _tensor(other, input)
    if not _is_float(input) and not _is_float(other):
        input, other = input.float(), other.float()
    close = input == other
    if equal_nan:
        close = close | (input.isnan() & other.isnan())
    diff = (input - other).abs()
    return close | (diff.isfinite() & (diff <= atol + rtol * other.abs()))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """torch.nan_to_num: nan, +inf and -inf replaced (by 0 and the dtype's largest and lowest)."""
    if not _is_float(input):
        return input.clone()
    fi = finfo(input.dtype)
    posinf = fi.max if posinf is None else posinf
    neginf = fi.min if neginf is None else neginf
    out = _C.where(input.isnan(), _C.full((), nan, dtype=input.dtype), input)
    out = _C.where(out == _math.inf, _C.full((), posinf, dtype=input.dtype), out)
    return _C.where(out == -_math.inf, _C.full((), neginf, dtype=input.dtype), out)


def count_nonzero(input, dim=None):
    nz = input != 0
    return nz.sum() if dim is None else nz.sum(dim)


# ---- reductions and interpolation (float32 rounding, not torch's bits) ---------------------------

def logsumexp(input, dim, keepdim=False):
    """torch.logsumexp: log(sum(exp(x))) along dim, computed around the largest value (so
    neither overflow nor an all--inf slice gives nan)."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    m = input.detach().amax(dims, True)
    m = _C.where(m.isinf(), _C.zeros_like(m), m)
    out = (input - m).exp().sum(dims, True).log() + m
    if not keepdim:
        for d in sorted((d % input.dim() for d in dims), reverse=True):
            out = out.squeeze(d)
    return out


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    from . import var
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


def prod(input, dim=None, keepdim=False, *, dtype=None):
    """torch.prod: the product in order along dim (or of every element), through cumprod."""
    if dtype is not None:
        input = input.to(dtype)
    if not _is_float(input) and input.dtype != _C.dtype.int64:
        input = input.long()
    if dim is None:
        flat = input.reshape(-1)
        if flat.shape[0] == 0:
            return _C.ones((), dtype=input.dtype)
        return flat.cumprod(0)[-1]
    d = dim % input.dim() if input.dim() else 0
    if input.shape[d] == 0:
        shape = list(input.shape)
        shape[d] = 1
        out = _C.ones(tuple(shape), dtype=input.dtype)
        return out if keepdim else out.squeeze(d)
    out = input.cumprod(d).select(d, -1)
    return out.unsqueeze(d) if keepdim else out


def lerp(input, end, weight):
    """torch.lerp: input + weight * (end - input), computed from the nearer end as torch's
    kernel (end - (end - input) * (1 - weight) for |weight| >= 0.5)."""
    end = _tensor(end, input)
    diff = end - input
    if isinstance(weight, Tensor):
        return _C.where(weight.abs() < 0.5, input + weight * diff, end - diff * (1 - weight))
    return input + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)


# ---- special functions (computed by attn._C; here only their torch.* names) ---------------------

def _method_function(name):
    def f(input):
        return getattr(input, name)()
    f.__name__ = name
    f.__doc__ = "torch.{0}(input): input.{0}()".format(name)
    return f


_SPECIAL = "log1p expm1 log2 log10 exp2 erf erfc tan sinh cosh asin acos atan".split()
for _name in _SPECIAL:
    globals()[_name] = _method_function(_name)
arcsin, arccos, arctan = asin, acos, atan  # noqa: F821 (defined just above)


# ---- stacking, selection and creation ------------------------------------------------------------

def hstack(tensors):
    tensors = [x if x.dim() else x.reshape(1) for x in tensors]
    return _C.cat(tensors, 0 if tensors[0].dim() == 1 else 1)


def vstack(tensors):
    return _C.cat([x.reshape(1, -1) if x.dim() < 2 else x for x in tensors], 0)


row_stack = vstack


def column_stack(tensors):
    return _C.cat([x.reshape(-1, 1) if x.dim() < 2 else x for x in tensors], 1)


def masked_select(input, mask):
    """torch.masked_select: the elements where mask (broadcast with input) is true, as 1-D."""
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    return input.expand(*shape)[mask.expand(*shape)]


def take(input, index):
    """torch.take: input read as 1-D at index (any shape)."""
    n = input.numel()
    if index.numel() and (int(index.max()) >= n or int(index.min()) < -n):
        raise IndexError("take(): index out of range for a tensor of {} elements".format(n))
    return input.reshape(-1)[index.reshape(-1)].reshape(tuple(index.shape))


def tril_indices(row, col, offset=0, *, dtype=None):
    """torch.tril_indices: the (row, column) indices of the lower triangle, row by row (2 x N)."""
    keep = _C.arange(col).unsqueeze(0) <= _C.arange(row).unsqueeze(1) + offset
    return _nonzero_t(keep, dtype)


def triu_indices(row, col, offset=0, *, dtype=None):
    keep = _C.arange(col).unsqueeze(0) >= _C.arange(row).unsqueeze(1) + offset
    return _nonzero_t(keep, dtype)


def _nonzero_t(mask, dtype):
    out = nonzero(mask).t().contiguous() if mask.numel() else _C.zeros((2, 0), dtype=_C.dtype.int64)
    return out if dtype is None else out.to(dtype)


def randn_like(input, *, dtype=None, requires_grad=False):
    """torch.randn_like: randn of input's shape (the same draws as torch.randn(input.shape))."""
    out = _C.randn(*input.shape).to(dtype or input.dtype)
    return out.requires_grad_() if requires_grad else out


def rand_like(input, *, dtype=None, requires_grad=False):
    out = _C.rand(*input.shape).to(dtype or input.dtype)
    return out.requires_grad_() if requires_grad else out


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """torch.addmm: beta * input + alpha * (mat1 @ mat2) (input broadcast; beta 0 ignores it)."""
    prod = mat1 @ mat2
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    return (input if beta == 1 else input * beta) + prod


def _unflatten(self, dim, sizes):
    d = dim % self.dim()
    return self.reshape(tuple(self.shape[:d]) + tuple(sizes) + tuple(self.shape[d + 1:]))


def _new_tensor(self, data, dtype=None, requires_grad=False):
    out = _C.tensor(data, dtype=dtype or self.dtype)
    return out.requires_grad_() if requires_grad else out


# ---- reductions over dims, diagonals, differences ------------------------------------------------

def _any(input, dim=None, keepdim=False):
    """torch.any: whether any element (along dim) is non-zero; bool."""
    if dim is None:
        return _ANY0(input)
    return (input != 0).sum(dim, keepdim) > 0


def _all(input, dim=None, keepdim=False):
    if dim is None:
        return _ALL0(input)
    return (input == 0).sum(dim, keepdim) == 0


_ANY0, _ALL0 = Tensor.any, Tensor.all


def amin(input, dim=(), keepdim=False):
    """torch.amin: the smallest value along dim (all dims by default): -amax(-input), exact."""
    dims = tuple(range(input.dim())) if dim == () or dim is None else dim
    return -((-input).amax(dims, keepdim))


def clamp_min(input, min):  # noqa: A002 (torch's argument name)
    return input.clamp(min=min)


def clamp_max(input, max):  # noqa: A002
    return input.clamp(max=max)


def frac(input):
    """torch.frac: input - trunc(input), the sign of input kept."""
    return input - trunc(input)


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """torch.diff: the n-th forward difference along dim (after prepend and append are joined)."""
    parts = [p for p in (prepend, input, append) if p is not None]
    x = _C.cat(parts, dim) if len(parts) > 1 else input
    d = dim % x.dim()
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = (hi != lo) if x.dtype == _C.dtype.bool else hi - lo
    return x


def diagonal(input, offset=0, dim1=0, dim2=1):
    """torch.diagonal: the diagonal of dims (dim1, dim2) as the last dim (a copy; gradients flow)."""
    nd = input.dim()
    if nd < 2:
        raise RuntimeError("diagonal(): expected a tensor of at least 2 dims, got {}".format(nd))
    d1, d2 = dim1 % nd, dim2 % nd
    if d1 == d2:
        raise RuntimeError("diagonal dimensions cannot be identical {}, {}".format(dim1, dim2))
    rest = [i for i in range(nd) if i not in (d1, d2)]
    x = input.permute(d1, d2, *rest)
    r0, c0 = _builtins.max(-offset, 0), _builtins.max(offset, 0)
    n = _builtins.max(0, _builtins.min(x.shape[0] - r0, x.shape[1] - c0))
    out = x[_C.arange(n) + r0, _C.arange(n) + c0]  # (n, *rest)
    return out.permute(*range(1, out.dim()), 0) if out.dim() > 1 else out


def diag(input, diagonal=0):
    """torch.diag: a 1-D input on the diagonal-th diagonal of a square matrix, or a 2-D input's
    diagonal."""
    if input.dim() == 2:
        return globals()["diagonal"](input, diagonal)
    if input.dim() != 1:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got {}D".format(input.dim()))
    n, k = input.shape[0], diagonal
    m = n + abs(k)
    rows, cols = _C.arange(m).unsqueeze(1), _C.arange(m).unsqueeze(0)
    on = (cols - rows) == k
    idx = (rows - _builtins.max(-k, 0)).clamp(0, _builtins.max(n - 1, 0)).expand(m, m)
    vals = input[idx.reshape(-1)].reshape(m, m) if n else _C.zeros((m, m), dtype=input.dtype)
    return _C.where(on, vals, _C.zeros((), dtype=input.dtype))


def trace(input):
    if input.dim() != 2:
        raise RuntimeError("trace(): expected a matrix, but got tensor with dim {}".format(
            input.dim()))
    return diagonal(input).sum()


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    from . import mean, var
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim) if dim is not None else mean(input))


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    v, m = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return v.sqrt(), m


def rot90(input, k=1, dims=(0, 1)):
    """torch.rot90: k quarter turns from dims[0] toward dims[1]."""
    d0, d1 = dims
    k %= 4
    if k == 1:
        return flip(input, d1).transpose(d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return flip(input, d0).transpose(d0, d1)
    return input.clone()


def logaddexp(input, other):
    """torch.logaddexp: log(exp(input) + exp(other)) without overflow (equal infinities kept)."""
    m = _C.maximum(input, other)
    out = m + (-(input - other).abs()).exp().log1p()
    return _C.where((input == other) & input.isinf(), input, out)


def xlogy(input, other):
    """torch.xlogy: input * log(other), 0 where input is 0 (unless other is nan)."""
    input, other = _tensor(input), _tensor(other)
    out = input * other.log()
    out = _C.where(input == 0, _C.zeros((), dtype=out.dtype), out)
    return _C.where(other.isnan(), other.to(out.dtype), out)


def logit(input, eps=None):
    """torch.logit: log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given."""
    x = input if eps is None else input.clamp(eps, 1.0 - eps)
    return (x / (1.0 - x)).log()


def _flip_method(self, *dims):  # Tensor.flip(0, 1) as well as flip((0, 1))
    return flip(self, dims[0] if len(dims) == 1 else dims)


def _tile_method(self, *dims):
    return tile(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims)


def install(module):
    """Puts the functions above into `module` (attn) and the methods onto Tensor."""
    for name in ("eq ne lt le gt ge greater greater_equal less less_equal not_equal logical_not "
                 "logical_and logical_or logical_xor floor ceil trunc round sign reciprocal flip "
                 "fliplr flipud roll tile broadcast_shapes broadcast_to t narrow meshgrid eye "
                 "isclose nan_to_num count_nonzero logsumexp std prod lerp hstack vstack "
                 "row_stack column_stack masked_select take tril_indices triu_indices randn_like "
                 "rand_like addmm arcsin arccos arctan amin clamp_min clamp_max frac diff "
                 "diagonal diag trace var_mean std_mean rot90 logaddexp xlogy logit").split() \
            + _SPECIAL:
        if name not in vars(module):
            setattr(module, name, globals()[name])
    for name in ("logical_and logical_or logical_xor trunc round sign reciprocal fliplr flipud "
                 "roll isclose nan_to_num count_nonzero logsumexp std prod lerp "
                 "broadcast_to masked_select take addmm amin clamp_min clamp_max frac diff "
                 "diagonal diag trace rot90 logaddexp xlogy logit").split():
        if not _has_own(name):
            setattr(Tensor, name, globals()[name])
    for name, fn in (("repeat", _repeat), ("expand_as", _expand_as), ("view_as", _view_as),
                     ("reshape_as", _reshape_as), ("where", _where), ("flip", _flip_method),
                     ("tile", _tile_method), ("unflatten", _unflatten),
                     ("new_tensor", _new_tensor), ("any", _any), ("all", _all)):
        if not _has_own(name):
            setattr(Tensor, name, fn)
    for name, fn in (("any", _any), ("all", _all)):
        if name not in vars(module):
            setattr(module, name, fn)
    Tensor.fix = Tensor.trunc
    module.fix = trunc


def _has_own(name):
    if name in ("any", "all"):  # _C's take no dim: replaced by the forms above
        return False
    return any(name in vars(k) for k in Tensor.__mro__ if k is not object)
