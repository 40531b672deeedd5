"""The ops of today's model programs (Llama, Qwen, Gemma: RoPE's cos/sin and outer, RMSNorm,
repeat_interleave for grouped heads, linspace, one_hot, pad, finfo) against PyTorch 1.13.

RMSNorm is not in torch 1.13: its oracle is the composite PyTorch 2.x runs on the CPU,
x * rsqrt(mean(x^2) + eps) * weight, written with 1.13's ops. cos and sin are within a float32
ulp of the result's scale of torch's (its vectorised kernels round differently from the C
library's); everything else is bit for bit.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402


def pair(shape, seed=0, requires_grad=False):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    a = attn.tensor(x.tolist())
    t = torch.tensor(x)
    if requires_grad:
        a.requires_grad_()
        t.requires_grad_()
    return a, t


def np_of(t):
    return np.array(t.detach().tolist(), dtype=np.float32) if isinstance(t, attn.Tensor) else \
        t.detach().numpy()


def same(a, t):
    assert tuple(a.shape) == tuple(t.shape)
    np.testing.assert_array_equal(np_of(a), np_of(t))


def close_ulp(a, t):
    x, y = np_of(a), np_of(t)
    assert x.shape == y.shape
    scale = max(1.0, float(np.abs(y).max())) if y.size else 1.0
    np.testing.assert_allclose(x, y, rtol=0, atol=2 * scale * 2.0 ** -23)


@pytest.mark.parametrize("fn", ["cos", "sin"])
def test_cos_sin_values_and_gradients(fn):
    a, t = pair((7, 65), requires_grad=True)
    ya, yt = getattr(attn, fn)(a * 3.0), getattr(torch, fn)(t * 3.0)
    close_ulp(ya, yt)
    close_ulp(getattr(a, fn)(), getattr(t, fn)())
    g, gt = pair((7, 65), seed=1)
    ya.backward(g)
    yt.backward(gt)
    close_ulp(a.grad, t.grad)
    assert "Backward0" in repr(ya.grad_fn) and fn.capitalize() in repr(ya.grad_fn)
    b, u = pair((5,))
    getattr(b, fn + "_")()
    getattr(u, fn + "_")()
    close_ulp(b, u)


def test_outer_is_the_broadcast_product():
    a, t = pair((7,), requires_grad=True)
    b, u = pair((5,), seed=1, requires_grad=True)
    same(attn.outer(a, b), torch.outer(t, u))
    same(a.outer(b), t.outer(u))
    same(attn.ger(a, b), torch.ger(t, u))
    attn.outer(a, b).sum().backward()
    torch.outer(t, u).sum().backward()
    close_ulp(a.grad, t.grad)
    close_ulp(b.grad, u.grad)
    with pytest.raises(ValueError, match=r"\[outer\] expected 1-D vectors"):
        attn.outer(a.reshape(1, 7), b)


def torch_rms_norm(x, shape, weight, eps):
    dims = tuple(range(-len(shape), 0))
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


@pytest.mark.parametrize("shape,normalized,eps", [((4, 7, 64), (64,), None),
                                                  ((3, 5, 6), (5, 6), 1e-6),
                                                  ((65,), (65,), 1e-5)])
def test_rms_norm_as_pytorchs_composite(shape, normalized, eps):
    a, t = pair(shape, requires_grad=True)
    w, tw = pair(normalized, seed=2, requires_grad=True)
    ya = AF.rms_norm(a, normalized, w, eps)
    yt = torch_rms_norm(t, normalized, tw, eps)
    close_ulp(ya, yt)  # attn's one-pass kernel (its mean square summed in double)
    g, gt = pair(shape, seed=3)
    ya.backward(g)
    yt.backward(gt)
    close_ulp(a.grad, t.grad)
    close_ulp(w.grad, tw.grad)
    # Without a gradient: attn's one-pass kernel (the mean square summed in double), within a
    # float32 rounding of the composite.
    close_ulp(AF.rms_norm(a.detach(), list(normalized)),
              torch_rms_norm(t.detach(), normalized, None, eps=None))


def test_rms_norm_module():
    m = attn.nn.RMSNorm(64, eps=1e-6)
    assert repr(m) == "RMSNorm((64,), eps=1e-06, elementwise_affine=True)"
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    assert attn.equal(m.weight, attn.ones(64))
    a, t = pair((2, 3, 64), requires_grad=True)
    close_ulp(m(a), torch_rms_norm(t, (64,), torch.ones(64), 1e-6))
    m(a).sum().backward()
    assert m.weight.grad is not None and tuple(m.weight.grad.shape) == (64,)
    plain = attn.nn.RMSNorm((2, 64), elementwise_affine=False)
    assert plain.weight is None and plain.eps is None
    b, u = pair((3, 2, 64))
    close_ulp(plain(b), torch_rms_norm(u, (2, 64), None, None))  # one pass: no gradient


def test_rms_norm_bad_input():
    a = attn.ones(2, 3)
    with pytest.raises(ValueError, match=r"\[rms_norm\] given normalized_shape=\(4,\), expected "
                                         r"input with shape \(\*, 4\), but got input of size "
                                         r"\(2, 3\)"):
        AF.rms_norm(a, (4,))
    with pytest.raises(ValueError, match=r"\[rms_norm\] weight \(2,\) must have the shape"):
        AF.rms_norm(a, (3,), attn.ones(2))
    with pytest.raises(ValueError, match=r"eps must be non-negative"):
        AF.rms_norm(a, (3,), None, -1.0)
    with pytest.raises(ValueError, match=r"\[RMSNorm\] normalized_shape must be positive"):
        attn.nn.RMSNorm(0)


@pytest.mark.parametrize("repeats,dim", [(2, 1), (3, None), (1, 0), (2, -1), (0, 1)])
def test_repeat_interleave_int(repeats, dim):
    a, t = pair((3, 4), requires_grad=True)
    ya = attn.repeat_interleave(a, repeats, dim)
    yt = torch.repeat_interleave(t, repeats, dim)
    same(ya, yt)
    same(a.repeat_interleave(repeats, dim), t.repeat_interleave(repeats, dim))
    g, gt = pair(tuple(yt.shape), seed=5)
    ya.backward(g)
    yt.backward(gt)
    close_ulp(a.grad, t.grad)


def test_repeat_interleave_tensor_counts_and_errors():
    a, t = pair((3, 4))
    counts = [2, 0, 3]
    same(attn.repeat_interleave(a, attn.tensor(counts), 0),
         torch.repeat_interleave(t, torch.tensor(counts), 0))
    same(attn.repeat_interleave(attn.tensor(counts)), torch.repeat_interleave(torch.tensor(counts)))
    # GQA's key/value heads repeated for their query heads, as the Llama programs do.
    k, tk = pair((2, 2, 5, 8))
    same(k.repeat_interleave(3, dim=1), tk.repeat_interleave(3, dim=1))
    # One count in a tensor: every slice repeated by it.
    same(attn.repeat_interleave(a, attn.tensor([2]), 1),
         torch.repeat_interleave(t, torch.tensor([2]), 1))
    same(attn.repeat_interleave(a.long(), 2, 0), torch.repeat_interleave(t.long(), 2, 0))
    assert tuple(attn.repeat_interleave(a, 2, 0, output_size=6).shape) == (6, 4)
    with pytest.raises(RuntimeError, match="output_size 5 does not match the 6 repeated"):
        attn.repeat_interleave(a, 2, 0, output_size=5)
    with pytest.raises(RuntimeError, match="repeats must have the same size as input along dim"):
        attn.repeat_interleave(a, attn.tensor([1, 2]), 0)
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        attn.repeat_interleave(a, -1, 0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        attn.repeat_interleave(a, 2, 2)


@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-3.5, 7.25, 33), (0, 1, 1),
                                             (1e-3, 10000.0, 64), (5, -5, 10), (0, 1, 0)])
def test_linspace_as_pytorch(start, end, steps):
    # Within a float32 ulp of the scale: torch's vectorised path rounds per vector width.
    close_ulp(attn.linspace(start, end, steps), torch.linspace(start, end, steps))
    a = attn.linspace(start, end, steps)
    assert a.dtype == attn.float32 and tuple(a.shape) == (steps,)
    if steps > 1:
        assert a[0].item() == np.float32(start) and a[-1].item() == np.float32(end)
    with pytest.raises(TypeError, match="linspace: dtype torch.int64 is not supported"):
        attn.linspace(start, end, steps, dtype=attn.int64)


def test_one_hot_as_pytorch():
    idx = [[0, 3], [2, 1]]
    assert AF.one_hot(attn.tensor(idx)).tolist() == torch.nn.functional.one_hot(
        torch.tensor(idx)).tolist()
    r = AF.one_hot(attn.tensor(idx), 6)
    assert tuple(r.shape) == (2, 2, 6) and r.dtype == attn.int64
    assert r.tolist() == torch.nn.functional.one_hot(torch.tensor(idx), 6).tolist()
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes."):
        AF.one_hot(attn.tensor(idx), 3)
    with pytest.raises(RuntimeError, match="Class values must be non-negative."):
        AF.one_hot(attn.tensor([-1, 0]))
    with pytest.raises(RuntimeError, match="Can not infer total number of classes"):
        AF.one_hot(attn.zeros(0, dtype=attn.int64))
    with pytest.raises(RuntimeError, match="one_hot is only applicable to index tensor"):
        AF.one_hot(attn.ones(2))


@pytest.mark.parametrize("pads,value", [((1, 2), None), ((0, 0, 2, 1), 1.5), ((-1, 2, 1, -2), 0.0),
                                        ((3, 0, 0, 1, 1, 1), -2.0)])
def test_pad_constant_as_pytorch(pads, value):
    a, t = pair((3, 4, 5), requires_grad=True)
    kw = {} if value is None else {"value": value}
    ya, yt = AF.pad(a, pads, **kw), torch.nn.functional.pad(t, pads, **kw)
    same(ya, yt)
    g, gt = pair(tuple(yt.shape), seed=7)
    ya.backward(g)
    yt.backward(gt)
    same(a.grad, t.grad)


def test_pad_bad_input():
    a = attn.ones(2, 3)
    with pytest.raises(ValueError, match="padding length must be even"):
        AF.pad(a, (1,))
    with pytest.raises(NotImplementedError, match="mode 'reflect' is not supported"):
        AF.pad(a, (1, 1), mode="reflect")


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_finfo_as_pytorch(name):
    a, t = attn.finfo(getattr(attn, name)), torch.finfo(getattr(torch, name))
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(a, field) == getattr(t, field), field
    assert a.dtype == t.dtype
    assert attn.finfo().eps == torch.finfo().eps
    with pytest.raises(TypeError):
        attn.finfo(attn.int64)


EINSUMS = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij,jk", [(3, 4), (4, 5)]),
           ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("bhqd,bhkd->bhqk", [(2, 2, 5, 8),
                                                                           (2, 2, 7, 8)]),
           ("bij->bji", [(2, 3, 4)]), ("bij->", [(2, 3, 4)]), ("i,i->", [(7,), (7,)]),
           ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 2)]), ("ij,kj->ik", [(3, 4), (5, 4)]),
           ("i,j->ij", [(3,), (4,)]), ("bn,nd->bd", [(1, 6), (6, 3)])]


@pytest.mark.parametrize("eq,shapes", EINSUMS)
def test_einsum_as_pytorch(eq, shapes):
    pairs = [pair(s, seed=i, requires_grad=True) for i, s in enumerate(shapes)]
    ya = attn.einsum(eq, *[p[0] for p in pairs])
    yt = torch.einsum(eq, *[p[1] for p in pairs])
    close_ulp(ya, yt)
    if yt.dim():
        g, gt = pair(tuple(yt.shape), seed=9)
        ya.backward(g)
        yt.backward(gt)
    else:
        ya.backward()
        yt.backward()
    for a, t in pairs:
        np.testing.assert_allclose(np_of(a.grad), np_of(t.grad), rtol=1e-5, atol=1e-5)
    close_ulp(attn.einsum(eq, [p[0].detach() for p in pairs]), yt)


def test_einsum_bad_input():
    a = attn.ones(2, 3)
    with pytest.raises(ValueError, match="repeated subscripts"):
        attn.einsum("ii->i", attn.ones(3, 3))
    with pytest.raises(ValueError, match="does not match operand"):
        attn.einsum("ijk->i", a)
    with pytest.raises(ValueError, match="2 operands for the 1 terms"):
        attn.einsum("ij->i", a, a)
    with pytest.raises(RuntimeError, match="subscript j has size 3 and 4"):
        attn.einsum("ij,jk->ik", a, attn.ones(4, 2))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_as_pytorch(dim):
    a, t = pair((4, 5), requires_grad=True)
    n = 6
    idx = [0, 2, 0, 3, 1, 2][:n] if dim == 0 else [4, 0, 4, 1, 2, 3][:n]
    shape = (n, 5) if dim == 0 else (4, n)
    s, u = pair(shape, seed=3, requires_grad=True)
    ya = attn.index_add(a, dim, attn.tensor(idx), s, alpha=2)
    yt = torch.index_add(t, dim, torch.tensor(idx), u, alpha=2)
    same(ya, yt)
    same(a.index_add(dim, attn.tensor(idx), s), t.index_add(dim, torch.tensor(idx), u))
    g, gt = pair(shape=(4, 5), seed=4)
    ya.backward(g)
    yt.backward(gt)
    same(a.grad, t.grad)
    same(s.grad, u.grad)
    b, v = pair((4, 5))
    b.index_add_(dim, attn.tensor(idx), s.detach())
    v.index_add_(dim, torch.tensor(idx), u.detach())
    same(b, v)
    with pytest.raises(RuntimeError, match="does not fit input"):
        attn.index_add(a, dim, attn.tensor(idx[:2]), s)


def test_index_add_and_slice_indexing_on_threads_as_pytorch():
    """index_add / index_add_ and advanced indexing along one dim of views (x[:, idx] of a
    transposed tensor, x[idx] = v, their gradients), above the size that shares the slices'
    elements among threads, with repeated indices: torch's bits on 1 and 2 threads (repeats are
    summed in index order, as torch's CPU kernel)."""
    threads = attn.get_num_threads()
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 300, 700).tolist()  # repeats
    try:
        for nt in (1, 2):
            attn.set_num_threads(nt)
            a, t = pair((300, 96), seed=20, requires_grad=True)
            s, u = pair((700, 96), seed=21, requires_grad=True)
            ya = attn.index_add(a, 0, attn.tensor(idx), s, alpha=0.5)
            yt = torch.index_add(t, 0, torch.tensor(idx), u, alpha=0.5)
            same(ya, yt)
            g, gt = pair((300, 96), seed=22)
            ya.backward(g)
            yt.backward(gt)
            same(a.grad, t.grad)
            same(s.grad, u.grad)
            # In place along dim 1 of a transposed view.
            b, v = pair((96, 300), seed=23)
            b.T.index_add_(0, attn.tensor(idx), s.detach())
            v.T.index_add_(0, torch.tensor(idx), u.detach())
            same(b, v)
            # x[:, idx] of a transposed (96, 300) view: the slices are strided; the gradient adds
            # the repeats back.
            x, xt = pair((300, 96), seed=24, requires_grad=True)
            ga, gt2 = pair((96, 700), seed=25)
            ra, rt = x.T[:, attn.tensor(idx)], xt.T[:, torch.tensor(idx)]
            same(ra, rt)
            ra.backward(ga)
            rt.backward(gt2)
            same(x.grad, xt.grad)
            # x[idx] = v with distinct indices (torch leaves repeats unspecified); its gradients.
            distinct = rng.permutation(300)[:200].tolist()
            w, wt = pair((300, 96), seed=26)
            val, valt = pair((200, 96), seed=27, requires_grad=True)
            w = w * 1.0
            wt = wt * 1.0
            w[attn.tensor(distinct)] = val
            wt[torch.tensor(distinct)] = valt
            same(w, wt)
            gw, gwt = pair((300, 96), seed=28)
            w.backward(gw)
            wt.backward(gwt)
            same(val.grad, valt.grad)
    finally:
        attn.set_num_threads(threads)
    ints = attn.tensor([[1, 2], [3, 4]])
    same(ints.index_add(0, attn.tensor([1, 1]), attn.tensor([[5, 6], [7, 8]])).float(),
         torch.tensor([[1, 2], [3, 4]]).index_add(0, torch.tensor([1, 1]),
                                                  torch.tensor([[5, 6], [7, 8]])).float())
    with pytest.raises(IndexError, match="out of range"):
        attn.zeros(3).index_add(0, attn.tensor([3]), attn.ones(1))
    with pytest.raises(IndexError, match="out of range"):
        attn.zeros(3).index_add_(0, attn.tensor([-1]), attn.ones(1))
    with pytest.raises(RuntimeError, match="same scalar type"):
        attn.zeros(3).index_add(0, attn.tensor([1]), attn.ones(1, dtype=attn.int64))


