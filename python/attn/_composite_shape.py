"""Shape, linear-algebra and statistics torch names composed of attn's ops: broadcast_tensors,
cartesian_prod, combinations, cov, corrcoef, diagflat, dist, dsplit / hsplit / vsplit, dstack,
inner, mv, ravel, select (the function; Tensor.select is attn's own), take_along_dim, tensordot,
vander, vdot, argwhere, isin, msort, nanmedian, mode and logcumsumexp, with the Tensor
methods torch has for them. mode and nanmedian(dim) return torch.return_types-like pairs
(attn.return_types.mode / .nanmedian, added here at install time).

How they differ from torch 1.13: real dtypes only (attn has no complex or float64 tensors here);
cov takes fweights / aweights. combinations builds its index table in Python (fine for the
sizes combinations is used at). isin always gives the exact answer (torch's assume_unique=True
on input that is not unique is undefined there; attn ignores the hint) in O((n+m) log(n+m)).
histc is not here: torch 1.13's CPU histc bins by the edges of its own linspace, whose
float32 rounding (vectorised, different per position) a composition does not reproduce.
nanmedian and mode pick indices through a stable sort (equal values ordered by index): nanmedian
the element at the median position of the non-nan values, which matched torch's CPU choice in
every case tried, except an all-nan row (attn: index 0; torch: where its nth_element leaves it);
mode the highest index of the most frequent (smallest such) value, torch's CPU answer for rows of
up to 16 elements (torch's std::sort is unstable beyond that; it may give another occurrence).
mode's answer for rows with nan is unspecified in torch and not matched. logcumsumexp is a
log-step (Hillis-Steele) scan of logaddexp: O(numel x log n), within float32 rounding of torch's
sequential sum. Bad input gets torch's exception types.
"""
import builtins as _builtins
import itertools as _itertools
import numbers as _numbers
import warnings as _warnings

from . import _C

Tensor = _C.Tensor


def _int64():
    from . import int64
    return int64


def _bool():
    from . import bool as bool_
    return bool_


def _wrap(dim, n):
    m = _builtins.max(n, 1)
    if not isinstance(dim, _numbers.Integral) or isinstance(dim, bool):
        raise TypeError("dim must be an int, not {}".format(type(dim).__name__))
    if not -m <= dim < m:
        raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but "
                         "got {})".format(-m, m - 1, dim))
    return dim % m


def _need_tensor(fn, *ts):
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError("{}(): argument must be Tensor, not {}".format(
                fn, type(t).__name__))


# ---- shapes -----------------------------------------------------------------------------------

def broadcast_tensors(*tensors):
    """torch.broadcast_tensors: each tensor broadcast (expanded, not copied) to the common
    shape."""
    from . import broadcast_shapes
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    _need_tensor("broadcast_tensors", *tensors)
    shape = tuple(broadcast_shapes(*[tuple(t.shape) for t in tensors]))
    return tuple(t if tuple(t.shape) == shape else t.broadcast_to(shape) for t in tensors)


def cartesian_prod(*tensors):
    """torch.cartesian_prod: the rows of all combinations of the 1-D inputs (itertools.product
    order); one input comes back as it is."""
    from . import meshgrid
    _need_tensor("cartesian_prod", *tensors)
    for t in tensors:
        if t.dim() != 1:
            raise RuntimeError("Expect a 1D vector, but got shape {}".format(list(t.shape)))
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return _C.stack([g.reshape(-1) for g in grids], 1)


def combinations(input, r=2, with_replacement=False):
    """torch.combinations: the rows of the length-r combinations of the 1-D input's elements
    (itertools.combinations order, with_replacement for combinations_with_replacement)."""
    _need_tensor("combinations", input)
    if input.dim() != 1:
        raise RuntimeError("Expect a 1D vector, but got shape {}".format(list(input.shape)))
    if r < 0:
        raise RuntimeError("Expect a non-negative number, but got {}".format(r))
    if r == 0:
        return _C.zeros(0, dtype=input.dtype)
    pick = _itertools.combinations_with_replacement if with_replacement \
        else _itertools.combinations
    rows = list(pick(range(input.shape[0]), r))
    if not rows:
        return _C.zeros((0, r), dtype=input.dtype)
    idx = _C.tensor([i for row in rows for i in row])
    return input.index_select(0, idx).reshape(len(rows), r)


