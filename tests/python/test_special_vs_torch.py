"""log1p, expm1, log2, log10, exp2, erf, erfc, tan, sinh, cosh, asin, acos, atan, asinh, acosh,
atanh (Tensor methods and attn.*) against PyTorch 1.13: values by test_ops_vs_torch's rule
(attn's float32 error against a float64 reference at most twice torch's own, plus an ulp of the
result's scale; nan and inf where torch has them), integers computed as float32, bfloat16 rounded once, gradients within float32
rounding of torch's, and bool refused."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from conftest import to_np  # noqa: E402
from test_ops_vs_torch import check_close  # noqa: E402

NAMES = "log1p expm1 log2 log10 exp2 erf erfc tan sinh cosh asin acos atan asinh acosh atanh".split()


def inputs(name, seed=0):
    rs = np.random.RandomState(seed)
    if name in ("asin", "acos", "atan", "atanh"):
        x = rs.uniform(-1.2, 1.2, 400)
    elif name == "acosh":
        x = np.concatenate([rs.uniform(0.5, 3, 300), 10.0 ** rs.uniform(0, 30, 100)])
    elif name == "asinh":
        x = np.concatenate([rs.standard_normal(200) * 4, 10.0 ** rs.uniform(-30, 30, 100),
                            -(10.0 ** rs.uniform(-30, 30, 100))])
    elif name in ("log1p",):
        x = np.concatenate([rs.uniform(-1.5, 3, 300), 10.0 ** rs.uniform(-12, 5, 100)])
    elif name in ("log2", "log10"):
        x = np.concatenate([10.0 ** rs.uniform(-30, 30, 300), rs.uniform(-2, 2, 100)])
    elif name in ("expm1", "exp2"):
        x = np.concatenate([rs.uniform(-90, 90, 300), rs.standard_normal(100) * 1e-6])
    elif name in ("sinh", "cosh"):
        # up to 88.5: beyond 88.72, exp(x) overflows and torch's vectorised sinh and cosh (through
        # exp) give inf where the C library's give the finite value (sinh(89.1) = 2.6e38)
        x = np.concatenate([rs.uniform(-88.5, 88.5, 300), rs.standard_normal(100) * 1e-6])
    else:
        x = rs.standard_normal(400) * 4
    special = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan]
    return np.concatenate([x, special]).astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
def test_values_as_torch(name):
    x = inputs(name)
    with np.errstate(all="ignore"):
        check_close(getattr(attn.tensor(x), name)(), lambda t: getattr(torch, name)(t),
                    [torch.tensor(x)], name)
        check_close(getattr(attn, name)(attn.tensor(x)), lambda t: getattr(torch, name)(t),
                    [torch.tensor(x)], name + " (attn." + name + ")")


@pytest.mark.parametrize("name", NAMES)
def test_integers_bfloat16_and_gradients(name):
    i = np.arange(-3, 4, dtype=np.int64) if name not in ("log2", "log10", "log1p") else \
        np.arange(0, 7, dtype=np.int64)
    got = getattr(attn.tensor(i), name)()
    assert got.dtype == attn.float32
    np.testing.assert_allclose(to_np(got), to_np(getattr(torch.tensor(i), name)()), rtol=2e-7,
                               err_msg=name)
    x = inputs(name, 1)[:300]
    xb = attn.tensor(x).to(attn.bfloat16)
    got = getattr(xb, name)()
    assert got.dtype == attn.bfloat16
    want = getattr(torch.tensor(x).to(torch.bfloat16).float(), name)().to(torch.bfloat16)
    a, b = to_np(got.float()), to_np(want.float())
    # computed in float32 and rounded once: at most one bfloat16 ulp from torch's rounding of its
    # own float32 result
    ok = np.isclose(a, b, rtol=2.0 ** -7, atol=0, equal_nan=True) | (a == b)
    assert ok.all(), "{}: {} of {} differ".format(name, (~ok).sum(), ok.size)
    xs = x[np.isfinite(x)][:64]
    if name in ("expm1", "exp2", "sinh", "cosh"):
        xs = np.clip(xs, -20, 20)
    xa = attn.tensor(xs, requires_grad=True)
    xt = torch.tensor(xs, requires_grad=True)
    ya, yt = getattr(xa, name)(), getattr(xt, name)()
    g = np.random.RandomState(2).standard_normal(xs.shape).astype(np.float32)
    ya.backward(attn.tensor(g))
    yt.backward(torch.tensor(g))
    ga, gt = to_np(xa.grad).astype(np.float64), to_np(xt.grad).astype(np.float64)
    fin = np.isfinite(gt)
    assert np.array_equal(np.isfinite(ga), fin), name
    np.testing.assert_allclose(ga[fin], gt[fin], rtol=1e-5, atol=1e-6 * np.abs(gt[fin]).max(),
                               err_msg=name + " grad")


def test_refusals():
    with pytest.raises(ValueError, match=r"\[erf\] not implemented for bool"):
        attn.tensor([True]).erf()
    assert attn.arcsin is attn.asin and attn.arctan is attn.atan
    assert attn.arcsinh is attn.asinh and attn.arccosh is attn.acosh and attn.arctanh is attn.atanh
