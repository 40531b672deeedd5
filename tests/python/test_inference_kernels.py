"""The one-pass kernels of the CPU against NumPy in float64 and the paths they replace:

  * RMSNorm (rms_norm_forward): float32, bfloat16, float16 rows, with and without a weight, with
    and without autograd (one node, RmsNormBackward: its gradients against float64's);
  * SiLU (silu_forward): x / (1 + e^-x) in float, rounded once, with and without autograd (one
    node, SiluBackward0: its gradient against float64's);
  * the binary ops of bfloat16 / float16 tensors (binary's 2-byte slots): each element widened,
    the float op, one rounding: bit for bit what widening the operands first gives."""
import numpy as np
import pytest

import attn
import attn.nn.functional as F

DTYPES = {"f32": attn.float32, "bf16": attn.bfloat16, "fp16": attn.float16}
ULP = {"f32": 2.0**-23, "bf16": 2.0**-7, "fp16": 2.0**-10}
TINY = {"f32": 2.0**-126, "bf16": 2.0**-126, "fp16": 2.0**-14}  # below: subnormal steps


def t(a, dt):
    return attn.tensor(np.asarray(a, dtype=np.float32)).to(DTYPES[dt])


def num(x):
    return x.detach().float().numpy().astype(np.float64)


def close(got, ref, dt, ulps, what):
    err = np.abs(got - ref)
    tol = ulps * ULP[dt] * np.maximum(np.abs(ref), TINY[dt])
    assert np.all(err <= tol), "{}: {:.3g} ulps off".format(what, float(np.max(err / tol * ulps)))


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("shape,norm", [((3, 7), (7,)), ((2, 33, 100), (100,)),
                                        ((64, 2048), (2048,)), ((4, 6, 5), (6, 5))])
@pytest.mark.parametrize("weighted", [False, True])
def test_rms_norm_one_pass_equals_the_composed_one(dt, shape, norm, weighted):
    rng = np.random.default_rng(sum(shape))
    xn = rng.standard_normal(shape) * 3
    wn = rng.standard_normal(norm) if weighted else None
    w = t(wn, dt) if weighted else None
    with attn.no_grad():
        fast = F.rms_norm(t(xn, dt), norm, w, 1e-5)
    xg = t(xn, dt).requires_grad_()
    slow = F.rms_norm(xg, norm, w, 1e-5)  # records RmsNormBackward
    assert slow.requires_grad and not fast.requires_grad
    assert fast.dtype is DTYPES[dt] and fast.shape == slow.shape
    # The reference: float64 normalisation of the dtype's values.
    xv = num(t(xn, dt))
    axes = tuple(range(-len(norm), 0))
    ref = xv / np.sqrt((xv * xv).mean(axis=axes, keepdims=True) + 1e-5)
    if weighted:
        ref = ref * num(w)
    # float32: a few ulps (the sums' orders differ); 2-byte dtypes: the two paths agree within
    # one rounding of the dtype, two with the weight's second rounding.
    ulps = 8 if dt == "f32" else (2 if weighted else 1)
    close(num(fast), num(slow), dt, ulps, "no grad vs grad")
    close(num(fast), ref, dt, ulps + (4 if dt == "f32" else 1), "fast vs float64")
    # The gradients of sum(y * c) against float64's, from the dtype's own x and w:
    # dx = r (c w) - x r^3 mean(c w x), dw = sum over rows of c x r.
    c = np.random.default_rng(5).standard_normal(shape)
    wg = t(wn, dt).requires_grad_() if weighted else None
    xg2 = t(xn, dt).requires_grad_()
    (F.rms_norm(xg2, norm, wg, 1e-5) * t(c, dt)).sum().backward()
    cv = num(t(c, dt))
    r = 1 / np.sqrt((xv * xv).mean(axis=axes, keepdims=True) + 1e-5)
    cw = cv * num(wg) if weighted else cv
    dx = r * cw - xv * r**3 * (cw * xv).mean(axis=axes, keepdims=True)
    gscale = np.abs(dx).max()
    tol = {"f32": 1e-5, "bf16": 3e-2, "fp16": 4e-3}[dt]  # the dtype's roundings of y * c
    assert np.abs(num(xg2.grad) - dx).max() <= tol * gscale, dt
    if weighted:
        dw = (cv * xv * r).reshape(-1, *norm).sum(0)
        assert np.abs(num(wg.grad) - dw).max() <= tol * np.abs(dw).max(), dt


