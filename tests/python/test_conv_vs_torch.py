"""nn.Conv1d / nn.Conv2d and F.conv1d / F.conv2d (python/attn/nn/conv.py) against torch 1.13:
the same seed gives the same parameters (bit for bit) and repr; outputs and the gradients of
input, weight and bias agree to float32 rounding (torch sums in oneDNN's order) over strides,
paddings (ints, tuples, 'same', 'valid'), dilations, groups, no bias and unbatched input; bad
input raises torch's exception types."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

CASES = [
    ("Conv1d", (4, 6, 3), {}, (2, 4, 11)),
    ("Conv1d", (4, 6, 4), dict(stride=2, padding=3, dilation=2), (3, 4, 17)),
    ("Conv1d", (4, 6, 4), dict(padding="same", dilation=3), (2, 4, 9)),
    ("Conv1d", (6, 4, 5), dict(padding="valid", groups=2, bias=False), (1, 6, 12)),
    ("Conv1d", (3, 5, 1), {}, (3, 7)),  # unbatched
    ("Conv2d", (3, 8, 3), dict(padding=1), (2, 3, 7, 6)),
    ("Conv2d", (3, 8, (3, 2)), dict(stride=(2, 1), padding=(0, 1), dilation=(1, 2)),
     (2, 3, 9, 8)),
    ("Conv2d", (4, 8, 3), dict(groups=4, padding="same"), (1, 4, 5, 5)),  # depthwise-style
    ("Conv2d", (2, 3, (2, 4)), dict(padding="same", bias=False), (2, 6, 7)),  # even kernel
    ("Conv2d", (3, 4, 5), dict(stride=3), (3, 11, 13)),
]


def run(M, case):
    cls, args, kw, shape = case
    M.manual_seed(7)
    conv = getattr(M.nn, cls)(*args, **kw)
    rs = np.random.RandomState(3)
    x = M.tensor(rs.standard_normal(shape).astype(np.float32)).requires_grad_()
    y = conv(x)
    up = M.tensor(rs.standard_normal(tuple(y.shape)).astype(np.float32))
    (y * up).sum().backward()
    params = [p.detach().numpy().copy() for p in conv.parameters()]
    grads = [p.grad.numpy().copy() for p in conv.parameters()]
    return repr(conv), params, y.detach().numpy(), x.grad.numpy(), grads


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}{}{}".format(c[0], c[1], c[2]))
def test_module_forward_backward_as_torch(case):
    ra, pa, ya, gxa, gpa = run(attn, case)
    rt, pt, yt, gxt, gpt = run(torch, case)
    assert ra == rt
    assert len(pa) == len(pt) and all(np.array_equal(a, t) for a, t in zip(pa, pt))
    assert ya.shape == yt.shape
    np.testing.assert_allclose(ya, yt, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gxa, gxt, rtol=1e-5, atol=1e-5)
    for a, t in zip(gpa, gpt):
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=1e-4)


def test_functional_forms_and_state_dict():
    rs = np.random.RandomState(0)
    x, w, b = (rs.standard_normal(s).astype(np.float32) for s in ((2, 4, 10), (6, 2, 3), (6,)))
    out = {}
    for M in (attn, torch):
        F = M.nn.functional
        X, W, B = M.tensor(x), M.tensor(w), M.tensor(b)
        out[M.__name__] = [F.conv1d(X, W, B, stride=2, groups=2).numpy(),
                           F.conv1d(X, W, None, padding=1, dilation=2, groups=2).numpy(),
                           F.conv2d(X.unsqueeze(-1), W.unsqueeze(-1), B, groups=2).numpy()]
    for a, t in zip(out["attn"], out["torch"]):
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=1e-5)
    m = attn.nn.Conv2d(2, 3, 3)
    assert list(m.state_dict()) == ["weight", "bias"]


@pytest.mark.parametrize("bad", [
    lambda M: M.nn.Conv1d(4, 6, 3, groups=4),
    lambda M: M.nn.Conv1d(4, 6, 3, groups=0),
    lambda M: M.nn.Conv1d(4, 6, 3, padding="full"),
    lambda M: M.nn.Conv1d(4, 6, 3, padding="same", stride=2),
    lambda M: M.nn.Conv1d(4, 6, 3, padding_mode="mirror"),
    lambda M: M.nn.Conv1d(4, 6, 3)(M.zeros(2, 5, 9)),
    lambda M: M.nn.Conv1d(4, 6, 3)(M.zeros(1, 2, 4, 9)),
    lambda M: M.nn.Conv2d(4, 6, 5)(M.zeros(1, 4, 3, 9)),
    lambda M: M.nn.functional.conv1d(M.zeros(1, 4, 9), M.zeros(6, 4, 3), M.zeros(5)),
    lambda M: M.nn.functional.conv1d(M.zeros(1, 4, 9), M.zeros(6, 4, 3), stride=0),
])
def test_errors_as_torch(bad):
    with pytest.raises(Exception) as te:
        bad(torch)
    with pytest.raises(type(te.value)):
        bad(attn)


def test_padding_modes_other_than_zeros_are_not_implemented():
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        attn.nn.Conv1d(2, 2, 3, padding_mode="reflect")
