"""Max, average and adaptive average pooling (python/attn/nn/pooling.py) against torch 1.13:
outputs, indices and input gradients over kernel sizes, strides, paddings, dilations, ceil_mode,
count_include_pad, divisor_override and unbatched input (max and avg pooling compared exactly:
the same floats summed in the same order); repr; bad input raises torch's exception types."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

CASES = [
    ("max_pool1d", dict(kernel_size=3), (2, 3, 10)),
    ("max_pool1d", dict(kernel_size=4, stride=2, padding=2, dilation=2, ceil_mode=True),
     (2, 3, 13)),
    ("max_pool1d", dict(kernel_size=2, return_indices=True), (3, 9)),
    ("max_pool2d", dict(kernel_size=2), (2, 3, 8, 6)),
    ("max_pool2d", dict(kernel_size=3, stride=2, padding=1), (1, 2, 9, 7)),
    ("max_pool2d", dict(kernel_size=(3, 2), stride=(2, 1), dilation=(1, 2), ceil_mode=True,
                        return_indices=True), (2, 2, 10, 9)),
    ("max_pool2d", dict(kernel_size=3, stride=2, ceil_mode=True, return_indices=True),
     (3, 8, 8)),
    ("avg_pool1d", dict(kernel_size=3, stride=2, padding=1), (2, 3, 10)),
    ("avg_pool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                        count_include_pad=False), (2, 3, 10)),
    ("avg_pool2d", dict(kernel_size=2), (2, 3, 8, 6)),
    ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (1, 2, 10, 7)),
    ("avg_pool2d", dict(kernel_size=(3, 2), stride=2, padding=(1, 1), count_include_pad=False),
     (2, 2, 9, 9)),
    ("avg_pool2d", dict(kernel_size=3, padding=1, divisor_override=5), (3, 7, 7)),
    ("adaptive_avg_pool1d", dict(output_size=4), (2, 3, 10)),
    ("adaptive_avg_pool2d", dict(output_size=(3, 5)), (2, 2, 7, 11)),
    ("adaptive_avg_pool2d", dict(output_size=1), (2, 4, 5, 5)),
    ("adaptive_avg_pool2d", dict(output_size=(None, 2)), (3, 6, 4)),
]


def run(M, fn, kw, shape, ties):
    rs = np.random.RandomState(1)
    data = rs.randint(0, 4, shape) if ties else rs.standard_normal(shape)
    x = M.tensor(data.astype(np.float32)).requires_grad_()
    out = getattr(M.nn.functional, fn)(x, **kw)
    y, idx = out if isinstance(out, tuple) else (out, None)
    up = M.tensor(rs.standard_normal(tuple(y.shape)).astype(np.float32))
    (y * up).sum().backward()
    return y.detach().numpy(), None if idx is None else idx.numpy(), x.grad.numpy()


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}{}".format(c[0], sorted(c[1].items())))
def test_functional_as_torch(case, ties):
    fn, kw, shape = case
    ya, ia, ga = run(attn, fn, kw, shape, ties)
    yt, it, gt = run(torch, fn, kw, shape, ties)
    assert ya.shape == yt.shape
    if fn.startswith("adaptive"):  # summed in another order than torch's: float rounding
        np.testing.assert_allclose(ya, yt, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ga, gt, rtol=1e-6, atol=1e-6)
        return
    assert np.array_equal(ya, yt)
    if ia is not None:
        assert np.array_equal(ia, it)
    np.testing.assert_allclose(ga, gt, rtol=1e-6, atol=1e-6)


def test_modules_repr_and_forward():
    x = np.random.RandomState(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    for make in (lambda M: M.nn.MaxPool2d(3, stride=2, padding=1),
                 lambda M: M.nn.MaxPool1d(2),
                 lambda M: M.nn.AvgPool2d(2, ceil_mode=True),
                 lambda M: M.nn.AvgPool1d(3, stride=1, padding=1),
                 lambda M: M.nn.AdaptiveAvgPool2d((1, 1)),
                 lambda M: M.nn.AdaptiveAvgPool1d(3)):
        a, t = make(attn), make(torch)
        assert repr(a) == repr(t)
        inp = x if "2d" in repr(a).split("(")[0].lower() else x[:, :, 0]
        np.testing.assert_allclose(a(attn.tensor(inp)).numpy(), t(torch.tensor(inp)).numpy(),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", [
    lambda M: M.nn.functional.max_pool2d(M.zeros(1, 1, 4, 4), 3, padding=2),
    lambda M: M.nn.functional.max_pool2d(M.zeros(1, 1, 2, 2), 3),
    lambda M: M.nn.functional.max_pool2d(M.zeros(4, 4), 2),
    lambda M: M.nn.functional.max_pool1d(M.zeros(1, 4), 0),
    lambda M: M.nn.functional.avg_pool2d(M.zeros(1, 1, 4, 4), 2, stride=0),
    lambda M: M.nn.functional.avg_pool2d(M.zeros(1, 1, 4, 4), 2, divisor_override=0),
    lambda M: M.nn.functional.adaptive_avg_pool2d(M.zeros(4), 2),
])
def test_errors_as_torch(bad):
    with pytest.raises(Exception) as te:
        bad(torch)
    with pytest.raises(type(te.value)):
        bad(attn)
