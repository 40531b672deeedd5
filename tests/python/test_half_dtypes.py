"""bfloat16 and float16 compute on the CPU: every op a model uses takes them, with PyTorch's CPU
semantics (float accumulation, each result rounded once to the dtype), autograd included.

Two oracles:
  * always: NumPy in float64, rounded once to the dtype (the products' paths: streaming few rows,
    widening blocks of the weight; autograd's dtypes and conversions; modules' dtype=);
  * torch 2.x where the running Python has it (scripts/test.sh runs this file again with the
    benchmarks' environment, .venv-bench): forward and backward of each op against torch's own
    bfloat16 / float16 CPU kernels. torch 1.13 (the suite's oracle elsewhere) computes LayerNorm,
    SiLU and tanh-GELU of bfloat16 in bfloat16 and lacks most float16 CPU kernels, so those
    comparisons skip there.
"""
import numpy as np
import pytest

import attn
import attn.nn as nn
import attn.nn.functional as F

DTYPES = {"bf16": attn.bfloat16, "fp16": attn.float16}
EPS = {"bf16": 2.0**-8, "fp16": 2.0**-11}  # half an ulp, relative (round to nearest)


def round_to(a, dt):
    """float64 values rounded once to the dtype (through torch-free bit arithmetic)."""
    f = np.asarray(a, dtype=np.float32)
    if dt == "fp16":
        return f.astype(np.float16).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def at(a, dt):
    return attn.tensor(np.asarray(a, dtype=np.float32)).to(DTYPES[dt])


def num(t):
    return t.float().numpy().astype(np.float64)


def assert_rounded_once(got, exact, dt, what, mag=None):
    """got equals exact rounded to the dtype, up to the float32 accumulation's last bits: within
    one ulp everywhere (or the float32 sum's own error, from the terms' magnitude `mag`, where a
    sum cancels) and bit-equal nearly everywhere."""
    ref = round_to(exact, dt).astype(np.float64)
    err = np.abs(got - ref)
    ulp = 2 * EPS[dt] * np.maximum(np.abs(ref), 1e-30)
    if mag is not None:
        ulp = np.maximum(ulp, 2.0**-20 * mag)
    assert np.all(err <= ulp * 1.01), "{}: {} ulps off".format(what, float(np.max(err / ulp)))
    assert np.mean(got != ref) < 0.02, "{}: {:.3f} differ".format(what, float(np.mean(got != ref)))


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("M,N,K", [(1, 40, 33), (3, 50, 96), (8, 130, 257), (9, 64, 48),
                                   (200, 300, 160), (1, 1100, 1030)])
def test_linear_is_the_product_rounded_once(dt, M, N, K):
    # M <= 8: the streaming path (bfloat16) or the widening one (float16); above: widened blocks
    # of the weight through sgemm. The big one is the decoding step of a real layer.
    rng = np.random.default_rng(M * 1000 + N + K)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (N, K), (N,)))
    xr, wr, br = (round_to(a, dt).astype(np.float64) for a in (x, w, b))
    y = F.linear(at(x, dt), at(w, dt), at(b, dt))
    assert y.dtype == DTYPES[dt] and tuple(y.shape) == (M, N)
    mag = np.abs(xr) @ np.abs(wr).T + np.abs(br)
    assert_rounded_once(num(y), xr @ wr.T + br, dt, "linear", mag)
    assert_rounded_once(num(at(x, dt) @ at(w, dt).t()), xr @ wr.T, dt, "matmul", mag)


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_reductions_softmax_and_norms_round_once(dt):
    rng = np.random.default_rng(3)
    x = round_to(rng.standard_normal((5, 70)), dt).astype(np.float64)
    t = at(x, dt)
    assert_rounded_once(num(t.sum(-1)), x.sum(-1), dt, "sum")
    assert_rounded_once(num(t.mean(-1)), x.mean(-1), dt, "mean")
    e = np.exp(x - x.max(-1, keepdims=True))
    assert_rounded_once(num(F.softmax(t, -1)), e / e.sum(-1, keepdims=True), dt, "softmax")
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert_rounded_once(num(F.layer_norm(t, (70,))), (x - mu) / np.sqrt(var + 1e-5), dt,
                        "layer_norm")
    assert_rounded_once(num(F.silu(t)), x / (1 + np.exp(-x)), dt, "silu")
    for r in (t.sum(-1), F.softmax(t, -1), F.layer_norm(t, (70,)), F.silu(t), F.gelu(t)):
        assert r.dtype == DTYPES[dt]


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_autograd_in_the_dtype(dt):
    rng = np.random.default_rng(4)
    x = at(rng.standard_normal((6, 20)), dt).requires_grad_()
    w = at(rng.standard_normal((12, 20)), dt).requires_grad_()
    y = F.linear(F.silu(x), w)
    assert y.dtype == DTYPES[dt] and y.requires_grad
    y.sum().backward()
    assert x.grad.dtype == DTYPES[dt] and w.grad.dtype == DTYPES[dt]
    xs, wn = num(x), num(w)
    s = round_to(xs / (1 + np.exp(-xs)), dt).astype(np.float64)
    # dW = g^T silu(x) with g all ones: the column sums of silu(x), rounded once.
    assert_rounded_once(num(w.grad), np.ones((6, 12)).T @ s, dt, "dW")
    # A float32 tensor converted to the dtype and back gets its gradient through both.
    a = attn.ones(3, requires_grad=True)
    (a.to(DTYPES[dt]) * 3).sum().backward()
    assert a.grad.dtype == attn.float32 and a.grad.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="floating point"):
        attn.ones(2, dtype=attn.int64).requires_grad_()
    with pytest.raises(ValueError, match="dtype"):
        y.backward(attn.ones(6, 12))  # a float32 gradient for a bfloat16 output


