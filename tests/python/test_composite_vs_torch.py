"""The torch names composed of attn's ops in Python (python/attn/_composite.py) against PyTorch 1.13:
the exact ones bit for bit (dtype included), logsumexp, std, prod and lerp within a few float32
ulps, gradients where torch has them, and the refusals."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from conftest import assert_same_bits, to_np  # noqa: E402


def awkward(shape, seed):
    rs = np.random.RandomState(seed)
    x = (rs.standard_normal(shape) * 10.0 ** rs.uniform(-2, 7, shape)).astype(np.float32)
    flat = x.reshape(-1)
    special = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 8388607.5, 4194304.5,
               -4194303.5, 16777217.0, 0.49999997, -0.49999997, 1e-30]
    k = min(len(special), flat.size)
    flat[:k] = special[:k]
    return x


def both(a):
    return attn.tensor(a), torch.tensor(a)


@pytest.mark.parametrize("name", ["trunc", "round", "sign", "reciprocal", "floor", "ceil",
                                  "logical_not", "nan_to_num", "fix"])
def test_exact_unary(name):
    a = awkward((7, 9), 1)
    xa, xt = both(a)
    assert_same_bits(getattr(attn, name)(xa), getattr(torch, name)(xt), name)
    assert_same_bits(getattr(xa, name)(), getattr(xt, name)(), name + " method")
    if name != "nan_to_num":
        ia, it = both(np.arange(-6, 7).astype(np.int64))
        assert_same_bits(getattr(attn, name)(ia), getattr(torch, name)(it), name + " int64")


def test_round_with_decimals_and_in_bfloat16():
    a = awkward((50,), 2) / 1000
    xa, xt = both(a.astype(np.float32))
    for d in (1, 2, 3, -1, -2):
        assert_same_bits(attn.round(xa, decimals=d), torch.round(xt, decimals=d), str(d))
    b = np.linspace(-300, 300, 1201).astype(np.float32)
    xa, xt = attn.tensor(b).to(attn.bfloat16), torch.tensor(b).to(torch.bfloat16)
    np.testing.assert_array_equal(to_np(attn.round(xa).float()), to_np(torch.round(xt).float()))


def test_comparisons_and_logical_ops_by_name():
    a, b = awkward((5, 6), 3), awkward((6,), 4)
    xa, xt = both(a)
    ya, yt = both(b)
    for name in ("eq", "ne", "lt", "le", "gt", "ge", "greater", "less_equal", "not_equal"):
        assert_same_bits(getattr(attn, name)(xa, ya), getattr(torch, name)(xt, yt), name)
        assert_same_bits(getattr(attn, name)(xa, 0.5), getattr(torch, name)(xt, 0.5), name + " 0.5")
    ia, it = both(np.array([0, 2, -1, 0, 5, 0], dtype=np.int64))
    for name in ("logical_and", "logical_or", "logical_xor"):
        assert_same_bits(getattr(attn, name)(xa, ya), getattr(torch, name)(xt, yt), name)
        assert_same_bits(getattr(xa, name)(ia), getattr(xt, name)(it), name + " float, int")


def test_reordering_and_repetition():
    a = awkward((3, 4, 5), 5)
    xa, xt = both(a)
    for dims in (0, (1,), (0, 2), (-1, 0, 1)):
        assert_same_bits(attn.flip(xa, dims), torch.flip(xt, dims if not isinstance(dims, int)
                                                          else (dims,)), "flip {}".format(dims))
    assert_same_bits(xa.flip(0, 2), xt.flip(0, 2), "flip varargs")
    assert_same_bits(attn.fliplr(xa), torch.fliplr(xt), "fliplr")
    assert_same_bits(attn.flipud(xa), torch.flipud(xt), "flipud")
    for shifts, dims in ((1, 0), (-3, 2), ((2, -1), (0, 1)), (7, None), (-13, None)):
        assert_same_bits(attn.roll(xa, shifts, dims), torch.roll(xt, shifts, dims),
                         "roll {} {}".format(shifts, dims))
    for sizes in ((1, 1, 1), (2, 1, 3), (2, 1, 1, 2)):
        assert_same_bits(xa.repeat(*sizes), xt.repeat(*sizes), "repeat {}".format(sizes))
    assert_same_bits(xa.repeat((2, 2, 1)), xt.repeat((2, 2, 1)), "repeat tuple")
    for dims in ((2,), (2, 1), (1, 2, 1, 2)):
        assert_same_bits(attn.tile(xa, dims), torch.tile(xt, dims), "tile {}".format(dims))
        assert_same_bits(xa.tile(*dims), xt.tile(*dims), "tile method {}".format(dims))
    y = both(np.zeros((2, 3, 4, 5), np.float32))
    assert_same_bits(xa.expand_as(y[0]), xt.expand_as(y[1]), "expand_as")
    z = both(np.zeros((12, 5), np.float32))
    assert_same_bits(xa.view_as(z[0]), xt.view_as(z[1]), "view_as")
    assert_same_bits(xa.transpose(0, 1).reshape_as(z[0]), xt.transpose(0, 1).reshape_as(z[1]),
                     "reshape_as")
    assert_same_bits(xa.where(xa > 0, -1.0), xt.where(xt > 0, torch.tensor(-1.0)), "Tensor.where")
    assert_same_bits(attn.broadcast_to(xa[0], (2, 4, 5)), torch.broadcast_to(xt[0], (2, 4, 5)), "b")
    assert attn.broadcast_shapes((3, 1), (1, 4), (4,)) == tuple(torch.broadcast_shapes((3, 1), (1, 4),
                                                                                       (4,)))
    assert_same_bits(attn.narrow(xa, 1, 1, 2), torch.narrow(xt, 1, 1, 2), "narrow")
    assert_same_bits(attn.t(xa[0]), torch.t(xt[0]), "t")
    with pytest.raises(RuntimeError, match="can not be smaller"):
        xa.repeat(2, 2)
    with pytest.raises(IndexError, match="out of range"):
        attn.flip(xa, 3)


def test_grids_and_masks():
    xa, xt = both(np.arange(3).astype(np.float32))
    ya, yt = both(np.array([1.5, -2.0], np.float32))
    for indexing in ("ij", "xy"):
        for ga, gt in zip(attn.meshgrid(xa, ya, xa, indexing=indexing),
                          torch.meshgrid(xt, yt, xt, indexing=indexing)):
            assert_same_bits(ga, gt, "meshgrid " + indexing)
    with pytest.raises(RuntimeError, match="same dtype"):
        attn.meshgrid(xa, attn.arange(2))
    assert_same_bits(attn.eye(3), torch.eye(3), "eye")
    assert_same_bits(attn.eye(2, 4, dtype=attn.int64), torch.eye(2, 4, dtype=torch.int64), "eye 2x4")
    a, b = awkward((40,), 6), awkward((40,), 6)
    b[::3] = b[::3] * (1 + 3e-6)
    b[1::5] = np.nan
    xa, xt = both(a)
    ba, bt = both(b)
    for kw in ({}, {"equal_nan": True}, {"rtol": 1e-3, "atol": 1.0}):
        assert_same_bits(attn.isclose(xa, ba, **kw), torch.isclose(xt, bt, **kw), str(kw))
    ia, it = both(np.array([1, 0, -4, 0], dtype=np.int64))
    assert_same_bits(attn.count_nonzero(ia), torch.count_nonzero(it), "count_nonzero")
    assert_same_bits(attn.count_nonzero(xa.reshape(5, 8), 1), torch.count_nonzero(xt.reshape(5, 8), 1),
                     "count_nonzero dim")
    assert_same_bits(attn.nan_to_num(xa, nan=1.0, posinf=2.0, neginf=-3.0),
                     torch.nan_to_num(xt, nan=1.0, posinf=2.0, neginf=-3.0), "nan_to_num args")


def close(ours, theirs, what, ulps=8, scale=0.0):
    """Within `ulps` float32 ulps of each value, or of `scale` (the operands' magnitude, where a
    difference of operands cancels: lerp's, which torch's compiler may fuse into an FMA)."""
    a, b = to_np(ours).astype(np.float64), to_np(theirs).astype(np.float64)
    assert a.shape == b.shape, what
    np.testing.assert_allclose(a, b, rtol=ulps * 2.0 ** -23, atol=1e-30 + ulps * 2.0 ** -23 * scale,
                               err_msg=what)


def test_reductions_and_lerp_with_gradients():
    rs = np.random.RandomState(7)
    a = (rs.standard_normal((4, 6, 5)) * 3).astype(np.float32)
    for fa, ft, what in (
            (lambda x: attn.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1), "logsumexp"),
            (lambda x: x.logsumexp((0, 2), keepdim=True), lambda x: x.logsumexp((0, 2), keepdim=True),
             "logsumexp dims"),
            (lambda x: attn.std(x, 2), lambda x: torch.std(x, 2), "std"),
            (lambda x: x.std(), lambda x: x.std(), "std all"),
            (lambda x: attn.prod(x, 1), lambda x: torch.prod(x, 1), "prod"),
            (lambda x: x.prod(2, keepdim=True), lambda x: x.prod(2, keepdim=True), "prod keepdim"),
            (lambda x: attn.lerp(x, x * 2 + 1, 0.3), lambda x: torch.lerp(x, x * 2 + 1, 0.3), "lerp"),
            (lambda x: x.lerp(-x, 0.8), lambda x: x.lerp(-x, 0.8), "lerp 0.8")):
        xa = attn.tensor(a, requires_grad=True)
        xt = torch.tensor(a, requires_grad=True)
        oa, ot = fa(xa), ft(xt)
        close(oa, ot, what, scale=3 * np.abs(a).max() + 1 if what.startswith("lerp") else 0.0)
        ga = rs.standard_normal(tuple(ot.shape)).astype(np.float32)
        oa.backward(attn.tensor(ga))
        ot.backward(torch.tensor(ga))
        close(xa.grad, xt.grad, what + " grad", ulps=64)
    inf = both(np.array([[-np.inf, -np.inf], [1e30, 3.0]], np.float32))
    assert_same_bits(attn.logsumexp(inf[0], 1), torch.logsumexp(inf[1], 1), "logsumexp -inf rows")
    ia, it = both(np.array([[2, -3, 4], [1, 0, 5]], np.int64))
    assert_same_bits(attn.prod(ia), torch.prod(it), "prod int")
    assert_same_bits(attn.prod(ia, 1), torch.prod(it, 1), "prod int dim")


def test_rounding_gradients_are_zero():
    xa = attn.tensor([1.3, -2.7], requires_grad=True)
    (attn.round(xa) + attn.trunc(xa) + xa).sum().backward()
    assert xa.grad.tolist() == [1.0, 1.0]


def test_stacking_selection_and_creation():
    a, b = awkward((2, 3), 8), awkward((2, 3), 9)
    xa, xt = both(a)
    ya, yt = both(b)
    for name in ("hstack", "vstack", "row_stack", "column_stack"):
        assert_same_bits(getattr(attn, name)([xa, ya]), getattr(torch, name)([xt, yt]), name)
        assert_same_bits(getattr(attn, name)([xa[0], ya[1]]), getattr(torch, name)([xt[0], yt[1]]),
                         name + " 1-D")
    m = np.array([True, False, True])
    assert_same_bits(attn.masked_select(xa, attn.tensor(m)), torch.masked_select(xt, torch.tensor(m)),
                     "masked_select broadcast")
    idx = np.array([[5, 0], [-1, 2]], dtype=np.int64)
    assert_same_bits(attn.take(xa, attn.tensor(idx)), torch.take(xt, torch.tensor(idx)), "take")
    with pytest.raises(IndexError):
        attn.take(xa, attn.tensor([6]))
    for r, c, off in ((3, 4, 1), (4, 3, -1), (3, 3, 0), (2, 5, -3), (0, 3, 0)):
        assert_same_bits(attn.tril_indices(r, c, off), torch.tril_indices(r, c, off), "tril")
        assert_same_bits(attn.triu_indices(r, c, off), torch.triu_indices(r, c, off), "triu")
    attn.manual_seed(3)
    torch.manual_seed(3)
    assert_same_bits(attn.randn_like(xa), torch.randn_like(xt), "randn_like")
    assert_same_bits(attn.rand_like(xa), torch.rand_like(xt), "rand_like")
    assert_same_bits(xa.reshape(6).unflatten(0, (3, 2)), xt.reshape(6).unflatten(0, (3, 2)),
                     "unflatten")
    assert_same_bits(xa.new_tensor([1, 2]), xt.new_tensor([1, 2]), "new_tensor")
    rs = np.random.RandomState(10)
    c, m1, m2 = (rs.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 4), (4, 3)))
    ca, ct = both(c)
    m1a, m1t = both(m1)
    m2a, m2t = both(m2)
    close(attn.addmm(ca, m1a, m2a, beta=0.5, alpha=2.0),
          torch.addmm(ct, m1t, m2t, beta=0.5, alpha=2.0), "addmm", ulps=16, scale=10.0)
    close(ca.addmm(m1a, m2a), ct.addmm(m1t, m2t), "Tensor.addmm", ulps=16, scale=10.0)


def test_dims_diagonals_differences_and_log_forms():
    a = awkward((4, 5, 3), 11)
    xa, xt = both(a)
    for dim in (0, 1, -1):
        assert_same_bits(attn.any(xa, dim), torch.any(xt, dim), "any")
        assert_same_bits(xa.all(dim, keepdim=True), xt.all(dim, keepdim=True), "all")
    assert_same_bits(attn.any(xa), torch.any(xt), "any all dims")
    assert_same_bits(attn.amin(xa[..., :2] + 1, 1), torch.amin(xt[..., :2] + 1, 1), "amin")
    assert_same_bits(xa.amin((0, 2), keepdim=True), xt.amin((0, 2), keepdim=True), "amin dims")
    assert_same_bits(attn.clamp_min(xa, 0.5), torch.clamp_min(xt, 0.5), "clamp_min")
    assert_same_bits(attn.clamp_max(xa, -0.5), torch.clamp_max(xt, -0.5), "clamp_max")
    assert_same_bits(attn.frac(xa), torch.frac(xt), "frac")
    for kw in ({}, {"n": 2, "dim": 0}, {"dim": 1, "prepend": xa[:, :1]}):
        kt = {k: (torch.tensor(to_np(v)) if k in ("prepend", "append") else v) for k, v in kw.items()}
        assert_same_bits(attn.diff(xa, **kw), torch.diff(xt, **kt), "diff {}".format(list(kw)))
    ba, bt = both(np.array([True, False, False, True]))
    assert_same_bits(ba.diff(), bt.diff(), "diff bool")
    for off, d1, d2 in ((0, 0, 1), (1, 0, 1), (-2, 0, 1), (1, 2, 0), (0, -1, 1), (7, 0, 1)):
        assert_same_bits(attn.diagonal(xa, off, d1, d2), torch.diagonal(xt, off, d1, d2),
                         "diagonal {} {} {}".format(off, d1, d2))
    for k in (0, 2, -1):
        assert_same_bits(attn.diag(xa[0], k), torch.diag(xt[0], k), "diag 2-D {}".format(k))
        assert_same_bits(attn.diag(xa[0, 0], k), torch.diag(xt[0, 0], k), "diag 1-D {}".format(k))
    m = np.random.RandomState(12).standard_normal((5, 5)).astype(np.float32)
    ma, mt = both(m)
    close(attn.trace(ma), torch.trace(mt), "trace")
    for k in (1, 2, 3, -1, 4):
        assert_same_bits(attn.rot90(xa, k, (0, 2)), torch.rot90(xt, k, (0, 2)), "rot90 {}".format(k))
    v, mu = attn.var_mean(ma, 1)
    vt, mut = torch.var_mean(mt, 1)
    close(v, vt, "var_mean var")
    close(mu, mut, "var_mean mean")
    s, _ = attn.std_mean(ma)
    close(s, torch.std_mean(mt)[0], "std_mean")
    b = awkward((4, 5, 3), 13)
    ya, yt = both(b)
    with np.errstate(all="ignore"):
        for name in ("logaddexp", "xlogy"):
            fa, ft = getattr(attn, name), getattr(torch, name)
            o, r = to_np(fa(xa, ya)), to_np(ft(xt, yt))
            assert np.array_equal(np.isnan(o), np.isnan(r)), name
            fin = np.isfinite(r)
            assert np.array_equal(o[~fin & ~np.isnan(r)], r[~fin & ~np.isnan(r)]), name
            np.testing.assert_allclose(o[fin], r[fin], rtol=4 * 2.0 ** -23,
                                       atol=4 * 2.0 ** -23 * np.abs(r[fin]).max(), err_msg=name)
    p = np.random.RandomState(14).uniform(0, 1, 50).astype(np.float32)
    pa, pt = both(p)
    for eps in (None, 1e-3):
        close(attn.logit(pa, eps), torch.logit(pt, eps), "logit {}".format(eps), ulps=16, scale=1.0)