def test_nonzero_of_every_dtype_as_pytorch():
    x = np.random.default_rng(8).standard_normal((40, 3, 17)).astype(np.float32)
    x[x < 0.3] = 0
    x[0, 0, 0] = np.nan  # NaN is non-zero
    for conv in (lambda m, v: v, lambda m, v: v != 0, lambda m, v: (v * 10).to(m.int64)):
        a, t = conv(attn, attn.tensor(x.tolist())), conv(torch, torch.tensor(x))
        assert attn.nonzero(a).tolist() == torch.nonzero(t).tolist()
        assert [c.tolist() for c in attn.nonzero(a, as_tuple=True)] == \
            [c.tolist() for c in torch.nonzero(t, as_tuple=True)]
        assert [c.tolist() for c in attn.where(a != 0)] == [c.tolist() for c in torch.where(t != 0)]
    for v in (0.0, 2.0):
        assert attn.nonzero(attn.tensor(v)).shape == torch.nonzero(torch.tensor(v)).shape
        assert attn.nonzero(attn.tensor(v), as_tuple=True)[0].tolist() == \
            torch.nonzero(torch.tensor(v), as_tuple=True)[0].tolist()
    assert tuple(attn.nonzero(attn.zeros(0, 4)).shape) == (0, 2)


def test_bincount_as_pytorch():
    x = [3, 1, 1, 0, 7, 3, 3]
    assert attn.bincount(attn.tensor(x)).tolist() == torch.bincount(torch.tensor(x)).tolist()
    assert attn.tensor(x).bincount(minlength=10).tolist() == torch.tensor(x).bincount(
        minlength=10).tolist()
    w, tw = pair((7,))
    same(attn.bincount(attn.tensor(x), w), torch.bincount(torch.tensor(x), tw))
    assert attn.bincount(attn.zeros(0, dtype=attn.int64)).tolist() == []
    with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative integral"):
        attn.bincount(attn.tensor([-1, 2]))


