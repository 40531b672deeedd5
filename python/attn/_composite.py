"""torch names that are compositions of attn's ops, written here in Python: comparisons and logical
ops by name, rounding (trunc, round, sign), reciprocal, flip, roll, repeat and tile, the *_as
views, meshgrid, eye, isclose, nan_to_num, count_nonzero, logsumexp, std, prod and lerp.

Each is built from ops whose results are correctly rounded, so most give torch's bits (the
comparisons, logical ops, trunc, round, sign, reciprocal, flip, roll, repeat, tile, meshgrid,
eye, isclose, nan_to_num, count_nonzero); logsumexp, std, prod and lerp round like any sequence
of float32 ops and agree with torch to a few ulps. Gradients flow through the ops they are made
of: zero through trunc and round (as torch's), none through sign (torch's is zero too).

A second batch follows torch 1.13's semantics, refusals included (torch's exception types, with
the function and the shapes in the message): baddbmm, addmv and addr (beta 0 ignores input: nan
in it does not propagate), diag_embed, kron, logspace, nansum, nanmean, signbit, tensor_split,
trapezoid and trapz, cross (dim None: the first dim of size 3), atleast_1d/2d/3d and block_diag.
diag_embed, kron, logspace (torch's kernel redone in float64), nansum, nanmean, signbit,
tensor_split, trapezoid, trapz, atleast_*d and block_diag give torch's bits; baddbmm and addmv
sum their products in another order, and torch's addr and cross fuse a product into an FMA, so
those agree with torch to a few ulps.
"""
import builtins as _builtins
import math as _math
import numbers as _numbers
import operator as _operator

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


_SPECIAL = "log1p expm1 log2 log10 exp2 erf erfc tan sinh cosh asin acos atan asinh acosh atanh".split()
for _name in _SPECIAL:
    globals()[_name] = _method_function(_name)
arcsin, arccos, arctan = asin, acos, atan  # noqa: F821 (defined just above)
arcsinh, arccosh, arctanh = asinh, acosh, atanh  # noqa: F821


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


# ---- batched products, Kronecker, diagonals, splits, integrals (torch 1.13's semantics) ---------

def _need_tensor(fn, what, x):
    if not isinstance(x, Tensor):
        raise TypeError("{}(): argument '{}' must be Tensor, not {}".format(fn, what,
                                                                          type(x).__name__))


def _shape(x):
    return tuple(x.shape)


def _check_broadcast_to(fn, input, shape):
    """torch's expand of `input` (the added term) to the result's shape, or its RuntimeError."""
    s = _shape(input)
    if len(s) > len(shape) or any(a != 1 and a != b for a, b in zip(s[::-1], shape[::-1])):
        raise RuntimeError("{}(): input of shape {} cannot be broadcast to the result's shape {} "
                           "(the expanded size of the tensor must match the existing size)".format(
                               fn, s, tuple(shape)))


def _broadcast(fn, a, b, what=""):
    try:
        return broadcast_shapes(a, b)
    except RuntimeError:
        raise RuntimeError("{}(): shapes {} and {} {}cannot be broadcast together".format(
            fn, a, b, what + " " if what else "")) from None


def _kept(value, other):
    """value, with other in the autograd graph at a zero gradient (torch's gradient of a term
    whose coefficient is 0) without other's nan or inf reaching the value."""
    if not other.requires_grad:
        return value
    return _C.where(_C.full((), True, dtype=_C.dtype.bool), value, other)


def _int_coef(x):
    return int(x) if isinstance(x, bool) else x


def _add_scaled(input, prod, beta, alpha, gemv=False):
    """beta * input + prod (prod = alpha * the product already); beta 0 ignores input's values,
    and for gemv (torch's addmv) alpha 0 the product's."""
    if input.dtype != prod.dtype:
        input = input.to(prod.dtype)
    if alpha == 0 and gemv:  # torch's gemv: the product takes no part at all
        term = input if beta == 1 else (input * beta if beta != 0 else None)
        if term is None:
            return _kept(_C.zeros(_shape(prod), dtype=prod.dtype), prod)
        return _kept(term.expand(*_shape(prod)), prod)
    if beta == 0:
        return _kept(prod, input.expand(*_shape(prod)))
    return (input if beta == 1 else input * beta) + prod