def diagflat(input, offset=0):
    """torch.diagflat: the flattened input on the offset diagonal of a square matrix."""
    _need_tensor("diagflat", input)
    return input.reshape(-1).diag(offset)


def ravel(input):
    """torch.ravel: the elements as one dim (a view where they are contiguous)."""
    _need_tensor("ravel", input)
    return input.reshape(-1)


def select(input, dim, index):
    return input.select(dim, index)


def _split_by(fn, input, sections, dim, need):
    _need_tensor(fn, input)
    if input.dim() < need:
        raise RuntimeError("torch.{} requires a tensor with at least {} dimension, but got a "
                           "tensor with {} dimensions!".format(fn, need, input.dim()))
    if isinstance(sections, _numbers.Integral):
        size = input.shape[dim]
        if sections == 0 or size % sections != 0:
            raise RuntimeError("torch.{} attempted to split along dimension {}, but the size of "
                               "the dimension {} is not divisible by the split_size {}!".format(
                                   fn, dim, size, sections))
        return input.tensor_split(sections, dim)
    return input.tensor_split(list(sections), dim)


def hsplit(input, indices_or_sections):
    """torch.hsplit: tensor_split along dim 1 (dim 0 for 1-D input); an int must divide it."""
    _need_tensor("hsplit", input)
    return _split_by("hsplit", input, indices_or_sections, 1 if input.dim() > 1 else 0, 1)


def vsplit(input, indices_or_sections):
    """torch.vsplit: tensor_split along dim 0 of an at least 2-D input."""
    return _split_by("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input, indices_or_sections):
    """torch.dsplit: tensor_split along dim 2 of an at least 3-D input."""
    return _split_by("dsplit", input, indices_or_sections, 2, 3)


def dstack(tensors):
    """torch.dstack: the inputs made at least 3-D and concatenated along dim 2."""
    from . import atleast_3d
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError("dstack(): argument 'tensors' (position 1) must be tuple of Tensors, "
                        "not {}".format(type(tensors).__name__))
    if not tensors:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return _C.cat([atleast_3d(t) for t in tensors], 2)


def take_along_dim(input, indices, dim=None):
    """torch.take_along_dim: gather along dim after broadcasting input and indices in the other
    dims; without dim, the flattened input indexed by the flattened indices."""
    _need_tensor("take_along_dim", input, indices)
    if indices.dtype != _int64():
        raise RuntimeError("torch.take_along_dim(): dtype of indices should be Long but got "
                           "{}".format(indices.dtype))
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    from . import broadcast_shapes
    if input.dim() != indices.dim():
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same "
                           "number of dimensions, but got {} dimensions for input, and {} "
                           "dimensions for indices".format(input.dim(), indices.dim()))
    if input.dim() == 0:
        raise IndexError("Dimension specified as {} but tensor has no dimensions".format(dim))
    d = _wrap(dim, input.dim())
    s = list(input.shape)
    s[d] = indices.shape[d]
    ishape = tuple(broadcast_shapes(tuple(s), tuple(indices.shape)))
    s = list(indices.shape)
    s[d] = input.shape[d]
    xshape = tuple(broadcast_shapes(tuple(s), tuple(input.shape)))
    x = input if tuple(input.shape) == xshape else input.broadcast_to(xshape)
    i = indices if tuple(indices.shape) == ishape else indices.broadcast_to(ishape)
    return x.gather(d, i)


# ---- products ---------------------------------------------------------------------------------