def test_deepcopy_and_cross_entropy_loss_modules():
    import copy
    model = attn.nn.Sequential(attn.nn.Linear(4, 8), attn.nn.SiLU(), attn.nn.RMSNorm(8),
                               attn.nn.Linear(8, 3))
    twin = copy.deepcopy(model)
    x = attn.randn(5, 4)
    assert attn.equal(model(x), twin(x))
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), twin.named_parameters()):
        assert n1 == n2 and p1 is not p2 and p2.requires_grad
        assert isinstance(p2, attn.nn.Parameter)
    with attn.no_grad():
        twin[0].weight.add_(1.0)
    assert not attn.equal(model(x), twin(x))
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user"):
        copy.deepcopy(model(x))
    a, t = pair((6, 5), requires_grad=True)
    target = [0, 4, 2, 2, 1, 3]
    la = attn.nn.CrossEntropyLoss()(a, attn.tensor(target))
    lt = torch.nn.CrossEntropyLoss()(t, torch.tensor(target))
    close_ulp(la, lt)
    la.backward()
    lt.backward()
    close_ulp(a.grad, t.grad)
    assert repr(attn.nn.CrossEntropyLoss()) == repr(torch.nn.CrossEntropyLoss())


@pytest.mark.parametrize("key", ["rows_cols", "slice_rows_cols", "broadcast", "lists", "int_between"])
def test_several_index_tensors_on_adjacent_dims(key):
    a, t = pair((4, 5, 6), requires_grad=True)
    r, c = [0, 3, -1], [1, 2, 4]
    keys = {"rows_cols": lambda m: (m.tensor(r), m.tensor(c)),
            "slice_rows_cols": lambda m: (slice(None), m.tensor(c), m.tensor(r)),
            "broadcast": lambda m: (m.tensor([[0], [2]]), m.tensor([1, 3, 4])),
            "lists": lambda m: ([0, 1], [2, 3]),
            "int_between": lambda m: (m.tensor(r), 2)}
    ya, yt = a[keys[key](attn)], t[keys[key](torch)]
    same(ya, yt)
    g, gt = pair(tuple(yt.shape), seed=11)
    ya.backward(g)
    yt.backward(gt)
    same(a.grad, t.grad)
    b, u = pair((4, 5, 6), seed=2)
    b[keys[key](attn)] = -7.0
    u[keys[key](torch)] = -7.0
    same(b, u)