def _mm_coefs(fn, dtype, beta, alpha):
    if dtype == _C.dtype.bool:
        raise RuntimeError("\"{}\" not implemented for 'Bool'".format(fn))
    beta, alpha = _int_coef(beta), _int_coef(alpha)
    if dtype == _C.dtype.int64:  # torch casts the coefficients to the integer type
        beta, alpha = int(beta), int(alpha)
    return beta, alpha


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """torch.baddbmm: beta * input + alpha * (batch1 @ batch2), batch by batch; input broadcast
    to (b, n, p); beta 0 ignores input (nan and inf in it do not propagate). The result has the
    batches' dtype."""
    for what, x in (("input", input), ("batch1", batch1), ("batch2", batch2)):
        _need_tensor("baddbmm", what, x)
    s1, s2 = _shape(batch1), _shape(batch2)
    if len(s1) < 2 or len(s2) < 3:  # torch reads batch1.size(1) and batch2.size(2) first
        raise IndexError("baddbmm(): Dimension out of range: batch1 and batch2 must be 3-D, got "
                         "shapes {} and {}".format(s1, s2))
    if len(s1) != 3 or len(s2) != 3:
        raise RuntimeError("baddbmm(): batch1 must be a 3D tensor and batch2 too, got shapes {} "
                           "and {}".format(s1, s2))
    if s2[:2] != (s1[0], s1[2]):
        raise RuntimeError("baddbmm(): Expected size for first two dimensions of batch2 tensor to "
                           "be: [{}, {}] but got: [{}, {}] (batch1 {}, batch2 {})".format(
                               s1[0], s1[2], s2[0], s2[1], s1, s2))
    if batch1.dtype != batch2.dtype:
        raise RuntimeError("baddbmm(): expected scalar type {} but found {} (batch1 and batch2 "
                           "must have the same dtype)".format(batch1.dtype, batch2.dtype))
    shape = (s1[0], s1[1], s2[2])
    _check_broadcast_to("baddbmm", input, shape)
    beta, alpha = _mm_coefs("baddbmm", batch1.dtype, beta, alpha)
    prod = _C.bmm(batch1, batch2)
    if alpha != 1:
        prod = prod * alpha
    return _add_scaled(input, prod, beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """torch.addmv: beta * input + alpha * (mat @ vec); beta 0 ignores input, alpha 0 the product
    (as torch's gemv). The result has mat's dtype."""
    for what, x in (("input", input), ("mat", mat), ("vec", vec)):
        _need_tensor("addmv", what, x)
    if mat.dim() != 2 or vec.dim() != 1 or input.dim() > 1:
        raise RuntimeError("addmv(): vector + matrix @ vector expected, got {}, {}, {} (shapes {}, "
                           "{}, {})".format(input.dim(), mat.dim(), vec.dim(), _shape(input),
                                            _shape(mat), _shape(vec)))
    n, m = _shape(mat)
    if vec.shape[0] != m or (input.dim() == 1 and input.shape[0] not in (1, n)):
        raise RuntimeError("addmv(): size mismatch, got {}, {}x{},{} (shapes {}, {}, {})".format(
            input.shape[0] if input.dim() else 1, n, m, vec.shape[0], _shape(input), _shape(mat),
            _shape(vec)))
    if mat.dtype != vec.dtype:
        raise RuntimeError("addmv(): expected scalar type {} but found {} (mat and vec must have "
                           "the same dtype)".format(mat.dtype, vec.dtype))
    beta, alpha = _mm_coefs("addmv", mat.dtype, beta, alpha)
    prod = _C.matmul(mat, vec)
    if alpha not in (0, 1):
        prod = prod * alpha
    return _add_scaled(input, prod, beta, alpha, gemv=True)


def _result_dtype(tensors):
    """torch.result_type of tensors (0-dim ones count for less, as torch's), from attn's own
    promotion of empty operands."""
    acc = None
    for t in tensors:
        e = t.detach()
        e = e if e.dim() == 0 else e.reshape(-1).narrow(0, 0, 0)
        acc = e if acc is None else acc + e
    return acc.dtype


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """torch.addr: beta * input + alpha * outer(vec1, vec2), computed as torch's kernel,
    beta * input + (alpha * vec1) * vec2 (torch's fuses the sum with one of the products, an FMA,
    so within an ulp of it); beta 0 ignores input. For bool tensors: (beta and input) or (alpha
    and vec1 & vec2)."""
    for what, x in (("input", input), ("vec1", vec1), ("vec2", vec2)):
        _need_tensor("addr", what, x)
    for what, v in (("vec1", vec1), ("vec2", vec2)):
        if v.dim() != 1:
            raise RuntimeError("addr: Expected 1-D argument {}, but got {}-D (shapes {} and "
                               "{})".format(what, v.dim(), _shape(vec1), _shape(vec2)))
    shape = (vec1.shape[0], vec2.shape[0])
    _check_broadcast_to("addr", input, shape)
    dtype = _result_dtype([input, vec1, vec2])
    for what, c in (("beta", beta), ("alpha", alpha)):
        if dtype in (_C.dtype.int64, _C.dtype.bool) and isinstance(c, float):
            raise RuntimeError("addr(): For integral input tensors, argument {} must not be a "
                               "floating point number.".format(what))
        if dtype != _C.dtype.bool and isinstance(c, bool):
            raise RuntimeError("addr(): Boolean {} only supported for Boolean results.".format(
                what))
    if dtype == _C.dtype.bool:
        out = _C.zeros(shape, dtype=dtype)
        if alpha:
            out = out | (vec1.unsqueeze(1) & vec2.unsqueeze(0))
        return out | input if beta else out
    v1, v2 = vec1.to(dtype), vec2.to(dtype)
    prod = (v1 if alpha == 1 else v1 * alpha).unsqueeze(1) * v2.unsqueeze(0)
    return _add_scaled(input, prod, beta, alpha)


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """torch.diag_embed: input's last dim on the offset-th diagonal of the planes (dim1, dim2) of
    a new tensor with one dim more, zeros elsewhere (gradients flow to input)."""
    _need_tensor("diag_embed", "input", input)
    nd = input.dim() + 1
    d1, d2 = _dims((dim1, dim2), nd)
    if d1 == d2:
        raise RuntimeError("diag_embed(): diagonal dimensions cannot be identical {}, {} (input "
                           "shape {})".format(dim1, dim2, _shape(input)))
    batch, m = _shape(input)[:-1], input.shape[-1]
    n = m + abs(offset)
    rows, cols = _C.arange(n).unsqueeze(1), _C.arange(n).unsqueeze(0)
    if m:
        idx = (rows - _builtins.max(-offset, 0)).clamp(0, m - 1).expand(n, n).reshape(-1)
        vals = input.index_select(-1, idx).reshape(batch + (n, n))
        out = _C.where((cols - rows) == offset, vals, _C.zeros((), dtype=input.dtype))
    else:
        out = _C.zeros(batch + (n, n), dtype=input.dtype)
    rest = iter(range(nd - 2))
    perm = [nd - 2 if p == d1 else nd - 1 if p == d2 else next(rest) for p in range(nd)]
    return out.permute(*perm)


def kron(input, other):
    """torch.kron: the Kronecker product (each block input[i] * other), the dims padded to the
    same number with leading 1s. Every element is one product, so the bits are torch's."""
    _need_tensor("kron", "input", input)
    _need_tensor("kron", "other", other)
    n = _builtins.max(input.dim(), other.dim())
    sa = (1,) * (n - input.dim()) + _shape(input)
    sb = (1,) * (n - other.dim()) + _shape(other)
    a = input.reshape(tuple(x for s in sa for x in (s, 1)))
    b = other.reshape(tuple(x for s in sb for x in (1, s)))
    return (a * b).reshape(tuple(x * y for x, y in zip(sa, sb)))


def _round_to(dtype, x):
    """A float64 number rounded to float32, then to dtype (attn's rounding to nearest even, as
    c10::BFloat16's), as a Python float."""
    return _C.full((), float(x), dtype=_C.dtype.float32).to(dtype).float().item()


def _pow(base, exponent):
    """The C library's pow (torch's std::pow; NumPy's vectorised power can differ from it in the
    last bit), inf and nan where C's gives them instead of Python's exceptions."""
    try:
        return _math.pow(base, exponent)
    except OverflowError:
        odd = exponent == int(exponent) and int(exponent) % 2 == 1
        return -_math.inf if base < 0 and odd else _math.inf
    except ValueError:
        return _math.nan


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """torch.logspace: base ** (steps points from start to end), computed as torch 1.13's CPU
    kernel (the exponents in float64 from the start for the first half, from the end for the
    second, then pow in float64, rounded to dtype), so the values are torch's bits. Integer
    dtypes (int64) truncate, as torch's."""
    import numpy as np
    if out is not None:
        raise ValueError("[logspace] out= is not supported")
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("logspace(): number of steps must be non-negative, got {}".format(steps))
    dt = _C.dtype.float32 if dtype is None else dtype
    if dt not in (_C.dtype.float32, _C.dtype.bfloat16, _C.dtype.int64):  # torch's CPU kernels
        raise RuntimeError("logspace(): \"logspace_cpu\" not implemented for {}".format(dt))
    start, end, base = float(start), float(end), float(base)
    f64 = np.float64
    if steps == 1:
        values = np.array([_pow(base, start)])
    else:
        if dt == _C.dtype.int64:  # start and end truncated, as torch's scalar_t
            s, e = f64(int(start)), f64(int(end))
            diff = e - s
        else:  # start, end and their difference rounded to dtype
            s, e = f64(_round_to(dt, start)), f64(_round_to(dt, end))
            diff = f64(_round_to(dt, e - s))
        step = diff / f64(steps - 1)
        i = np.arange(steps, dtype=np.float64)
        exps = np.where(i < steps // 2, s + step * i, e - step * (f64(steps) - i - 1))
        values = np.array([_pow(base, x) for x in exps.tolist()], dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # inf beyond float32's range, as torch's
        values = values.astype(np.int64 if dt == _C.dtype.int64 else np.float32)
    t = _C.from_numpy(np.ascontiguousarray(values)).clone()
    if dt not in (_C.dtype.int64, _C.dtype.float32):
        t = t.to(dt)
    if device is not None and str(device) != "cpu":
        t = t.to(device)
    return t.requires_grad_() if requires_grad else t


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """torch.nansum: the sum with nan counted as zero (integers and bool: the sum, int64)."""
    _need_tensor("nansum", "input", input)
    if dtype is not None:
        input = input.to(dtype)
    if _is_float(input):
        input = _C.where(input.isnan(), _C.zeros((), dtype=input.dtype), input)
    return input.sum(dim, keepdim)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """torch.nanmean: nansum / the number of non-nan elements (nan where all are nan); floating
    dtypes only, as torch."""
    _need_tensor("nanmean", "input", input)
    if not _is_float(input if dtype is None else _C.zeros((), dtype=dtype)):
        raise RuntimeError("nanmean(): expected input to have floating point dtype but got {} "
                           "(shape {})".format(input.dtype if dtype is None else dtype,
                                               _shape(input)))
    count = (~input.isnan()).sum(dim, keepdim)
    return nansum(input, dim, keepdim, dtype=dtype) / count


def signbit(input):
    """torch.signbit: whether the sign bit is set: True for -0.0, -inf and a nan with its sign
    bit set (as -nan), False for 0.0 and nan; for integers x < 0; False for bool."""
    _need_tensor("signbit", "input", input)
    if input.dtype == _C.dtype.bool:
        return _C.zeros(_shape(input), dtype=_C.dtype.bool)
    if not _is_float(input):
        return input < 0
    import numpy as np
    x = input.detach()
    x = x if x.dtype == _C.dtype.float32 else x.float()  # widening keeps the sign bit
    bits = np.ascontiguousarray(np.signbit(x.numpy())).reshape(_shape(input))  # 0-d stays 0-d
    return _C.from_numpy(bits).clone()


def tensor_split(input, indices_or_sections, dim=0):
    """torch.tensor_split: a tuple of views of input along dim, either `sections` nearly equal
    parts (the first size % sections one longer) or split before each of `indices` (read as
    Python slices: negative ones count from the end, out-of-range ones clamp)."""
    _need_tensor("tensor_split", "input", input)
    if input.dim() < 1:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims (shape {})".format(_shape(input)))
    d = _dims(dim, input.dim())[0]
    size = input.shape[d]
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if ios.dtype != _C.dtype.int64:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to have dtype of "
                               "long, but got {}".format(ios.dtype))
        if ios.dim() > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a "
                               "zero-dimensional or one-dimensional tensor, but got a tensor "
                               "with {} dims (shape {})".format(ios.dim(), _shape(ios)))
        ios = ios.item() if ios.dim() == 0 else ios.tolist()

    def as_int(i):  # an int or a NumPy integer; a bool or a float is a TypeError, as torch's
        try:
            if not isinstance(i, bool):
                return _operator.index(i)
        except TypeError:
            pass
        raise TypeError("tensor_split(): indices_or_sections must be an int, a sequence of ints "
                        "or an int64 tensor, got {!r}".format(indices_or_sections))

    if not isinstance(ios, (list, tuple)):
        ios = as_int(ios)
        if ios <= 0:
            raise RuntimeError("tensor_split(): number of sections must be larger than 0, got {} "
                               "(input shape {})".format(ios, _shape(input)))
        q, r = divmod(size, ios)
        lengths = [q + 1] * r + [q] * (ios - r)
        out, start = [], 0
        for n in lengths:
            out.append(input.narrow(d, start, n))
            start += n
        return tuple(out)
    ios = [as_int(i) for i in ios]

    def clamp(i):
        i = i + size if i < 0 else i
        return _builtins.min(_builtins.max(i, 0), size)

    out, start = [], 0
    for i in list(ios) + [size]:
        s, e = clamp(start), clamp(i)
        out.append(input.narrow(d, s, _builtins.max(e - s, 0)))
        start = i
    return tuple(out)


def _trapezoid_dim(fn, y, dim):
    if y.dim() == 0:
        raise IndexError("{}(): Dimension specified as {} but tensor has no dimensions".format(
            fn, dim))
    return _dims(dim, y.dim())[0]


def _empty_integral(y, d):
    return _C.zeros(_shape(y)[:d] + _shape(y)[d + 1:], dtype=y.dtype)


def _trapezoid_x(fn, y, x, d):
    """torch's trapezoid with sample points x: sum((y[i] + y[i+1]) * (x[i+1] - x[i])) / 2."""
    _need_tensor(fn, "x", x)
    if y.shape[d] == 0:
        return _empty_integral(y, d)
    if y.dtype == _C.dtype.bool or x.dtype == _C.dtype.bool:
        raise RuntimeError("{}: received a bool input for `x` or `y`, but bool is not "
                           "supported".format(fn))
    if x.dim() == 1:
        if x.shape[0] != y.shape[d]:
            raise RuntimeError("{}: There must be one `x` value for each sample point (x of shape "
                               "{}, y of shape {}, dim {})".format(fn, _shape(x), _shape(y), d))
        xs = [1] * y.dim()
        xs[d] = x.shape[0]
        xv = x.reshape(tuple(xs))
    elif x.dim() < y.dim():
        xv = x.reshape((1,) * (y.dim() - x.dim()) + _shape(x))
    else:
        xv = x
    if xv.shape[d] == 0:
        raise RuntimeError("{}: x of shape {} has no sample points along dim {} (y of shape "
                           "{})".format(fn, _shape(x), d, _shape(y)))
    dx = xv.narrow(d, 1, xv.shape[d] - 1) - xv.narrow(d, 0, xv.shape[d] - 1)
    n = y.shape[d]
    pair = y.narrow(d, 0, n - 1) + y.narrow(d, 1, n - 1)
    _broadcast(fn, _shape(pair), _shape(dx), "(the sums of y's neighbours, from y of shape {}, "
               "and the differences of x, from x of shape {})".format(_shape(y), _shape(x)))
    return (pair * dx).sum(d) / 2.0


def _trapezoid_dx(fn, y, dx, d):
    """torch's trapezoid with spacing dx: (sum(y) - (y[0] + y[-1]) / 2) * dx."""
    if y.shape[d] == 0:
        return _empty_integral(y, d)
    if y.dtype == _C.dtype.bool:
        raise RuntimeError("{}: received a bool input for `y`, but bool is not supported".format(
            fn))
    if isinstance(dx, bool) or not isinstance(dx, _numbers.Real):
        raise RuntimeError("{}: Currently, we only support dx as a real number, got {!r}".format(
            fn, dx))
    return (y.sum(d) - (y.select(d, 0) + y.select(d, -1)) * 0.5) * float(dx)


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """torch.trapezoid: the trapezoidal rule along dim, with sample points x or spacing dx
    (1 when neither is given), torch's formulas; integers give float32."""
    _need_tensor("trapezoid", "y", y)
    if x is not None and dx is not None:
        raise TypeError("trapezoid() takes x or dx, not both")
    d = _trapezoid_dim("trapezoid", y, dim)
    if x is not None:
        return _trapezoid_x("trapezoid", y, x, d)
    return _trapezoid_dx("trapezoid", y, 1 if dx is None else dx, d)


_UNSET = object()


def trapz(y, x=None, *, dx=_UNSET, dim=-1):
    """torch.trapz, the older name of trapezoid (dx defaults to 1)."""
    _need_tensor("trapz", "y", y)
    if x is not None and dx is not _UNSET:
        raise TypeError("trapz() takes x or dx, not both")
    if dx is _UNSET:
        dx = 1.0
    elif isinstance(dx, _numbers.Real):
        dx = float(dx)  # torch's trapz takes a float (True is 1.0)
    else:
        raise TypeError("trapz(): argument 'dx' must be float, not {}".format(type(dx).__name__))
    d = _trapezoid_dim("trapz", y, dim)
    if x is not None:
        return _trapezoid_x("trapezoid", y, x, d)
    return _trapezoid_dx("trapezoid", y, dx, d)


def cross(input, other, dim=None):
    """torch.cross: the cross product of 3-vectors along dim, the other dims broadcast. Without
    dim, the first dim of input's of size 3 (torch 1.13's default, which it does not warn about;
    torch.linalg.cross defaults to -1)."""
    _need_tensor("cross", "input", input)
    _need_tensor("cross", "other", other)
    sa, sb = _shape(input), _shape(other)
    if dim is None:
        if 3 not in sa:
            raise RuntimeError("cross(): no dimension of size 3 in input (shape {})".format(sa))
        dim = sa.index(3)
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions, got "
                           "shapes {} and {}".format(sa, sb))
    d = _dims(dim, input.dim())[0]
    if sa[d] != 3 or sb[d] != 3:
        raise RuntimeError("linalg.cross: inputs dimension {} must have length 3. Got {} and {} "
                           "(shapes {} and {})".format(dim, sa[d], sb[d], sa, sb))
    if input.dtype != other.dtype:
        raise RuntimeError("cross(): expected scalar type {} but found {} (input and other must "
                           "have the same dtype)".format(input.dtype, other.dtype))
    if input.dtype == _C.dtype.bool:
        raise RuntimeError("\"cross\" not implemented for 'Bool'")
    _broadcast("cross", sa, sb)
    a = [input.narrow(d, i, 1) for i in range(3)]
    b = [other.narrow(d, i, 1) for i in range(3)]
    return _C.cat([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                   a[0] * b[1] - a[1] * b[0]], d)