def test_modules_convert_in_place_and_stay_tied():
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.norm = nn.RMSNorm(8)
            self.head = nn.Linear(8, 10, bias=False)
            self.head.weight = self.emb.weight  # tied, as GPT-2 and Llama 3.2 do

        def forward(self, idx):
            return self.head(self.norm(self.emb(idx)))

    m = Tiny()
    before = m.emb.weight.detach().clone()
    assert m.to(attn.bfloat16) is m
    assert all(p.dtype == attn.bfloat16 and p.requires_grad for p in m.parameters())
    assert m.head.weight is m.emb.weight
    assert np.array_equal(num(m.emb.weight), round_to(before.numpy(), "bf16"))
    out = m(attn.tensor([[1, 2, 3]]))
    assert out.dtype == attn.bfloat16 and tuple(out.shape) == (1, 3, 10)
    F.cross_entropy(out[0], attn.tensor([2, 3, 4])).backward()
    assert m.emb.weight.grad.dtype == attn.bfloat16
    assert m.float() is m and m.emb.weight.dtype == attn.float32
    assert m.emb.weight.grad.dtype == attn.float32
    assert nn.Linear(4, 3, dtype=attn.float16).weight.dtype == attn.float16
    with pytest.raises(ValueError, match="cannot move"):
        nn.Linear(4, 3).to(attn.int64)
    with pytest.raises(ValueError, match="computes in float32"):
        nn.MultiheadAttention(8, 2).to(attn.bfloat16)


def test_autocast_runs_the_products_in_bfloat16():
    rng = np.random.default_rng(9)
    lin = nn.Linear(16, 8)
    x = attn.tensor(rng.standard_normal((4, 16)).astype(np.float32))
    with attn.autocast("cpu"):
        y = lin(x)
        z = F.softmax(y, -1)  # not on the lists: the input's dtype
        loss = F.cross_entropy(y, attn.tensor([1, 2, 3, 4]))  # float32, as torch's
        with attn.autocast("cpu", enabled=False):
            assert (x @ x.t()).dtype is attn.float32
        assert (x @ x.t()).dtype is attn.bfloat16  # restored
    assert y.dtype is attn.bfloat16 and z.dtype is attn.bfloat16 and loss.dtype is attn.float32
    assert (x @ x.t()).dtype is attn.float32  # off again outside
    # y is the bfloat16 product of the rounded operands, rounded once.
    xr, wr, br = (round_to(t.numpy(), "bf16").astype(np.float64)
                  for t in (x, lin.weight.detach(), lin.bias.detach()))
    assert_rounded_once(num(y), xr @ wr.T + br, "bf16", "autocast linear",
                        np.abs(xr) @ np.abs(wr).T + np.abs(br))
    loss.backward()  # gradients reach the float32 parameters in float32
    assert lin.weight.grad.dtype is attn.float32 and lin.bias.grad.dtype is attn.float32


# ---- against torch 2.x's CPU kernels ------------------------------------------------------------

torch = pytest.importorskip("torch")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
needs_torch2 = pytest.mark.skipif(not TORCH2, reason="torch 1.13 computes some bfloat16 ops in "
                                  "bfloat16 and lacks float16 CPU kernels; run with torch 2.x")
TDT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def case_inputs(rng):
    return {"x": rng.standard_normal((2, 3, 16, 40)), "w": rng.standard_normal((24, 40)),
            "b": rng.standard_normal(24), "g": rng.standard_normal(40) * 0.5 + 1,
            "t": rng.integers(0, 40, 48)}


