"""Gradients of every op and module of the Python module against torch.autograd (1.13, the oracle).

Each case runs the same function three times on the same float32 input values:
  * torch in float64 (the reference gradient),
  * torch in float32 (how far PyTorch itself is from the reference),
  * attn (float32),
backpropagating the same random upstream gradient R (out.backward(R)). For every input that
requires grad, attn's error against the reference must be at most twice torch's own float32
error, plus a few float32 ulps of the gradient's scale (ULPS * 2**-23 * max(1, max|ref|)) so that
a case where torch happens to be exact does not demand exactness from attn (the FlashAttention
accuracy rule, as in test_ops_vs_torch.py). Shapes use awkward sizes (1, 7, 63, 65, 129).

Also the autograd surface: .grad (settable to None), .backward(gradient, retain_graph), .grad_fn,
is_leaf, no_grad / enable_grad / set_grad_enabled, Module.zero_grad, Parameter.grad.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402

F32_EPS = 2.0 ** -23
ULPS = 4
SIZES = [1, 7, 63, 65, 129]


# ---- inputs -------------------------------------------------------------------------------------

def data(shape, kind="f", seed=0):
    """f: randn; p: positive 0.5..2; u: uniform -1..1; b: bool; d: distinct values (no ties)."""
    rs = np.random.RandomState(seed * 7919 + 31 * len(shape) + int(np.prod(shape)) % 100003)
    if kind == "f":
        return np.asarray(rs.standard_normal(size=shape), np.float32)
    if kind == "p":
        return np.asarray(rs.uniform(0.5, 2.0, size=shape), np.float32)
    if kind == "u":
        return np.asarray(rs.uniform(-1.0, 1.0, size=shape), np.float32)
    if kind == "b":
        return np.asarray(rs.uniform(size=shape) < 0.5)
    if kind == "d":
        n = int(np.prod(shape))
        return (rs.permutation(n).astype(np.float64) / max(n, 1) * 4 - 2).astype(
            np.float32).reshape(shape)
    raise ValueError(kind)


class In:
    """An input of a case: a NumPy array, and whether it requires grad (float arrays by default)."""

    def __init__(self, array, grad=None):
        self.array = array
        self.grad = array.dtype == np.float32 if grad is None else grad


def _make(lib, spec, dtype):
    a = spec.array
    if lib is torch:
        t = torch.from_numpy(a.copy())
        if a.dtype == np.float32:
            t = t.to(dtype)
    else:
        t = attn.from_numpy(a.copy())
    if spec.grad:
        t.requires_grad_(True)
    return t


def _np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().double().numpy()
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def run(lib, fn, specs, R, dtype=torch.float32):
    ts = [_make(lib, s, dtype) for s in specs]
    out = fn(lib, *ts)
    if lib is torch:
        g = torch.from_numpy(R.copy()).to(out.dtype)
    else:
        g = attn.from_numpy(R.copy())
    out.backward(g)
    return _np(out), [(_np(t.grad) if t.grad is not None else None) if s.grad else None
                      for t, s in zip(ts, specs)]


def check_grads(what, fn, specs, factor=2.0, ulps=ULPS, seed=1):
    """fn(lib, *tensors) -> one tensor; lib is torch or attn. See the module docstring."""
    R = _upstream(fn, specs, seed)
    out64, g64 = run(torch, fn, specs, R, torch.float64)
    _, g32 = run(torch, fn, specs, R, torch.float32)
    out_a, ga = run(attn, fn, specs, R)
    assert out_a.shape == out64.shape, "{}: output shape {} != torch's {}".format(
        what, out_a.shape, out64.shape)
    for i, spec in enumerate(specs):
        if not spec.grad:
            continue
        ref, theirs, ours = g64[i], g32[i], ga[i]
        assert ours is not None, "{}: input {} got no gradient".format(what, i)
        if ref is None:  # torch gives None where the input does not reach the output
            ref = np.zeros_like(ours)
            theirs = np.zeros_like(ours)
        assert ours.shape == ref.shape, "{}: grad {} shape {} != {}".format(
            what, i, ours.shape, ref.shape)
        assert np.array_equal(np.isnan(ours), np.isnan(ref)), "{}: NaN positions of grad {}".format(
            what, i)
        fin = np.isfinite(ref)
        assert np.array_equal(ours[~fin], ref[~fin], equal_nan=True), \
            "{}: inf positions of grad {}".format(what, i)
        if not fin.any():
            continue
        err_ours = np.max(np.abs(ours[fin] - ref[fin]))
        err_torch = np.max(np.abs(theirs[fin] - ref[fin]))
        scale = max(1.0, float(np.max(np.abs(ref[fin]))))
        bound = factor * err_torch + ulps * F32_EPS * scale
        assert err_ours <= bound, (
            "{}: grad of input {}: attn's fp32 error {:.3g} > {}x torch's {:.3g} + {} ulp "
            "(scale {:.3g})".format(what, i, err_ours, factor, err_torch, ulps, scale))



def _upstream(fn, specs, seed):
    """A fixed random upstream gradient of the output's shape (found with a float64 torch run)."""
    with torch.no_grad():
        ts = [_make(torch, In(s.array, False), torch.float64) for s in specs]
        shape = tuple(fn(torch, *ts).shape)
    rs = np.random.RandomState(1234 + seed)
    return rs.standard_normal(size=shape).astype(np.float32)


