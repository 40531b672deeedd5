"""attn's broadcast_tensors, cartesian_prod, combinations, cov, corrcoef, diagflat, dist,
dsplit / hsplit / vsplit, dstack, inner, mv, ravel, select, take_along_dim, tensordot, vander,
vdot, argwhere, isin, msort, nanmedian, mode and logcumsumexp
(python/attn/_composite_shape.py) against torch 1.13: the same program on both; integer and index
results and results of the same float ops compared exactly, the others (matrix products, norms,
logcumsumexp's scan order) to float32 tolerance; gradients likewise."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

RS = np.random.RandomState(0)
A = RS.standard_normal((3, 4, 5)).astype(np.float32)
B = RS.standard_normal((4, 5, 6)).astype(np.float32)
V = RS.standard_normal(5).astype(np.float32)
W = RS.standard_normal(5).astype(np.float32)
INT = RS.randint(0, 5, (4, 9))
TIES = RS.randint(0, 4, (6, 13)).astype(np.float32)
BIG = RS.randint(0, 3, (5, 40)).astype(np.float32)
G = RS.standard_normal((3, 6)).astype(np.float32)


def tol(a, t, where, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(t, dtype=np.float64),
                               rtol=rtol, atol=atol, err_msg=where)


def pair(M, x):
    return M.tensor(x)


def shape_program(M):
    out = []
    a = M.tensor(A)
    b1, b2 = M.broadcast_tensors(M.ones(3, 1), M.zeros(4))
    out += [tuple(b1.shape), tuple(b2.shape), b1.tolist(), b2.tolist()]
    out += [[tuple(t.shape) for t in M.broadcast_tensors(M.ones(()), M.ones(2, 0))]]
    out += [M.cartesian_prod(M.tensor([1, 2]), M.tensor([3, 4, 5])).tolist(),
            M.cartesian_prod(M.tensor([1, 2]), M.tensor([3]), M.tensor([7, 8])).tolist(),
            M.cartesian_prod(M.tensor([4, 5])).tolist(),
            tuple(M.cartesian_prod(M.tensor([1, 2]), M.zeros(0, dtype=M.int64)).shape)]
    c = M.tensor([1, 2, 3, 4])
    out += [M.combinations(c).tolist(), M.combinations(c, 3).tolist(),
            M.combinations(c, 2, with_replacement=True).tolist(),
            M.combinations(c, r=1).tolist(), tuple(M.combinations(c, 5).shape),
            tuple(M.combinations(c, 0).shape), tuple(M.combinations(M.zeros(0), 2).shape)]
    out += [M.diagflat(M.tensor([[1, 2], [3, 4]])).tolist(),
            M.diagflat(M.tensor([1., 2.]), 1).tolist(), M.tensor([1, 2]).diagflat(-1).tolist(),
            M.diagflat(M.tensor(5)).tolist(), tuple(M.diagflat(M.zeros(0)).shape)]
    out += [a.ravel().tolist(), tuple(M.ravel(M.tensor(3.)).shape),
            M.ravel(a.transpose(0, 2)).tolist()]
    out += [M.select(a, 1, -1).tolist(), M.select(a, -1, 2).tolist()]
    x = M.arange(48).reshape(2, 4, 6)
    out += [[t.tolist() for t in M.hsplit(x, 2)], [t.tolist() for t in M.hsplit(x, [1, 3])],
            [t.tolist() for t in M.vsplit(x, 2)], [t.tolist() for t in x.dsplit(3)],
            [t.tolist() for t in x.dsplit([2, 5])],
            [t.tolist() for t in M.hsplit(M.arange(6), 3)],
            [t.tolist() for t in x.vsplit([1])], [t.tolist() for t in x.hsplit([-1])]]
    out += [M.dstack([M.tensor([1, 2]), M.tensor([3, 4])]).tolist(),
            M.dstack((M.ones(2, 3), M.zeros(2, 3))).tolist(),
            tuple(M.dstack([M.tensor(1.), M.tensor(2.)]).shape),
            M.dstack([x, x[:, :, :2]]).tolist()]
    ii = M.tensor(RS_take)
    out += [M.take_along_dim(a, ii, 2).tolist(), a.take_along_dim(ii[:1], dim=-1).tolist(),
            M.take_along_dim(a, M.tensor([0, 59, 7])).tolist(),
            M.take_along_dim(a, a.argsort(1), 1).tolist(),
            M.take_along_dim(a, M.zeros((3, 1, 1), dtype=M.int64), 1).tolist(),
            M.take_along_dim(M.tensor(3.), M.tensor(0)).tolist()]
    out += [M.argwhere(M.tensor([[0, 1, 0], [2, 0, 3]])).tolist(),
            M.tensor([0., 1., 0.]).argwhere().tolist(), tuple(M.argwhere(M.tensor(2.)).shape),
            tuple(M.argwhere(M.tensor(0.)).shape), tuple(M.argwhere(M.zeros(2, 0, 3)).shape)]
    out += [M.msort(M.tensor(INT)).tolist(), M.tensor(A[0]).msort().tolist(),
            M.msort(M.tensor(2.5)).tolist()]
    return out


RS_take = np.random.RandomState(1).randint(0, 5, (3, 4, 2))


def exact(a, t):
    assert len(a) == len(t)
    for i, (x, y) in enumerate(zip(a, t)):
        assert x == y or repr(x) == repr(y), "item %d: %r != %r" % (i, x, y)


def test_shape_ops_same_as_torch():
    exact(shape_program(attn), shape_program(torch))


def integer_program(M):
    out = []
    e, t = M.tensor(INT), M.tensor([4, 1, 7])
    out += [M.isin(e, t).tolist(), M.isin(e, t, invert=True).tolist(),
            M.isin(e, 3).tolist(), M.isin(2, t).tolist(), M.isin(M.tensor(3), t).tolist(),
            M.isin(M.tensor([1., float("nan"), 2.5, -0.0]),
                   M.tensor([0., 2.5, float("nan")])).tolist(),
            M.isin(M.tensor([1, 2, 3]), M.tensor([2.0, 3.5])).tolist(),
            M.isin(M.zeros(0, dtype=M.int64), t).tolist(), M.isin(e[0], t[:0]).tolist(),
            M.isin(e[0], t[:0], invert=True).tolist(),
            M.isin(M.tensor([5, 1, 3]), M.tensor([3, 5]), assume_unique=True).tolist(),
            M.isin(M.arange(40) % 7, M.arange(30) * 2).tolist()]
    out += [M.vander(M.tensor([1, 2, 3, 5])).tolist(),
            M.vander(M.tensor([1, 2, 3]), N=5, increasing=True).tolist(),
            M.vander(M.tensor([1., 2., 3.]), 2).tolist(), tuple(M.vander(M.tensor([1, 2]),
                                                                         0).shape),
            M.vander(M.tensor([0.5, -1.5, 2.25])).tolist(), tuple(M.vander(M.zeros(0)).shape)]
    i = M.tensor(INT)
    out += [M.tensordot(i, i.t(), 1).tolist(), M.inner(i, i).tolist(),
            M.mv(i, M.arange(9)).tolist(), M.vdot(M.arange(5), M.arange(5)).tolist(),
            M.inner(M.tensor(3), i[0]).tolist(), M.tensordot(i, i, 0).shape == (4, 9, 4, 9)]
    return out


def test_integer_and_exact_results_same_as_torch():
    exact(integer_program(attn), integer_program(torch))


def order_program(M):
    out = []
    for data in (TIES, BIG):
        x = M.tensor(data)
        for d in (0, 1, -1):
            r = M.mode(x, d)
            out += [r.values.tolist(), tuple(r.indices.shape)]
            if data is TIES or d == 0:
                out += [r.indices.tolist()]
            out += [M.gather(x, d % 2, r.indices.unsqueeze(d % 2)).squeeze(d % 2).tolist()]
    x = M.tensor(TIES)
    r = x.mode(1, keepdim=True)
    out += [r[0].tolist(), r[1].tolist(), type(r).__name__]
    out += [M.mode(M.tensor(INT)).values.tolist(), M.mode(M.tensor(INT)).indices.tolist(),
            [v.tolist() for v in M.mode(M.tensor(7.))], [v.tolist() for v in
                                                        M.mode(M.tensor([True, False, True]))],
            [tuple(v.shape) for v in M.mode(M.zeros(0, 3), 1)]]
    nan = float("nan")
    y = M.tensor([[1., nan, 3., 2., nan], [nan, nan, nan, nan, nan], [2., 2., 1., 1., 0.],
                  [5., nan, 1., nan, 1.]])
    out += [M.nanmedian(y).tolist(), y[0].nanmedian().tolist(), M.nanmedian(y[1]).tolist(),
            M.nanmedian(M.tensor(INT)).tolist(), M.nanmedian(M.zeros(0)).tolist()]
    for d in (0, 1, -1):
        r = M.nanmedian(y, d)
        keep = r.indices.tolist() if d == 0 else [r.indices.tolist()[k] for k in (0, 2, 3)]
        out += [r.values.tolist(), keep, type(r).__name__]  # all-nan row: index not matched
    r = y.nanmedian(1, keepdim=True)
    out += [r.values.tolist(), r.indices[2:].tolist()]
    for d in (0, 1):
        r = M.tensor(TIES).nanmedian(d)
        out += [r.values.tolist(), r.indices.tolist()]
    r = M.nanmedian(M.tensor(3.), 0)
    out += [r.values.tolist(), r.indices.tolist(),
            [tuple(v.shape) for v in M.nanmedian(M.zeros(0, 3), 1)]]
    return out


def test_mode_and_nanmedian_same_as_torch():
    """Indices of mode are compared on rows of up to 16 elements (torch's CPU std::sort is
    insertion sort there, stable); on longer rows only what they point at."""
    exact(order_program(attn), order_program(torch))


def float_program(M):
    out = []
    a, b = M.tensor(A), M.tensor(B)
    v, w = M.tensor(V), M.tensor(W)
    out += [M.tensordot(a, b, 2), M.tensordot(a, b, ([1, 2], [0, 1])),
            M.tensordot(a, b, dims=([-2], [0])), M.tensordot(a, b, 0).reshape(-1)[:50],
            M.tensordot(v, w, 1), M.tensordot(a, b, ([2, 1], [1, 0]))]
    out += [M.inner(a, b[:, :, :5].transpose(0, 1)), M.inner(v, w), a.inner(v),
            M.inner(M.tensor(2.), a)]
    m = M.tensor(A[0])
    out += [M.mv(m, v), m.mv(v), M.vdot(v, w), v.vdot(w)]
    out += [M.cov(m), M.cov(v), m.cov(correction=0), M.cov(m, correction=2),
            M.cov(M.tensor(INT)), M.cov(m, fweights=M.tensor([1, 2, 0, 3, 1])),
            M.cov(m, aweights=M.tensor([0.5, 1.0, 2.0, 0.1, 1.5])),
            M.cov(m, correction=0, fweights=M.tensor([1, 2, 1, 3, 1]),
                  aweights=M.tensor([0.5, 1.0, 2.0, 0.1, 1.5])),
            M.cov(m, fweights=M.tensor([1, 2, 1, 3, 1]),
                  aweights=M.tensor([0.5, 1.0, 2.0, 0.1, 1.5])),
            M.cov(m.t())]
    out += [M.corrcoef(m), m.corrcoef(), M.corrcoef(v), M.corrcoef(M.tensor(INT))]
    out += [M.dist(v, w), M.dist(v, w, 1), M.dist(v, w, 0), M.dist(v, w, float("inf")),
            M.dist(v, w, 3.5), a.dist(v), M.dist(v, v)]
    out += [M.logcumsumexp(a, 1), a.logcumsumexp(-1), M.logcumsumexp(a, 0),
            M.logcumsumexp(M.tensor([-1000., 0., 1000., float("-inf"), 3.]), 0),
            M.logcumsumexp(M.tensor(2.5), 0), M.logcumsumexp(M.tensor([float("-inf")] * 3), 0),
            M.logcumsumexp(M.tensor(RS_long), 0)]
    return [x.tolist() for x in out]


RS_long = np.random.RandomState(2).standard_normal(37).astype(np.float32) * 20


def test_float_results_close_to_torch():
    got, want = float_program(attn), float_program(torch)
    assert len(got) == len(want)
    for i, (x, y) in enumerate(zip(got, want)):
        tol(x, y, "item %d" % i, rtol=3e-5, atol=3e-5)


def grad_program(M):
    out = []
    a = M.tensor(A, requires_grad=True)
    b = M.tensor(B, requires_grad=True)
    v = M.tensor(V, requires_grad=True)
    w = M.tensor(W, requires_grad=True)
    m = M.tensor(A[1], requires_grad=True)
    g = M.tensor(G)
    loss = (M.tensordot(a, b, 2) * g).sum() + M.inner(a, v).pow(2).sum() \
        + (M.mv(m, v) * M.arange(4).float()).sum() + M.vdot(v, w) * 3
    loss = loss + (M.cov(m) * M.tensor(np.arange(16, dtype=np.float32).reshape(4, 4))).sum()
    loss = loss + (M.corrcoef(m) * M.tensor(np.arange(16, dtype=np.float32).reshape(4, 4))).sum()
    loss = loss + M.dist(v, w) + M.dist(v, w, 1) * 0.5 + M.dist(m, v, 3)
    loss = loss + (M.logcumsumexp(a, 1) * M.tensor(np.linspace(-1, 1, 60, dtype=np.float32)
                                                   .reshape(3, 4, 5))).sum()
    idx = M.tensor(RS_take)
    loss = loss + (M.take_along_dim(a, idx, 2) ** 2).sum() + M.take_along_dim(a, idx[0, 0]).sum()
    parts = M.dsplit(b, [2, 3]) + M.hsplit(a, 2) + M.vsplit(m, [1])
    loss = loss + sum((p * (k + 1)).sum() for k, p in enumerate(parts))
    loss = loss + (M.dstack([a, a[:, :, :2] * 2]) ** 2).sum()
    loss = loss + (M.cov(m, aweights=M.tensor([0.5, 1.0, 2.0, 0.1, 1.5])) ** 2).sum()
    loss.backward()
    out += [a.grad, b.grad, v.grad, w.grad, m.grad]
    x = M.tensor(TIES, requires_grad=True)
    (M.mode(x, 1).values * M.arange(6).float()).sum().backward()
    out.append(x.grad)
    y = M.tensor(TIES, requires_grad=True)
    (M.nanmedian(y, 0).values * M.arange(13).float()).sum().backward()
    out.append(y.grad)
    return [t.tolist() for t in out]


def test_gradients_close_to_torch():
    got, want = grad_program(attn), grad_program(torch)
    for i, (x, y) in enumerate(zip(got, want)):
        tol(x, y, "grad %d" % i, rtol=1e-4, atol=1e-4)


def test_return_types_and_methods():
    r = attn.mode(attn.tensor([1, 1, 2]))
    assert type(r) is attn.return_types.mode and "torch.return_types.mode(" in repr(r)
    v, i = attn.tensor([[1., 2.]]).nanmedian(1)
    assert type(attn.tensor([[1., 2.]]).nanmedian(1)).__name__ == "nanmedian"
    assert v.tolist() == [1.0] and i.tolist() == [0]
    for name in ("cov", "corrcoef", "diagflat", "dist", "dsplit", "hsplit", "vsplit", "inner",
                 "mv", "ravel", "take_along_dim", "vdot", "argwhere", "msort",
                 "nanmedian", "mode", "logcumsumexp", "select"):
        assert hasattr(torch.Tensor, name) and hasattr(attn.Tensor, name), name
    for name in ("broadcast_tensors", "cartesian_prod", "combinations", "dstack", "tensordot",
                 "vander", "isin"):
        assert hasattr(attn, name) and not hasattr(torch.Tensor, name), name


def test_degrees_of_freedom_warning():
    for M in (torch, attn):
        with pytest.warns(UserWarning, match="degrees of freedom"):
            r = M.cov(M.tensor([1.0, 2.0]), correction=2)
        assert np.isinf(r.item()) or np.isnan(r.item())


ERRORS = [
    ("broadcast_tensors", lambda M: M.broadcast_tensors(M.ones(2, 3), M.ones(4)), RuntimeError),
    ("cartesian_prod 2-D", lambda M: M.cartesian_prod(M.ones(2, 2), M.ones(2)), RuntimeError),
    ("combinations 2-D", lambda M: M.combinations(M.ones(2, 2)), RuntimeError),
    ("combinations r<0", lambda M: M.combinations(M.ones(3), -1), RuntimeError),
    ("cov 3-D", lambda M: M.cov(M.ones(2, 2, 2)), RuntimeError),
    ("cov bool", lambda M: M.cov(M.ones(2, 2).bool()), RuntimeError),
    ("cov float fweights", lambda M: M.cov(M.ones(2, 3), fweights=M.ones(3)), RuntimeError),
    ("cov int aweights", lambda M: M.cov(M.ones(2, 3), aweights=M.tensor([1, 1, 1])),
     RuntimeError),
    ("cov fweights numel", lambda M: M.cov(M.ones(2, 3), fweights=M.tensor([1, 1])),
     RuntimeError),
    ("cov negative fweights", lambda M: M.cov(M.ones(2, 3), fweights=M.tensor([1, -1, 1])),
     RuntimeError),
    ("cov zero weights", lambda M: M.cov(M.ones(2, 3), fweights=M.tensor([0, 0, 0])),
     RuntimeError),
    ("corrcoef 3-D", lambda M: M.corrcoef(M.ones(2, 2, 2)), RuntimeError),
    ("hsplit 0-d", lambda M: M.hsplit(M.tensor(1.), 1), RuntimeError),
    ("hsplit uneven", lambda M: M.hsplit(M.ones(2, 5), 2), RuntimeError),
    ("vsplit 1-D", lambda M: M.vsplit(M.ones(4), 2), RuntimeError),
    ("dsplit 2-D", lambda M: M.dsplit(M.ones(4, 4), 2), RuntimeError),
    ("dsplit uneven", lambda M: M.dsplit(M.ones(1, 1, 5), 3), RuntimeError),
    ("dstack tensor", lambda M: M.dstack(M.ones(2)), TypeError),
    ("dstack empty", lambda M: M.dstack([]), RuntimeError),
    ("inner mismatch", lambda M: M.inner(M.ones(2, 3), M.ones(4)), RuntimeError),
    ("mv 1-D", lambda M: M.mv(M.ones(3), M.ones(3)), RuntimeError),
    ("mv size", lambda M: M.mv(M.ones(2, 3), M.ones(4)), RuntimeError),
    ("vdot 2-D", lambda M: M.vdot(M.ones(2, 2), M.ones(4)), RuntimeError),
    ("vdot dtype", lambda M: M.vdot(M.ones(2), M.tensor([1, 2])), RuntimeError),
    ("vdot size", lambda M: M.vdot(M.ones(2), M.ones(3)), RuntimeError),
    ("select dim", lambda M: M.select(M.ones(2, 2), 2, 0), IndexError),
    ("take_along_dim ndim", lambda M: M.take_along_dim(M.ones(2, 2), M.tensor([0]), 0),
     RuntimeError),
    ("take_along_dim float idx", lambda M: M.take_along_dim(M.ones(2), M.ones(1), 0),
     RuntimeError),
    ("take_along_dim dim", lambda M: M.take_along_dim(M.ones(2), M.tensor([0]), 1), IndexError),
    ("take_along_dim 0-d", lambda M: M.take_along_dim(M.tensor(3.), M.tensor(0), 0),
     IndexError),
    ("tensordot neg", lambda M: M.tensordot(M.ones(2), M.ones(2), -1), RuntimeError),
    ("tensordot mismatch", lambda M: M.tensordot(M.ones(2, 3), M.ones(2, 3), 1), RuntimeError),
    ("tensordot dims", lambda M: M.tensordot(M.ones(2, 3), M.ones(3), ([1], [0, 0])),
     RuntimeError),
    ("tensordot dim range", lambda M: M.tensordot(M.ones(2, 3), M.ones(3), ([2], [0])),
     IndexError),
    ("vander 2-D", lambda M: M.vander(M.ones(2, 2)), RuntimeError),
    ("vander N<0", lambda M: M.vander(M.ones(2), -1), RuntimeError),
    ("isin scalars", lambda M: M.isin(1, 2), TypeError),
    ("mode dim", lambda M: M.mode(M.ones(2, 2), 2), IndexError),
    ("mode empty dim", lambda M: M.mode(M.ones(2, 0), 1), IndexError),
    ("nanmedian dim", lambda M: M.nanmedian(M.ones(2, 2), -3), IndexError),
    ("nanmedian empty dim", lambda M: M.nanmedian(M.ones(2, 0), 1), IndexError),
    ("logcumsumexp dim", lambda M: M.logcumsumexp(M.ones(2, 2), 2), IndexError),
    ("logcumsumexp int", lambda M: M.logcumsumexp(M.tensor([1, 2]), 0), RuntimeError),
]


@pytest.mark.parametrize("name,fn,exc", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_as_torch(name, fn, exc):
    for M in (torch, attn):
        with pytest.raises(exc):
            fn(M)