def tensordot(a, b, dims=2, out=None):
    """torch.tensordot: dims an int (the last dims of a with the first of b) or a pair of lists
    of dims; one mm over the permuted, reshaped operands."""
    _need_tensor("tensordot", a, b)
    if out is not None:
        raise NotImplementedError("attn.tensordot: out= is not supported by attn")
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, _numbers.Integral):
        if dims < 0:
            raise RuntimeError("tensordot expects dims >= 0, but got dims={}".format(dims))
        if dims > a.dim() or dims > b.dim():
            raise RuntimeError("tensordot expects dims < ndim_a or ndim_b, but got dims={}"
                               .format(dims))
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        if len(dims) != 2:
            raise RuntimeError("tensordot expects dims to be an int or a pair of lists")
        da, db = dims
        da = [da] if isinstance(da, _numbers.Integral) else list(da)
        db = [db] if isinstance(db, _numbers.Integral) else list(db)
        if len(da) != len(db):
            raise RuntimeError("both dimension lists should have same length")
        da, db = [_wrap(x, a.dim()) for x in da], [_wrap(x, b.dim()) for x in db]
    k = 1
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError("contracted dimensions need to match, but first has size {} in "
                               "dim {} and second has size {} in dim {}".format(
                                   a.shape[x], x, b.shape[y], y))
        k *= a.shape[x]
    fa = [i for i in range(a.dim()) if i not in da]
    fb = [i for i in range(b.dim()) if i not in db]
    sa, sb = [a.shape[i] for i in fa], [b.shape[i] for i in fb]
    ma, nb = 1, 1
    for s in sa:
        ma *= s
    for s in sb:
        nb *= s
    pa = a.permute(*(fa + da)) if a.dim() else a
    pb = b.permute(*(db + fb)) if b.dim() else b
    return pa.reshape(ma, k).mm(pb.reshape(k, nb)).reshape(tuple(sa + sb))


def inner(input, other):
    """torch.inner: the sum over the last dims (a plain product where either is 0-d)."""
    _need_tensor("inner", input, other)
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError("inner() the last dimension must match on both input tensors but got "
                           "shapes {} and {}".format(list(input.shape), list(other.shape)))
    return tensordot(input, other, ([-1], [-1]))


def mv(input, vec):
    """torch.mv: matrix (n x m) times vector (m)."""
    _need_tensor("mv", input, vec)
    if input.dim() != 2 or vec.dim() != 1:
        raise RuntimeError("vector + matrix @ vector expected, got 1, {}, {}".format(
            input.dim(), vec.dim()))
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError("size mismatch, got {}, {}x{},{}".format(
            input.shape[0], input.shape[0], input.shape[1], vec.shape[0]))
    if input.dtype != vec.dtype:
        raise RuntimeError("expected scalar type {} but found {}".format(input.dtype, vec.dtype))
    return _C.matmul(input, vec)


def vdot(input, other):
    """torch.vdot for real 1-D tensors of one dtype: their dot product."""
    _need_tensor("vdot", input, other)
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError("1D tensors expected, but got {}D and {}D tensors".format(
            input.dim(), other.dim()))
    if input.dtype != other.dtype:
        raise RuntimeError("vdot : expected both vectors to have same dtype, but found {} and {}"
                           .format(input.dtype, other.dtype))
    if input.shape[0] != other.shape[0]:
        raise RuntimeError("inconsistent tensor size, expected tensor [{}] and src [{}] to have "
                           "the same number of elements, but got {} and {} elements "
                           "respectively".format(input.shape[0], other.shape[0],
                                                 input.shape[0], other.shape[0]))
    return _C.dot(input, other)


def vander(x, N=None, increasing=False):
    """torch.vander: columns x**0 .. x**(N-1) (decreasing unless increasing), built with cumprod
    as torch does, so the same float products."""
    _need_tensor("vander", x)
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    dt = x.dtype if x.is_floating_point() else _int64()
    xx = x.to(dt)
    if n == 0:
        return _C.zeros((x.shape[0], 0), dtype=dt)
    ones = _C.ones((x.shape[0], 1), dtype=dt)
    if n == 1:
        res = ones
    else:
        res = _C.cat([ones, xx.unsqueeze(1).expand(x.shape[0], n - 1).cumprod(1)], 1)
    return res if increasing else res.flip(1)