# ---- elementwise ----------------------------------------------------------------------------------

SHAPES = [(n,) for n in SIZES] + [(7, 65), (63, 1, 7), (1, 129)]

UNARY = {
    "exp": (lambda L, x: x.exp(), "f"),
    "log": (lambda L, x: L.log(x), "p"),
    "sqrt": (lambda L, x: L.sqrt(x), "p"),
    "rsqrt": (lambda L, x: x.rsqrt(), "p"),
    "abs": (lambda L, x: L.abs(x), "f"),
    "neg": (lambda L, x: -x, "f"),
    "neg()": (lambda L, x: x.neg(), "f"),
    "tanh": (lambda L, x: L.tanh(x), "f"),
    "sigmoid": (lambda L, x: x.sigmoid(), "f"),
    "relu": (lambda L, x: x.relu(), "f"),
    "ceil+floor": (lambda L, x: x.ceil() * x + x.floor(), "f"),
    "pow 2": (lambda L, x: x ** 2, "f"),
    "pow 3 (int)": (lambda L, x: x.pow(3), "f"),
    "pow 2.5": (lambda L, x: x ** 2.5, "p"),
    "pow -0.5": (lambda L, x: x ** -0.5, "p"),
    "pow 0": (lambda L, x: x ** 0 + x, "f"),
    "2 ** x": (lambda L, x: 2 ** x, "u"),
    "0.5 ** x": (lambda L, x: L.pow(0.5, x), "u"),
    "x + 2": (lambda L, x: x + 2, "f"),
    "2 + x": (lambda L, x: 2 + x, "f"),
    "x - 1.5": (lambda L, x: x - 1.5, "f"),
    "1 - x (rsub)": (lambda L, x: 1 - x, "f"),
    "x * 3": (lambda L, x: x * 3, "f"),
    "0.25 * x": (lambda L, x: 0.25 * x, "f"),
    "x / 7": (lambda L, x: x / 7, "f"),
    "2 / x": (lambda L, x: 2 / x, "p"),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_and_scalar_ops(name, shape):
    fn, kind = UNARY[name]
    check_grads("{} {}".format(name, shape), fn, [In(data(shape, kind))])


BINARY = {
    "add": (lambda L, a, b: a + b, "f"),
    "sub": (lambda L, a, b: a - b, "f"),
    "mul": (lambda L, a, b: a * b, "f"),
    "div": (lambda L, a, b: a / b, "p"),
    "pow": (lambda L, a, b: a.pow(b), "p"),
    "maximum": (lambda L, a, b: L.maximum(a, b), "d"),
    "minimum": (lambda L, a, b: L.minimum(a, b), "d"),
}
BROADCAST = [((7,), (7,)), ((63, 7), (7,)), ((65, 1), (1, 129)), ((1,), (7, 65)),
             ((7, 1, 63), (65, 1)), ((129,), ())]


@pytest.mark.parametrize("shapes", BROADCAST, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_ops_with_broadcasting(name, shapes):
    fn, kind = BINARY[name]
    sa, sb = shapes
    a = data(sa, "p" if name == "pow" else ("d" if kind == "d" else "f"), 1)
    b = data(sb, kind, 2)
    if name == "pow":
        b = data(sb, "u", 2)
    check_grads("{} {}".format(name, shapes), fn, [In(a), In(b)])
    check_grads("{} {} (a only)".format(name, shapes), fn, [In(a), In(b, grad=False)])
    check_grads("{} {} (b only)".format(name, shapes), fn, [In(a, grad=False), In(b)])


def test_ties_follow_pytorch():
    a = np.array([1.0, 2.0, 3.0, -1.0], np.float32)
    b = np.array([1.0, 5.0, 0.0, -1.0], np.float32)
    x = np.array([[3.0, 1.0, 3.0], [2.0, 2.0, 0.0]], np.float32)
    cases = [
        ("maximum", lambda L, a, b: L.maximum(a, b), [In(a), In(b)]),
        ("minimum", lambda L, a, b: L.minimum(a, b), [In(a), In(b)]),
        ("max()", lambda L, x: x.max(), [In(x)]),
        ("min()", lambda L, x: x.min(), [In(x)]),
        ("amax(1)", lambda L, x: L.amax(x, 1), [In(x)]),
        ("max(1)", lambda L, x: x.max(1)[0], [In(x)]),
        ("abs at 0 / relu at 0", lambda L, x: (x - 2).abs() + (x - 2).relu(), [In(x)]),
    ]
    for what, fn, specs in cases:
        check_grads(what, fn, specs, factor=0, ulps=0)  # exact


@pytest.mark.parametrize("n", SIZES)
def test_where_and_masked_fill(n):
    a, b, m = data((n, 7)), data((7,), "f", 3), data((n, 7), "b", 4)
    check_grads("where", lambda L, c, x, y: L.where(c, x, y), [In(m), In(a), In(b)])
    check_grads("masked_fill", lambda L, c, x: x.masked_fill(c, -2.5), [In(m), In(a)])
    check_grads("masked_fill broadcast", lambda L, c, x: x.masked_fill(c, 1.0), [In(m), In(b)])
    check_grads("masked_fill -inf then softmax",
                lambda L, c, x: (x.masked_fill(c, -math.inf) + 0).softmax(-1).masked_fill(c, 0.0),
                [In(m), In(a)])


# ---- reductions and softmax -----------------------------------------------------------------------

RSHAPES = [(1,), (129,), (7, 65), (63, 1, 7), (1, 65, 7)]
def ends(x):
    """The first and last dims (one dim for a 1-D tensor)."""
    return (0, -1) if x.dim() > 1 else (0,)


REDUCTIONS = {
    "sum()": lambda L, x: x.sum(),
    "sum(-1)": lambda L, x: x.sum(-1),
    "sum(0, keepdim)": lambda L, x: x.sum(0, keepdim=True),
    "sum((0, -1))": lambda L, x: L.sum(x, ends(x)),
    "mean()": lambda L, x: x.mean(),
    "mean(-1, keepdim)": lambda L, x: x.mean(-1, keepdim=True),
    "mean((0, -1))": lambda L, x: L.mean(x, ends(x)),
    "var()": lambda L, x: x.var(),
    "var(0, unbiased=False)": lambda L, x: x.var(0, unbiased=False),
    "var(-1, keepdim)": lambda L, x: x.var(-1, keepdim=True),
    "max()": lambda L, x: x.max(),
    "min()": lambda L, x: x.min(),
    "max(-1).values": lambda L, x: x.max(-1)[0],
    "min(0, keepdim).values": lambda L, x: x.min(0, keepdim=True)[0],
    "amax(-1)": lambda L, x: L.amax(x, -1),
    "amax((0, -1), keepdim)": lambda L, x: L.amax(x, ends(x), keepdim=True),
}


@pytest.mark.parametrize("shape", RSHAPES, ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(name, shape):
    if name == "var()" and shape == (1,):
        pytest.skip("torch 1.13's VarBackward0 itself fails on a one-element tensor")
    x = data(shape, "d")  # distinct values: no ties in max / min / amax
    check_grads("{} {}".format(name, shape), REDUCTIONS[name], [In(x)])


@pytest.mark.parametrize("shape", [(1,), (7,), (63, 65), (65, 129), (7, 1, 63), (2, 129, 7)],
                         ids=str)
@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_and_log_softmax(shape, dim):
    x = data(shape) * 3
    check_grads("softmax", lambda L, x: x.softmax(dim), [In(x)])
    check_grads("F.softmax", lambda L, x: (AF if L is attn else torch.nn.functional).softmax(
        x, dim=dim), [In(x)])
    check_grads("log_softmax", lambda L, x: x.log_softmax(dim), [In(x)])
    check_grads("softmax of a transpose",
                lambda L, x: x.transpose(0, -1).softmax(dim) if x.dim() > 1 else x.softmax(0),
                [In(x)])


# ---- views, copies, joins ---------------------------------------------------------------------------

VIEWS = {
    "view": lambda L, x: x.view(7, -1, 3),
    "reshape (copy)": lambda L, x: x.transpose(0, 2).reshape(-1),
    "flatten": lambda L, x: x.flatten(1),
    "transpose": lambda L, x: x.transpose(0, 2),
    "permute": lambda L, x: x.permute(1, 2, 0),
    "T (2-D)": lambda L, x: x[0].T,
    "mT": lambda L, x: x.mT,
    "unsqueeze/squeeze": lambda L, x: x.unsqueeze(1).unsqueeze(-1).squeeze(-1).squeeze(),
    "squeeze(d)": lambda L, x: x[:, :1].squeeze(1),
    "select": lambda L, x: x.select(1, -2),
    "x[i]": lambda L, x: x[3],
    "slice step": lambda L, x: x[:, 1::3],
    "narrow": lambda L, x: x.narrow(1, 5, 50),
    "x[..., None]": lambda L, x: x[..., None, 1],
    "index tensor": lambda L, x: x[:, L.tensor([64, 0, 3, 0, -1])],
    "clone": lambda L, x: x.clone(),
    "contiguous": lambda L, x: x.transpose(1, 2).contiguous(),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_and_copies(name):
    x = data((7, 65, 3))
    # Pure data movement (and sums of repeated picks): never worse than torch's own float32.
    check_grads(name, VIEWS[name], [In(x)], factor=1, ulps=0)


def test_expand():
    check_grads("expand", lambda L, x: x[:, :1].expand(7, 65, 3) * x[:, :1], [In(data((7, 65, 3)))])


def test_cat_stack_tril_triu():
    a, b, c = data((7, 65)), data((7, 1)), data((7, 65), "f", 5)
    sq = data((2, 63, 65))
    cases = [
        ("cat(1)", lambda L, a, b: L.cat([a, b, a], 1), [In(a), In(b)]),
        ("cat(0)", lambda L, a, c: L.cat([a, c]), [In(a), In(c)]),
        ("stack", lambda L, a, c: L.stack([a, c, a], 1), [In(a), In(c)]),
        ("tril", lambda L, x: L.tril(x), [In(sq)]),
        ("tril(-3)", lambda L, x: x.tril(-3), [In(sq)]),
        ("triu(2)", lambda L, x: L.triu(x, 2), [In(sq)]),
    ]
    for what, fn, specs in cases:
        check_grads(what, fn, specs, factor=1, ulps=0)  # data movement: no worse than torch


# ---- matmul --------------------------------------------------------------------------------------

MATMUL = [((n,), (n,)) for n in SIZES] + [
    ((65,), (65, 7)), ((7, 129), (129,)), ((63, 7), (7, 65)), ((1, 129), (129, 1)),
    ((3, 65, 7), (7, 63)), ((63, 7), (2, 7, 65)), ((2, 1, 7, 63), (3, 63, 1)),
    ((129,), (2, 129, 7)), ((2, 7, 65), (65,)), ((2, 63, 7), (2, 7, 129))]


@pytest.mark.parametrize("shapes", MATMUL, ids=str)
def test_matmul(shapes):
    sa, sb = shapes
    a, b = data(sa, "f", 1), data(sb, "f", 2)
    check_grads("matmul {}".format(shapes), lambda L, a, b: a @ b, [In(a), In(b)])
    check_grads("matmul {} (b only)".format(shapes), lambda L, a, b: L.matmul(a, b),
                [In(a, grad=False), In(b)])
    if len(sa) == 1 and len(sb) == 1:
        check_grads("dot", lambda L, a, b: a.dot(b), [In(a), In(b)])


# ---- nn: embedding, linear, dropout ------------------------------------------------------------

def test_embedding_and_linear():
    w = data((65, 7))
    ids = np.array([[0, 64, 3, 3], [64, 1, 0, 3]], np.int64)
    check_grads("embedding", lambda L, i, w: (AF if L is attn else torch.nn.functional).embedding(
        i, w), [In(ids), In(w)])
    for xs in [(7,), (63, 7), (2, 65, 7)]:
        x, W, b = data(xs, "f", 1), data((129, 7), "f", 2), data((129,), "f", 3)
        lin = lambda L, x, W, b: (AF if L is attn else torch.nn.functional).linear(x, W, b)  # noqa
        check_grads("linear {}".format(xs), lin, [In(x), In(W), In(b)])
        check_grads("linear without bias {}".format(xs),
                    lambda L, x, W: (AF if L is attn else torch.nn.functional).linear(x, W),
                    [In(x), In(W)])
        check_grads("linear, bias only {}".format(xs), lin,
                    [In(x, grad=False), In(W, grad=False), In(b)])


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_reuses_its_mask(p):
    # attn draws the same mask as torch for the same seed: the gradient is R * mask / (1 - p).
    x = data((7, 65))
    R = data((7, 65), "f", 9)
    torch.manual_seed(3)
    mask = torch.nn.functional.dropout(torch.ones(7, 65), p).numpy()
    attn.manual_seed(3)
    xa = attn.from_numpy(x.copy()).requires_grad_()
    AF.dropout(xa, p).backward(attn.from_numpy(R.copy()))
    assert np.array_equal(xa.grad.numpy(), R * mask)
    # In eval mode dropout is the identity.
    d = attn.nn.Dropout(p)
    d.eval()
    xa.grad = None
    (d(xa) * 2).sum().backward()
    assert np.array_equal(xa.grad.numpy(), np.full((7, 65), 2, np.float32))


# ---- scaled_dot_product_attention -------------------------------------------------------------

def torch_sdpa(q, k, v, mask=None, causal=False, bottom_right=False, gqa=False, scale=None,
               drop=None):
    """attn's sdpa as a torch composition: (out, weights). Fully masked rows give zeros."""
    L_q, L_k = q.shape[-2], k.shape[-2]
    if gqa and k.shape[-3] != q.shape[-3]:
        r = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(r, dim=-3)
        v = v.repeat_interleave(r, dim=-3)
    s = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    allowed = torch.ones(L_q, L_k, dtype=torch.bool)
    if causal:
        allowed = allowed.tril(L_k - L_q if bottom_right else 0)
    if mask is not None and mask.dtype == torch.bool:
        allowed = allowed & mask
    elif mask is not None:
        s = s + mask
    allowed = allowed.expand(s.shape)
    s = s.masked_fill(~allowed, -math.inf)
    empty = ~allowed.any(-1, keepdim=True)
    s = s.masked_fill(empty, 0.0)
    w = torch.softmax(s, -1).masked_fill(empty, 0.0)
    if drop is not None:
        w = w * drop
    return w @ v, w


SDPA_CASES = [
    # (B, H, H_kv, L_q, L_k, D, D_v, causal, mask)
    (1, 1, 1, 1, 1, 7, 7, None, None),
    (2, 3, 3, 7, 7, 63, 65, None, None),
    (1, 2, 2, 65, 63, 7, 1, "top_left", None),
    (1, 2, 2, 63, 129, 7, 7, "bottom_right", None),
    (1, 2, 2, 129, 65, 7, 7, "bottom_right", None),  # the first rows see no key: zeros
    (2, 1, 1, 65, 65, 7, 7, None, "bool"),
    (1, 2, 2, 7, 129, 7, 7, None, "bool_empty_rows"),
    (1, 2, 2, 63, 65, 7, 7, None, "float"),
    (1, 2, 2, 63, 65, 7, 7, None, "float_trainable"),
    (2, 6, 2, 7, 65, 7, 7, None, "gqa"),
    (1, 4, 1, 65, 63, 7, 7, "top_left", "gqa"),
]


def _sdpa_case(case):
    B, H, Hkv, L_q, L_k, D, D_v, causal, mask = case
    q, k, v = data((B, H, L_q, D), "f", 1), data((B, Hkv, L_k, D), "f", 2), \
        data((B, Hkv, L_k, D_v), "f", 3)
    m = None
    if mask in ("bool", "bool_empty_rows"):
        m = data((L_q, L_k), "b", 4) | (np.random.RandomState(5).uniform(size=(L_q, L_k)) < 0.3)
        if mask == "bool_empty_rows":
            m[::3] = False
    elif mask in ("float", "float_trainable"):
        m = data((1, L_q, L_k), "f", 6)
    return q, k, v, m, causal, mask == "gqa"


@pytest.mark.parametrize("case", SDPA_CASES,
                         ids=lambda c: "B{}_H{}_Hkv{}_Lq{}_Lk{}_D{}_Dv{}_{}_{}".format(*c))
@pytest.mark.parametrize("path", ["fused", "reference", "with_weights"])
def test_scaled_dot_product_attention(case, path):
    """The default (fused) path is one graph node whose backward is the fused backward kernel;
    reference=True runs the naive kernels (double precision inside); with_weights differentiates
    through the materialised weights (both outputs).

    Tolerance: the reference and with-weights paths meet the rule of this file (2x torch's float32
    error + 4 ulp). The fused backward recomputes each probability in float32 as exp(s - lse) from
    the float32 log-sum-exp (FlashAttention-2), which costs a few ulps over torch's composition:
    measured worst case 7.5 ulp at scale 1 (8.9e-7 against torch's 1.1e-7, causal bottom-right,
    L_q 63, L_k 129), so the fused path gets 2x + 12 ulp."""
    q, k, v, m, causal, gqa = _sdpa_case(case)
    opts = dict(is_causal=causal is not None)
    weights = path == "with_weights"

    def fn(L, q, k, v, *mask):
        mk = mask[0] if mask else None
        if L is torch:
            out, w = torch_sdpa(q, k, v, mk, causal is not None, causal == "bottom_right", gqa)
        elif weights:
            out, w = AF.scaled_dot_product_attention_with_weights(
                q, k, v, mk, enable_gqa=gqa, causal_bottom_right=causal == "bottom_right", **opts)
        else:
            return AF.scaled_dot_product_attention(
                q, k, v, mk, enable_gqa=gqa, causal_bottom_right=causal == "bottom_right",
                reference=path == "reference", **opts)
        # The weights' gradient is exercised through a term of the output's shape.
        return out + (w * w).sum(-1, keepdim=True) if weights else out

    specs = [In(q), In(k), In(v)]
    if m is not None:
        specs.append(In(m, grad=case[-1] == "float_trainable"))
    check_grads("sdpa " + path, fn, specs, ulps=12 if path == "fused" else ULPS)


def test_sdpa_dropout_reuses_its_mask():
    # Dropout on the weights: recover attn's mask as weights_dropped / weights (same seed) and give
    # it to torch's composition; the gradients must then agree (output and weights).
    q, k, v = data((2, 2, 7, 7), "f", 1), data((2, 2, 65, 7), "f", 2), data((2, 2, 65, 7), "f", 3)
    with attn.no_grad():
        args = [attn.from_numpy(a.copy()) for a in (q, k, v)]
        _, w0 = AF.scaled_dot_product_attention_with_weights(*args)
        attn.manual_seed(11)
        _, wd = AF.scaled_dot_product_attention_with_weights(*args, dropout_p=0.3)
    kept = wd.numpy() > 0.5 * w0.numpy()
    drop = np.where(kept, 1 / 0.7, 0.0)

    def fn(L, q, k, v):
        if L is torch:
            out, w = torch_sdpa(q, k, v, drop=torch.from_numpy(drop).to(q.dtype))
        else:
            attn.manual_seed(11)
            out, w = AF.scaled_dot_product_attention_with_weights(q, k, v, dropout_p=0.3)
        return out + (w * w).sum(-1, keepdim=True)

    check_grads("sdpa with weights and dropout", fn, [In(q), In(k), In(v)])


@pytest.mark.parametrize("reference", [False, True])
def test_sdpa_dropout_regenerates_its_mask(reference):
    # The plain path's dropout mask is counter-based: its backward regenerates it from the
    # forward's seed, never storing it. Check the gradient against a central difference of the
    # same forward (same seed, so the same mask) along a random direction: float32 forward, h =
    # 1e-2 on O(1) inputs, directional derivative of magnitude ~10: truncation ~1e-4, rounding
    # ~1e-4; a wrong or missing mask is off by O(1).
    shapes = [(2, 2, 7, 7), (2, 2, 65, 7), (2, 2, 65, 5)]
    xs = [data(sh, "f", i + 1) for i, sh in enumerate(shapes)]
    ds = [data(sh, "u", i + 7) for i, sh in enumerate(shapes)]
    R = data((2, 2, 7, 5), "f", 11)

    def f(arrays, grad=False):
        ts = [attn.from_numpy(a.copy()) for a in arrays]
        if grad:
            for t in ts:
                t.requires_grad_()
        attn.manual_seed(5)
        out = AF.scaled_dot_product_attention(*ts, dropout_p=0.4, is_causal=True,
                                              reference=reference)
        return ts, out

    ts, out = f(xs, grad=True)
    out.backward(attn.from_numpy(R.copy()))
    analytic = sum(float(np.sum(t.grad.numpy().astype(np.float64) * d)) for t, d in zip(ts, ds))
    h = 1e-2
    lp = np.sum(f([x + h * d for x, d in zip(xs, ds)])[1].numpy().astype(np.float64) * R)
    lm = np.sum(f([x - h * d for x, d in zip(xs, ds)])[1].numpy().astype(np.float64) * R)
    fd = (lp - lm) / (2 * h)
    assert abs(analytic - fd) <= 1e-3 + 1e-2 * abs(fd), (analytic, fd)
    # And the mask really is applied: without dropout the output differs.
    attn.manual_seed(5)
    plain = AF.scaled_dot_product_attention(*[attn.from_numpy(a.copy()) for a in xs],
                                            is_causal=True, reference=reference)
    assert not np.allclose(plain.numpy(), out.detach().numpy())


# ---- the seeds' classes and MultiheadAttention ------------------------------------------------

def seed_classes(L):
    """Seed 003's SelfAttention_v1, SelfAttention_v2 and CausalAttention, verbatim, over torch or
    attn (the same source code drives both)."""
    nn = L.nn

    class SelfAttention_v1(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.W_query = nn.Parameter(L.rand(d_in, d_out))
            self.W_key = nn.Parameter(L.rand(d_in, d_out))
            self.W_value = nn.Parameter(L.rand(d_in, d_out))

        def forward(self, x):
            keys = x @ self.W_key
            queries = x @ self.W_query
            values = x @ self.W_value
            attn_scores = queries @ keys.T  # omega
            attn_weights = L.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
            context_vec = attn_weights @ values
            return context_vec

    class SelfAttention_v2(nn.Module):
        def __init__(self, d_in, d_out, qkv_bias=False):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

        def forward(self, x):
            keys = self.W_key(x)
            queries = self.W_query(x)
            values = self.W_value(x)
            attn_scores = queries @ keys.T
            attn_weights = L.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
            context_vec = attn_weights @ values
            return context_vec

    class CausalAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.d_out = d_out
            self.W_query = nn.Parameter(L.rand(d_in, d_out))
            self.W_key = nn.Parameter(L.rand(d_in, d_out))
            self.W_value = nn.Parameter(L.rand(d_in, d_out))
            self.dropout = nn.Dropout(dropout)
            self.register_buffer(
                "mask", L.triu(L.ones(context_length, context_length), diagonal=1)
            )

        def forward(self, x):
            b, num_tokens, d_in = x.shape
            keys = x @ self.W_key
            queries = x @ self.W_query
            values = x @ self.W_value
            attn_scores = queries @ keys.transpose(1, 2)
            attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -L.inf)
            attn_weights = L.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
            attn_weights = self.dropout(attn_weights)
            context_vec = attn_weights @ values
            return context_vec

    return SelfAttention_v1, SelfAttention_v2, CausalAttention


def check_module(what, make, inputs_np, factor=2.0, ulps=ULPS, call=None):
    """make(L) builds the module (torch's in float32; its weights are loaded into attn's and, in
    float64, into a float64 copy). Compares the gradients of the inputs and of every parameter."""
    torch.manual_seed(0)
    tm = make(torch)
    am = make(attn)
    am.load_state_dict({k: attn.from_numpy(v.detach().numpy().copy())
                        for k, v in tm.state_dict().items()})
    names = [n for n, _ in tm.named_parameters()]
    call = call or (lambda m, *xs: m(*xs))
    R = None
    results = {}
    for label, lib, dtype in [("f64", torch, torch.float64), ("f32", torch, torch.float32),
                              ("attn", attn, None)]:
        if lib is torch:
            m = make(torch)
            m.load_state_dict(tm.state_dict())
            m = m.to(dtype)
            m.eval() if not tm.training else m.train()
            xs = [torch.from_numpy(x.copy()).to(dtype).requires_grad_() for x in inputs_np]
        else:
            m = am
            m.eval() if not tm.training else m.train()
            xs = [attn.from_numpy(x.copy()).requires_grad_() for x in inputs_np]
        out = call(m, *xs)
        if R is None:
            R = np.random.RandomState(7).standard_normal(size=tuple(out.shape)).astype(np.float32)
        g = torch.from_numpy(R.copy()).to(dtype) if lib is torch else attn.from_numpy(R.copy())
        out.backward(g)
        params = dict(m.named_parameters())
        results[label] = [_np(x.grad) for x in xs] + [
            _np(params[n].grad) if params[n].grad is not None else None for n in names]
    labels = ["input {}".format(i) for i in range(len(inputs_np))] + names
    for i, lbl in enumerate(labels):
        ref, theirs, ours = results["f64"][i], results["f32"][i], results["attn"][i]
        if ref is None:
            assert ours is None or not np.any(ours), "{}: {}".format(what, lbl)
            continue
        assert ours is not None, "{}: {} got no gradient".format(what, lbl)
        err_ours = np.max(np.abs(ours - ref))
        err_torch = np.max(np.abs(theirs - ref))
        scale = max(1.0, float(np.max(np.abs(ref))))
        assert err_ours <= factor * err_torch + ulps * F32_EPS * scale, (
            "{}: {}: attn's error {:.3g} > {}x torch's {:.3g} + {} ulp".format(
                what, lbl, err_ours, factor, err_torch, ulps))


@pytest.mark.parametrize("L_tokens", [1, 7, 63])
def test_seed_classes(L_tokens):
    d_in = 3
    x2 = data((L_tokens, d_in), "u", 1)
    x3 = data((2, L_tokens, d_in), "u", 2)
    check_module("SelfAttention_v1", lambda L: seed_classes(L)[0](d_in, 2), [x2])
    check_module("SelfAttention_v2", lambda L: seed_classes(L)[1](d_in, 2), [x2])
    check_module("SelfAttention_v2 (bias)", lambda L: seed_classes(L)[1](d_in, 5, True), [x2])

    def causal(L):
        m = seed_classes(L)[2](d_in, 2, 65, 0.5)
        m.eval()
        return m

    check_module("CausalAttention (eval)", causal, [x3])


@pytest.mark.parametrize("kind", ["self", "cross", "kdim_vdim", "masks", "no_weights",
                                  "batch_first"])
def test_multihead_attention(kind):
    E, H = 8, 2
    kw = {}
    if kind == "kdim_vdim":
        kw = dict(kdim=5, vdim=3)
    if kind == "batch_first":
        kw = dict(batch_first=True)

    def make(L):
        m = L.nn.MultiheadAttention(E, H, **kw)
        m.eval()
        return m

    L_q, L_k, B = 7, 65, 2
    q = data((L_q, B, E), "u", 1)
    kdim, vdim = kw.get("kdim", E), kw.get("vdim", E)
    k, v = data((L_k, B, kdim), "u", 2), data((L_k, B, vdim), "u", 3)
    if kind == "self":
        k, v = q, q
    if kind == "batch_first":
        q, k, v = (a.transpose(1, 0, 2).copy() for a in (q, k, v))
    kpm = np.zeros((B, L_k if kind != "self" else L_q), bool)
    kpm[:, ::5] = True
    am = data((L_q, L_k), "b", 4) & (np.arange(L_k)[None, :] > 2)

    def call(m, q, k, v):
        lib = attn if isinstance(q, attn.Tensor) else torch
        if kind == "masks":
            out, w = m(q, k, v, key_padding_mask=lib.from_numpy(kpm.copy()),
                       attn_mask=lib.from_numpy(am.copy()))
            return out + (w * w).sum(-1).transpose(0, 1)[..., None]
        out, w = m(q, k, v, need_weights=kind != "no_weights")
        if w is not None:
            return out * 2 + (w * w).mean()
        return out

    check_module("MultiheadAttention " + kind, make, [q, k, v], call=call)


# ---- the surface ----------------------------------------------------------------------------------

def test_grad_backward_and_grad_fn():
    x = attn.rand(3, 4, requires_grad=True)
    assert x.grad is None and x.is_leaf and x.grad_fn is None
    y = (x * x).sum()
    assert not y.is_leaf
    assert y.grad_fn.name() == "SumBackward0"
    assert repr(y.grad_fn).startswith("<SumBackward0 object at 0x")
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-6)
    y.backward()  # retained: accumulates
    np.testing.assert_allclose(x.grad.numpy(), 4 * x.detach().numpy(), rtol=1e-6)
    with pytest.raises(Exception, match="second time"):
        y.backward()
    x.grad = None
    assert x.grad is None
    x.grad = attn.ones(3, 4)
    (x * 2).backward(attn.ones(3, 4))
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 3.0))
    with pytest.raises(Exception, match="scalar outputs"):
        (x * 2).backward()
    with pytest.raises(Exception, match="does not require grad"):
        attn.ones(2).sum().backward()
    with pytest.raises(Exception, match=r"\(2, 2\)"):
        (x * 2).backward(attn.ones(2, 2))
    assert (x * 2).grad is None  # a result has no .grad
    v0 = x._version
    with attn.no_grad():
        x.add_(1)
    assert x._version == v0 + 1


def test_grad_modes():
    x = attn.rand(3, requires_grad=True)
    with attn.no_grad():
        assert not (x * 2).requires_grad
        with attn.enable_grad():
            assert (x * 2).requires_grad
    assert attn.is_grad_enabled()

    @attn.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    with attn.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None


def test_module_zero_grad_and_parameter_grad():
    m = attn.nn.Linear(4, 3)
    x = attn.rand(5, 4)
    m(x).sum().backward()
    assert isinstance(m.weight, attn.nn.Parameter)
    assert m.weight.grad is not None and tuple(m.weight.grad.shape) == (3, 4)
    np.testing.assert_allclose(m.bias.grad.numpy(), np.full(3, 5.0))
    m.zero_grad(set_to_none=False)
    assert np.array_equal(m.weight.grad.numpy(), np.zeros((3, 4), np.float32))
    m.zero_grad()
    assert m.weight.grad is None and m.bias.grad is None
    # One hand-written SGD step lowers the loss.
    target = attn.rand(5, 3)
    loss = ((m(x) - target) ** 2).mean()
    loss.backward()
    before = loss.item()
    with attn.no_grad():
        for p in m.parameters():
            p -= 0.5 * p.grad
    assert ((m(x) - target) ** 2).mean().item() < before


def test_inplace_on_views_and_version_errors():
    # torch's semantics for in-place ops on non-leaves and through views, against torch.
    def fn(L, a, b):
        y = a * 1.0
        y[1] += b
        y[:, 2] = b[:3] * 2
        y.masked_fill_(y > 1.5, 0.0)
        return y.exp()

    check_grads("in-place through views", fn, [In(data((3, 4), "u", 1)), In(data((4,), "u", 2))])
    a = attn.rand(3, requires_grad=True)
    e = a.exp()
    loss = e.sum()
    e.add_(1)
    with pytest.raises(Exception, match="modified by an inplace operation"):
        (e * a.exp()).sum().backward()
    with pytest.raises(Exception, match="leaf"):
        a.add_(1)
    del loss