def ops(lib, Fn):
    """Each op as a function of the inputs, written once for torch and for attn."""
    return {
        "linear": lambda x, w, b, g: Fn.linear(x, w, b),
        "matmul": lambda x, w, b, g: x @ w.t(),
        "softmax": lambda x, w, b, g: Fn.softmax(x, -1),
        "log_softmax": lambda x, w, b, g: Fn.log_softmax(x, -1),
        "layer_norm": lambda x, w, b, g: Fn.layer_norm(x, (40,), g, g),
        "rms_norm": lambda x, w, b, g: Fn.rms_norm(x, (40,), g),
        "silu": lambda x, w, b, g: Fn.silu(x),
        "gelu": lambda x, w, b, g: Fn.gelu(x),
        "gelu_tanh": lambda x, w, b, g: Fn.gelu(x, approximate="tanh"),
        "sum_mean": lambda x, w, b, g: x.sum(-1, keepdim=True) + x.mean(-2, keepdim=True),
        "sdpa": lambda x, w, b, g: Fn.scaled_dot_product_attention(x, x * 0.5, x),
        "sdpa_causal": lambda x, w, b, g: Fn.scaled_dot_product_attention(x, x, x * g,
                                                                          is_causal=True),
        "mlp": lambda x, w, b, g: Fn.linear(Fn.silu(Fn.linear(x, w)) * Fn.linear(x, w, b),
                                            w.t().contiguous()),
    }


def scaled_error(got, ref):
    """Largest error in units of the reference's largest magnitude along the last dim."""
    scale = np.maximum(np.abs(ref).max(-1, keepdims=True), 1e-6) if ref.ndim else abs(ref)
    return float(np.max(np.abs(got - ref) / scale))


@needs_torch2
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("name", list(ops(None, F)))
def test_forward_and_backward_equal_torch2(dt, name):
    rng = np.random.default_rng(len(name) * 7 + len(dt))
    data = case_inputs(rng)
    keys = ["x", "w", "b", "g"]
    tin = {k: torch.tensor(data[k], dtype=torch.float32).to(TDT[dt]).requires_grad_()
           for k in keys}
    ain = {k: attn.tensor(data[k].astype(np.float32)).to(DTYPES[dt]).requires_grad_()
           for k in keys}
    tout = ops(torch, torch.nn.functional)[name](*(tin[k] for k in keys))
    aout = ops(attn, F)[name](*(ain[k] for k in keys))
    assert str(aout.dtype) == str(tout.dtype)
    ref, got = tout.detach().float().numpy(), num(aout)
    # Forward: within a few of the dtype's ulps of the largest value in the row. Attention and
    # the MLP differ more: torch rounds the probabilities (and the MLP's hidden products) to the
    # dtype before the next product, attn keeps them in float (it is the more accurate).
    tol = {"sdpa": 16, "sdpa_causal": 16, "mlp": 16}.get(name, 4) * EPS[dt]
    assert scaled_error(got, ref) <= tol, (name, scaled_error(got, ref) / EPS[dt])
    # Backward with one upstream gradient on both sides.
    up = rng.standard_normal(ref.shape).astype(np.float32)
    tout.backward(torch.tensor(up).to(TDT[dt]))
    aout.backward(attn.tensor(up).to(DTYPES[dt]))
    for k in keys:
        if tin[k].grad is None:
            assert ain[k].grad is None or not np.any(num(ain[k].grad)), (name, k)
            continue
        assert ain[k].grad is not None and ain[k].grad.dtype == DTYPES[dt], (name, k)
        tg, ag = tin[k].grad.float().numpy(), num(ain[k].grad)
        err = np.max(np.abs(tg - ag)) / max(np.max(np.abs(tg)), 1e-6)
        assert err <= 64 * EPS[dt], (name, k, err / EPS[dt])