# ---- statistics -------------------------------------------------------------------------------

def _cov_weights(name, weights, nobs, integral):
    """cov's fweights (integral) or aweights (floating) checked as torch checks them."""
    _need_tensor("cov", weights)
    if weights.dim() > 1:
        raise RuntimeError("cov(): expected {0} to have one or fewer dimensions but got {0} with "
                           "{1} dimensions".format(name, weights.dim()))
    if integral and (weights.is_floating_point() or weights.dtype == _bool()):
        raise RuntimeError("cov(): expected {0} to have integral dtype but got {0} with {1} "
                           "dtype".format(name, weights.dtype))
    if not integral and not weights.is_floating_point():
        raise RuntimeError("cov(): expected {0} to have floating point dtype but got {0} with "
                           "{1} dtype".format(name, weights.dtype))
    if weights.numel() != nobs:
        raise RuntimeError("cov(): expected {} to have the same numel as there are observations "
                           "in the input but got {} != {}".format(name, weights.numel(), nobs))
    if nobs and weights.min().item() < 0:
        raise RuntimeError("cov(): {} cannot be negative".format(name))
    return weights


def cov(input, *, correction=1, fweights=None, aweights=None):
    """torch.cov: the covariance of the rows (variables) over the columns (observations), with
    torch's formula (weighted mean, mm of the centred data, true division by the
    normalisation)."""
    _need_tensor("cov", input)
    if input.dim() > 2:
        raise RuntimeError("cov(): expected input to have two or fewer dimensions but got an "
                           "input with {} dimensions".format(input.dim()))
    if input.dtype == _bool():
        raise RuntimeError("cov(): bool dtype is not supported for input")
    x = input.reshape(1, -1) if input.dim() < 2 else input
    nobs = x.shape[1]
    w = None
    if fweights is not None:
        w = _cov_weights("fweights", fweights, nobs, integral=True)
    if aweights is not None:
        a = _cov_weights("aweights", aweights, nobs, integral=False)
        w = a if w is None else w * a
    if w is not None:
        w = w.reshape(-1)
        w_sum = w.sum()
        if w_sum.item() == 0:
            raise RuntimeError("cov(): weights sum to zero, can't be normalized")
        avg = (x * w).sum(1) / w_sum
        if correction != 0:
            if aweights is not None:
                norm = w_sum - correction * (w * aweights.reshape(-1)).sum() / w_sum
            else:
                norm = w_sum - correction
        else:
            norm = w_sum
        if norm.item() <= 0:
            _warnings.warn("cov(): degrees of freedom is <= 0")
            norm = norm * 0
    else:
        avg = x.sum(1) / nobs if nobs else x.sum(1) / 0.0
        norm = nobs - correction
        if norm <= 0:
            _warnings.warn("cov(): degrees of freedom is <= 0")
            norm = 0
    xc = x - avg.unsqueeze(1)
    c = xc.mm((xc * w if w is not None else xc).t())
    if isinstance(norm, Tensor):
        c = c / norm
    else:
        c = c / float(norm)
    return c.squeeze()


def corrcoef(input):
    """torch.corrcoef: cov divided by the outer product of the standard deviations (row and
    column one after the other, as torch), clipped to [-1, 1]."""
    _need_tensor("corrcoef", input)
    if input.dim() > 2:
        raise RuntimeError("corrcoef(): expected input to have two or fewer dimensions but got an "
                           "input with {} dimensions".format(input.dim()))
    c = cov(input)
    if c.dim() == 0:
        return c / c
    sd = c.diagonal().sqrt()
    c = c / sd.reshape(-1, 1)
    c = c / sd.reshape(1, -1)
    return c.clip(-1, 1)


