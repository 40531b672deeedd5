"""The second batch of torch names composed of attn's ops in Python (python/attn/_composite.py)
against PyTorch 1.13: baddbmm, addmv, addr, diag_embed, kron, logspace, nansum, nanmean, signbit,
tensor_split, trapezoid, trapz, cross, atleast_1d/2d/3d and block_diag. Values bit for bit where
the composition is exact (dtype and shape included), else within a few float32 ulps; gradients
against torch's; the refusals with torch's exception types."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from conftest import assert_same_bits, to_np  # noqa: E402

NAN, INF = float("nan"), float("inf")


def both(a, requires_grad=False):
    a = np.asarray(a)
    if requires_grad:
        return attn.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    return attn.tensor(a), torch.tensor(a)


def randn(shape, seed, scale=1.0):
    return (np.random.RandomState(seed).standard_normal(shape) * scale).astype(np.float32)


def awkward(shape, seed):
    """Values of every magnitude with the special ones first: ±0, ±inf, nan, -nan."""
    rs = np.random.RandomState(seed)
    x = (rs.standard_normal(shape) * 10.0 ** rs.uniform(-3, 5, shape)).astype(np.float32)
    flat = x.reshape(-1)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.5, -1.5, 1e-40, -1e-40],
                       dtype=np.float32)
    k = min(special.size, flat.size)
    flat[:k] = special[:k]
    return x


def close(ours, theirs, what, ulps=8, scale=0.0):
    """Same shape and dtype, nan and infinities where torch's are, and within `ulps` float32 ulps
    of each value (or of `scale`, the magnitude of the terms of a sum that may cancel: a number,
    or an array of one per element)."""
    a, b = to_np(ours), to_np(theirs)
    assert a.shape == b.shape, "{}: shape {} != torch's {}".format(what, a.shape, b.shape)
    assert a.dtype == b.dtype, "{}: dtype {} != torch's {}".format(what, a.dtype, b.dtype)
    a, b = a.astype(np.float64), b.astype(np.float64)
    assert np.array_equal(np.isnan(a), np.isnan(b)), what + ": nan in different places"
    inf = np.isinf(b)
    assert np.array_equal(a[inf], b[inf]), what + ": infinities differ"
    ok = np.isfinite(b)
    a, b = a[ok], b[ok]
    tol = 1e-30 + ulps * 2.0 ** -23 * (np.abs(b) + np.broadcast_to(scale, ok.shape)[ok])
    over = np.flatnonzero(np.abs(a - b) > tol)
    if over.size:
        i = over[0]
        raise AssertionError("{}: {} of {} values differ by more than {} ulps; first {!r} vs "
                             "torch {!r}".format(what, over.size, b.size, ulps, a[i], b[i]))


def backward_both(oa, ot, seed):
    g = randn(tuple(ot.shape), seed)
    oa.backward(attn.tensor(g))
    ot.backward(torch.tensor(g))


# ---- baddbmm, addmv, addr ------------------------------------------------------------------------

def test_baddbmm_values_and_broadcast_input():
    b1, b2 = randn((3, 5, 7), 1), randn((3, 7, 4), 2)
    for ishape in ((3, 5, 4), (5, 4), (1, 4), (3, 1, 1), ()):
        c = randn(ishape, 3)
        for beta, alpha in ((1, 1), (0.5, 2.0), (-1.5, 0.25), (2, 0)):
            oa = attn.baddbmm(attn.tensor(c), attn.tensor(b1), attn.tensor(b2), beta=beta,
                              alpha=alpha)
            ot = torch.baddbmm(torch.tensor(c), torch.tensor(b1), torch.tensor(b2), beta=beta,
                               alpha=alpha)
            close(oa, ot, "baddbmm {} {} {}".format(ishape, beta, alpha), ulps=16, scale=20.0)
    ca, ct = both(randn((3, 5, 4), 4))
    close(ca.baddbmm(attn.tensor(b1), attn.tensor(b2), alpha=3),
          ct.baddbmm(torch.tensor(b1), torch.tensor(b2), alpha=3), "Tensor.baddbmm", 16, 60.0)
    ia, it = both(np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 7)
    ja, jt = both(np.arange(40, dtype=np.int64).reshape(2, 4, 5) % 7 - 3)
    ka, kt = both(np.arange(30, dtype=np.int64).reshape(2, 3, 5))
    for beta, alpha in ((1, 1), (3, -2), (0, 5), (0.5, 2.5)):  # integers: coefficients truncated
        assert_same_bits(attn.baddbmm(ka, ia, ja, beta=beta, alpha=alpha),
                         torch.baddbmm(kt, it, jt, beta=beta, alpha=alpha),
                         "baddbmm int64 {} {}".format(beta, alpha))
    # the result has the batches' dtype (torch's): an int64 input is converted
    close(attn.baddbmm(ka[..., :4], attn.tensor(b1[:2, :3]), attn.tensor(b2[:2])),
          torch.baddbmm(kt[..., :4], torch.tensor(b1[:2, :3]), torch.tensor(b2[:2])),
          "baddbmm int64 input", ulps=16, scale=40.0)


def test_beta_zero_ignores_input_and_alpha_zero():
    b1, b2 = randn((2, 3, 4), 5), randn((2, 4, 3), 6)
    bad = np.array([[NAN, INF, -INF], [NAN, 1.0, NAN], [INF, INF, 2.0]], np.float32)
    # torch 1.13's CPU baddbmm with beta=0 scales an uninitialised result by 0, so it sometimes
    # gives nan where its documentation says it does not (pytorch/pytorch#80588, fixed in 2.0 by
    # #96086): the reference is the documented value, alpha * bmm(batch1, batch2)
    for beta, alpha in ((0, 1), (0.0, -2)):
        oa = attn.baddbmm(attn.tensor(bad), attn.tensor(b1), attn.tensor(b2), beta=beta,
                          alpha=alpha)
        assert np.isfinite(to_np(oa)).all(), "baddbmm beta={}: nan or inf from input".format(beta)
        close(oa, torch.bmm(torch.tensor(b1), torch.tensor(b2)) * alpha,
              "baddbmm beta={}".format(beta), ulps=16, scale=20.0)
    m, v = randn((3, 4), 7), randn((4,), 8)
    for beta, alpha in ((0, 1), (0.0, 2.5), (1, 0), (2, 0), (0, 0)):
        inp = bad[0] if beta == 0 else randn((3,), 9)
        oa = attn.addmv(attn.tensor(inp), attn.tensor(m), attn.tensor(v), beta=beta, alpha=alpha)
        ot = torch.addmv(torch.tensor(inp), torch.tensor(m), torch.tensor(v), beta=beta,
                         alpha=alpha)
        if alpha == 0:  # beta * input alone (or zeros): exact
            assert_same_bits(oa, ot, "addmv alpha=0 beta={}".format(beta))
        else:
            close(oa, ot, "addmv {} {}".format(beta, alpha), ulps=16, scale=10.0)
    # torch's gemv: alpha 0 ignores the product (nan in mat included); addr's kernel does not
    nm = np.full((3, 4), NAN, np.float32)
    assert_same_bits(attn.addmv(attn.tensor(bad[1]), attn.tensor(nm), attn.tensor(v), alpha=0),
                     torch.addmv(torch.tensor(bad[1]), torch.tensor(nm), torch.tensor(v), alpha=0),
                     "addmv nan mat alpha=0")
    v1, v2 = randn((3,), 10), randn((3,), 11)
    assert_same_bits(attn.addr(attn.tensor(bad), attn.tensor(v1), attn.tensor(v2), beta=0),
                     torch.addr(torch.tensor(bad), torch.tensor(v1), torch.tensor(v2), beta=0),
                     "addr beta=0")
    v1[1] = NAN
    assert_same_bits(attn.addr(attn.tensor(bad[2]), attn.tensor(v1), attn.tensor(v2), alpha=0),
                     torch.addr(torch.tensor(bad[2]), torch.tensor(v1), torch.tensor(v2), alpha=0),
                     "addr nan vec alpha=0")


def test_addmv_and_addr_values():
    m, v = randn((6, 9), 12), randn((9,), 13)
    for ishape in ((6,), (1,), ()):
        c = randn(ishape, 14)
        for beta, alpha in ((1, 1), (0.5, -2.0)):
            close(attn.addmv(attn.tensor(c), attn.tensor(m), attn.tensor(v), beta=beta,
                             alpha=alpha),
                  torch.addmv(torch.tensor(c), torch.tensor(m), torch.tensor(v), beta=beta,
                              alpha=alpha), "addmv {} {}".format(ishape, beta), ulps=16, scale=20.0)
    ca, ct = both(randn((6,), 15))
    close(ca.addmv(attn.tensor(m), attn.tensor(v)), ct.addmv(torch.tensor(m), torch.tensor(v)),
          "Tensor.addmv", ulps=16, scale=20.0)
    im, iv = np.arange(12, dtype=np.int64).reshape(3, 4) - 5, np.array([2, -1, 0, 3], np.int64)
    assert_same_bits(attn.addmv(attn.tensor([1, 2, 3]), attn.tensor(im), attn.tensor(iv), beta=2,
                                alpha=-3),
                     torch.addmv(torch.tensor([1, 2, 3]), torch.tensor(im), torch.tensor(iv),
                                 beta=2, alpha=-3), "addmv int64")
    # addr: beta * input + (alpha * vec1) * vec2, one product and one sum per element; torch's
    # kernel fuses the sum with one of the products (an FMA, which one depending on where the
    # element falls in its vector loop), so within an ulp of the terms' magnitude
    v1, v2 = awkward((37,), 16), awkward((29,), 17)
    for ishape in ((37, 29), (29,), (37, 1), ()):
        c = awkward(ishape, 18) if ishape else np.float32(2.5)
        for beta, alpha in ((1, 1), (0.5, 2.0), (-3, 0.1), (1, -1), (0.7, 1 / 3)):
            with np.errstate(all="ignore"):
                terms = (np.abs(beta * c.astype(np.float64)) +
                         np.abs(alpha * np.outer(v1, v2).astype(np.float64)))
                close(attn.addr(attn.tensor(c), attn.tensor(v1), attn.tensor(v2), beta=beta,
                                alpha=alpha),
                      torch.addr(torch.tensor(c), torch.tensor(v1), torch.tensor(v2), beta=beta,
                                 alpha=alpha), "addr {} {} {}".format(ishape, beta, alpha), ulps=2,
                      scale=np.nan_to_num(terms, nan=0.0, posinf=0.0))
    # where no sum can round (beta 0, alpha 0, a zero input) the bits are torch's
    ca, ct = both(awkward((37, 29), 19))
    for beta, alpha in ((0, 1), (0, 0.1), (1, 0), (0.5, 0)):
        assert_same_bits(ca.addr(attn.tensor(v1), attn.tensor(v2), beta=beta, alpha=alpha),
                         ct.addr(torch.tensor(v1), torch.tensor(v2), beta=beta, alpha=alpha),
                         "Tensor.addr {} {}".format(beta, alpha))
    a1, a2 = np.array([1, -2, 3], np.int64), np.array([4, 0, -5, 6], np.int64)
    for ci in (np.ones((3, 4), np.int64), np.array([True, False, True, True])):
        assert_same_bits(attn.addr(attn.tensor(ci), attn.tensor(a1), attn.tensor(a2), beta=3,
                                   alpha=2),
                         torch.addr(torch.tensor(ci), torch.tensor(a1), torch.tensor(a2), beta=3,
                                    alpha=2), "addr int64 {}".format(ci.dtype))
    # an int64 vector with a float32 input promotes to float32, as torch
    ai = np.arange(37, dtype=np.int64) - 18
    assert_same_bits(attn.addr(ca, attn.tensor(ai), attn.tensor(v2), beta=0, alpha=0.3),
                     torch.addr(ct, torch.tensor(ai), torch.tensor(v2), beta=0, alpha=0.3),
                     "addr promoted")
    bi = np.array([[True, False, False], [False, True, False]])
    b1, b2 = np.array([True, False]), np.array([False, True, True])
    for beta, alpha in ((True, True), (False, True), (True, False), (1, 2), (0, 0)):
        assert_same_bits(attn.addr(attn.tensor(bi), attn.tensor(b1), attn.tensor(b2), beta=beta,
                                   alpha=alpha),
                         torch.addr(torch.tensor(bi), torch.tensor(b1), torch.tensor(b2), beta=beta,
                                    alpha=alpha), "addr bool {} {}".format(beta, alpha))


def test_baddbmm_addmv_addr_gradients():
    b1, b2, c = randn((2, 3, 4), 20), randn((2, 4, 5), 21), randn((3, 5), 22)
    for beta, alpha in ((1, 1), (0.5, -2.0), (0, 1.5)):
        (ca, ct), (b1a, b1t), (b2a, b2t) = both(c, True), both(b1, True), both(b2, True)
        oa = attn.baddbmm(ca, b1a, b2a, beta=beta, alpha=alpha)
        ot = torch.baddbmm(ct, b1t, b2t, beta=beta, alpha=alpha)
        backward_both(oa, ot, 23)
        for ga, gt, what in ((ca, ct, "input"), (b1a, b1t, "batch1"), (b2a, b2t, "batch2")):
            assert ga.grad is not None, "baddbmm {} {}: no grad for {}".format(beta, alpha, what)
            close(ga.grad, gt.grad, "baddbmm grad {} {} {}".format(what, beta, alpha), ulps=16,
                  scale=30.0)
    m, v = randn((4, 6), 24), randn((6,), 25)
    for beta, alpha in ((1, 1), (2.0, 0.5), (1, 0)):
        (ca, ct), (ma, mt), (va, vt) = both(randn((4,), 26), True), both(m, True), both(v, True)
        oa = attn.addmv(ca, ma, va, beta=beta, alpha=alpha)
        ot = torch.addmv(ct, mt, vt, beta=beta, alpha=alpha)
        backward_both(oa, ot, 27)
        for ga, gt, what in ((ca, ct, "input"), (ma, mt, "mat"), (va, vt, "vec")):
            close(ga.grad, gt.grad, "addmv grad {} {} {}".format(what, beta, alpha), ulps=16,
                  scale=20.0)
    for beta, alpha in ((1, 1), (-0.5, 3.0)):
        (ca, ct), (v1a, v1t), (v2a, v2t) = (both(randn((5,), 28), True),
                                            both(randn((3,), 29), True),
                                            both(randn((5,), 30), True))
        oa = attn.addr(ca, v1a, v2a, beta=beta, alpha=alpha)
        ot = torch.addr(ct, v1t, v2t, beta=beta, alpha=alpha)
        backward_both(oa, ot, 31)
        for ga, gt, what in ((ca, ct, "input"), (v1a, v1t, "vec1"), (v2a, v2t, "vec2")):
            close(ga.grad, gt.grad, "addr grad {} {}".format(what, beta), ulps=16, scale=20.0)


def test_baddbmm_addmv_addr_refusals():
    f = lambda *s: (attn.zeros(*s), torch.zeros(*s))  # noqa: E731
    cases = [
        ("baddbmm", (f(2, 3, 5), f(2, 3, 4), f(2, 3, 5)), {}, RuntimeError,
         r"\[2, 4\].*\[2, 3\].*\(2, 3, 4\).*\(2, 3, 5\)"),
        ("baddbmm", (f(3, 6), f(2, 3, 4), f(2, 4, 5)), {}, RuntimeError, r"\(3, 6\)"),
        ("baddbmm", (f(2, 2), f(2, 2), f(2, 2)), {}, IndexError, r"\(2, 2\)"),
        ("baddbmm", (f(3, 4, 5), f(3, 4), f(2, 4, 5)), {}, RuntimeError, r"\(3, 4\)"),
        ("addmv", (f(2), f(3, 4), f(4)), {}, RuntimeError, r"size mismatch.*\(3, 4\)"),
        ("addmv", (f(3), f(3, 4), f(5)), {}, RuntimeError, r"size mismatch.*\(5,\)"),
        ("addmv", (f(2, 2), f(2, 2), f(2)), {}, RuntimeError, r"vector \+ matrix @ vector"),
        ("addmv", (f(3), f(3, 4), f(4, 1)), {}, RuntimeError, r"got 1, 2, 2"),
        ("addr", (f(3, 4), f(3, 1), f(4)), {}, RuntimeError, r"vec1.*2-D"),
        ("addr", (f(2, 4), f(3), f(4)), {}, RuntimeError, r"\(2, 4\).*\(3, 4\)"),
        ("addr", (f(3, 4), f(3), f(4)), {"beta": True}, RuntimeError, r"Boolean beta"),
        ("addr", (f(3, 4), f(3), f(4)), {"alpha": False}, RuntimeError, r"Boolean alpha"),
    ]
    for name, args, kw, exc, pattern in cases:
        with pytest.raises(exc):
            getattr(torch, name)(*[t for _, t in args], **kw)
        with pytest.raises(exc, match=name + r".*" + pattern):
            getattr(attn, name)(*[a for a, _ in args], **kw)
    li = (attn.ones(2, 2, dtype=attn.int64), attn.ones(2, dtype=attn.int64),
          attn.ones(2, dtype=attn.int64))
    lt = (torch.ones(2, 2, dtype=torch.long), torch.ones(2, dtype=torch.long),
          torch.ones(2, dtype=torch.long))
    with pytest.raises(RuntimeError):
        torch.addr(*lt, beta=0.5)
    with pytest.raises(RuntimeError, match=r"addr.*integral.*beta"):
        attn.addr(*li, beta=0.5)
    with pytest.raises(RuntimeError):
        torch.baddbmm(torch.zeros(1, 2, 2), torch.ones(1, 2, 2), torch.ones(1, 2, 2).long())
    with pytest.raises(RuntimeError, match=r"baddbmm.*torch.float32.*torch.int64"):
        attn.baddbmm(attn.zeros(1, 2, 2), attn.ones(1, 2, 2), attn.ones(1, 2, 2).long())
    with pytest.raises(RuntimeError):
        torch.addmv(torch.zeros(2), torch.ones(2, 2), torch.ones(2).long())
    with pytest.raises(RuntimeError, match=r"addmv.*torch.float32.*torch.int64"):
        attn.addmv(attn.zeros(2), attn.ones(2, 2), attn.ones(2).long())
    with pytest.raises(RuntimeError, match=r"baddbmm.*Bool"):
        attn.baddbmm(*(attn.ones(1, 2, 2, dtype=attn.bool),) * 3)
    with pytest.raises(TypeError, match=r"addr.*vec2.*list"):
        attn.addr(attn.zeros(2, 2), attn.zeros(2), [1.0, 2.0])


# ---- diag_embed, kron --------------------------------------------------------------------------

def test_diag_embed_bits_and_gradient():
    a = awkward((2, 3, 4), 40)
    xa, xt = both(a)
    for off, d1, d2 in ((0, -2, -1), (1, -2, -1), (-2, -2, -1), (1, 0, 2), (-1, 3, 1), (0, -1, 0),
                        (5, 1, 2), (-4, 2, 0)):
        assert_same_bits(attn.diag_embed(xa, off, d1, d2), torch.diag_embed(xt, off, d1, d2),
                         "diag_embed {} {} {}".format(off, d1, d2))
    assert_same_bits(xa.diag_embed(1), xt.diag_embed(1), "Tensor.diag_embed")
    assert_same_bits(attn.diag_embed(xa[0, 0]), torch.diag_embed(xt[0, 0]), "diag_embed 1-D")
    for arr in (np.array([[3, -1], [0, 7]], np.int64), np.array([True, False, True])):
        ia, it = both(arr)
        assert_same_bits(attn.diag_embed(ia, -1), torch.diag_embed(it, -1), "diag_embed " +
                         str(arr.dtype))
    ea, et = both(np.zeros((2, 0), np.float32))
    assert_same_bits(attn.diag_embed(ea, 2), torch.diag_embed(et, 2), "diag_embed empty")
    ga, gt = both(randn((3, 4), 41), True)
    oa, ot = attn.diag_embed(ga, 1, 0, 2), torch.diag_embed(gt, 1, 0, 2)
    backward_both(oa, ot, 42)
    assert_same_bits(ga.grad, gt.grad, "diag_embed grad")
    for args, exc, pattern in (((0, 0, 0), RuntimeError, r"cannot be identical"),
                               ((0, 0, 3), IndexError, r"out of range"),
                               ((0, -4, 0), IndexError, r"out of range")):
        with pytest.raises(exc):
            torch.diag_embed(torch.zeros(2, 3), *args)
        with pytest.raises(exc, match=pattern):
            attn.diag_embed(attn.zeros(2, 3), *args)
    with pytest.raises(IndexError):
        torch.diag_embed(torch.tensor(1.0))
    with pytest.raises(IndexError):
        attn.diag_embed(attn.tensor(1.0))


def test_kron_bits_dtypes_and_gradient():
    for sa, sb in (((2, 3), (4, 5)), ((2, 3), (5,)), ((), (4,)), ((3,), (2, 2, 2)), ((0, 3), (2,)),
                   ((2, 1, 3), (1, 4, 2)), ((), ())):
        a, b = awkward(sa, 43), awkward(sb, 44)
        (xa, xt), (ya, yt) = both(a), both(b)
        with np.errstate(all="ignore"):
            assert_same_bits(attn.kron(xa, ya), torch.kron(xt, yt), "kron {} {}".format(sa, sb))
    xa, xt = both(awkward((2, 3), 45))
    ya, yt = both(awkward((3, 2), 46))
    assert_same_bits(xa.kron(ya), xt.kron(yt), "Tensor.kron")
    for a, b in ((np.array([1, -2]), np.array([[3], [4]])),
                 (np.array([1, 2]), np.array([0.5], np.float32)),
                 (np.array([True, False]), np.array([True, True])),
                 (np.array([3, 4]), np.array([True]))):
        (xa, xt), (ya, yt) = both(a), both(b)
        assert_same_bits(attn.kron(xa, ya), torch.kron(xt, yt),
                         "kron {} {}".format(a.dtype, b.dtype))
    (xa, xt), (ya, yt) = both(randn((2, 3), 47), True), both(randn((3, 2), 48), True)
    oa, ot = attn.kron(xa, ya), torch.kron(xt, yt)
    backward_both(oa, ot, 49)
    close(xa.grad, xt.grad, "kron grad input", ulps=8, scale=10.0)
    close(ya.grad, yt.grad, "kron grad other", ulps=8, scale=10.0)
    with pytest.raises(TypeError):
        torch.kron(torch.ones(2), 3)
    with pytest.raises(TypeError, match=r"kron.*other.*int"):
        attn.kron(attn.ones(2), 3)


# ---- logspace ------------------------------------------------------------------------------------

def test_logspace_bits():
    for start, end, steps, base in ((0, 2, 5, 10.0), (-1, 2.5, 7, 2.0), (3.3, -4.7, 50, math.e),
                                    (0.1, 38.0, 101, 10.0), (2.5, 3, 1, 10.0), (0, 2, 0, 10.0),
                                    (-20, 20, 333, 1.5), (1, 1, 4, 0.5), (0, 300, 1000, 1.01)):
        for dtype in ("float32", "bfloat16", "int64"):
            ours = attn.logspace(start, end, steps, base, dtype=getattr(attn, dtype))
            theirs = torch.logspace(start, end, steps, base, dtype=getattr(torch, dtype))
            what = "logspace {} {} {} {} {}".format(start, end, steps, base, dtype)
            if dtype == "bfloat16":
                assert ours.dtype == attn.bfloat16, what
                ours, theirs = ours.float(), theirs.float()
            with np.errstate(all="ignore"):
                assert_same_bits(ours, theirs, what)
    assert_same_bits(attn.logspace(attn.tensor(-1.0), 1, 5),
                     torch.logspace(torch.tensor(-1.0), 1, 5), "logspace tensor start")
    assert attn.logspace(0, 1, 3, requires_grad=True).requires_grad
    for kw in ({"steps": -1}, {"steps": 3, "dtype": "bool"}, {"steps": 3, "dtype": "float16"}):
        kt = dict(kw, **({"dtype": getattr(torch, kw["dtype"])} if "dtype" in kw else {}))
        ka = dict(kw, **({"dtype": getattr(attn, kw["dtype"])} if "dtype" in kw else {}))
        with pytest.raises(RuntimeError):
            torch.logspace(0, 1, **kt)
        with pytest.raises(RuntimeError, match=r"logspace"):
            attn.logspace(0, 1, **ka)


# ---- nansum, nanmean, signbit ------------------------------------------------------------------

def test_nansum_nanmean():
    a = randn((4, 6, 5), 50, 3.0)
    a[a > 1.5] = np.nan
    a[1, 2, :] = np.nan  # a slice of nans only
    a[0, 0, 0], a[2, 3, 4] = -np.inf, np.inf
    xa, xt = both(a)
    for name in ("nansum", "nanmean"):
        fa, ft = getattr(attn, name), getattr(torch, name)
        for dim, keepdim in ((None, False), (1, False), (-1, True), ((0, 2), False),
                             ((0, 1, 2), True)):
            kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
            # attn's float32 sum adds in torch's order (docs/differences.md): torch's bits
            assert_same_bits(fa(xa, **kw), ft(xt, **kw), "{} {}".format(name, kw))
            assert_same_bits(getattr(xa, name)(**kw), getattr(xt, name)(**kw),
                             "Tensor.{} {}".format(name, kw))
    b = np.array([[1.5, NAN, -2.0], [NAN, NAN, NAN], [0.25, 4.0, NAN]], np.float32)
    ba, bt = both(b)
    for dim in (0, 1):
        assert_same_bits(attn.nansum(ba, dim), torch.nansum(bt, dim), "nansum exact")
        assert_same_bits(attn.nanmean(ba, dim), torch.nanmean(bt, dim), "nanmean exact")
    for arr in (np.array([[1, -2, 3], [4, 5, 6]], np.int64), np.array([True, False, True])):
        ia, it = both(arr)
        assert_same_bits(attn.nansum(ia), torch.nansum(it), "nansum " + str(arr.dtype))
        with pytest.raises(RuntimeError):
            torch.nanmean(it)
        with pytest.raises(RuntimeError, match=r"nanmean.*floating point.*int64|nanmean.*bool"):
            attn.nanmean(ia)
    hb = attn.tensor(b).bfloat16()
    assert_same_bits(attn.nanmean(hb, 1).float(),
                     torch.nanmean(torch.tensor(b).bfloat16(), 1).float(), "nanmean bfloat16")
    assert attn.nansum(hb).dtype == attn.bfloat16
    with pytest.raises(IndexError):
        attn.nanmean(xa, 3)
    for name in ("nansum", "nanmean"):
        (ga, gt) = both(a, True)
        oa, ot = getattr(attn, name)(ga, 1), getattr(torch, name)(gt, 1)
        backward_both(oa, ot, 51)
        # torch's gradient at a nan is grad * 0 (-0.0 for a negative grad), attn's +0.0
        close(ga.grad, gt.grad, name + " grad", ulps=0)
        assert (to_np(ga.grad)[np.isnan(a)] == 0).all()


def test_signbit():
    a = awkward((6, 7), 52)
    a.reshape(-1)[-1] = np.float32(np.copysign(np.nan, -1.0))
    xa, xt = both(a)
    assert np.signbit(a).any() and not np.signbit(a).all()
    assert_same_bits(attn.signbit(xa), torch.signbit(xt), "signbit")
    assert_same_bits(xa.signbit(), xt.signbit(), "Tensor.signbit")
    assert_same_bits(attn.signbit(-xa), torch.signbit(-xt), "signbit of -x (-nan, -0.0)")
    sp = both(np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0], np.float32))
    assert attn.signbit(sp[0]).tolist() == [False, True, False, True, False, False, True]
    # bfloat16 without nan (which nan a conversion makes is the kernel's: torch's vectorised
    # float32 -> bfloat16 gives 0xffff, a negative one)
    assert_same_bits(attn.signbit(sp[0][[0, 1, 2, 3, 5, 6]].bfloat16()),
                     torch.signbit(sp[1][[0, 1, 2, 3, 5, 6]].bfloat16()), "bf16")
    for arr in (np.array([-3, 0, 2], np.int64), np.array([True, False])):
        ia, it = both(arr)
        assert_same_bits(attn.signbit(ia), torch.signbit(it), "signbit " + str(arr.dtype))


# ---- tensor_split ------------------------------------------------------------------------------

def test_tensor_split():
    a = awkward((7, 10), 53)
    xa, xt = both(a)
    for ios, dim in ((3, 0), (1, 0), (7, 0), (10, 0), (4, 1), (3, -1), ([1, 5], 0), ((2, 2, 6), 1),
                     ([5, 1], 0), ([-2, 9], 0), ([-20, 3], 1), ([], 0), ([0], 1), ([12], 1)):
        oa, ot = attn.tensor_split(xa, ios, dim), torch.tensor_split(xt, ios, dim)
        assert isinstance(oa, tuple) and len(oa) == len(ot), "tensor_split {} {}".format(ios, dim)
        for i, (pa, pt) in enumerate(zip(oa, ot)):
            assert_same_bits(pa, pt, "tensor_split {} {} piece {}".format(ios, dim, i))
    for ios in (attn.tensor([2, 4]), attn.tensor(3), attn.tensor([3])):
        it = torch.tensor(to_np(ios))
        oa, ot = xa.tensor_split(ios, dim=1), xt.tensor_split(it, dim=1)
        assert len(oa) == len(ot)
        for pa, pt in zip(oa, ot):
            assert_same_bits(pa, pt, "Tensor.tensor_split tensor {}".format(ios.tolist()))
    ga, gt = both(randn((5, 4), 54), True)
    oa, ot = attn.tensor_split(ga, [1, 3]), torch.tensor_split(gt, [1, 3])
    (oa[0].sum() * 2 + (oa[2] * oa[2]).sum()).backward()
    (ot[0].sum() * 2 + (ot[2] * ot[2]).sum()).backward()
    assert_same_bits(ga.grad, gt.grad, "tensor_split grad")
    for args, exc, pattern in (((xa, 0), RuntimeError, r"larger than 0, got 0.*\(7, 10\)"),
                               ((xa, -2), RuntimeError, r"larger than 0"),
                               ((xa, 3, 2), IndexError, r"out of range"),
                               ((attn.tensor(1.0), 2), RuntimeError, r"0 dims"),
                               ((xa, attn.tensor([1.0])), RuntimeError, r"long"),
                               ((xa, attn.tensor([[1]])), RuntimeError, r"2 dims"),
                               ((xa, 2.5), TypeError, r"tensor_split"),
                               ((xa, True), TypeError, r"tensor_split"),
                               ((xa, [1.5]), TypeError, r"tensor_split")):
        targs = [torch.tensor(to_np(x)) if isinstance(x, attn.Tensor) else x for x in args]
        with pytest.raises(exc):
            torch.tensor_split(*targs)
        with pytest.raises(exc, match=pattern):
            attn.tensor_split(*args)


# ---- trapezoid, trapz ----------------------------------------------------------------------------

def test_trapezoid_and_trapz_values():
    y = randn((4, 6), 55, 3.0)
    x = np.sort(randn((6,), 56, 2.0))
    (ya, yt), (xa, xt) = both(y), both(x)
    for fname in ("trapezoid", "trapz"):
        fa, ft = getattr(attn, fname), getattr(torch, fname)
        # torch's formulas, op for op, and attn's sum adds in torch's order: torch's bits
        for kw in ({}, {"dim": 0}, {"dx": 0.5}, {"dx": 3, "dim": 0}, {"dx": -1.25}):
            assert_same_bits(fa(ya, **kw), ft(yt, **kw), "{} {}".format(fname, kw))
        assert_same_bits(fa(ya, xa), ft(yt, xt), fname + " x")
        x2 = randn((4, 6), 57)
        assert_same_bits(fa(ya, attn.tensor(x2), dim=0), ft(yt, torch.tensor(x2), dim=0),
                         fname + " x 2-D")
        x3 = randn((6,), 58)
        assert_same_bits(fa(ya, attn.tensor(x3[:4]), dim=0), ft(yt, torch.tensor(x3[:4]), dim=0),
                         fname + " x dim 0")
        y3, x4 = randn((2, 4, 6), 59), randn((4, 6), 60)  # x padded with leading 1s
        for dim in (-1, 1):
            assert_same_bits(fa(attn.tensor(y3), attn.tensor(x4), dim=dim),
                             ft(torch.tensor(y3), torch.tensor(x4), dim=dim),
                             "{} x 2-D, y 3-D, dim {}".format(fname, dim))
    yi, xi = both(np.array([[1, 2, 4, 8], [0, -3, 5, 2]], np.int64)), both(np.array([0, 1, 3, 4]))
    for kw in ({}, {"dx": 2}, {"dx": 0.5}):  # integers: float32 results, exact here
        assert_same_bits(attn.trapezoid(yi[0], **kw), torch.trapezoid(yi[1], **kw),
                         "int " + str(kw))
    assert_same_bits(attn.trapezoid(yi[0], xi[0]), torch.trapezoid(yi[1], xi[1]), "int x")
    assert_same_bits(attn.trapz(yi[0], xi[0].float()), torch.trapz(yi[1], xi[1].float()), "mixed x")
    for shape, dim in (((0,), -1), ((2, 0), -1), ((2, 0), 0), ((3, 1), -1)):
        ea, et = both(np.zeros(shape, np.float32))
        assert_same_bits(attn.trapezoid(ea, dim=dim), torch.trapezoid(et, dim=dim),
                         "empty {} {}".format(shape, dim))
    ea, et = both(np.zeros((2, 0), np.int64))
    assert_same_bits(attn.trapezoid(ea), torch.trapezoid(et), "empty int64")
    bf = torch.tensor([1.0, 2.0, 4.0]).bfloat16()
    ours = attn.trapezoid(attn.tensor([1.0, 2.0, 4.0]).bfloat16(), dx=0.3)
    assert ours.dtype == attn.bfloat16
    assert ours.float().item() == torch.trapezoid(bf, dx=0.3).float().item()


def test_trapezoid_gradients_and_refusals():
    y, x = randn((3, 5), 59), np.sort(randn((5,), 60))
    for kw in ({}, {"dx": 0.75}, {"x": x}, {"dim": 0}):
        (ya, yt) = both(y, True)
        xa = attn.tensor(x, requires_grad=True) if "x" in kw else None
        xt = torch.tensor(x, requires_grad=True) if "x" in kw else None
        ka = dict(kw, **({"x": xa} if "x" in kw else {}))
        kt = dict(kw, **({"x": xt} if "x" in kw else {}))
        oa, ot = attn.trapezoid(ya, **ka), torch.trapezoid(yt, **kt)
        backward_both(oa, ot, 61)
        assert_same_bits(ya.grad, yt.grad, "trapezoid grad y {}".format(list(kw)))
        if xa is not None:
            assert_same_bits(xa.grad, xt.grad, "trapezoid grad x")
    ya, yt = both(y)
    cases = [((ya, attn.tensor([0.0, 1, 3])), (yt, torch.tensor([0.0, 1, 3])), {}, RuntimeError,
              r"one `x` value.*\(3,\).*\(3, 5\)"),
             ((ya, attn.zeros(2, 1)), (yt, torch.zeros(2, 1)), {}, RuntimeError,
              r"trapezoid.*cannot be broadcast"),
             ((ya,), (yt,), {"dim": 2}, IndexError, r"out of range"),
             ((attn.tensor(3.0),), (torch.tensor(3.0),), {}, IndexError, r"no dimensions"),
             ((attn.tensor([True, False, True]),), (torch.tensor([True, False, True]),), {},
              RuntimeError, r"bool"),
             ((ya, attn.tensor([True] * 5)), (yt, torch.tensor([True] * 5)), {}, RuntimeError,
              r"bool"),
             ((ya, attn.tensor(x)), (yt, torch.tensor(x)), {"dx": 1}, TypeError, r"x or dx"),
             ((ya, 2), (yt, 2), {}, TypeError, r"x.*int")]
    for fname in ("trapezoid", "trapz"):
        for aa, at, kw, exc, pattern in cases + [((ya,), (yt,), {"dx": True}, RuntimeError,
                                                  r"real number")] * (fname == "trapezoid"):
            with pytest.raises(exc):
                getattr(torch, fname)(*at, **kw)
            with pytest.raises(exc, match=pattern):
                getattr(attn, fname)(*aa, **kw)
    with pytest.raises(TypeError):
        torch.trapz(yt, dx=None)
    with pytest.raises(TypeError, match=r"trapz.*dx"):
        attn.trapz(ya, dx=None)
    assert_same_bits(attn.trapz(ya, dx=True), torch.trapz(yt, dx=True), "trapz dx=True is 1.0")


# ---- cross ---------------------------------------------------------------------------------------

def test_cross_values_default_dim_and_gradient():
    for sa, sb, dim in (((4, 3), (4, 3), None), ((3, 4), (3, 4), None), ((3, 3), (3, 3), None),
                        ((4, 3), (1, 3), None), ((1, 3), (4, 3), -1), ((3, 1), (3, 3), None),
                        ((2, 3, 5), (2, 3, 5), 1), ((3, 1, 5), (3, 4, 5), 0), ((2, 3), (2, 3), -1),
                        ((3, 3), (3, 3), 1)):
        a, b = randn(sa, 62), randn(sb, 63)
        (xa, xt), (ya, yt) = both(a), both(b)
        oa = attn.cross(xa, ya) if dim is None else attn.cross(xa, ya, dim)
        ot = torch.cross(xt, yt) if dim is None else torch.cross(xt, yt, dim)
        close(oa, ot, "cross {} {} {}".format(sa, sb, dim), ulps=4, scale=8.0)
    xa, xt = both(randn((5, 3), 64))
    ya, yt = both(randn((5, 3), 65))
    close(xa.cross(ya), xt.cross(yt), "Tensor.cross", ulps=4, scale=8.0)
    close(xa.cross(ya, dim=1), xt.cross(yt, dim=1), "Tensor.cross dim", ulps=4, scale=8.0)
    ia, it = both(np.array([[1, 2, 3], [-4, 0, 7]], np.int64))
    ja, jt = both(np.array([[4, 5, 6], [2, -2, 1]], np.int64))
    assert_same_bits(attn.cross(ia, ja), torch.cross(it, jt), "cross int64")
    # exact where the products are: small integers in float32, and a basis
    e = np.eye(3, dtype=np.float32)
    for i in range(3):
        for j in range(3):
            assert_same_bits(attn.cross(attn.tensor(e[i]), attn.tensor(e[j])),
                             torch.cross(torch.tensor(e[i]), torch.tensor(e[j])), "basis")
    (xa, xt), (ya, yt) = both(randn((4, 3), 66), True), both(randn((4, 3), 67), True)
    oa, ot = attn.cross(xa, ya, 1), torch.cross(xt, yt, 1)
    backward_both(oa, ot, 68)
    close(xa.grad, xt.grad, "cross grad input", ulps=4, scale=8.0)
    close(ya.grad, yt.grad, "cross grad other", ulps=4, scale=8.0)


def test_cross_refusals():
    z = lambda *s: (attn.zeros(*s), torch.zeros(*s))  # noqa: E731
    cases = [((z(2, 4), z(2, 4)), {}, RuntimeError, r"cross.*no dimension of size 3.*\(2, 4\)"),
             ((z(2, 4), z(2, 4)), {"dim": 1}, RuntimeError,
              r"dimension 1 must have length 3. Got 4 and 4.*\(2, 4\)"),
             ((z(2, 3), z(2, 3)), {"dim": 2}, IndexError, r"out of range"),
             ((z(3), z(4, 3)), {}, RuntimeError, r"same number of dimensions.*\(3,\).*\(4, 3\)"),
             ((z(3, 3), z(2, 3)), {}, RuntimeError, r"dimension 0.*Got 3 and 2"),
             ((z(3, 2), z(3, 3)), {}, RuntimeError, r"cross.*\(3, 2\).*\(3, 3\).*broadcast"),
             ((z(5, 3), z(2, 1, 3)), {"dim": -1}, RuntimeError, r"same number of dimensions")]
    for args, kw, exc, pattern in cases:
        with pytest.raises(exc):
            torch.cross(*[t for _, t in args], **kw)
        with pytest.raises(exc, match=pattern):
            attn.cross(*[a for a, _ in args], **kw)
    with pytest.raises(RuntimeError):
        torch.cross(torch.tensor([1, 2, 3]), torch.tensor([4.0, 5, 6]))
    with pytest.raises(RuntimeError, match=r"cross.*torch.int64.*torch.float32"):
        attn.cross(attn.tensor([1, 2, 3]), attn.tensor([4.0, 5, 6]))
    with pytest.raises(RuntimeError, match=r"cross.*Bool"):
        attn.cross(attn.tensor([True, False, True]), attn.tensor([True, True, False]))


# ---- atleast_nd, block_diag ----------------------------------------------------------------------

def test_atleast_nd():
    arrays = [np.float32(2.5), randn((3,), 70), randn((2, 3), 71), randn((2, 3, 4), 72),
              randn((1, 2, 1, 2), 73), np.array([1, 2], np.int64)]
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        fa, ft = getattr(attn, name), getattr(torch, name)
        for arr in arrays:
            xa, xt = both(arr)
            assert_same_bits(fa(xa), ft(xt), "{} {}".format(name, np.shape(arr)))
        pa = [attn.tensor(a) for a in arrays]
        pt = [torch.tensor(a) for a in arrays]
        for ours, theirs in ((fa(*pa), ft(*pt)), (fa(pa), ft(pt)), (fa(tuple(pa[:1])),
                                                                     ft(tuple(pt[:1])))):
            assert isinstance(ours, tuple) and len(ours) == len(theirs), name
            for o, t in zip(ours, theirs):
                assert_same_bits(o, t, name + " several")
        assert fa() == ft() == ()
        with pytest.raises(TypeError):
            ft(1.0)
        with pytest.raises(TypeError, match=name):
            fa(1.0)
    ga, gt = both(np.float32(1.5), True)
    (attn.atleast_3d(ga) * 3).sum().backward()
    (torch.atleast_3d(gt) * 3).sum().backward()
    assert_same_bits(ga.grad, gt.grad, "atleast_3d grad")


def test_block_diag():
    parts = [randn((2, 2), 74), randn((1, 3), 75), np.float32(5.0), randn((2,), 76),
             randn((0, 2), 77), randn((2, 0), 78)]
    pa, pt = [attn.tensor(p) for p in parts], [torch.tensor(p) for p in parts]
    assert_same_bits(attn.block_diag(*pa), torch.block_diag(*pt), "block_diag")
    assert_same_bits(attn.block_diag(pa[0]), torch.block_diag(pt[0]), "block_diag one")
    assert_same_bits(attn.block_diag(), torch.block_diag(), "block_diag none")
    for a, b in ((np.ones((2, 2), np.int64), np.array([1.5], np.float32)),
                 (np.ones((2, 2), np.int64), np.array(True)),
                 (np.array(True), np.array(5, np.int64)),
                 (np.ones((2, 2), np.int64), np.float32(2.5))):
        (xa, xt), (ya, yt) = both(a), both(b)
        assert_same_bits(attn.block_diag(xa, ya), torch.block_diag(xt, yt),
                         "block_diag {} {}".format(a.dtype, np.asarray(b).dtype))
    ha = attn.block_diag(attn.ones(2, 2).bfloat16(), attn.tensor(5.0))
    ht = torch.block_diag(torch.ones(2, 2).bfloat16(), torch.tensor(5.0))
    assert ha.dtype == attn.bfloat16 and ht.dtype == torch.bfloat16
    assert_same_bits(ha.float(), ht.float(), "block_diag bfloat16")
    (xa, xt), (ya, yt) = both(randn((2, 3), 79), True), both(randn((2,), 80), True)
    oa, ot = attn.block_diag(xa, ya), torch.block_diag(xt, yt)
    backward_both(oa, ot, 81)
    assert_same_bits(xa.grad, xt.grad, "block_diag grad 0")
    assert_same_bits(ya.grad, yt.grad, "block_diag grad 1")
    with pytest.raises(RuntimeError):
        torch.block_diag(torch.ones(2, 2), torch.ones(2, 2, 2))
    with pytest.raises(RuntimeError, match=r"block_diag.*Input 1 has 3 dimensions.*\(2, 2, 2\)"):
        attn.block_diag(attn.ones(2, 2), attn.ones(2, 2, 2))
    with pytest.raises(TypeError):
        torch.block_diag([torch.ones(2, 2)])
    with pytest.raises(TypeError, match=r"block_diag.*element 0.*list"):
        attn.block_diag([attn.ones(2, 2)])


def test_names_are_installed():
    for name in ("baddbmm addmv addr diag_embed kron logspace nanmean nansum signbit tensor_split "
                 "trapezoid trapz cross atleast_1d atleast_2d atleast_3d block_diag").split():
        assert callable(getattr(attn, name)), name
    for name in ("baddbmm addmv addr diag_embed kron nanmean nansum signbit tensor_split "
                 "cross").split():
        assert callable(getattr(attn.Tensor, name)), "Tensor." + name
