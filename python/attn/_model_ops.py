"""torch functions that today's model programs (Llama, Qwen, Gemma, Mixtral style) use, composed of
attn's ops: finfo, repeat_interleave, linspace, index_add, bincount, nonzero and the one-argument
where (mixture-of-experts routing) and einsum."""
import builtins

import numpy as np

from . import _C


class finfo:
    """torch.finfo(dtype): the machine limits of a floating dtype (float32 by default)."""

    # bits, eps, max, smallest normal (tiny), resolution (10^-digits)
    _LIMITS = {
        "float32": (32, 1.1920928955078125e-07, 3.4028234663852886e+38, 1.1754943508222875e-38,
                    1e-06),
        "bfloat16": (16, 0.0078125, 3.3895313892515355e+38, 1.1754943508222875e-38, 0.01),
        "float16": (16, 0.0009765625, 65504.0, 6.103515625e-05, 0.001),
        "float64": (64, 2.220446049250313e-16, 1.7976931348623157e+308, 2.2250738585072014e-308,
                    1e-15),
    }

    def __init__(self, type=None):  # noqa: A002  (torch's argument name)
        name = "float32" if type is None else str(type).replace("torch.", "")
        if name not in self._LIMITS:
            raise TypeError("finfo(): the dtype must be a floating point dtype, got {}".format(
                type))
        self.dtype = name
        self.bits, self.eps, self.max, self.tiny, self.resolution = self._LIMITS[name]
        self.min = -self.max
        self.smallest_normal = self.tiny

    def __repr__(self):
        return ("finfo(resolution={:g}, min={:g}, max={:g}, eps={:g}, smallest_normal={:g}, "
                "tiny={:g}, dtype={})".format(self.resolution, self.min, self.max, self.eps,
                                              self.smallest_normal, self.tiny, self.dtype))


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """torch.repeat_interleave: each element (or slice along dim) repeated; repeats an int or a
    1-D int64 tensor of one count per element; dim None flattens first. With input alone (an int64
    tensor of counts), the indices repeated by those counts. Differentiable (expand for one
    count for all, else index_select)."""
    if repeats is None:  # torch.repeat_interleave(repeats)
        counts = input
        return repeat_interleave(_C.arange(counts.numel()), counts, 0)
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else dim
    if x.dim() == 0:
        x, d = x.reshape(1), 0
    d = d + x.dim() if d < 0 else d
    if not 0 <= d < x.dim():
        raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but got "
                         "{})".format(-x.dim(), x.dim() - 1, dim))
    n = x.shape[d]
    if isinstance(repeats, _C.Tensor):
        if repeats.dtype != _C.dtype.int64:
            raise RuntimeError("repeat_interleave: repeats must be an int64 tensor, got {}".format(
                repeats.dtype))
        counts = repeats.reshape(-1).tolist()
        if len(counts) == 1:
            counts = counts * n
        elif len(counts) != n:
            raise RuntimeError("repeats must have the same size as input along dim, but got "
                               "repeats.size(0) = {} and input.size({}) = {}".format(
                                   len(counts), d, n))
    else:
        counts = [int(repeats)] * n
    if builtins.any(c < 0 for c in counts):
        raise RuntimeError("repeats can not be negative")
    total = builtins.sum(counts)
    if output_size is not None and int(output_size) != total:
        raise RuntimeError("repeat_interleave: output_size {} does not match the {} repeated "
                           "elements".format(output_size, total))
    if n > 0 and builtins.all(c == counts[0] for c in counts):
        # One count for all (grouped-query attention's keys): a broadcast copy, whose backward
        # sums over the copies, rather than a gather and a scatter-add.
        shape = list(x.shape)
        wide = x.unsqueeze(d + 1).expand(*(shape[:d + 1] + [counts[0]] + shape[d + 1:]))
        return wide.reshape(*(shape[:d] + [total] + shape[d + 1:]))
    index = np.repeat(np.arange(n, dtype=np.int64), counts)
    return x.index_select(d, _C.tensor(index.tolist(), dtype=_C.dtype.int64))


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """torch.linspace: steps values from start to end, in float32 as PyTorch's CPU kernel's scalar
    path computes them: step = (end - start) / (steps - 1) in float32, the first half
    start + i step, the second end - (steps - 1 - i) step. PyTorch's vectorised path restarts
    that sum every vector of elements, so its values differ from these in the last bit, by its
    vector width (a float32 ulp of the result's scale). Integer dtypes are refused: PyTorch's
    truncated values depend on that width."""
    if out is not None:
        raise ValueError("[linspace] out= is not supported")
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("linspace: number of steps must be non-negative")
    dt = _C.dtype.float32 if dtype is None else dtype
    if dt not in (_C.dtype.float32, _C.dtype.bfloat16, _C.dtype.float16):
        raise TypeError("linspace: dtype {} is not supported (float32, bfloat16, float16; an "
                        "integer linspace: compute in float32, then .long())".format(dt))
    ftype = np.float32
    s, e = ftype(start), ftype(end)
    i = np.arange(steps)
    if steps == 1:
        values = np.array([s], dtype=ftype)
    else:
        step = (e - s) / ftype(steps - 1)
        half = steps // 2
        values = np.where(i < half, s + step * i.astype(ftype),
                          e - step * (steps - 1 - i).astype(ftype)).astype(ftype)
    t = _C.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).clone()
    if dt != _C.dtype.float32:
        t = t.to(dt)
    if device is not None and str(device) != "cpu":
        t = t.to(device)
    return t.requires_grad_() if requires_grad else t