def dist(input, other, p=2):
    """torch.dist: the p-norm of input - other (broadcast), through attn.norm."""
    from . import norm
    _need_tensor("dist", input, other)
    return norm(input - other, p)


def argwhere(input):
    """torch.argwhere: the (n, ndim) indices of the nonzero elements, as torch.nonzero."""
    from . import nonzero
    _need_tensor("argwhere", input)
    return nonzero(input)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """torch.isin: whether each element occurs in test_elements (either may be a scalar, not
    both). One sort of both together, then a per-group count of test elements."""
    e_scalar, t_scalar = not isinstance(elements, Tensor), not isinstance(test_elements, Tensor)
    if e_scalar and t_scalar:
        raise TypeError("isin() received an invalid combination of arguments - got (Scalar, "
                        "Scalar), but expected a Tensor for elements or test_elements")
    if e_scalar:
        elements = _C.tensor(elements)
    if t_scalar:
        test_elements = _C.tensor(test_elements)
    dt = _common_dtype(elements, test_elements)
    e = elements.reshape(-1).to(dt)
    t = test_elements.reshape(-1).to(dt)
    n = e.numel()
    bool_ = _bool()
    if n == 0 or t.numel() == 0:
        res = _C.full(tuple(elements.shape), bool(invert), dtype=bool_)
        return res
    allv = _C.cat([e, t])
    order = _C.argsort(allv)
    vals = allv.gather(0, order)
    change = _C.cat([_C.ones(1, dtype=bool_), vals[1:] != vals[:-1]])
    group = change.long().cumsum(0) - 1
    ngroups = int(group[-1].item()) + 1
    is_test = (order >= n).long()
    cnt = _C.zeros(ngroups, dtype=_int64()).scatter_add(0, group, is_test)
    hit_sorted = cnt.index_select(0, group) > 0
    hit = _C.zeros(allv.numel(), dtype=bool_).scatter(0, order, hit_sorted)[:n]
    hit = hit.reshape(tuple(elements.shape))
    return hit.logical_not() if invert else hit


def _common_dtype(a, b):
    if a.is_floating_point():
        return a.dtype
    return b.dtype if b.is_floating_point() else a.dtype


def msort(input):
    """torch.msort: the input sorted along dim 0."""
    _need_tensor("msort", input)
    if input.dim() == 0:
        return input.clone()
    return input.sort(0)[0]


def _stable_sort(x, d):
    idx = _C.argsort(x, dim=d, stable=True)
    return x.gather(d, idx), idx