@needs_torch2
def test_autocast_equals_torch2():
    # A Llama-style block (RMSNorm, attention, SwiGLU) and its loss under autocast("cpu"), the
    # same weights on both sides: outputs and the float32 parameters' gradients.
    rng = np.random.default_rng(12)
    D, T, H = 32, 12, 4
    ws = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in
          {"q": (D, D), "k": (D, D), "v": (D, D), "o": (D, D), "g": (64, D), "u": (64, D),
           "d": (D, 64), "n": (D,)}.items()}
    x = rng.standard_normal((2, T, D)).astype(np.float32)
    target = rng.integers(0, D, 2 * T)

    def block(lib, Fn, p, x, tgt):
        h = Fn.rms_norm(x, (D,), p["n"])
        q, k, v = (Fn.linear(h, p[n]).reshape(2, T, H, D // H).transpose(1, 2) for n in "qkv")
        a = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + Fn.linear(a.transpose(1, 2).reshape(2, T, D), p["o"])
        h = h + Fn.linear(Fn.silu(Fn.linear(h, p["g"])) * Fn.linear(h, p["u"]), p["d"])
        return h, Fn.cross_entropy(h.reshape(2 * T, D), tgt)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in ws.items()}
    ap = {k: attn.tensor(v).requires_grad_() for k, v in ws.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        th, tl = block(torch, torch.nn.functional, tp, torch.tensor(x), torch.tensor(target))
    with attn.autocast("cpu", dtype=attn.bfloat16):
        ah, al = block(attn, F, ap, attn.tensor(x), attn.tensor(target))
    assert str(ah.dtype) == str(th.dtype) and str(al.dtype) == str(tl.dtype)
    assert scaled_error(num(ah), th.detach().float().numpy()) <= 16 * EPS["bf16"]
    assert abs(al.item() - tl.item()) <= 8 * EPS["bf16"] * abs(tl.item())
    tl.backward()
    al.backward()
    for k in ws:
        assert ap[k].grad.dtype is attn.float32
        tg, ag = tp[k].grad.numpy(), ap[k].grad.numpy()
        assert np.max(np.abs(tg - ag)) <= 64 * EPS["bf16"] * np.max(np.abs(tg)), k


OPTIMIZERS = {
    "adamw": lambda lib, ps: lib.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adam_l2_amsgrad": lambda lib, ps: lib.optim.Adam(ps, lr=3e-3, weight_decay=0.05,
                                                      amsgrad=True),
    "adam_maximize": lambda lib, ps: lib.optim.Adam(ps, lr=1e-3, betas=(0.8, 0.95),
                                                    maximize=True),
    "sgd": lambda lib, ps: lib.optim.SGD(ps, lr=0.05),
    "sgd_momentum_wd": lambda lib, ps: lib.optim.SGD(ps, lr=0.03, momentum=0.9, dampening=0.1,
                                                     weight_decay=0.01),
    "sgd_nesterov_maximize": lambda lib, ps: lib.optim.SGD(ps, lr=0.02, momentum=0.8,
                                                           nesterov=True, maximize=True),
    "rmsprop_centered_momentum": lambda lib, ps: lib.optim.RMSprop(
        ps, lr=1e-3, momentum=0.9, centered=True, weight_decay=0.01),
    "rmsprop_maximize": lambda lib, ps: lib.optim.RMSprop(ps, lr=1e-3, alpha=0.9, maximize=True),
    "adagrad": lambda lib, ps: lib.optim.Adagrad(ps, lr=0.02, lr_decay=0.05, weight_decay=0.01,
                                                 initial_accumulator_value=0.1),
}
STATE_KEY = {"adam": "exp_avg", "adamw": "exp_avg", "sgd": "momentum_buffer",
             "rmsprop": "square_avg", "adagrad": "sum"}


@needs_torch2
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_on_2_byte_parameters_equal_torch2(dt, name):
    # Parameters in the dtype (as model.to(torch.bfloat16) then AdamW(model.parameters()) makes
    # them), their state in it too; each of torch's ops rounds, so does attn's kernel. Six steps
    # with the same gradients, a float32 parameter in the same optimizer beside them.
    rng = np.random.default_rng(17)
    p0 = [rng.standard_normal(s) for s in ((37, 19), (300,))]
    q0 = rng.standard_normal(5)
    grads = [[rng.standard_normal(p.shape) * 0.1 for p in p0] + [rng.standard_normal(5)]
             for _ in range(6)]
    sides = {}
    for lib in (attn, torch):
        tdt = DTYPES[dt] if lib is attn else TDT[dt]
        ps = [lib.tensor(np.asarray(p, dtype=np.float32)).to(tdt).requires_grad_() for p in p0]
        q = lib.tensor(np.asarray(q0, dtype=np.float32)).requires_grad_()
        opt = OPTIMIZERS[name](lib, ps + [q])
        for gs in grads:
            for t, g in zip(ps + [q], gs):
                t.grad = lib.tensor(np.asarray(g, dtype=np.float32)).to(t.dtype)
            opt.step()
        sides[lib.__name__] = ps + [q]
        if name != "sgd":  # the state in the parameter's dtype (plain SGD keeps none)
            key = STATE_KEY[name.split("_")[0]]
            assert opt.state_dict()["state"][0][key].dtype == ps[0].dtype
    ulp = 2.0 ** (-7 if dt == "bf16" else -10)
    for i, (a, t) in enumerate(zip(sides["attn"], sides["torch"])):
        an, tn = num(a.detach()), t.detach().float().numpy().astype(np.float64)
        # float16: eps 1e-8 rounds to zero and small v underflow, so some of torch's updates
        # divide by zero (inf / NaN parameters): attn's must be the same there.
        bad = ~np.isfinite(tn)
        assert np.array_equal(np.isnan(an), np.isnan(tn)) and np.array_equal(an[bad & ~np.isnan(tn)],
                                                                               tn[bad & ~np.isnan(tn)])
        an, tn = an[~bad], tn[~bad]
        if i == len(p0):  # the float32 parameter: attn's fused float loop, torch's op by op
            np.testing.assert_allclose(an, tn, rtol=1e-5, atol=1e-7)
            continue
        # Each op rounds to the dtype on both sides; where a rounding lands on the other side
        # of a tie the two drift apart by an ulp or two of the parameter over the steps.
        err = np.abs(an - tn) / np.maximum(np.abs(tn), 1e-3)
        assert err.max() <= 2 * ulp, "{} {}: {:.3g} ulps".format(name, dt, err.max() / ulp)
        assert np.mean(an != tn) < 0.01, "{} {}: {:.3f} differ".format(name, dt,
                                                                     np.mean(an != tn))


def test_optimizers_refuse_a_parameter_that_is_not_a_float():
    p = attn.zeros(3, dtype=attn.int64)
    with pytest.raises(ValueError, match="float32, bfloat16 or float16 leaf tensor"):
        attn.optim.SGD([p], lr=0.1)


@needs_torch2
@pytest.mark.parametrize("dts", [("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "f32")])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_clip_grad_norm_on_2_byte_gradients_equals_torch2(dts, norm_type, max_norm):
    # torch 2.x: each gradient's norm in its dtype, the total in their common dtype (float32
    # where they mix), the coefficient op by op in that dtype, each gradient times it rounded.
    rng = np.random.default_rng(5)
    shapes = [(40, 33), (257,), (3, 7)]
    g0 = [rng.standard_normal(sh) * 0.3 for sh in shapes]
    kinds = [dts[i % 2] for i in range(len(shapes))]
    out = {}
    for lib in (attn, torch):
        def dtype_of(k):
            if k == "f32":
                return lib.float32
            return DTYPES[k] if lib is attn else TDT[k]
        ps = [lib.zeros(*sh, dtype=dtype_of(k)).requires_grad_() for sh, k in zip(shapes, kinds)]
        for p, g in zip(ps, g0):
            p.grad = lib.tensor(np.asarray(g, dtype=np.float32)).to(p.dtype)
        total = lib.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
        out[lib.__name__] = (total, [p.grad for p in ps])
    (at, ag), (tt, tg) = out["attn"], out["torch"]
    assert str(at.dtype) == str(tt.dtype)
    # The norms sum in a different order (attn in double, torch in float): the total may sit an
    # ulp of its dtype apart; the gradients are then scaled by the same coefficient or one an
    # ulp away.
    ulp = 2.0 ** {"bfloat16": -7, "float16": -10, "float32": -23}[str(tt.dtype).split(".")[-1]]
    assert abs(at.item() - tt.item()) <= ulp * abs(tt.item())
    for a, t in zip(ag, tg):
        assert str(a.dtype) == str(t.dtype)
        an, tn = num(a), t.float().numpy()
        err = np.abs(an - tn) / np.maximum(np.abs(tn), 1e-6)
        assert err.max() <= 2 * 2.0 ** -7, err.max()
        if max_norm > 1e3:  # no clipping: the gradients are untouched, bit for bit
            assert np.array_equal(an, tn)


@needs_torch2
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_clip_grad_value_on_2_byte_gradients_equals_torch2(dt):
    g0 = np.random.default_rng(6).standard_normal((9, 31)) * 2
    grads = {}
    for lib in (attn, torch):
        p = lib.zeros(9, 31, dtype=DTYPES[dt] if lib is attn else TDT[dt]).requires_grad_()
        p.grad = lib.tensor(np.asarray(g0, dtype=np.float32)).to(p.dtype)
        lib.nn.utils.clip_grad_value_([p], 0.7)
        grads[lib.__name__] = p.grad
    assert str(grads["attn"].dtype) == str(grads["torch"].dtype)
    assert np.array_equal(num(grads["attn"]), grads["torch"].float().numpy())