def _index_add_dim(input, dim, index, source):
    """index_add's checks, with torch's exceptions; the dim wrapped. The indices' range is checked
    in C++ (IndexError)."""
    d = dim + input.dim() if dim < 0 else dim
    if not 0 <= d < max(input.dim(), 1):
        raise IndexError("index_add(): dim {} is out of range for a tensor of {} dims".format(
            dim, input.dim()))
    if index.dim() > 1 or index.dtype != _C.dtype.int64:
        raise IndexError("index_add_(): Index is supposed to be a vector of int64")
    if source.dim() != input.dim() or source.shape[d] != index.numel() or builtins.any(
            source.shape[i] != input.shape[i] for i in range(input.dim()) if i != d):
        raise RuntimeError("index_add(): source {} does not fit input {} with {} indices along "
                           "dim {}".format(tuple(source.shape), tuple(input.shape), index.numel(),
                                           d))
    if source.dtype != input.dtype:
        raise RuntimeError("index_add_(): self ({}) and source ({}) must have the same scalar "
                           "type".format(input.dtype, source.dtype))
    return d


def index_add(input, dim, index, source, *, alpha=1):
    """torch.index_add: input with source's slices added at the positions of index along dim (in
    index order, as torch's CPU kernel), differentiable in input and source."""
    return _C._index_add(input, _index_add_dim(input, dim, index, source), index, source, alpha)


def index_add_(input, dim, index, source, *, alpha=1):
    """Tensor.index_add_: index_add in place."""
    return _C._index_add_(input, _index_add_dim(input, dim, index, source), index, source, alpha)