def nanmedian(input, dim=None, keepdim=False):
    """torch.nanmedian: the lower median of the non-nan values (nan where all are nan); with dim
    a (values, indices) pair, the index that of the median position in a stable sort."""
    from . import no_grad, return_types
    _need_tensor("nanmedian", input)
    if dim is None:
        flat = input.reshape(-1)
        k = int(flat.isnan().logical_not().long().sum().item())
        if k == 0:
            return _C.full((), float("nan"), dtype=input.dtype)
        with no_grad():
            _, idx = _stable_sort(flat.detach(), 0)
        return flat.gather(0, idx[(k - 1) // 2:(k - 1) // 2 + 1]).reshape(())
    d = _wrap(dim, input.dim())
    if input.dim() == 0:
        return return_types.nanmedian(input.clone(), _C.zeros((), dtype=_int64()))
    if input.shape[d] == 0:
        raise IndexError("median(): Expected reduction dim {} to have non-zero size.".format(d))
    with no_grad():
        x = input.detach()
        _, idx = _stable_sort(x, d)
        cnt = x.isnan().logical_not().long().sum(d, keepdim=True)
        pick = ((cnt - 1).clamp(min=0) // 2)
        indices = idx.gather(d, pick)
    values = input.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return return_types.nanmedian(values, indices)


def mode(input, dim=-1, keepdim=False):
    """torch.mode: the most frequent value along dim (the smallest of equally frequent ones) and
    an index of it (the highest, torch's CPU choice for rows of up to 16 elements)."""
    from . import no_grad, return_types
    _need_tensor("mode", input)
    d = _wrap(dim, input.dim())
    if input.dim() == 0:
        return return_types.mode(input.clone(), _C.zeros((), dtype=_int64()))
    n = input.shape[d]
    if n == 0:
        raise IndexError("mode(): Expected reduction dim {} to have non-zero size.".format(d))
    if input.numel() == 0:
        shape = list(input.shape)
        shape[d] = 1
        v = _C.zeros(tuple(shape), dtype=input.dtype)
        i = _C.zeros(tuple(shape), dtype=_int64())
        if not keepdim:
            v, i = v.squeeze(d), i.squeeze(d)
        return return_types.mode(v, i)
    from . import cummax
    with no_grad():
        x = input.detach().movedim(d, -1)
        shape = tuple(x.shape)
        x = x.reshape(-1, n)
        vals, idx = _stable_sort(x, 1)
        bool_ = _bool()
        rows = x.shape[0]
        change = _C.cat([_C.ones((rows, 1), dtype=bool_), vals[:, 1:] != vals[:, :-1]], 1)
        end = _C.cat([vals[:, 1:] != vals[:, :-1], _C.ones((rows, 1), dtype=bool_)], 1)
        pos = _C.arange(n).unsqueeze(0).expand(rows, n)
        start = cummax(_C.where(change, pos, _C.zeros_like(pos)), 1)[0]
        freq = _C.where(end, pos - start + 1, _C.zeros_like(pos))
        best = freq.argmax(1, keepdim=True)
        indices = idx.gather(1, best).reshape(shape[:-1] + (1,)).movedim(-1, d)
    values = input.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return return_types.mode(values, indices)


def logcumsumexp(input, dim):
    """torch.logcumsumexp: log(cumsum(exp(input))) along dim without overflow, as a log-step
    scan of logaddexp."""
    from . import logaddexp
    _need_tensor("logcumsumexp", input)
    d = _wrap(dim, input.dim())
    if not input.is_floating_point():
        raise RuntimeError("\"logcumsumexp_out_cpu\" not implemented for '{}'".format(
            str(input.dtype).split(".")[-1].capitalize()))
    if input.dim() == 0:
        return input.clone()
    n = input.shape[d]
    out = input
    s = 1
    while s < n:
        pad_shape = list(input.shape)
        pad_shape[d] = s
        pad = _C.full(tuple(pad_shape), float("-inf"), dtype=input.dtype)
        shifted = _C.cat([pad, out.narrow(d, 0, n - s)], d)
        out = logaddexp(out, shifted)
        s *= 2
    return out if out is not input else input.clone()


# ---- install ----------------------------------------------------------------------------------

_FUNCTIONS = ("broadcast_tensors", "cartesian_prod", "combinations", "cov", "corrcoef",
              "diagflat", "dist", "dsplit", "hsplit", "vsplit", "dstack", "inner", "mv", "ravel",
              "select", "take_along_dim", "tensordot", "vander", "vdot", "argwhere", "isin",
              "msort", "nanmedian", "mode", "logcumsumexp")

_METHODS = ("cov", "corrcoef", "diagflat", "dist", "dsplit", "hsplit", "vsplit", "inner", "mv",
            "ravel", "take_along_dim", "vdot", "argwhere", "msort", "nanmedian", "mode",
            "logcumsumexp")


def _return_types():
    from . import return_types as rt
    for kind in ("mode", "nanmedian"):
        if not hasattr(rt, kind):
            setattr(rt, kind, type(kind, (rt._ValuesIndices,), {"_name": kind,
                                                               "__module__": rt.__name__}))


def install(module):
    """Puts the functions above into `module` (attn), the return types into attn.return_types
    and the methods onto Tensor."""
    _return_types()
    for name in _FUNCTIONS:
        if name not in vars(module):
            setattr(module, name, globals()[name])
    for name in _METHODS:
        if not any(name in vars(k) for k in Tensor.__mro__ if k is not object):
            setattr(Tensor, name, globals()[name])
