"""nn.BatchNorm1d / nn.BatchNorm2d and F.batch_norm (python/attn/nn/batchnorm.py) against torch
1.13: training-mode outputs and the gradients of input, weight and bias agree to float32 rounding
(torch's CPU kernel accumulates in double), as do the running statistics over several steps
(unbiased variance, momentum and momentum=None's cumulative average), num_batches_tracked,
evaluation-mode outputs, affine=False, track_running_stats=False, state_dict, repr, a small CNN
trained with SGD, and the exception types of bad input."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)

CASES = [
    ("BatchNorm1d", (4,), {}, (8, 4)),
    ("BatchNorm1d", (4,), {}, (3, 4, 6)),
    ("BatchNorm1d", (5,), dict(eps=1e-3, momentum=0.3), (2, 5, 3)),
    ("BatchNorm1d", (4,), dict(momentum=None), (6, 4)),
    ("BatchNorm2d", (3,), {}, (2, 3, 5, 4)),
    ("BatchNorm2d", (3,), dict(momentum=None), (3, 3, 2, 3)),
    ("BatchNorm2d", (3,), dict(affine=False), (2, 3, 4, 4)),
    ("BatchNorm2d", (3,), dict(track_running_stats=False), (2, 3, 3, 5)),
    ("BatchNorm1d", (4,), dict(affine=False, track_running_stats=False), (5, 4, 2)),
    ("BatchNorm2d", (2,), {}, (1, 2, 1, 2)),  # two values per channel
]


def numpy_of(t):
    return None if t is None else t.detach().numpy().copy()


def run(M, case, steps=4):
    """steps training steps (forward and backward against a random upstream gradient), then one
    in evaluation mode; returns every output, gradient and buffer along the way."""
    cls, args, kw, shape = case
    bn = getattr(M.nn, cls)(*args, **kw)
    rs = np.random.RandomState(5)
    c = args[0]
    if bn.affine:  # not ones and zeros, so that the affine step is checked
        with M.no_grad():
            bn.weight.copy_(M.tensor(rs.uniform(0.5, 1.5, c).astype(np.float32)))
            bn.bias.copy_(M.tensor(rs.standard_normal(c).astype(np.float32)))
    record = [repr(bn)]
    for step in range(steps + 1):
        if step == steps:
            bn.eval()
        x = M.tensor((rs.standard_normal(shape) * 2 + 0.7).astype(np.float32)).requires_grad_()
        y = bn(x)
        up = M.tensor(rs.standard_normal(shape).astype(np.float32))
        (y * up).sum().backward()
        record += [y.detach().numpy(), x.grad.numpy().copy()]
        for p in bn.parameters():
            record.append(p.grad.numpy().copy())
            p.grad = None
        for name, b in bn.named_buffers():
            record += [name, numpy_of(b)]
            assert not b.requires_grad and b.grad_fn is None
    return record


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}{}{}".format(c[0], c[2], c[3]))
def test_module_train_eval_as_torch(case):
    ra = run(attn, case)
    rt = run(torch, case)
    assert len(ra) == len(rt)
    for a, t in zip(ra, rt):
        if isinstance(a, str):
            assert a == t
        else:
            assert a.shape == t.shape and a.dtype == t.dtype
            np.testing.assert_allclose(a, t, **TOL)


def test_num_batches_tracked_and_buffers():
    for M in (attn, torch):
        bn = M.nn.BatchNorm1d(3)
        for _ in range(3):
            bn(M.randn(4, 3))
        assert int(bn.num_batches_tracked) == 3
        assert str(bn.num_batches_tracked.dtype) == "torch.int64"
        assert bn.num_batches_tracked.dim() == 0
        bn.eval()
        bn(M.randn(4, 3))
        assert int(bn.num_batches_tracked) == 3  # evaluation leaves the buffers alone
        bn.reset_running_stats()
        assert int(bn.num_batches_tracked) == 0
        np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(3, np.float32))
        np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3, np.float32))
        with M.no_grad():
            bn.weight.fill_(3.0)
        bn.reset_parameters()
        np.testing.assert_array_equal(bn.weight.detach().numpy(), np.ones(3, np.float32))


def test_state_dict_names_and_values():
    rs = np.random.RandomState(1)
    xs = [rs.standard_normal((4, 3, 5, 5)).astype(np.float32) for _ in range(3)]
    sds, nbufs, nparams = {}, {}, {}
    for M in (attn, torch):
        bn = M.nn.BatchNorm2d(3, momentum=0.2)
        for x in xs:
            bn(M.tensor(x))
        sds[M.__name__] = {k: v.numpy() for k, v in bn.state_dict().items()}
        nbufs[M.__name__] = [n for n, _ in bn.named_buffers()]
        nparams[M.__name__] = [n for n, _ in bn.named_parameters()]
    assert list(sds["attn"]) == list(sds["torch"]) == [
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert nbufs["attn"] == nbufs["torch"] == ["running_mean", "running_var",
                                               "num_batches_tracked"]
    assert nparams["attn"] == nparams["torch"] == ["weight", "bias"]
    for k in sds["torch"]:
        np.testing.assert_allclose(sds["attn"][k], sds["torch"][k], **TOL)
    for kw in (dict(affine=False), dict(track_running_stats=False),
               dict(affine=False, track_running_stats=False)):
        a, t = attn.nn.BatchNorm1d(3, **kw), torch.nn.BatchNorm1d(3, **kw)
        assert list(a.state_dict()) == list(t.state_dict())
        assert [n for n, _ in a.named_buffers()] == [n for n, _ in t.named_buffers()]
        assert [n for n, _ in a.named_parameters()] == [n for n, _ in t.named_parameters()]
        assert (a.weight is None) == (t.weight is None)
        assert (a.running_mean is None) == (t.running_mean is None)


def test_load_torch_state_dict_then_eval():
    torch.manual_seed(0)
    t = torch.nn.BatchNorm2d(4)
    for _ in range(3):
        t(torch.randn(3, 4, 3, 3) * 3 + 1)
    with torch.no_grad():
        t.weight.uniform_(0.5, 2.0)
        t.bias.uniform_(-1.0, 1.0)
    t.eval()
    a = attn.nn.BatchNorm2d(4)
    a.load_state_dict(t.state_dict())
    a.eval()
    assert int(a.num_batches_tracked) == 3
    x = np.random.RandomState(2).standard_normal((2, 4, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(a(attn.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(),
                               **TOL)
    # a plain dict without num_batches_tracked (torch's version-1 checkpoints) loads as 0
    old = {k: v for k, v in t.state_dict().items() if k != "num_batches_tracked"}
    a.load_state_dict(old)
    t.load_state_dict(old)
    assert int(a.num_batches_tracked) == int(t.num_batches_tracked) == 0


@pytest.mark.parametrize("kw", [{}, dict(eps=1e-3), dict(momentum=None), dict(affine=False),
                                dict(track_running_stats=False)])
def test_repr(kw):
    for cls in ("BatchNorm1d", "BatchNorm2d"):
        assert repr(getattr(attn.nn, cls)(16, **kw)) == repr(getattr(torch.nn, cls)(16, **kw))
    assert repr(attn.nn.BatchNorm2d(16)) == ("BatchNorm2d(16, eps=1e-05, momentum=0.1, "
                                             "affine=True, track_running_stats=True)")


def test_functional_batch_norm():
    rs = np.random.RandomState(4)
    x = (rs.standard_normal((5, 3, 4)) * 1.5 - 0.3).astype(np.float32)
    w, b = rs.uniform(0.5, 1.5, 3).astype(np.float32), rs.standard_normal(3).astype(np.float32)
    rm, rv = rs.standard_normal(3).astype(np.float32), rs.uniform(0.5, 2, 3).astype(np.float32)
    up = rs.standard_normal(x.shape).astype(np.float32)
    out = {}
    for M in (attn, torch):
        F = M.nn.functional
        X, W, B = M.tensor(x).requires_grad_(), M.tensor(w).requires_grad_(), M.tensor(b)
        # copies: attn.tensor(ndarray) shares the array's memory (torch.tensor copies)
        RM, RV = M.tensor(rm.copy()), M.tensor(rv.copy())
        y1 = F.batch_norm(X, RM, RV, W, B, training=True, momentum=0.25, eps=1e-4)
        (y1 * M.tensor(up)).sum().backward()
        res = [y1.detach().numpy(), X.grad.numpy().copy(), W.grad.numpy().copy(),
               RM.numpy().copy(), RV.numpy().copy()]
        res.append(F.batch_norm(X, RM, RV).detach().numpy())  # evaluation with the stats
        res.append(F.batch_norm(X, RM, RV, W, None, False, 0.1, 1e-3).detach().numpy())
        res.append(F.batch_norm(X, None, None, None, B, training=True).detach().numpy())
        RM2 = M.tensor(rm.copy())
        res.append(F.batch_norm(X, RM2, None, training=True).detach().numpy())
        res.append(RM2.numpy())
        res.append(F.batch_norm(X[:, :, 0], RM, RV, W, B, training=True).detach().numpy())
        res += [RM.numpy(), RV.numpy()]
        out[M.__name__] = res
    for a, t in zip(out["attn"], out["torch"]):
        np.testing.assert_allclose(a, t, **TOL)


def test_small_cnn_trains_as_torch():
    rs = np.random.RandomState(0)
    x = rs.standard_normal((4, 3, 8, 8)).astype(np.float32)
    target = rs.randint(0, 5, 4)
    losses, evals = {}, {}
    for M in (attn, torch):
        M.manual_seed(11)
        nn = M.nn
        model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                              nn.Conv2d(6, 4, 3, stride=2), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.Flatten(), nn.Linear(4 * 3 * 3, 5))
        opt = M.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        X, T = M.tensor(x), M.tensor(target)
        seen = []
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(X), T)
            loss.backward()
            opt.step()
            seen.append(float(loss))
        losses[M.__name__] = seen
        model.eval()
        evals[M.__name__] = [model(X).detach().numpy()] + [
            v.numpy() for v in model.state_dict().values()]
        assert list(model.state_dict())[2:7] == [
            "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"]
    np.testing.assert_allclose(losses["attn"], losses["torch"], rtol=0, atol=1e-5)
    for a, t in zip(evals["attn"], evals["torch"]):
        np.testing.assert_allclose(a, t, rtol=1e-4, atol=1e-5)


def test_buffers_stay_out_of_the_graph():
    bn = attn.nn.BatchNorm1d(3)
    x = attn.randn(4, 3, requires_grad=True)
    y = bn(x)
    for b in bn.buffers():
        assert not b.requires_grad and b.grad_fn is None
    y.sum().backward()  # the in-place buffer updates do not disturb the backward
    assert x.grad is not None
    rm, rv = attn.zeros(3), attn.ones(3)
    attn.nn.functional.batch_norm(x, rm, rv, training=True)
    assert not rm.requires_grad and rm.grad_fn is None and rv.grad_fn is None


def test_dtype_and_module_to():
    for M in (attn, torch):
        bn = M.nn.BatchNorm2d(3, dtype=M.bfloat16)
        assert [str(v.dtype) for v in bn.state_dict().values()] == [
            "torch.bfloat16"] * 4 + ["torch.int64"]
        bn = M.nn.BatchNorm1d(3).to(M.float16)
        assert str(bn.running_var.dtype) == "torch.float16"
        assert str(bn.num_batches_tracked.dtype) == "torch.int64"


@pytest.mark.parametrize("bad", [
    lambda M: M.nn.BatchNorm1d(3)(M.zeros(2, 3, 4, 5)),
    lambda M: M.nn.BatchNorm1d(3)(M.zeros(3)),
    lambda M: M.nn.BatchNorm2d(3)(M.zeros(2, 3, 4)),
    lambda M: M.nn.BatchNorm2d(3)(M.zeros(2, 3, 4, 4, 1)),
    lambda M: M.nn.BatchNorm1d(3)(M.zeros(1, 3)),
    lambda M: M.nn.BatchNorm1d(3)(M.zeros(1, 3, 1)),
    lambda M: M.nn.BatchNorm2d(3)(M.zeros(1, 3, 1, 1)),
    lambda M: M.nn.BatchNorm1d(3, track_running_stats=False)(M.zeros(1, 3)),
    lambda M: M.nn.BatchNorm1d(3)(M.zeros(2, 4)),
    lambda M: M.nn.BatchNorm1d(3).eval()(M.zeros(2, 4)),
    lambda M: M.nn.functional.batch_norm(M.zeros(2, 3), M.zeros(4), M.ones(4)),
    lambda M: M.nn.functional.batch_norm(M.zeros(2, 3), M.zeros(3), M.ones(3), M.ones(4)),
    lambda M: M.nn.functional.batch_norm(M.zeros(2, 3), M.zeros(3), M.ones(3), None, M.ones(2)),
    lambda M: M.nn.functional.batch_norm(M.zeros(2, 3), None, None),
    lambda M: M.nn.functional.batch_norm(M.zeros(1, 3), None, None, training=True),
    lambda M: M.nn.functional.batch_norm(M.zeros(2, 3), M.zeros(3), M.ones(3), training=True,
                                         momentum=None),
])
def test_errors_as_torch(bad):
    with pytest.raises(Exception) as t:
        bad(torch)
    with pytest.raises(Exception) as a:
        bad(attn)
    assert isinstance(a.value, t.type), (a.value, t.value)


def test_error_messages():
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        attn.nn.BatchNorm1d(3)(attn.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        attn.nn.BatchNorm2d(3)(attn.zeros(2, 3, 4))
    with pytest.raises(ValueError) as e:
        attn.nn.BatchNorm1d(3)(attn.zeros(1, 3))
    assert str(e.value) == ("Expected more than 1 value per channel when training, got input "
                            "size torch.Size([1, 3])")
