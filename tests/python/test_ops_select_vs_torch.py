"""The ops small PyTorch programs use beyond the basics, against PyTorch 1.13 (the oracle):
multinomial and exponential_ (the same random stream for the same seed), topk / sort / argsort /
argmax / argmin (torch's index order on ties), cumsum / cumprod, clamp, gather / scatter,
split / chunk / unbind, the in-place math methods and indexing with tensors, lists, bool masks and
None. Values, dtypes, shapes, gradients and errors: where torch raises RuntimeError attn raises
ValueError (docs/errors.md), IndexError where torch raises IndexError.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from conftest import assert_same_bits, to_attn, to_np  # noqa: E402


def pair(shape, seed=0, kind="f"):
    rs = np.random.RandomState(seed)
    if kind == "f":
        a = rs.standard_normal(size=shape).astype(np.float32)
    elif kind == "ties":  # few distinct values: many ties
        a = rs.randint(0, 4, size=shape).astype(np.float32)
    elif kind == "i":
        a = rs.randint(-5, 6, size=shape).astype(np.int64)
    else:
        a = rs.uniform(size=shape) < 0.5
    return attn.tensor(a.copy()), torch.from_numpy(a.copy())


def grads_match(f, shape, seed=0, rtol=1e-5, atol=1e-6):
    """f(module, x) -> loss-able tensor: the same gradient of sum(f(x) * w) in attn and torch."""
    o, t = pair(shape, seed)
    o.requires_grad_()
    t.requires_grad_()
    yo, yt = f(attn, o), f(torch, t)
    w = np.random.RandomState(seed + 1).standard_normal(size=tuple(yt.shape)).astype(np.float32)
    (yo * attn.tensor(w)).sum().backward()
    (yt * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(to_np(o.grad), to_np(t.grad), rtol=rtol, atol=atol)
    return yo, yt


def raises_like_torch(f, attn_exc=ValueError, torch_exc=RuntimeError, match=None):
    with pytest.raises(torch_exc):
        f(torch)
    with pytest.raises(attn_exc, match=match):
        f(attn)


# ---- multinomial and exponential_: the same stream as torch --------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2024])
def test_exponential_stream(seed):
    torch.manual_seed(seed)
    attn.manual_seed(seed)
    for shape, lambd in [((37,), 1.0), ((5, 3), 2.5), ((1,), 0.5), ((129,), 1.0)]:
        assert_same_bits(attn.empty(*shape).exponential_(lambd),
                         torch.empty(*shape).exponential_(lambd))
    # a non-contiguous tensor is filled in memory order, as torch's iterator does
    assert_same_bits(attn.empty(4, 6).t().exponential_(), torch.empty(4, 6).t().exponential_())
    assert_same_bits(attn.rand(5), torch.rand(5))  # the generators stay in step
    g_o, g_t = attn.Generator(), torch.Generator()
    g_o.manual_seed(seed + 7)
    g_t.manual_seed(seed + 7)
    assert_same_bits(attn.empty(9).exponential_(generator=g_o),
                     torch.empty(9).exponential_(generator=g_t))


def test_exponential_errors_and_version():
    raises_like_torch(lambda m: m.empty(3).exponential_(-1.0), match=r"^\[exponential_\]")
    x = attn.zeros(3)
    v = x._version
    x.exponential_()
    assert x._version > v
    with pytest.raises(ValueError, match=r"^\[exponential_\]"):
        attn.zeros(3, dtype=attn.int64).exponential_()


@pytest.mark.parametrize("seed", [0, 5, 1234])
@pytest.mark.parametrize("n,replacement", [(1, False), (1, True), (3, False), (40, False),
                                           (7, True), (100, True)])
def test_multinomial_stream(seed, n, replacement):
    torch.manual_seed(seed)
    attn.manual_seed(seed)
    pt, po = torch.rand(4, 40), attn.rand(4, 40)
    assert_same_bits(po, pt)
    pt[1, :20] = 0  # zero-probability categories are never drawn
    po[1, :20] = 0
    assert_same_bits(attn.multinomial(po, n, replacement), torch.multinomial(pt, n, replacement))
    assert_same_bits(po[2].multinomial(n, replacement), pt[2].multinomial(n, replacement))
    assert_same_bits(attn.multinomial(po * 3.0, n, replacement=replacement),  # unnormalised
                     torch.multinomial(pt * 3.0, n, replacement=replacement))
    assert_same_bits(attn.rand(3), torch.rand(3))


@pytest.mark.parametrize("view", [lambda p: p.t(), lambda p: p[::2].t(), lambda p: p[::3, 1]])
def test_multinomial_non_contiguous_probs(view):
    """torch draws the noise into empty_like(probs), which keeps the input's memory order."""
    torch.manual_seed(3)
    attn.manual_seed(3)
    pt, po = torch.rand(30, 4), attn.rand(30, 4)
    for n, rep in [(1, False), (3, False), (5, True)]:
        assert_same_bits(attn.multinomial(view(po), n, rep), torch.multinomial(view(pt), n, rep))