def test_index_tensors_separated_by_other_indices_are_refused():
    a = attn.ones(4, 5, 6)
    with pytest.raises(NotImplementedError, match=r"separated by other indices"):
        a[attn.tensor([0, 1]), :, attn.tensor([1, 2])]
    with pytest.raises(IndexError):
        a[attn.tensor([0, 9]), attn.tensor([1, 2])]


def test_nonzero_and_one_argument_where_as_pytorch():
    x = np.array([[0, 1.5, 0], [2, 0, -1]], dtype=np.float32)
    a, t = attn.tensor(x.tolist()), torch.tensor(x)
    assert attn.nonzero(a).tolist() == torch.nonzero(t).tolist()
    assert attn.nonzero(a).dtype == attn.int64 and tuple(attn.nonzero(a).shape) == (3, 2)
    for ra, rt in zip(a.nonzero(as_tuple=True), t.nonzero(as_tuple=True)):
        assert ra.tolist() == rt.tolist()
    for ra, rt in zip(attn.where(a > 0), torch.where(t > 0)):
        assert ra.tolist() == rt.tolist()
    assert tuple(attn.nonzero(attn.zeros(2, 3)).shape) == (0, 2)
    same(attn.where(a > 0, a, 0.0), torch.where(t > 0, t, torch.tensor(0.0)))
    with pytest.raises(TypeError, match="where"):
        attn.where(a > 0, a)