def test_rms_norm_one_pass_reads_views_and_refuses_as_before():
    x = attn.tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).t()  # non-contiguous
    with attn.no_grad():
        got = F.rms_norm(x, (4,), None, 1e-6).numpy()
    xv = np.arange(24, dtype=np.float64).reshape(4, 6).T
    np.testing.assert_allclose(got, xv / np.sqrt((xv**2).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-6)
    with attn.no_grad(), pytest.raises(ValueError, match="normalized_shape"):
        F.rms_norm(x, (5,))
    with attn.no_grad(), pytest.raises(ValueError, match="weight"):
        F.rms_norm(x, (4,), attn.ones(3))
    # A weight of another dtype: the composed path, with its type promotion.
    with attn.no_grad():
        y = F.rms_norm(x.to(attn.bfloat16), (4,), attn.ones(4))
    assert y.dtype is attn.float32


@pytest.mark.parametrize("dt", list(DTYPES))
def test_silu_one_pass_equals_the_composed_one(dt):
    rng = np.random.default_rng(3)
    xn = np.concatenate([rng.standard_normal(70000) * 4, [0.0, -0.0, 30.0, -30.0, 80.0, -80.0]])
    with attn.no_grad():
        fast = F.silu(t(xn, dt))
    x = t(xn, dt).requires_grad_()
    graded = F.silu(x)  # the same pass, recorded
    assert graded.grad_fn.name() == "SiluBackward0"
    xw = t(xn, dt).float()
    slow = (xw * xw.sigmoid()).to(DTYPES[dt])  # composed in float32, rounded once
    xv = num(t(xn, dt))
    ref = xv / (1 + np.exp(-xv))
    # Relative to each value, against float64 (exp's error is about 1 ulp of float32), and
    # within one rounding of the dtype of the composed x * sigmoid(x).
    close(num(fast), ref, dt, 4 if dt == "f32" else 1, "silu vs float64")
    assert np.array_equal(num(graded), num(fast))
    close(num(fast), num(slow), dt, 8 if dt == "f32" else 1, "silu vs x * sigmoid(x)")
    # The gradient: g s (1 + x (1 - s)) in float32, rounded once.
    g = rng.standard_normal(xn.size)
    graded.backward(t(g, dt))
    gv = num(t(g, dt))
    s = 1 / (1 + np.exp(-xv))
    # Where 1 + x (1 - s) cancels (x near -1.28) the float32 error is relative to its terms'
    # size, not to the small result.
    ref_grad, size = gv * s * (1 + xv * (1 - s)), np.abs(gv) * s * (1 + np.abs(xv) * (1 - s))
    err = np.abs(num(x.grad) - ref_grad)
    rounding = 0.5 * ULP[dt] * np.maximum(np.abs(ref_grad), TINY[dt]) if dt != "f32" else 0
    assert np.all(err <= rounding + 16 * ULP["f32"] * size), "silu grad"
    with attn.no_grad():
        nan = F.silu(t([np.nan], dt))
    assert np.isnan(num(nan)).all()


def widened(op, a, b):
    """The op on float32 copies, rounded once to the dtype (comparisons: bool)."""
    r = op(a.float() if isinstance(a, attn.Tensor) else a, b.float() if isinstance(b, attn.Tensor)
           else b)
    dt = a.dtype if isinstance(a, attn.Tensor) else b.dtype
    return r if r.dtype is attn.bool else r.to(dt)


def same_bits(x, y):
    assert x.dtype is y.dtype and x.shape == y.shape
    xv, yv = x.float().numpy(), y.float().numpy()
    assert np.array_equal(xv, yv, equal_nan=True) or np.array_equal(xv.view(np.uint32),
                                                                    yv.view(np.uint32))


OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "max": attn.maximum,
       "min": attn.minimum, "lt": lambda a, b: a < b, "eq": lambda a, b: a == b}


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("op", list(OPS))
def test_two_byte_binary_ops_equal_the_widened_ones_bit_for_bit(dt, op):
    rng = np.random.default_rng(7)
    f = OPS[op]
    a = t(np.abs(rng.standard_normal((5, 300))) + 0.1, dt)  # positive: pow is defined
    b = t(rng.standard_normal((5, 300)), dt)
    b.view(-1)[3] = float("nan")
    row = t(rng.standard_normal(300), dt)
    col = t(rng.standard_normal((5, 1)), dt)
    big = t(rng.standard_normal((40, 2048)), dt)  # above the parallel threshold
    big2 = t(rng.standard_normal((40, 2048)), dt)
    cases = [(a, b), (a, row), (row, a), (a, col), (a, b.t().contiguous().t()), (a.t(), b.t()),
             (big, big2), (big, t(rng.standard_normal(2048), dt)),
             (a[:, ::3], b[:, ::3])]
    if op not in ("max", "min", "div"):  # maximum/minimum take tensors; 2.5 / a is a.reciprocal()
        cases += [(2.5, a), (a, 2.5)]   # * 2.5 (torch's __rtruediv__), two roundings
    for x, y in cases:
        same_bits(f(x, y), widened(f, x, y))


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_two_byte_in_place_ops_and_overflow(dt):
    rng = np.random.default_rng(11)
    x = t(rng.standard_normal((3, 1000)), dt)
    y = t(rng.standard_normal((3, 1000)), dt)
    once = widened(lambda a, b: a * b, x, y)
    twice = widened(lambda a, b: a + b, once, y)
    z = x.clone()
    z.mul_(y)
    same_bits(z, once)
    z.add_(y)
    same_bits(z, twice)
    z[:, ::2] -= y[:, ::2]  # a strided view, in place
    same_bits(z[:, ::2], widened(lambda a, b: a - b, twice[:, ::2], y[:, ::2]))
    big = t([60000.0, 3e38, -3e38], dt)
    s = big + big
    same_bits(s, widened(lambda a, b: a + b, big, big))
    assert np.isinf(num(s)[1:]).all() and s.dtype is DTYPES[dt]  # fp16: 60000 + 60000 too
    assert dt == "bf16" or np.isinf(num(s)[0])