def test_multinomial_generator_and_softmax_sampling():
    """The sampling step of a generate() loop: softmax over logits, one sample per row."""
    g_o, g_t = attn.Generator(), torch.Generator()
    g_o.manual_seed(42)
    g_t.manual_seed(42)
    lo, lt = pair((3, 65), 3)
    for _ in range(5):
        so = attn.multinomial(attn.softmax(lo, dim=-1), num_samples=1, generator=g_o)
        st = torch.multinomial(torch.softmax(lt, dim=-1), num_samples=1, generator=g_t)
        assert_same_bits(so, st)


@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_errors(replacement):
    def bad(values, n=1):
        return lambda m: m.multinomial(m.tensor(values), n, replacement)
    for values in ([0.5, -0.1, 0.6], [0.5, float("inf")], [0.5, float("nan")], [0.0, 0.0],
                   [[0.5, 0.5], [0.0, 0.0]]):
        raises_like_torch(bad(values), match=r"^\[multinomial\]")
    raises_like_torch(lambda m: m.multinomial(m.ones(2, 2, 2), 1, replacement))
    raises_like_torch(lambda m: m.multinomial(m.tensor(0.5), 1, replacement))
    raises_like_torch(lambda m: m.multinomial(m.ones(3), 0, replacement))
    raises_like_torch(lambda m: m.multinomial(m.tensor([1, 2]), 1, replacement))
    if not replacement:
        raises_like_torch(lambda m: m.multinomial(m.ones(3), 4, False),
                          match="without replacement")
    else:
        assert attn.multinomial(attn.ones(3), 4, True).shape == (4,)


# ---- sorting and selection -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["f", "ties", "i", "b"])
@pytest.mark.parametrize("shape,dim", [((300,), 0), ((5, 70), -1), ((5, 70), 0), ((3, 4, 9), 1)])
def test_sort_argsort(kind, shape, dim):
    o, t = pair(shape, 11, kind)
    for descending in (False, True):
        for stable in (False, True):
            ro = attn.sort(o, dim=dim, descending=descending, stable=stable)
            rt = torch.sort(t, dim=dim, descending=descending, stable=stable)
            assert_same_bits(ro.values, rt.values)
            assert_same_bits(ro.indices, rt.indices)
            assert_same_bits(o.argsort(dim, descending=descending),
                             t.argsort(dim, descending=descending))
    vo, io = o.sort(dim)
    assert_same_bits(io, t.sort(dim)[1])


def test_sort_nan_and_repr():
    x = [3.0, float("nan"), 1.0, 3.0, float("-inf"), float("nan"), 0.0]
    for desc in (False, True):
        ro, rt = attn.sort(attn.tensor(x), descending=desc), torch.sort(torch.tensor(x),
                                                                          descending=desc)
        assert_same_bits(ro.values, rt.values)
        assert_same_bits(ro.indices, rt.indices)
    r = attn.topk(attn.tensor([1.0, 3.0, 2.0]), 2)
    assert repr(r).startswith("torch.return_types.topk(\nvalues=tensor([3., 2.])")
    assert isinstance(r, tuple) and len(r) == 2


