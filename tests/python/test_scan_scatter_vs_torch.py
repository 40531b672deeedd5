"""attn's cummax / cummin and scatter_reduce(_) (python/attn/_composite_scan.py) against torch
1.13: the same program on both. Indices, integer results, amax / amin and cummax values are
compared exactly (nan where torch has nan); float sums, means and products to float32 rounding
(torch's kernel may add in another order). Gradients are compared where both run them, and the
exception types (and messages) for bad input are torch's."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:scatter_reduce")  # torch 1.13: "in beta"

REDUCES = ("sum", "prod", "mean", "amax", "amin")


def same(a, t, exact=True, where=""):
    """attn result a and torch result t: same shape, dtype kind and values (nan == nan)."""
    if isinstance(t, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(t), where
        for k, (x, y) in enumerate(zip(a, t)):
            same(x, y, exact, "%s[%d]" % (where, k))
        return
    assert tuple(a.shape) == tuple(t.shape), where
    assert str(a.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], where
    x, y = np.array(a.tolist()), np.array(t.tolist())
    if exact or y.dtype.kind != "f":
        np.testing.assert_array_equal(x, y, err_msg=where)
        if y.dtype.kind == "f":  # the sign of zeros too
            np.testing.assert_array_equal(np.signbit(x), np.signbit(y), err_msg=where)
    else:
        np.testing.assert_allclose(x, y, rtol=2e-6, atol=1e-6, err_msg=where)


def both(fn):
    return fn(attn), fn(torch)


# ---- cummax / cummin -------------------------------------------------------------------------

def scan_inputs(M):
    rs = np.random.RandomState(0)
    ties = rs.randint(-3, 4, (5, 7, 6)).astype(np.float32)  # many equal values
    xs = [M.tensor(ties), M.tensor(rs.standard_normal((3, 17)).astype(np.float32)),
          M.tensor(rs.randint(-5, 5, (4, 33))), M.tensor(rs.randint(0, 3, (100,))),
          M.tensor(rs.standard_normal((1, 9)).astype(np.float32)),
          M.tensor(rs.randint(0, 2, (3, 5)).astype(bool))]
    return xs


@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cum_values_indices_every_dim(op):
    for k, (xa, xt) in enumerate(zip(scan_inputs(attn), scan_inputs(torch))):
        for d in range(-xt.dim(), xt.dim()):
            ra, rt = getattr(attn, op)(xa, d), getattr(torch, op)(xt, d)
            same(tuple(ra), tuple(rt), where="%s input %d dim %d" % (op, k, d))
            same(tuple(getattr(xa, op)(dim=d)), tuple(rt), where="method")
            same((ra.values, ra.indices), (rt.values, rt.indices))


def test_cum_ties_pick_last_index_and_nan_propagates():
    nan = float("nan")
    rows = [[1.0, 3.0, 3.0, 2.0, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0], [1.0, nan, 3.0, nan, 2.0],
            [nan, 1.0, nan, nan, 0.5], [0.0, -0.0, 0.0, -0.0, 1.0], [-0.0, 0.0, -1.0, -0.0, 0.0],
            [float("inf"), nan, float("-inf"), 5.0, float("inf")]]
    for op in ("cummax", "cummin"):
        for r in rows:
            a, t = getattr(attn.tensor(r), op)(0), getattr(torch.tensor(r), op)(0)
            same(tuple(a), tuple(t), where="%s %s" % (op, r))
        a = getattr(attn, op)(attn.tensor(rows), 0)
        t = getattr(torch, op)(torch.tensor(rows), 0)
        same(tuple(a), tuple(t), where="%s over rows" % op)
    same(tuple(attn.tensor([5, 5, 7, 7, 1]).cummax(0)), tuple(torch.tensor([5, 5, 7, 7, 1])
                                                              .cummax(0)))
    assert attn.tensor([2, 2, 1]).cummax(0).indices.tolist() == [0, 1, 1]


def test_cum_long_dims_and_float16():
    rs = np.random.RandomState(3)
    x = rs.randint(0, 50, (2, 1000)).astype(np.float32)
    for op in ("cummax", "cummin"):
        same(tuple(getattr(attn.tensor(x), op)(1)), tuple(getattr(torch.tensor(x), op)(1)))
        # torch 1.13 has no cummax for float16 on the cpu: its float32 result, in float16
        v, i = getattr(torch.tensor(x), op)(-1)
        same(tuple(getattr(attn.tensor(x).to(attn.float16), op)(-1)), (v.half(), i))


def test_cum_zero_dim_and_empty():
    for op in ("cummax", "cummin"):
        for d in (0, -1, 3):  # torch 1.13 takes any dim for a 0-d tensor
            same(tuple(getattr(attn.tensor(2.5), op)(d)), tuple(getattr(torch.tensor(2.5), op)(d)))
        same(tuple(getattr(attn, op)(attn.tensor(4), 0)), tuple(getattr(torch, op)(
            torch.tensor(4), 0)))
        for shape, d in (((0,), 0), ((2, 0), 1), ((2, 0), 0), ((0, 3), -1), ((3, 0, 2), 2),
                         ((0,), 3), ((2, 0), -5)):
            same(tuple(getattr(attn.zeros(*shape), op)(d)),
                 tuple(getattr(torch.zeros(*shape), op)(d)), where=str((shape, d)))


def test_cum_return_types():
    for op in ("cummax", "cummin"):
        r = getattr(attn.tensor([1.0, 0.0]), op)(0)
        assert isinstance(r, tuple) and len(r) == 2
        assert repr(r).startswith("torch.return_types.%s(\nvalues=" % op)
        assert type(r) is getattr(attn.return_types, op)
        v, i = r
        assert v is r.values and i is r.indices
        assert str(i.dtype).endswith("int64") and not i.requires_grad


@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cum_gradients(op):
    rs = np.random.RandomState(5)
    x = rs.randint(-3, 4, (4, 9)).astype(np.float32)
    w = rs.standard_normal((4, 9)).astype(np.float32)
    for d in (0, 1, -1):
        grads = []
        for M in (attn, torch):
            xx = M.tensor(x, requires_grad=True)
            v = getattr(M, op)(xx * 2.0, d).values
            (v * M.tensor(w)).sum().backward()
            grads.append(xx.grad)
        same(grads[0], grads[1], exact=False, where="%s grad dim %d" % (op, d))
    for M in (attn, torch):  # 0-d and empty
        s = M.tensor(3.0, requires_grad=True)
        getattr(s, op)(0).values.backward()
        assert s.grad.item() == 1.0
        e = M.zeros(2, 0, requires_grad=True)
        assert tuple(getattr(e, op)(1).values.shape) == (2, 0)


def test_cum_errors_as_torch():
    for M in (torch, attn):
        x = M.ones(2, 3)
        for op in ("cummax", "cummin"):
            for d in (2, -3):
                with pytest.raises(IndexError, match="Dimension out of range"):
                    getattr(M, op)(x, d)
                with pytest.raises(IndexError, match=r"range of \[-2, 1\], but got"):
                    getattr(x, op)(d)
            # torch 1.13 checks no dim for an empty or 0-d tensor
            assert tuple(getattr(M.zeros(2, 0), op)(5).values.shape) == (2, 0)
            assert getattr(M.tensor(1.0), op)(-4).indices.item() == 0
            with pytest.raises(TypeError):
                getattr(x, op)(1.0)
            with pytest.raises(TypeError):
                getattr(M, op)(x)


# ---- scatter_reduce --------------------------------------------------------------------------

def scatter_cases(M):
    """(self, dim, index, src) cases: duplicates, several dims, src larger than index, ints."""
    rs = np.random.RandomState(1)
    f = np.float32
    cases = []
    self2 = rs.standard_normal((4, 6)).astype(f)
    src2 = rs.standard_normal((4, 6)).astype(f)
    cases.append((self2, 1, rs.randint(0, 6, (4, 6)), src2))
    cases.append((self2, 0, rs.randint(0, 4, (3, 6)), src2))
    cases.append((self2, -1, rs.randint(0, 2, (2, 5)), src2))  # src larger than index
    cases.append((self2, -2, rs.randint(0, 4, (4, 6)), src2))
    self3 = rs.standard_normal((3, 4, 5)).astype(f)
    src3 = rs.standard_normal((3, 5, 5)).astype(f)
    cases.append((self3, 1, rs.randint(0, 4, (3, 5, 5)), src3))
    cases.append((self3, 2, rs.randint(0, 5, (2, 4, 3)), src3))
    cases.append((self3, 0, rs.randint(0, 3, (3, 4, 5)), src3))
    selfi = rs.randint(-9, 10, (5, 4))
    srci = rs.randint(-9, 10, (7, 4))
    cases.append((selfi, 0, rs.randint(0, 5, (7, 4)), srci))
    cases.append((selfi, 1, rs.randint(0, 4, (5, 4)), srci))
    small = rs.randint(-2, 3, (6,)).astype(f)  # ties and zeros, one row
    cases.append((small, 0, np.array([0, 0, 1, 1, 1, 5, 0, 2, 2]),
                  rs.randint(-2, 3, (9,)).astype(f)))
    cases.append((small, 0, np.array([0, 3, 3, 3, 3, 3, 3, 3]), np.ones(8, f) * 1.5))
    cases.append((small, 0, np.zeros(0, np.int64), np.ones(3, f)))  # empty index
    return [(M.tensor(s), d, M.tensor(i.astype(np.int64)), M.tensor(r)) for s, d, i, r in cases]


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_values(reduce, include_self):
    exact = reduce in ("amax", "amin")
    for k, (ca, ct) in enumerate(zip(scatter_cases(attn), scatter_cases(torch))):
        where = "%s include_self=%s case %d" % (reduce, include_self, k)
        sa, d, ia, ra = ca
        st, _, it, rt = ct
        t = st.scatter_reduce(d, it, rt, reduce, include_self=include_self)
        same(sa.scatter_reduce(d, ia, ra, reduce, include_self=include_self), t, exact, where)
        same(attn.scatter_reduce(sa, d, ia, ra, reduce, include_self=include_self), t, exact,
             where + " function")
        same(attn.scatter_reduce(sa, d, ia, ra, reduce=reduce, include_self=include_self),
             t, exact, where)
        s2 = sa.clone()
        r = s2.scatter_reduce_(d, ia, ra, reduce, include_self=include_self)
        assert r is s2
        same(s2, t, exact, where + " in place")
    if include_self:
        same(attn.zeros(3).scatter_reduce(0, attn.tensor([1, 1]), attn.ones(2), reduce),
             torch.zeros(3).scatter_reduce(0, torch.tensor([1, 1]), torch.ones(2), reduce))


def test_scatter_reduce_many_duplicates():
    """More than 32 values into one position: attn's log-step path."""
    rs = np.random.RandomState(2)
    idx = np.concatenate([np.zeros(100, np.int64), rs.randint(0, 4, 50)])
    rs.shuffle(idx)
    vals = (1 + rs.standard_normal(150).astype(np.float32) * 0.01)
    ivals = rs.randint(-1, 2, 150)  # products of -1, 0, 1: exact in int64
    for reduce in REDUCES:
        for inc in (True, False):
            for v, base in ((vals, np.full(4, 0.5, np.float32)), (ivals, np.array([3, -2, 0, 7]))):
                a = attn.tensor(base).scatter_reduce(0, attn.tensor(idx), attn.tensor(v), reduce,
                                                     include_self=inc)
                t = torch.tensor(base).scatter_reduce(0, torch.tensor(idx), torch.tensor(v),
                                                      reduce, include_self=inc)
                same(a, t, exact=reduce in ("amax", "amin"), where="%s %s" % (reduce, inc))
    x = rs.standard_normal(150).astype(np.float32)
    x[[3, 77]] = np.nan
    for reduce in ("amax", "amin"):
        same(attn.zeros(4).scatter_reduce(0, attn.tensor(idx), attn.tensor(x), reduce),
             torch.zeros(4).scatter_reduce(0, torch.tensor(idx), torch.tensor(x), reduce))