def bincount(input, weights=None, minlength=0):
    """torch.bincount: how often each value of a 1-D non-negative int64 tensor occurs (or the sum
    of its weights), max(input) + 1 or minlength bins."""
    if input.dim() != 1 or input.dtype != _C.dtype.int64 or (
            input.numel() and int(input.min().item()) < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and tuple(weights.shape) != tuple(input.shape):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    n = builtins.max(int(input.max().item()) + 1 if input.numel() else 0, int(minlength))
    if weights is None:
        return _C.zeros(n, dtype=_C.dtype.int64).scatter_add(0, input, _C.ones_like(input))
    return _C.zeros(n, dtype=weights.dtype).scatter_add(0, input, weights)


def _einsum_terms(equation, operands):
    """The letters of each operand and of the output, '...' expanded to private letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError("einsum(): {} operands for the {} terms of {!r}".format(
            len(operands), len(terms), equation))
    n_ell = 0
    for t, op in zip(terms, operands):
        if "..." in t:
            n_ell = builtins.max(n_ell, op.dim() - (len(t) - 3))
    ell = "".join(chr(0x3b1 + i) for i in range(n_ell))  # Greek letters: never in an equation

    def expand(t, ndim):
        if "..." not in t:
            return t
        k = ndim - (len(t) - 3)
        return t.replace("...", ell[n_ell - k:])
    out_terms = []
    for t, op in zip(terms, operands):
        letters = expand(t, op.dim())
        if len(letters) != op.dim() or not builtins.all(c.isalpha() for c in letters):
            raise ValueError("einsum(): term {!r} does not match operand of shape {}".format(
                t, tuple(op.shape)))
        if len(set(letters)) != len(letters):
            raise ValueError("einsum(): repeated subscripts within a term ({!r}, a diagonal) are "
                             "not supported".format(t))
        out_terms.append(letters)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit: the letters that appear once, in alphabetical order, after the ellipsis
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    return out_terms, out


def _einsum_pair(a, ta, b, tb, keep):
    """a (letters ta) times b (letters tb), summed over the shared letters not in keep: a matmul
    over (batch, left, contracted) x (batch, contracted, right)."""
    sizes = {}
    for t, x in ((ta, a), (tb, b)):
        for c, s in zip(t, x.shape):
            if sizes.get(c, 1) != 1 and s != 1 and s != sizes[c]:
                raise RuntimeError("einsum(): subscript {} has size {} and {}".format(
                    c, sizes[c], s))
            sizes[c] = builtins.max(sizes.get(c, 1), s)
    # A letter of one operand only that nothing later needs: summed there first.
    def drop_unneeded(x, t, other):
        gone = [i for i, c in enumerate(t) if c not in other and c not in keep]
        if not gone:
            return x, t
        return x.sum(gone), "".join(c for i, c in enumerate(t) if i not in gone)
    a, ta2 = drop_unneeded(a, ta, tb)
    b, tb = drop_unneeded(b, tb, ta)
    ta = ta2
    batch = [c for c in ta if c in tb and c in keep]
    contract = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]

    def arrange(x, t, order):
        x = x.permute([t.index(c) for c in order]) if order else x
        return x.expand(*[sizes[c] for c in order]) if order else x
    prod = lambda cs: int(np.prod([sizes[c] for c in cs])) if cs else 1  # noqa: E731
    A = arrange(a, ta, batch + left + contract).reshape(prod(batch), prod(left), prod(contract))
    B = arrange(b, tb, batch + contract + right).reshape(prod(batch), prod(contract), prod(right))
    r = _C.matmul(A, B).reshape([sizes[c] for c in batch + left + right])
    return r, "".join(batch + left + right)


def einsum(equation, *operands):
    """torch.einsum without diagonals: operands contracted left to right, each pair through one
    batched matmul (torch's own path without opt_einsum, so sums are in matmul's order), '...'
    broadcasting, implicit output."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _einsum_terms(equation, operands)
    x, tx = operands[0], terms[0]
    for i in range(1, len(operands)):
        later = set(out).union(*[set(t) for t in terms[i + 1:]])
        x, tx = _einsum_pair(x, tx, operands[i], terms[i], later)
    gone = [j for j, c in enumerate(tx) if c not in out]
    if gone:
        x = x.sum(gone)
        tx = "".join(c for c in tx if c in out)
    if sorted(tx) != sorted(out):
        raise ValueError("einsum(): output subscripts {!r} name letters that no operand has".format(
            out))
    return x.permute([tx.index(c) for c in out]) if out else x


def nonzero(input, *, out=None, as_tuple=False):
    """torch.nonzero: the indices of the non-zero elements in row-major order, (n, input.dim())
    int64, or with as_tuple one 1-D int64 tensor per dim."""
    if out is not None:
        raise ValueError("[nonzero] out= is not supported")
    table = _C._nonzero(input)
    if as_tuple:
        if input.dim() == 0:  # one tensor of its (0 or 1) positions
            return (_C.zeros(table.shape[0], dtype=_C.dtype.int64),)
        return tuple(table[:, j] for j in range(input.dim()))
    return table


def where(condition, input=None, other=None):
    """torch.where(condition, input, other), or torch.where(condition): nonzero(condition,
    as_tuple=True)."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("where() takes a condition alone, or a condition, input and other")
    if any(type(x) is _C.flex.Expr for x in (condition, input, other)):  # a traced modifier
        return _C.flex.where(condition, input, other)
    return _C.where(condition, input, other)