@pytest.mark.parametrize("kind", ["f", "ties", "i"])
@pytest.mark.parametrize("shape,dim", [((300,), 0), ((5, 70), -1), ((6, 9), 0), ((2, 3, 130), 2)])
def test_topk(kind, shape, dim):
    o, t = pair(shape, 12, kind)
    n = shape[dim]
    for k in sorted({0, 1, 2, 3, n // 2, n}):
        for largest in (True, False):
            ro = o.topk(k, dim=dim, largest=largest)
            rt = t.topk(k, dim=dim, largest=largest)
            assert_same_bits(ro.values, rt.values, "k={} largest={}".format(k, largest))
            assert_same_bits(ro.indices, rt.indices, "k={} largest={}".format(k, largest))
    ro, rt = attn.topk(o, 2, dim, True, False), torch.topk(t, 2, dim, True, False)
    assert_same_bits(ro[1], rt[1])


def test_topk_errors():
    raises_like_torch(lambda m: m.topk(m.ones(3, 4), 5), match=r"^\[topk\]")
    raises_like_torch(lambda m: m.topk(m.ones(3, 4), -1))
    raises_like_torch(lambda m: m.topk(m.ones(3, 4), 1, dim=2), attn_exc=IndexError,
                      torch_exc=IndexError)


def test_sort_topk_gradients():
    grads_match(lambda m, x: m.sort(x, dim=1, descending=True).values, (4, 7))
    grads_match(lambda m, x: x.sort(0)[0], (5, 3))
    grads_match(lambda m, x: m.topk(x, 3).values, (4, 9))
    grads_match(lambda m, x: x.topk(2, dim=0, largest=False)[0], (6, 3))
    o = attn.ones(3, requires_grad=True)
    assert o.sort()[0].grad_fn.name() == "SortBackward0"
    assert o.topk(1)[0].grad_fn.name() == "TopkBackward0"
    assert not o.sort()[1].requires_grad


@pytest.mark.parametrize("kind", ["f", "ties", "i"])
def test_argmax_argmin(kind):
    o, t = pair((4, 5, 6), 13, kind)
    for fn in ("argmax", "argmin"):
        assert_same_bits(getattr(attn, fn)(o), getattr(torch, fn)(t))
        assert_same_bits(getattr(o, fn)(keepdim=True), getattr(t, fn)(keepdim=True))
        for d in (0, 1, -1):
            for keepdim in (False, True):
                assert_same_bits(getattr(o, fn)(d, keepdim), getattr(t, fn)(d, keepdim))
                assert_same_bits(getattr(attn, fn)(o, dim=d, keepdim=keepdim),
                                 getattr(torch, fn)(t, dim=d, keepdim=keepdim))
    raises_like_torch(lambda m: m.argmin(m.ones(2, 3), 2), attn_exc=IndexError,
                      torch_exc=IndexError)


# ---- cumsum / cumprod ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,dim", [((1000,), 0), ((4, 65), 1), ((4, 65), 0), ((2, 3, 4), -2)])
def test_cumsum_cumprod(shape, dim):
    o, t = pair(shape, 14)
    assert_same_bits(attn.cumsum(o, dim), torch.cumsum(t, dim))
    assert_same_bits(o.cumsum(dim=dim), t.cumsum(dim=dim))
    assert_same_bits(o.cumprod(dim), t.cumprod(dim))
    oi, ti = pair(shape, 14, "i")
    assert_same_bits(oi.cumsum(dim), ti.cumsum(dim))
    assert_same_bits(oi.cumprod(dim), ti.cumprod(dim))
    ob, tb = pair(shape, 14, "b")
    assert_same_bits(ob.cumsum(dim), tb.cumsum(dim))
    assert_same_bits(oi.cumsum(dim, dtype=attn.float32), ti.cumsum(dim, dtype=torch.float32))


def test_cumsum_cumprod_gradients():
    grads_match(lambda m, x: m.cumsum(x, 1), (3, 8))
    grads_match(lambda m, x: x.cumsum(0), (5, 2))
    grads_match(lambda m, x: x.cumprod(1), (3, 6), rtol=1e-4, atol=1e-5)

    def with_zero(m, x):
        return (x * (x > -0.3).float()).cumprod(-1)  # zeros inside the product
    grads_match(with_zero, (4, 6), rtol=1e-4, atol=1e-5)
    raises_like_torch(lambda m: m.cumsum(m.ones(2, 3), 2), attn_exc=IndexError,
                      torch_exc=IndexError)


# ---- clamp ---------------------------------------------------------------------------------------

def test_clamp_scalars():
    o, t = pair((7, 65), 15)
    for lo, hi in [(-0.5, 0.5), (None, 0.1), (-0.2, None), (0.5, -0.5), (0, 1)]:
        assert_same_bits(attn.clamp(o, lo, hi), torch.clamp(t, lo, hi))
        assert_same_bits(o.clamp(min=lo, max=hi), t.clamp(min=lo, max=hi))
        assert_same_bits(attn.clip(o, lo, hi), torch.clip(t, lo, hi))
    x = [float("nan"), 1.0, -3.0, float("inf")]
    assert_same_bits(attn.tensor(x).clamp(-1, 2), torch.tensor(x).clamp(-1, 2))
    oi, ti = pair((20,), 15, "i")
    assert_same_bits(oi.clamp(-2, 3), ti.clamp(-2, 3))
    assert_same_bits(oi.clamp(min=2.5), ti.clamp(min=2.5))  # a float bound makes it float32
    raises_like_torch(lambda m: m.clamp(m.ones(3)))


def test_clamp_tensors_and_gradients():
    o, t = pair((4, 6), 16)
    lo_o, lo_t = pair((6,), 17)
    hi_o, hi_t = pair((4, 1), 18)
    assert_same_bits(attn.clamp(o, lo_o, hi_o), torch.clamp(t, lo_t, hi_t))
    assert_same_bits(o.clamp(min=lo_o), t.clamp(min=lo_t))
    assert_same_bits(o.clamp(max=hi_o), t.clamp(max=hi_t))
    grads_match(lambda m, x: m.clamp(x, -0.5, 0.7), (5, 8))
    grads_match(lambda m, x: x.clamp(max=0.0), (5, 8))
    # gradients of tensor bounds
    for m_, (x, lo, hi) in ((attn, (o, lo_o, hi_o)), (torch, (t, lo_t, hi_t))):
        for v in (x, lo, hi):
            v.requires_grad_()
        (m_.clamp(x, lo, hi) * m_.arange(24.0).reshape(4, 6)).sum().backward()
    for a, b in ((o, t), (lo_o, lo_t), (hi_o, hi_t)):
        np.testing.assert_allclose(to_np(a.grad), to_np(b.grad), rtol=1e-6)


def test_clamp_inplace():
    o, t = pair((3, 5), 19)
    v = o._version
    assert o.clamp_(-0.1, 0.2) is o
    t.clamp_(-0.1, 0.2)
    assert_same_bits(o, t)
    assert o._version > v
    o.clip_(max=0.0)
    t.clip_(max=0.0)
    assert_same_bits(o, t)


# ---- gather / scatter ----------------------------------------------------------------------------

def test_gather():
    o, t = pair((4, 6), 20)
    idx = np.random.RandomState(0).randint(0, 6, size=(4, 3))
    for dim, ix in ((1, idx), (0, idx[:, :2] % 4)):
        assert_same_bits(attn.gather(o, dim, attn.tensor(ix)),
                         torch.gather(t, dim, torch.tensor(ix)))
        assert_same_bits(o.gather(dim, index=attn.tensor(ix)), t.gather(dim, torch.tensor(ix)))
    oi, ti = pair((4, 6), 20, "i")
    assert_same_bits(oi.gather(1, attn.tensor(idx % 6)), ti.gather(1, torch.tensor(idx % 6)))
    # the cross-entropy idiom: log-probabilities of the targets (the log-probabilities themselves
    # within float rounding of torch's: its exp is Sleef's, attn's vmath's)
    tgt = np.array([[1], [5], [0], [2]])
    ls = o.log_softmax(-1)
    np.testing.assert_allclose(to_np(ls), to_np(t.log_softmax(-1)), rtol=1e-6, atol=1e-6)
    assert_same_bits(ls.gather(-1, attn.tensor(tgt)),
                     torch.from_numpy(to_np(ls)).gather(-1, torch.tensor(tgt)))
    grads_match(lambda m, x: x.gather(1, m.tensor([[0, 0, 5], [1, 2, 1], [3, 3, 3], [4, 0, 0]])),
                (4, 6))


def test_gather_errors():
    raises_like_torch(lambda m: m.ones(3, 4).gather(1, m.tensor([[4]])), match=r"^\[gather\]")
    raises_like_torch(lambda m: m.ones(3, 4).gather(1, m.tensor([[-1]])))
    raises_like_torch(lambda m: m.ones(3, 4).gather(1, m.tensor([0, 1])))
    raises_like_torch(lambda m: m.ones(3, 4).gather(1, m.tensor([[0.0]])))
    raises_like_torch(lambda m: m.ones(3, 4).gather(1, m.zeros(4, 1, dtype=m.int64)))


def test_scatter_and_scatter_add():
    o, t = pair((4, 6), 21)
    so, st = pair((3, 5), 22)
    idx = np.array([[0, 1, 2, 3, 4], [5, 4, 3, 2, 1], [1, 1, 1, 1, 1]])
    io, it = attn.tensor(idx[:2]), torch.tensor(idx[:2])  # unique positions per row for scatter
    assert_same_bits(o.scatter(1, io, so[:2]), t.scatter(1, it, st[:2]))
    assert_same_bits(attn.scatter(o, 1, io, 2.5), torch.scatter(t, 1, it, 2.5))
    assert_same_bits(o.scatter(1, io, value=-1.0), t.scatter(1, it, value=-1.0))
    io3, it3 = attn.tensor(idx), torch.tensor(idx)
    io4, it4 = attn.tensor(idx % 4), torch.tensor(idx % 4)
    assert_same_bits(o.scatter_add(1, io3, so), t.scatter_add(1, it3, st))
    assert_same_bits(attn.scatter_add(o, 0, io4, so), torch.scatter_add(t, 0, it4, st))
    oc, tc = o.clone(), t.clone()
    v = oc._version
    assert oc.scatter_(1, io, so[:2]) is oc
    tc.scatter_(1, it, st[:2])
    assert_same_bits(oc, tc)
    assert oc._version > v
    oc.scatter_add_(1, io3, so)
    tc.scatter_add_(1, it3, st)
    assert_same_bits(oc, tc)
    oc.scatter_(0, io4, 0.0)
    tc.scatter_(0, it4, 0.0)
    assert_same_bits(oc, tc)
    with pytest.raises(NotImplementedError, match="attn"):
        o.scatter(1, io, so[:2], reduce="add")


def test_scatter_gradients():
    idx = [[0, 1, 2], [5, 4, 3]]
    res = {}
    for name, m_ in (("attn", attn), ("torch", torch)):
        x = m_.tensor(np.arange(24, dtype=np.float32).reshape(4, 6) / 10)
        s = m_.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7)
        x.requires_grad_()
        s.requires_grad_()
        w = m_.tensor(np.random.RandomState(3).standard_normal((4, 6)).astype(np.float32))
        y = (x * 1.0).scatter(1, m_.tensor(idx), s) * w
        z = (x * 1.0).scatter_add(1, m_.tensor(idx), s * s) * w
        (y.sum() + z.sum()).backward()
        res[name] = (to_np(x.grad), to_np(s.grad))
    for a, b in zip(res["attn"], res["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# ---- split / chunk / unbind ----------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda m, x: m.split(x, 2, dim=1),
    lambda m, x: x.split(3),
    lambda m, x: x.split([1, 4, 2], dim=1),
    lambda m, x: m.split(x, [5], 0),
    lambda m, x: x.chunk(3, dim=1),
    lambda m, x: m.chunk(x, 2),
    lambda m, x: x.chunk(10, 1),
    lambda m, x: x.unbind(1),
    lambda m, x: m.unbind(x),
])
def test_split_chunk_unbind(fn):
    o, t = pair((5, 7), 23)
    ro, rt = fn(attn, o), fn(torch, t)
    assert isinstance(ro, tuple) and len(ro) == len(rt)
    for a, b in zip(ro, rt):
        assert_same_bits(a, b)
    o.requires_grad_()
    t.requires_grad_()
    for m_, x in ((attn, o), (torch, t)):
        pieces = fn(m_, x)
        sum((p * (i + 1)).sum() for i, p in enumerate(pieces)).backward()
    np.testing.assert_array_equal(to_np(o.grad), to_np(t.grad))


def test_split_idioms_and_errors():
    # the qkv idiom of a GPT block
    o, t = pair((2, 3, 12), 24)
    for a, b in zip(o.split(4, dim=2), t.split(4, dim=2)):
        assert_same_bits(a, b)
    assert len(attn.chunk(attn.arange(0), 3)) == len(torch.chunk(torch.arange(0), 3))
    raises_like_torch(lambda m: m.ones(5).split([2, 2]))
    raises_like_torch(lambda m: m.ones(5).chunk(0))
    raises_like_torch(lambda m: m.ones(5).split(-1))


# ---- in-place math -------------------------------------------------------------------------------

@pytest.mark.parametrize("name,args", [("exp_", ()), ("tanh_", ()), ("sqrt_", ()), ("neg_", ()),
                                       ("abs_", ()), ("pow_", (2,)), ("pow_", (0.5,)),
                                       ("sigmoid_", ()), ("relu_", ()), ("rsqrt_", ()),
                                       ("log_", ()), ("zero_", ())])
def test_inplace_math(name, args):
    o, t = pair((7, 65), 25)
    if name in ("sqrt_", "rsqrt_", "log_") or args == (0.5,):
        o, t = o.abs() + 0.5, t.abs() + 0.5
    v = o._version
    r = getattr(o, name)(*args)
    getattr(t, name)(*args)
    assert r is o
    assert o._version > v
    np.testing.assert_allclose(to_np(o), to_np(t), rtol=2e-6, atol=1e-7)
    # through the graph: the gradient of the op reaches the leaf
    if name != "zero_":
        def f(m, x):
            y = x.abs() + 0.5 if name in ("sqrt_", "rsqrt_", "log_") or args == (0.5,) else x * 1
            return getattr(y, name)(*args)
        grads_match(f, (3, 4), rtol=1e-5, atol=1e-6)


def test_pow_inplace_with_a_tensor_exponent_that_requires_grad():
    res = {}
    for name, m in (("attn", attn), ("torch", torch)):
        e = m.tensor([0.5, 2.0, 3.0], requires_grad=True)
        x = m.tensor([1.5, 2.0, 0.5])
        x.pow_(e)
        (x * m.tensor([1.0, 2.0, 3.0])).sum().backward()
        res[name] = (to_np(x), to_np(e.grad))
    for a, b in zip(res["attn"], res["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_inplace_refused_on_leaf_and_int():
    def on_leaf(m):
        m.ones(3, requires_grad=True).exp_()
    raises_like_torch(on_leaf)
    raises_like_torch(lambda m: m.arange(3).exp_())
    oi, ti = pair((5,), 26, "i")
    oi.abs_()
    ti.abs_()
    oi.neg_()
    ti.neg_()
    assert_same_bits(oi, ti)


# ---- indexing ------------------------------------------------------------------------------------

INDEXING = [
    ("index tensor", lambda m, x: x[m.tensor([2, 0, 2, -1])]),
    ("2-d index tensor", lambda m, x: x[m.tensor([[2, 0], [1, 1]])]),
    ("list in the middle", lambda m, x: x[:, [-1], :]),
    ("list of ints", lambda m, x: x[[0, 2]]),
    ("index tensor after a slice", lambda m, x: x[1:, m.tensor([[0, 3], [2, 2]])]),
    ("None", lambda m, x: x[..., None]),
    ("None in the middle", lambda m, x: x[:, None, 1]),
    ("full bool mask", lambda m, x: x[x > 0]),
    ("row mask", lambda m, x: x[m.tensor([True, False, True])]),
    ("mask over two dims", lambda m, x: x[x.sum(-1) > 0]),
    ("mask after a slice", lambda m, x: x[:, m.tensor([True, False, True, True])]),
    ("list of bools", lambda m, x: x[[False, True, True]]),
]


@pytest.mark.parametrize("name,fn", INDEXING, ids=[c[0] for c in INDEXING])
def test_indexing_vs_torch(name, fn):
    o, t = pair((3, 4, 5), 27)
    assert_same_bits(fn(attn, o), fn(torch, t), name)
    oi, ti = pair((3, 4, 5), 27, "i")
    assert_same_bits(fn(attn, oi), fn(torch, ti), name)
    grads_match(fn, (3, 4, 5), seed=27)


SETITEMS = [
    ("mask = scalar", lambda m, x: x.__setitem__(x > 0, 0.5)),
    ("mask = tensor", lambda m, x: x.__setitem__(x > 0, m.arange(float((x > 0).sum().item())))),
    ("mask over two dims = row", lambda m, x: x.__setitem__(x.sum(-1) > 0, m.ones(5) * 3)),
    ("index tensor = scalar", lambda m, x: x.__setitem__(m.tensor([[0, 2]]), 7.0)),
    ("index tensor += 1", lambda m, x: x.__setitem__(m.tensor([0, 2]),
                                                     x[m.tensor([0, 2])] + 1)),
    ("list index = tensor", lambda m, x: x.__setitem__((slice(None), [1, 3]),
                                                       m.zeros(3, 2, 5))),
]


@pytest.mark.parametrize("name,fn", SETITEMS, ids=[c[0] for c in SETITEMS])
def test_setitem_vs_torch(name, fn):
    o, t = pair((3, 4, 5), 28)
    fn(attn, o)
    fn(torch, t)
    assert_same_bits(o, t, name)


def test_setitem_augmented_and_gradients():
    o, t = pair((4, 3), 29)
    idx = [0, 0, 2]  # repeated: torch writes the same value twice
    for m_, x in ((attn, o), (torch, t)):
        x[m_.tensor(idx)] += 1
    assert_same_bits(o, t)

    def f(m, x):
        z = x * 1
        z[m.tensor(idx)] += 1
        z[z > 1.5] = 0.0
        v = m.ones(2, 3) * x[3]
        z[m.tensor([1, 3])] = v
        return z * z
    grads_match(f, (4, 3), seed=29)


def test_indexing_errors():
    raises_like_torch(lambda m: m.ones(3, 4)[m.tensor([True, False])], attn_exc=IndexError,
                      torch_exc=IndexError)
    raises_like_torch(lambda m: m.ones(3, 4)[m.tensor([3])], attn_exc=IndexError,
                      torch_exc=IndexError)
    raises_like_torch(lambda m: m.ones(3, 4)[m.tensor([0.0])], attn_exc=IndexError,
                      torch_exc=IndexError)

    with pytest.raises(NotImplementedError, match="attn"):
        attn.ones(3, 4, 2)[attn.tensor([0, 1]), :, attn.tensor([1, 0])]

    def bad_value(m):
        x = m.ones(3, 4)
        x[x > 0] = m.ones(5)
    raises_like_torch(bad_value)


# ---- sum / mean with an int dim (the C++ overloads, from Python) ---------------------------------

def test_sum_mean_int_dim():
    o, t = pair((3, 4, 5), 30)
    assert_same_bits(o.sum(1), t.sum(1))
    assert_same_bits(attn.sum(o, -1, keepdim=True), torch.sum(t, -1, keepdim=True))
    assert_same_bits(o.mean(0, True), t.mean(0, True))


# ---- the torch functions rsqrt, sigmoid, relu, neg, square, bmm, index_select ------------------

@pytest.mark.parametrize("name", ["rsqrt", "sigmoid", "relu", "neg", "negative", "square"])
def test_math_functions(name):
    o, t = pair((7, 65), 31)
    if name == "rsqrt":
        o, t = o.abs() + 0.1, t.abs() + 0.1
    np.testing.assert_allclose(to_np(getattr(attn, name)(o)), to_np(getattr(torch, name)(t)),
                               rtol=2e-6, atol=1e-7)
    grads_match(lambda m, x: getattr(m, name)(x.abs() + 0.1 if name == "rsqrt" else x), (3, 4))
    oi, ti = pair((9,), 31, "i")
    if name in ("neg", "negative", "square", "relu"):
        assert_same_bits(getattr(attn, name)(oi), getattr(torch, name)(ti))


def test_bmm_and_index_select():
    a_o, a_t = pair((3, 4, 5), 32)
    b_o, b_t = pair((3, 5, 2), 33)
    np.testing.assert_allclose(to_np(attn.bmm(a_o, b_o)), to_np(torch.bmm(a_t, b_t)), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(to_np(a_o.bmm(b_o)), to_np(a_t.bmm(b_t)), rtol=1e-5, atol=1e-6)
    raises_like_torch(lambda m: m.bmm(m.ones(3, 4), m.ones(4, 3)))
    raises_like_torch(lambda m: m.bmm(m.ones(2, 3, 4), m.ones(2, 3, 4)))
    for dim, idx in ((0, [2, 0, 2]), (1, [3]), (-1, [4, 0, 1, 1])):
        assert_same_bits(attn.index_select(a_o, dim, attn.tensor(idx)),
                         torch.index_select(a_t, dim, torch.tensor(idx)))
        assert_same_bits(a_o.index_select(dim, attn.tensor(idx)),
                         a_t.index_select(dim, torch.tensor(idx)))
    grads_match(lambda m, x: x.index_select(1, m.tensor([0, 0, 3])), (3, 4))
    raises_like_torch(lambda m: m.ones(3, 4).index_select(1, m.tensor([4])))
    raises_like_torch(lambda m: m.ones(3, 4).index_select(1, m.tensor([-1])))
    raises_like_torch(lambda m: m.ones(3, 4).index_select(1, m.tensor([[1]])), attn_exc=IndexError,
                      torch_exc=IndexError)