def test_scatter_reduce_nan_zero_sign_and_bool():
    nan = float("nan")
    cases = [([7.0, -7.0, 3.0], [0, 1, 1], [2.0, nan, 3.0]),
             ([nan, -7.0, 3.0], [0, 1, 1], [2.0, 1.0, 3.0]),
             ([0.0, -7.0, 3.0], [0, 0, 1], [-0.0, 0.0, 3.0]),
             ([-0.0, 1.0, 3.0], [0, 0, 2], [0.0, -0.0, nan])]
    for s, i, r in cases:
        for reduce in REDUCES:
            for inc in (True, False):
                a = attn.tensor(s).scatter_reduce(0, attn.tensor(i), attn.tensor(r), reduce,
                                                  include_self=inc)
                t = torch.tensor(s).scatter_reduce(0, torch.tensor(i), torch.tensor(r), reduce,
                                                   include_self=inc)
                same(a, t, exact=reduce != "mean", where="%s %s %s" % (s, reduce, inc))
    b, bi, bs = [True, False, False, True], [0, 0, 1, 2, 2], [True, True, False, False, True]
    for reduce in ("sum", "prod", "amax", "amin"):
        for inc in (True, False):
            same(attn.tensor(b).scatter_reduce(0, attn.tensor(bi), attn.tensor(bs), reduce,
                                               include_self=inc),
                 torch.tensor(b).scatter_reduce(0, torch.tensor(bi), torch.tensor(bs), reduce,
                                                include_self=inc), where=reduce)