def test_mixtral_style_routing_as_pytorch():
    """Top-k routing as the Mixtral-style programs write it: softmax, topk, renormalise, one_hot
    expert masks, where(mask), gathering rows with None and two index tensors, index_add_."""
    def route(m, x, router, experts):
        logits = x @ router
        weights = m.softmax(logits, dim=1)
        weights, selected = m.topk(weights, 2, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = m.zeros(x.shape[0], x.shape[1])
        mask = m.nn.functional.one_hot(selected, num_classes=4).permute(2, 1, 0)
        for e in range(4):
            idx, top_x = m.where(mask[e])
            state = x[None, top_x].reshape(-1, x.shape[1])
            hidden = (state @ experts[e]) * weights[top_x, idx, None]
            out.index_add_(0, top_x, hidden)
        return out
    x, tx = pair((6, 8), seed=1)
    r, tr = pair((8, 4), seed=2)
    es = [pair((8, 8), seed=3 + e) for e in range(4)]
    close_ulp(route(attn, x, r, [e[0] for e in es]), route(torch, tx, tr, [e[1] for e in es]))


def test_complex_rope_as_metas_reference_code():
    """Rotary embeddings in complex64 as Meta's reference Llama writes them: polar, view_as_complex,
    a broadcast complex product, view_as_real; values and gradients."""
    def precompute_freqs_cis(m, dim, end, theta=10000.0):
        freqs = 1.0 / (theta ** (m.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = m.arange(end, dtype=m.float32)
        freqs = m.outer(t, freqs)
        return m.polar(m.ones_like(freqs), freqs)

    def reshape_for_broadcast(freqs_cis, x):
        ndim = x.ndim
        assert freqs_cis.shape == (x.shape[1], x.shape[-1])
        shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
        return freqs_cis.view(*shape)

    def apply_rotary_emb(m, xq, xk, freqs_cis):
        xq_ = m.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = m.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
        xq_out = m.view_as_real(xq_ * freqs_cis).flatten(3)
        xk_out = m.view_as_real(xk_ * freqs_cis).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    q, tq = pair((2, 5, 3, 8), seed=1, requires_grad=True)
    k, tk = pair((2, 5, 3, 8), seed=2, requires_grad=True)
    fa, ft = precompute_freqs_cis(attn, 8, 16)[:5], precompute_freqs_cis(torch, 8, 16)[:5]
    assert fa.dtype == attn.complex64 and str(fa.dtype) == str(ft.dtype)
    close_ulp(fa.real, ft.real)
    close_ulp(fa.imag, ft.imag)
    qa, ka = apply_rotary_emb(attn, q, k, fa)
    qt, kt = apply_rotary_emb(torch, tq, tk, ft)
    close_ulp(qa, qt)
    close_ulp(ka, kt)
    (qa.sum() + (ka * ka).sum()).backward()
    (qt.sum() + (kt * kt).sum()).backward()
    close_ulp(q.grad, tq.grad)
    close_ulp(k.grad, tk.grad)
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        attn.view_as_complex(attn.ones(3, 3))
    assert attn.is_complex(fa) and not attn.is_complex(q)


def test_complex_views_products_and_gradients_as_pytorch():
    """complex64 beyond the reference code's one product: the broadcast operand first, a complex
    product of two tensors that both need gradients, conj, a real scale and a complex sum, .real /
    .imag and view_as_real sharing memory with the pairs, indexing with an Ellipsis."""
    results = {}
    for m in (attn, torch):
        xa, xt = pair((2, 6, 3, 4, 2), seed=5, requires_grad=True)
        fa, ft = pair((6, 1, 4, 2), seed=6, requires_grad=True)
        x, f = (xa, fa) if m is attn else (xt, ft)
        cx, cf = m.view_as_complex(x), m.view_as_complex(f)
        assert tuple(cx.shape) == (2, 6, 3, 4) and cx.dim() == 4 and cx.size(-1) == 4
        y = cf * cx + (cx * cf.conj()) * 0.5 + cx[..., 1:2] * cx[:, :, :, :1]
        r = m.view_as_real(y)
        loss = (r * r).sum() + y.real.sum() - 3.0 * y.imag.sum()
        loss.backward()
        p = m.zeros(2, 3, 2)
        cp = m.view_as_complex(p)
        m.view_as_real(cp)[0, 0, 1] = 7.0  # the same memory, as torch's views
        results[m] = (r, x.grad, f.grad, p[0, 0, 1])
    for a, t in zip(results[attn], results[torch]):
        np.testing.assert_allclose(np_of(a), np_of(t), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="complex64 only"):
        attn.view_as_complex(attn.ones(3, 2, dtype=attn.bfloat16))
    with pytest.raises(RuntimeError, match="stride 1"):
        attn.view_as_complex(attn.ones(2, 3).t())


def test_new_factories_take_self_dtype_and_device():
    for m in (attn, torch):
        x = m.ones(2, dtype=m.int64)
        assert x.new_zeros(2, 3).dtype == m.int64 and tuple(x.new_zeros((2, 3)).shape) == (2, 3)
        assert x.new_ones([4]).tolist() == [1, 1, 1, 1]
        f = m.ones(1).new_full((2, 2), -float("inf"))
        assert f.dtype == m.float32 and f.tolist() == [[-float("inf")] * 2] * 2
        assert m.ones(1).new_zeros(3, dtype=m.int64).dtype == m.int64
        assert tuple(m.ones(1).new_empty(5).shape) == (5,)
        assert m.ones(1).new_zeros(2, requires_grad=True).requires_grad
