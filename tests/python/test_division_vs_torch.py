"""Rounded division and remainders against PyTorch 1.13: `//`, `%`, floor_divide, remainder, fmod,
div(rounding_mode=...), their in-place forms and scalar operands on either side, in float32,
int64 and bfloat16, with their gradients and their refusals. The results are correctly rounded
functions of their operands, so they must be torch's bits (signed zeros, inf and nan included).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from conftest import assert_same_bits, to_np  # noqa: E402


def floats(n, seed):
    """Awkward float32 values: wide-range randoms, exact multiples, +-0, +-inf and nan."""
    rs = np.random.RandomState(seed)
    x = (rs.standard_normal(n) * 10.0 ** rs.uniform(-3, 3, n)).astype(np.float32)
    x[: n // 4] = np.round(x[: n // 4])  # integers: exact quotients and remainders of 0
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 7.0, -7.0, 0.1, -0.1, 1e30, -1e-30],
                       dtype=np.float32)
    return np.concatenate([x, special])


def pair(a, b):
    return attn.tensor(a), torch.tensor(a), attn.tensor(b), torch.tensor(b)


OPS = {
    "//": (lambda x, y: x // y, lambda x, y: x // y),
    "%": (lambda x, y: x % y, lambda x, y: x % y),
    "floor_divide": (lambda x, y: attn.floor_divide(x, y), lambda x, y: torch.floor_divide(x, y)),
    "remainder": (lambda x, y: attn.remainder(x, y), lambda x, y: torch.remainder(x, y)),
    "fmod": (lambda x, y: attn.fmod(x, y), lambda x, y: torch.fmod(x, y)),
    "div floor": (lambda x, y: attn.div(x, y, rounding_mode="floor"),
                  lambda x, y: torch.div(x, y, rounding_mode="floor")),
    "div trunc": (lambda x, y: x.div(y, rounding_mode="trunc"),
                  lambda x, y: x.div(y, rounding_mode="trunc")),
    "divide": (lambda x, y: attn.divide(x, y), lambda x, y: torch.divide(x, y)),
    "true_divide": (lambda x, y: attn.true_divide(x, y), lambda x, y: torch.true_divide(x, y)),
}


def torch_elementwise(ft, xt, yt):
    """torch's result element by element (one-element tensors: its scalar kernel). Its vectorised
    fmod (Sleef's, also under remainder and //) returns nan where the quotient is beyond float
    range (1e30 fmod -1e-30), where its scalar kernel and C's fmod give the exact remainder."""
    return torch.cat([ft(xt[i:i + 1], yt[i:i + 1]) for i in range(xt.numel())])


@pytest.mark.parametrize("name", sorted(OPS))
def test_float32_every_pair_of_awkward_values(name):
    fa, ft = OPS[name]
    v = floats(40, 1)
    a = np.repeat(v, v.size)  # every value against every value, zero divisors included
    b = np.tile(v, v.size)
    xa, xt, ya, yt = pair(a, b)
    assert_same_bits(fa(xa, ya), torch_elementwise(ft, xt, yt), name)
    # away from such quotients the vectorised kernel agrees too
    ok = np.abs(a.astype(np.float64)) < 1e20 * np.maximum(np.abs(b.astype(np.float64)), 1e-30)
    assert_same_bits(fa(xa, ya)[attn.tensor(ok)], ft(xt, yt)[torch.tensor(ok)], name + " vector")


@pytest.mark.parametrize("name", sorted(OPS))
def test_int64_both_signs_and_scalar_forms(name):
    fa, ft = OPS[name]
    a = np.repeat(np.arange(-20, 21), 14).astype(np.int64)
    b = np.tile(np.array([-7, -5, -3, -2, -1, 1, 2, 3, 4, 5, 7, 11, 100, -100]), 41).astype(np.int64)
    xa, xt, ya, yt = pair(a, b)
    assert_same_bits(fa(xa, ya), ft(xt, yt), name)
    if name not in ("fmod",):
        for s in (3, -2, 2.5, -0.75):
            assert_same_bits(fa(xa, s), ft(xt, s), "{} scalar {}".format(name, s))
            if name not in ("div trunc",):
                assert_same_bits(fa(s, ya), ft(s, yt), "{} scalar {} first".format(name, s))
    else:
        for s in (3, -2, 2.5):
            assert_same_bits(xa.fmod(s), xt.fmod(s), "fmod scalar {}".format(s))


def test_broadcast_non_contiguous_and_bool_with_numbers():
    rs = np.random.RandomState(3)
    a = (rs.standard_normal((5, 7)) * 9).astype(np.float32)
    b = (rs.standard_normal((7, 1)) * 3).astype(np.float32)
    xa, xt = attn.tensor(a).t(), torch.tensor(a).t()  # (7, 5), strided
    ya, yt = attn.tensor(b), torch.tensor(b)
    for name in ("//", "%", "fmod", "div trunc"):
        fa, ft = OPS[name]
        assert_same_bits(fa(xa, ya), ft(xt, yt), name)
    m = np.array([True, False, True])
    assert_same_bits(attn.tensor(m) // 2, torch.tensor(m) // 2, "bool // 2")
    assert_same_bits(attn.tensor(m) % 2, torch.tensor(m) % 2, "bool % 2")
    assert_same_bits(7 // attn.tensor([2, -3]), 7 // torch.tensor([2, -3]), "7 // int")
    assert_same_bits(5.5 % attn.tensor([2, -2]), 5.5 % torch.tensor([2, -2]), "5.5 % int")


def test_bfloat16_rounds_the_float_result_once():
    v = floats(30, 2)
    a = np.repeat(v, v.size)
    b = np.tile(v, v.size)
    xa = attn.tensor(a).to(attn.bfloat16)
    ya = attn.tensor(b).to(attn.bfloat16)
    xt = torch.tensor(a).to(torch.bfloat16)
    yt = torch.tensor(b).to(torch.bfloat16)
    for name in ("//", "%", "fmod", "div trunc"):
        fa, ft = OPS[name]
        got = fa(xa, ya)
        assert got.dtype == attn.bfloat16
        # the float32 op on the widened operands, rounded once: what torch's CPU kernels compute
        want = torch_elementwise(ft, xt.float(), yt.float()).to(torch.bfloat16)
        np.testing.assert_array_equal(to_np(got.float()), to_np(want.float()), err_msg=name)


def test_in_place_forms():
    a = np.array([5.0, -5.0, 7.5, -0.0, 3.0], dtype=np.float32)
    xa, xt = attn.tensor(a), torch.tensor(a)
    xa //= 2
    xt //= 2
    assert_same_bits(xa, xt, "//=")
    xa %= 1.5
    xt %= 1.5
    assert_same_bits(xa, xt, "%=")
    ia, it = attn.tensor([7, -7, 9]), torch.tensor([7, -7, 9])
    ia //= attn.tensor([2, 2, -4])
    it //= torch.tensor([2, 2, -4])
    assert_same_bits(ia, it, "int //=")
    ia.fmod_(-2)
    it.fmod_(-2)
    assert_same_bits(ia, it, "fmod_")
    ia, it = attn.tensor([7, -7, 9]), torch.tensor([7, -7, 9])
    ia.div_(2, rounding_mode="floor")
    it.div_(2, rounding_mode="floor")
    assert_same_bits(ia, it, "div_ floor")
    ia.remainder_(attn.tensor([4]))
    it.remainder_(torch.tensor([4]))
    assert_same_bits(ia, it, "remainder_")
    with pytest.raises(ValueError, match="can't be cast"):
        attn.tensor([5, -5]).__imod__(1.5)
    with pytest.raises(ValueError, match="can't be cast"):
        attn.tensor([5, -5]).floor_divide_(1.5)


def test_gradients_as_torch():
    rs = np.random.RandomState(4)
    a = (rs.standard_normal((4, 6)) * 5).astype(np.float32)
    b = (rs.standard_normal((1, 6)) * 2).astype(np.float32)
    g = rs.standard_normal((4, 6)).astype(np.float32)
    for name in ("remainder", "fmod", "div floor", "div trunc"):
        fa, ft = OPS[name]
        xa = attn.tensor(a, requires_grad=True)
        ya = attn.tensor(b, requires_grad=True)
        xt = torch.tensor(a, requires_grad=True)
        yt = torch.tensor(b, requires_grad=True)
        oa, ot = fa(xa, ya), ft(xt, yt)
        assert_same_bits(oa, ot, name)
        assert oa.grad_fn.name() == ot.grad_fn.name(), name
        oa.backward(attn.tensor(g))
        ot.backward(torch.tensor(g))
        np.testing.assert_allclose(to_np(xa.grad), to_np(xt.grad), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(to_np(ya.grad), to_np(yt.grad), rtol=1e-6, err_msg=name)
    # scalar divisors: the gradient passes to the dividend (remainder, fmod) or is zero
    for fa, ft in ((lambda x: x % 2.5, lambda x: x % 2.5), (lambda x: x.fmod(-2), lambda x: x.fmod(-2)),
                   (lambda x: x.div(3, rounding_mode="floor"),
                    lambda x: x.div(3, rounding_mode="floor"))):
        xa, xt = attn.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        fa(xa).backward(attn.tensor(g))
        ft(xt).backward(torch.tensor(g))
        np.testing.assert_array_equal(to_np(xa.grad), to_np(xt.grad))
    # in place on a non-leaf: remainder_ through the old value
    xa, xt = attn.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    ya, yt = attn.tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)
    (xa * 1.0).remainder_(ya).backward(attn.tensor(g))
    (xt * 1.0).remainder_(yt).backward(torch.tensor(g))
    np.testing.assert_allclose(to_np(xa.grad), to_np(xt.grad), rtol=1e-6)
    np.testing.assert_allclose(to_np(ya.grad), to_np(yt.grad), rtol=1e-6)


def test_no_derivative_where_torch_has_none():
    x = attn.tensor([5.0, -3.0], requires_grad=True)
    for y in (x // 2, attn.floor_divide(x, attn.tensor([2.0, 2.0])), 5 % x):
        assert y.requires_grad  # as torch's: the result is in the graph...
        with pytest.raises(NotImplementedError, match=r"derivative for aten::(floor_divide|remainder)"):
            y.sum().backward()  # ...and a pass through it is refused
    y = x * 1.0
    y //= 2  # in place on a non-leaf: the same refusal
    with pytest.raises(NotImplementedError, match=r"derivative for aten::floor_divide"):
        y.sum().backward()
    with attn.no_grad():
        assert not (x // 2).requires_grad


def test_refusals_name_the_op_and_the_operands():
    with pytest.raises(ValueError, match=r"floor_divide.*ZeroDivisionError"):
        attn.tensor([7, 8]) // attn.tensor([2, 0])
    with pytest.raises(ValueError, match=r"remainder.*ZeroDivisionError"):
        attn.tensor([7, 8]) % 0
    with pytest.raises(ValueError, match=r"fmod.*ZeroDivisionError"):
        attn.tensor([7]).fmod(attn.tensor([0]))
    x = attn.tensor([7, 8])
    with pytest.raises(ValueError, match="ZeroDivisionError"):
        x //= 0
    assert x.tolist() == [7, 8]  # refused before any element is written
    with pytest.raises(ValueError, match="two bool operands"):
        attn.tensor([True]) // attn.tensor([True])
    with pytest.raises(ValueError, match=r"rounding_mode to be one of None, 'trunc', or 'floor' "
                                         r"but found 'round'"):
        attn.div(attn.tensor([1.0]), 2, rounding_mode="round")
    with pytest.raises(ValueError, match="cannot be broadcast"):
        attn.tensor([1.0, 2.0]) % attn.tensor([1.0, 2.0, 3.0])


def test_int64_minimum_by_minus_one_wraps_instead_of_trapping():
    lo = -2 ** 63
    x = attn.tensor([lo, 7])
    assert (x // -1).tolist() == [lo, -7]
    assert (x % -1).tolist() == [0, 0]
    assert x.fmod(-1).tolist() == [0, 0]
    assert x.div(-1, rounding_mode="trunc").tolist() == [lo, -7]


def test_module_level_arithmetic():
    rs = np.random.RandomState(5)
    a = rs.standard_normal(9).astype(np.float32)
    b = rs.standard_normal(9).astype(np.float32)
    xa, xt, ya, yt = pair(a, b)
    assert_same_bits(attn.add(xa, ya, alpha=2), torch.add(xt, yt, alpha=2), "add alpha")
    assert_same_bits(attn.sub(xa, ya, alpha=0.5), torch.sub(xt, yt, alpha=0.5), "sub alpha")
    assert_same_bits(attn.mul(xa, 3), torch.mul(xt, 3), "mul")
    assert_same_bits(attn.multiply(xa, ya), torch.multiply(xt, yt), "multiply")
    assert_same_bits(attn.subtract(xa, ya), torch.subtract(xt, yt), "subtract")
    assert_same_bits(attn.true_divide(attn.tensor([7, -7]), 2),
                     torch.true_divide(torch.tensor([7, -7]), 2), "true_divide ints")
    assert_same_bits(attn.div(7, attn.tensor([2, -2]), rounding_mode="trunc"),
                     torch.div(7, torch.tensor([2, -2]), rounding_mode="trunc"), "div number first")