def test_scatter_reduce_zero_dim_and_int_mean():
    for M in (attn, torch):
        assert M.tensor(2.0).scatter_reduce(0, M.tensor(0), M.tensor(3.0), "prod").item() == 6.0
        assert M.tensor(2.0).scatter_reduce(-1, M.tensor(0), M.tensor(3.0), "mean",
                                            include_self=False).item() == 3.0
        assert M.tensor(1.0).scatter_reduce(0, M.tensor([0]), M.tensor([5.0]),
                                            "sum").item() == 6.0
        assert M.zeros(3).scatter_reduce(0, M.tensor(1), M.ones(2), "sum").tolist() == \
            [0.0, 1.0, 0.0]
        assert M.zeros(3).scatter_reduce(0, M.tensor([1]), M.tensor(5.0), "sum").tolist() == \
            [0.0, 5.0, 0.0]
    same(attn.tensor([7, -7, 3]).scatter_reduce(0, attn.tensor([0, 1, 1]),
                                                attn.tensor([2, 1, 3]), "mean"),
         torch.tensor([7, -7, 3]).scatter_reduce(0, torch.tensor([0, 1, 1]),
                                                 torch.tensor([2, 1, 3]), "mean"))


def grad_cases():
    rs = np.random.RandomState(4)
    f = np.float32
    return [
        (rs.standard_normal((3, 5)).astype(f), 1, rs.randint(0, 5, (3, 5)),
         rs.standard_normal((3, 5)).astype(f)),
        (rs.standard_normal((4, 3)).astype(f), 0, rs.randint(0, 4, (6, 3)),
         rs.standard_normal((6, 3)).astype(f)),
        # ties (amax / amin share the gradient) and zeros (prod: one zero, two zeros)
        (np.array([1.0, 0.0, 2.0, 3.0, 2.0, 0.0], f), 0, np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 5]),
         np.array([1.0, 1.0, 0.0, 5.0, 0.0, 0.0, 3.0, 2.0, 2.0, -1.0], f)),
        (rs.randint(-2, 3, (2, 4, 3)).astype(f), 1, rs.randint(0, 4, (2, 4, 3)),
         rs.randint(-2, 3, (2, 4, 3)).astype(f)),
    ]


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradients(reduce, include_self):
    rs = np.random.RandomState(9)
    for k, (s, d, i, r) in enumerate(grad_cases()):
        w = rs.standard_normal(s.shape).astype(np.float32)
        res = []
        for M in (attn, torch):
            ms, mr = M.tensor(s, requires_grad=True), M.tensor(r, requires_grad=True)
            out = (ms * 1.0).scatter_reduce(d, M.tensor(i), mr * 1.0, reduce,
                                            include_self=include_self)
            (out * M.tensor(w)).sum().backward()
            res.append((out.detach(), ms.grad, mr.grad))
        same(res[0], res[1], exact=False, where="%s %s case %d" % (reduce, include_self, k))


