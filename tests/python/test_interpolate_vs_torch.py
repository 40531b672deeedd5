"""F.interpolate and nn.Upsample (python/attn/nn/upsample.py) against torch 1.13: nearest and
nearest-exact exactly, linear / bilinear (align_corners both ways, sizes and scale factors, up
and down) and area to float32 rounding, with input gradients; repr; bad input raises torch's
exception types."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

CASES = [
    ((2, 3, 7), dict(scale_factor=2)),
    ((2, 3, 7), dict(size=5)),
    ((2, 3, 7), dict(scale_factor=1.6, mode="nearest-exact")),
    ((2, 3, 7), dict(size=12, mode="linear")),
    ((2, 3, 7), dict(scale_factor=0.45, mode="linear", align_corners=True)),
    ((2, 3, 7), dict(size=3, mode="area")),
    ((1, 2, 5, 6), dict(scale_factor=2)),
    ((1, 2, 5, 6), dict(size=(7, 4))),
    ((1, 2, 5, 6), dict(scale_factor=(1.5, 0.7), mode="nearest-exact")),
    ((1, 2, 5, 6), dict(scale_factor=1.7, mode="bilinear")),
    ((1, 2, 5, 6), dict(size=(9, 11), mode="bilinear", align_corners=True)),
    ((1, 2, 5, 6), dict(size=(3, 2), mode="bilinear")),
    ((1, 2, 5, 6), dict(scale_factor=2.5, mode="bilinear", recompute_scale_factor=True)),
    ((1, 2, 5, 6), dict(size=(2, 4), mode="area")),
]


def run(M, shape, kw):
    rs = np.random.RandomState(4)
    x = M.tensor(rs.standard_normal(shape).astype(np.float32)).requires_grad_()
    y = M.nn.functional.interpolate(x, **kw)
    up = M.tensor(rs.standard_normal(tuple(y.shape)).astype(np.float32))
    (y * up).sum().backward()
    return y.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}{}".format(c[0], sorted(c[1].items())))
def test_interpolate_as_torch(case):
    (ya, ga), (yt, gt) = run(attn, *case), run(torch, *case)
    assert ya.shape == yt.shape
    if case[1].get("mode", "nearest").startswith("nearest"):
        assert np.array_equal(ya, yt)
    np.testing.assert_allclose(ya, yt, rtol=1e-6, atol=2e-6)
    np.testing.assert_allclose(ga, gt, rtol=1e-6, atol=2e-6)


def test_upsample_module():
    x = np.random.RandomState(5).standard_normal((2, 3, 4, 4)).astype(np.float32)
    for make in (lambda M: M.nn.Upsample(scale_factor=2),
                 lambda M: M.nn.Upsample(size=(5, 3), mode="bilinear", align_corners=False)):
        a, t = make(attn), make(torch)
        assert repr(a) == repr(t)
        np.testing.assert_allclose(a(attn.tensor(x)).numpy(), t(torch.tensor(x)).numpy(),
                                   rtol=1e-6, atol=2e-6)


@pytest.mark.parametrize("bad", [
    lambda M: M.nn.functional.interpolate(M.zeros(1, 1, 4), size=3, scale_factor=2),
    lambda M: M.nn.functional.interpolate(M.zeros(1, 1, 4)),
    lambda M: M.nn.functional.interpolate(M.zeros(1, 1, 4), size=3, align_corners=True),
    lambda M: M.nn.functional.interpolate(M.zeros(1, 1, 4), size=3, mode="cubic"),
    lambda M: M.nn.functional.interpolate(M.zeros(1, 1, 4, 4), size=(3, 3, 3)),
    lambda M: M.nn.functional.interpolate(M.zeros(1, 1, 4), scale_factor=0.1),
])
def test_errors_as_torch(bad):
    with pytest.raises(Exception) as te:
        bad(torch)
    with pytest.raises(type(te.value)):
        bad(attn)
