"""attn's movedim / swapaxes, as_tensor, addcmul(_), addcdiv(_), lerp_, unique and
unique_consecutive (python/attn/_composite_extra.py) against torch 1.13: the same program on both,
results compared exactly except the float arithmetic of addcmul, addcdiv and lerp, which is
within an ulp of torch's (whether torch's kernel fuses its multiply and add into an FMA is its
compiler's choice)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402


def program(M):
    out = []
    x = M.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    out += [tuple(M.movedim(x, 0, 2).shape), tuple(M.movedim(x, (0, 1), (2, 0)).shape),
            M.movedim(x, (0, 1), (2, 0)).tolist(), tuple(x.moveaxis(-1, 0).shape),
            M.swapaxes(x, 0, 1).tolist(), tuple(x.swapdims(1, 2).shape)]
    rs = np.random.RandomState(0)
    a, b, c = (M.tensor(rs.standard_normal((5, 7)).astype(np.float32)) for _ in range(3))
    out += [M.addcmul(a, b, c, value=0.3).tolist(), M.addcdiv(a, b, c, value=-1.7).tolist(),
            a.addcmul(b, c).tolist(), a.addcdiv(b, c, value=0.5).tolist()]
    a2, a3, a4 = a.clone(), a.clone(), a.clone()
    a2.addcmul_(b, c, value=0.1)
    a3.addcdiv_(b, c, value=2.5)
    a4.lerp_(b, 0.3)
    out += [a2.tolist(), a3.tolist(), a4.tolist()]
    t = M.tensor(rs.randint(0, 6, (4, 9)))
    out += [[v.tolist() for v in M.unique(t, return_inverse=True, return_counts=True)],
            M.unique(t).tolist(), t.unique(return_counts=True)[1].tolist(),
            M.unique(M.tensor([2.5, -1.0, 2.5, 0.0])).tolist()]
    u = M.tensor([1, 1, 2, 2, 3, 1, 1, 2])
    out += [[v.tolist() for v in M.unique_consecutive(u, return_inverse=True,
                                                      return_counts=True)],
            M.unique_consecutive(u).tolist()]
    out += [str(M.as_tensor([1.0, 2.0]).dtype).split(".")[-1], M.as_tensor(a) is a]
    w = M.ones(5, 7, requires_grad=True)
    (M.addcmul(w, b, c).sum() + M.addcdiv(w, b, c).sum() + M.movedim(w, 0, 1)[0].sum()).backward()
    out += [w.grad.tolist()]
    return out


def same(a, t, where="result"):
    if isinstance(t, list) and t and isinstance(t[0], float) or isinstance(t, float):
        np.testing.assert_allclose(np.array(a), np.array(t), rtol=3e-7, atol=1e-7, err_msg=where)
    elif isinstance(t, (list, tuple)) and not (t and isinstance(t[0], int)):
        assert isinstance(a, (list, tuple)) and len(a) == len(t), where
        for i, (x, y) in enumerate(zip(a, t)):
            same(x, y, "%s[%d]" % (where, i))
    else:
        assert a == t, where


def test_program_same_as_torch():
    same(program(attn), program(torch))


def test_errors_as_torch():
    for M in (torch, attn):
        x = M.ones(2, 3)
        with pytest.raises(IndexError, match="Dimension out of range"):
            M.movedim(x, 0, 2)
        with pytest.raises(RuntimeError):
            M.movedim(x, (0, 1), (1,))
        with pytest.raises(RuntimeError):
            M.movedim(x, (0, 0), (0, 1))
        with pytest.raises(TypeError):
            M.addcmul(x, 2.0, x)


def order_statistics(M):
    rs = np.random.RandomState(1)
    x = M.tensor(rs.permutation(35).reshape(5, 7).astype(np.float32) / 4)  # distinct values
    seq = M.tensor([-1.0, 0.5, 0.5, 2.0, 3.5])
    vals = M.tensor([[-2.0, 0.5, 1.0], [3.5, 9.0, 0.0]])
    rows = M.tensor(np.sort(rs.standard_normal((2, 6)).astype(np.float32), 1))
    out = [M.searchsorted(seq, vals).tolist(), M.searchsorted(seq, vals, right=True).tolist(),
           M.searchsorted(seq, vals, side="right").tolist(),
           M.searchsorted(rows, M.tensor([[0.0, 1.0], [-0.5, 2.0]])).tolist(),
           M.searchsorted(seq, 0.5).tolist(), M.bucketize(vals, seq).tolist(),
           M.bucketize(vals, seq, right=True).tolist()]
    out += [M.median(x).tolist(), [v.tolist() for v in M.median(x, 1)],
            [v.tolist() for v in x.median(0, keepdim=True)],
            [v.tolist() for v in M.kthvalue(x, 3, 1)], [v.tolist() for v in x.kthvalue(2, 0)]]
    for how in ("linear", "lower", "higher", "midpoint", "nearest"):
        out += [M.quantile(x, 0.3, interpolation=how).tolist(),
                M.quantile(x, M.tensor([0.0, 0.25, 0.5, 1.0]), dim=1,
                           interpolation=how).tolist(),
                x.quantile(0.75, dim=0, keepdim=True, interpolation=how).tolist()]
    return out


def test_order_statistics_as_torch():
    same(order_statistics(attn), order_statistics(torch))


def test_cdist_values_and_gradients():
    rs = np.random.RandomState(2)
    a, b = rs.standard_normal((2, 5, 3)).astype(np.float32), \
        rs.standard_normal((2, 4, 3)).astype(np.float32)
    b[0, 1] = a[0, 2]  # a zero distance: gradient 0, not nan
    for p in (2.0, 1.0, 3.0):
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        aa, ab = attn.tensor(a, requires_grad=True), attn.tensor(b, requires_grad=True)
        dt, da = torch.cdist(ta, tb, p), attn.cdist(aa, ab, p)
        np.testing.assert_allclose(da.detach().numpy(), dt.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        r = rs.standard_normal(dt.shape).astype(np.float32)
        dt.backward(torch.tensor(r))
        da.backward(attn.tensor(r))
        np.testing.assert_allclose(aa.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(ab.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_order_statistics_errors_as_torch():
    for M in (torch, attn):
        with pytest.raises(RuntimeError, match="out of range"):
            M.kthvalue(M.ones(3), 4)
        with pytest.raises(RuntimeError, match="in the range"):
            M.quantile(M.ones(3), 1.5)
        with pytest.raises(RuntimeError, match="same number of columns"):
            M.cdist(M.ones(2, 3), M.ones(2, 4))
        with pytest.raises(RuntimeError, match="boundaries tensor"):
            M.searchsorted(M.ones(2, 3), M.ones(3, 2))


def indexing_and_transposes(M):
    rs = np.random.RandomState(3)
    x = M.tensor(rs.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
    y = x * 1.0
    y.index_fill_(1, M.tensor([0, 3]), -2.0)
    src = M.tensor(rs.standard_normal((2, 5)).astype(np.float32), requires_grad=True)
    z = y.index_copy(0, M.tensor([2, 0]), src)
    (z * M.tensor(rs.standard_normal((3, 5)).astype(np.float32))).sum().backward()
    mm = M.aminmax(x.detach())
    md = M.aminmax(x.detach(), dim=1, keepdim=True)
    b = M.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    return [z.tolist(), x.grad.tolist(), src.grad.tolist(), mm.min.tolist(), mm.max.tolist(),
            md.min.tolist(), md.max.tolist(), x.index_fill(0, M.tensor([1]), 9.0).tolist(),
            b.mT.tolist(), b[0].H.tolist(), b.mH.shape == b.mT.shape]


def test_index_fill_copy_aminmax_transposes_as_torch():
    same(indexing_and_transposes(attn), indexing_and_transposes(torch))
    for M in (torch, attn):
        with pytest.raises(RuntimeError, match="H is only supported"):
            M.ones(3).H
        for name in ("mT", "mH"):  # torch's RuntimeError and words below 2 dims
            with pytest.raises(RuntimeError, match="tensor.{} is only supported on matrices or "
                               "batches of matrices. Got 1-D tensor.".format(name)):
                getattr(M.ones(3), name)


def unfolds(M):
    x = M.tensor(np.arange(60, dtype=np.float32).reshape(3, 4, 5), requires_grad=True)
    a, b, c = x.unfold(2, 3, 1), x.unfold(0, 2, 1), x.unfold(-2, 2, 3)
    (a.sum() * 1.0 + (b * b).sum() + c.sum() * 2.0).backward()
    return [a.tolist(), b.tolist(), c.tolist(), x.grad.tolist(),
            M.arange(10.0).unfold(0, 4, 3).tolist(), M.tensor(5.0).unfold(0, 1, 1).tolist(),
            tuple(M.arange(10.0).unfold(0, 0, 1).shape)]


def test_unfold_as_torch():
    same(unfolds(attn), unfolds(torch))
    for bad in (lambda M: M.arange(10.0).unfold(0, 11, 1),
                lambda M: M.arange(10.0).unfold(0, 3, 0),
                lambda M: M.arange(10.0).unfold(1, 3, 1)):
        with pytest.raises(Exception) as te:
            bad(torch)
        with pytest.raises(type(te.value)):
            bad(attn)


def test_tensor_copies_numpy_and_as_tensor_shares_it_as_torch():
    for M in (torch, attn):
        a = np.zeros(3, dtype=np.float32)
        M.tensor(a).add_(1)  # torch.tensor copies
        assert a.tolist() == [0.0, 0.0, 0.0], M.__name__
        M.as_tensor(a).add_(1)  # as_tensor shares an array of the same dtype
        assert a.tolist() == [1.0, 1.0, 1.0], M.__name__
        b = np.zeros((3, 4), dtype=np.float32)[:, ::2]
        assert M.tensor(b).is_contiguous() and tuple(M.tensor(b).shape) == (3, 2)