def _tensor_list(fn, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
        listed = True
    else:
        listed = len(tensors) != 1
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError("{}(): expected Tensor as element {}, but got {}".format(
                fn, i, type(t).__name__))
    return tensors, listed


def _atleast(fn, tensors, make):
    tensors, listed = _tensor_list(fn, tensors)
    out = tuple(make(t) for t in tensors)
    return out if listed else out[0]


def atleast_1d(*tensors):
    """torch.atleast_1d: 0-dim tensors as shape (1,), the others as they are (one tensor, or a
    tuple for several or a list)."""
    return _atleast("atleast_1d", tensors, lambda t: t.reshape(1) if t.dim() == 0 else t)


def atleast_2d(*tensors):
    """torch.atleast_2d: () -> (1, 1), (n,) -> (1, n)."""
    return _atleast("atleast_2d", tensors, lambda t: t.reshape(1, 1) if t.dim() == 0 else
                    t.unsqueeze(0) if t.dim() == 1 else t)


def atleast_3d(*tensors):
    """torch.atleast_3d: () -> (1, 1, 1), (n,) -> (1, n, 1), (m, n) -> (m, n, 1)."""
    return _atleast("atleast_3d", tensors, lambda t: t.reshape(1, 1, 1) if t.dim() == 0 else
                    t.reshape(1, -1, 1) if t.dim() == 1 else t.unsqueeze(2) if t.dim() == 2
                    else t)


def block_diag(*tensors):
    """torch.block_diag: the tensors (0-dim as 1x1, 1-D as one row) on the diagonal of a matrix,
    zeros elsewhere, in their promoted dtype; no tensors give a (1, 0) float32 matrix."""
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError("block_diag(): expected Tensor as element {} in argument 0, but got "
                            "{}".format(i, type(t).__name__))
        if t.dim() > 2:
            raise RuntimeError("torch.block_diag: Input tensors must have 2 or fewer dimensions. "
                               "Input {} has {} dimensions (shape {})".format(i, t.dim(),
                                                                              _shape(t)))
    if not tensors:
        return _C.zeros((1, 0), dtype=_C.dtype.float32)
    dtype = _result_dtype(tensors)
    mats = [t.reshape(1, 1) if t.dim() == 0 else t.reshape(1, -1) if t.dim() == 1 else t
            for t in tensors]
    cols = _builtins.sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        r, c = _shape(m)
        rows.append(_C.cat([_C.zeros((r, left), dtype=dtype), m.to(dtype),
                            _C.zeros((r, cols - left - c), dtype=dtype)], 1))
        left += c
    return _C.cat(rows, 0)


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
                 "rand_like addmm arcsin arccos arctan arcsinh arccosh arctanh amin clamp_min clamp_max frac diff "
                 "diagonal diag trace var_mean std_mean rot90 logaddexp xlogy logit baddbmm "
                 "addmv addr diag_embed kron logspace nanmean nansum signbit tensor_split "
                 "trapezoid trapz cross atleast_1d atleast_2d atleast_3d block_diag").split() \
            + _SPECIAL:
        if name not in vars(module):
            setattr(module, name, globals()[name])
    for name in ("logical_and logical_or logical_xor trunc round sign reciprocal fliplr flipud "
                 "roll isclose nan_to_num count_nonzero logsumexp std prod lerp "
                 "broadcast_to masked_select take addmm amin clamp_min clamp_max frac diff "
                 "diagonal diag trace rot90 logaddexp xlogy logit baddbmm addmv addr "
                 "diag_embed kron nanmean nansum signbit tensor_split cross").split():
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