def test_scatter_reduce_inplace_gradient_and_leaf_error():
    res = []
    for M in (attn, torch):
        p = M.tensor([1.0, 2.0, 3.0], requires_grad=True)
        src = M.tensor([4.0, 5.0], requires_grad=True)
        y = p * 2.0
        y.scatter_reduce_(0, M.tensor([2, 2]), src, "amax")
        (y * M.tensor([1.0, 2.0, 3.0])).sum().backward()
        res.append((y.detach(), p.grad, src.grad))
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            p.scatter_reduce_(0, M.tensor([0]), M.tensor([1.0]), "sum")
    same(res[0], res[1])


def test_scatter_reduce_errors_as_torch():
    for M in (torch, attn):
        x = M.zeros(2, 3)
        i = M.tensor([[0, 0, 1], [1, 1, 0]])
        with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean, "
                                               "amax or amin"):
            x.scatter_reduce(1, i, x, "max")
        with pytest.raises(RuntimeError, match="reduce argument must be either"):
            M.scatter_reduce(x, 1, i, x, "foo")
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range "
                                             r"of \[-2, 1\], but got 2\)"):
            x.scatter_reduce(2, i, x, "sum")
        with pytest.raises(IndexError, match="Dimension out of range"):
            x.scatter_reduce(-3, i, x, "sum")
        with pytest.raises(RuntimeError, match="Expected dtype int64 for index"):
            x.scatter_reduce(1, i.float(), x, "sum")
        with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
            x.scatter_reduce(1, i, x.long(), "sum")
        with pytest.raises(RuntimeError, match="same number of dimensions as self"):
            x.scatter_reduce(1, i[0], x, "sum")
        with pytest.raises(RuntimeError, match="same number of dimensions as src"):
            M.zeros(3).scatter_reduce(0, M.tensor([0, 1]), M.ones(2, 2), "sum")
        with pytest.raises(RuntimeError, match=r"Expected index \[1, 4\] to be smaller than "
                                               r"self \[2, 3\] apart from dimension 1"):
            x.scatter_reduce(1, M.tensor([[0, 1, 2, 0]]), x, "sum")
        with pytest.raises(RuntimeError, match=r"Expected index \[4\] to be smaller"):
            M.zeros(3).scatter_reduce(0, M.tensor([0, 1, 2, 0]), M.ones(3), "sum")
        with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with "
                                               "size 3"):
            x.scatter_reduce(1, i * 3, x, "amax")
        with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 1"):
            x.scatter_reduce(1, i - 1, x, "prod")
        with pytest.raises(TypeError):
            x.scatter_reduce(1, i, x, "sum", include_self=2)
        with pytest.raises(TypeError):
            x.scatter_reduce(1, i, 5.0, "sum")
        with pytest.raises(TypeError):
            x.scatter_reduce(1, [[0]], x, "sum")
        with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
            M.zeros(3, dtype=M.bool).scatter_reduce(0, M.tensor([0]), M.ones(1, dtype=M.bool),
                                                    "mean")
        with pytest.raises(RuntimeError, match="reduce argument"):  # reduce checked before
            M.zeros(3).scatter_reduce(0, M.tensor([7]), M.ones(1), "foo")  # the index values


@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_gradient_src_larger_than_index(reduce):
    """torch raises in backward where src is larger than index; attn gives the covered part
    torch's gradient (that of src cut to the index's shape) and the rest zeros."""
    rs = np.random.RandomState(6)
    s = rs.standard_normal((3, 4)).astype(np.float32)
    r = rs.standard_normal((4, 5)).astype(np.float32)
    i = rs.randint(0, 4, (3, 2))
    sa, ra = attn.tensor(s, requires_grad=True), attn.tensor(r, requires_grad=True)
    sa.scatter_reduce(1, attn.tensor(i), ra, reduce).sum().backward()
    st, rt = torch.tensor(s, requires_grad=True), torch.tensor(r[:3, :2], requires_grad=True)
    st.scatter_reduce(1, torch.tensor(i), rt, reduce).sum().backward()
    same(sa.grad, st.grad, exact=False)
    want = np.zeros((4, 5), np.float32)
    want[:3, :2] = rt.grad.numpy()
    np.testing.assert_allclose(np.array(ra.grad.tolist()), want, rtol=2e-6, atol=1e-6)
