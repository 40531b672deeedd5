"""The error model and the NaN policy of docs/errors.md, checked from Python.

Where PyTorch 1.13 defines the behaviour the test computes the same thing with torch and compares;
where attn deliberately differs (fully masked rows, keys of weight zero, layer_norm of huge rows,
ValueError for PyTorch's RuntimeError) it checks torch's behaviour and attn's documented one side
by side. tests/cpp/test_error_model.cpp checks the same statements in C++.

torch 1.13 has no F.scaled_dot_product_attention: its math path is written out below
(softmax(q k^T * scale + mask) v, bool masks applied with masked_fill), as PyTorch 2.x documents it.
"""
import math
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402

inf = float("inf")
nan = float("nan")


def A(t, requires_grad=False):
    """A torch tensor as an attn tensor (a copy)."""
    a = t.detach().cpu().contiguous().numpy()
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    out = attn.from_numpy(np.array(a, copy=True))
    if requires_grad:
        out.requires_grad_()
    return out


def N(x):
    """Values of an attn or torch tensor as a float64 NumPy array."""
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy().astype(np.float64)
    return np.array(x.detach().numpy(), dtype=np.float64, copy=True)


def torch_sdpa(q, k, v, mask=None):
    """PyTorch's math path: bool mask True = may attend (masked_fill -inf), float mask added."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -inf) if mask.dtype == torch.bool else s + mask
    w = torch.softmax(s, -1)
    return w @ v, w


def ours(path, q, k, v, mask=None, **kw):
    """attn through the fused kernel, the reference kernel, or the path that returns weights."""
    m = None if mask is None else A(mask)
    if path == "weights":
        return AF.scaled_dot_product_attention_with_weights(q, k, v, attn_mask=m, **kw)[0]
    return AF.scaled_dot_product_attention(q, k, v, attn_mask=m, reference=path == "reference",
                                           **kw)


PATHS = ["fused", "reference", "weights"]


# ================================================================================================
# Errors
# ================================================================================================

def test_error_classes():
    assert issubclass(attn._C.AttnError, ValueError)
    assert issubclass(attn._C.AttnIndexError, IndexError)


# The same calls and messages as tests/cpp/test_error_model.cpp: C++ errors reach Python unchanged.
CPP_ERRORS = [
    (lambda: attn.zeros(2, 3) @ attn.zeros(4, 5), ValueError,
     "[matmul] shapes (2, 3) and (4, 5) cannot be multiplied (2x3 and 4x5)"),
    (lambda: attn.zeros(2, 3) + attn.zeros(4), ValueError,
     "[add] shapes (2, 3) and (4,) cannot be broadcast together (size 3 vs 4 at dim 1)"),
    (lambda: attn.zeros(2, 3).view(4), ValueError,
     "[view] shape (4,) is invalid for input of size 6 (2, 3)"),
    (lambda: attn.zeros(-1, 3), ValueError, "[zeros] negative dimension in shape (-1, 3)"),
    (lambda: AF.scaled_dot_product_attention(attn.zeros(2, 4, 8, 16), attn.zeros(2, 4, 9, 32),
                                             attn.zeros(2, 4, 9, 32)), ValueError,
     "[scaled_dot_product_attention] q (2, 4, 8, 16) and k (2, 4, 9, 32) differ in head dim"),
    (lambda: AF.layer_norm(attn.zeros(2, 3), (4,)), ValueError,
     "[layer_norm] input (2, 3) does not end in normalized_shape (4)"),
    (lambda: attn.softmax(attn.zeros(2, 3), 2), IndexError,
     "[softmax] dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda: attn.zeros(2).narrow(0, 1, 5), IndexError,
     "[narrow] start 1 and length 5 are out of range for dimension 0 of size 2"),
    (lambda: AF.cross_entropy(attn.zeros(2, 3), attn.tensor([0, 3])), IndexError,
     "[cross_entropy] target 3 at position 1 is out of bounds for 3 classes"),
    (lambda: attn.nn.Embedding(5, 2)(attn.tensor([7])), IndexError,
     "[embedding] index 7 is out of range for a table of 5 embeddings (weight (5, 2))"),
]


@pytest.mark.parametrize("call,kind,message", CPP_ERRORS,
                         ids=[c[2][1:c[2].index("]")] for c in CPP_ERRORS])
def test_cpp_errors_reach_python_with_their_message(call, kind, message):
    with pytest.raises(kind) as info:
        call()
    assert str(info.value) == message
    base = attn._C.AttnIndexError if kind is IndexError else attn._C.AttnError
    assert isinstance(info.value, base)


def test_index_errors_where_torch_raises_index_error():
    """Out-of-range indices and dims: IndexError in torch and in attn."""
    cases = [
        (lambda m: m.zeros(2, 3)[5]),
        (lambda m: m.softmax(m.zeros(2, 3), 2)),
        (lambda m: m.zeros(2, 3).transpose(0, 5)),
        (lambda m: m.nn.Embedding(5, 2)(m.tensor([7]))),
        (lambda m: m.nn.functional.cross_entropy(m.zeros(2, 3), m.tensor([0, 3]))),
    ]
    for case in cases:
        with pytest.raises(IndexError):
            case(torch)
        with pytest.raises(IndexError) as info:
            case(attn)
        assert str(info.value).startswith("[")


def test_value_error_where_torch_raises_runtime_error():
    """Bad shapes: torch raises RuntimeError, attn ValueError (the documented difference)."""
    cases = [
        (lambda m: m.zeros(2, 3) @ m.zeros(4, 5)),
        (lambda m: m.zeros(2, 3) + m.zeros(4)),
        (lambda m: m.zeros(2, 3).view(4)),
        (lambda m: m.nn.functional.layer_norm(m.zeros(2, 3), (4,))),
    ]
    for case in cases:
        with pytest.raises(RuntimeError):
            case(torch)
        with pytest.raises(ValueError) as info:
            case(attn)
        assert not isinstance(info.value, RuntimeError)
        assert str(info.value).startswith("[")


def test_not_implemented_where_torch_lacks_the_kernel():
    """An op whose backend lacks the dtype: torch raises RuntimeError ("... not implemented for
    'Long'"); attn raises NotImplementedError (a RuntimeError) naming the op, the dtype, the
    device and what the device has."""
    cases = [
        ("gelu", lambda m: m.nn.functional.gelu(m.ones(2, 3, dtype=m.int64))),
        ("layer_norm", lambda m: m.nn.functional.layer_norm(m.ones(2, 3, dtype=m.int64), (3,))),
    ]
    for fn, case in cases:
        with pytest.raises(RuntimeError):
            case(torch)
        with pytest.raises(NotImplementedError) as info:
            case(attn)
        assert isinstance(info.value, RuntimeError)
        assert str(info.value) == ("[%s] not implemented for torch.int64 tensors on cpu "
                                   "(it has: torch.float32)" % fn)


def _cli():
    """The attn binary next to the Python module of this build (build*/attn), or None."""
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
    path = os.path.join(build, "attn")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def test_cli_exit_codes_and_stderr(tmp_path):
    exe = _cli()
    if exe is None:
        pytest.skip("the attn binary is not built next to the Python module")

    def run(*args):
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)

    r = run("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, "attn 0.1.0\n", "")
    r = run("frobnicate")
    assert r.returncode == 2
    assert r.stderr == ("attn: unknown command 'frobnicate'\n"
                        "Try 'attn --help' for more information.\n")
    assert r.stdout == ""
    missing = str(tmp_path / "no_such_checkpoint")
    r = run("generate", "--ckpt", missing)
    assert r.returncode == 1
    assert r.stderr.startswith("attn: error: [generate] no checkpoint '{}'".format(missing))
    assert r.stderr.count("\n") == 1 and r.stdout == ""


# ================================================================================================
# NaN policy: attention
# ================================================================================================

def _mask_cases():
    """(name, L_q, L_k, attn keyword arguments, equivalent torch bool mask (B, 1, L_q, L_k))."""
    cases = []
    Lq, Lk = 37, 29
    m = torch.ones(Lq, Lk, dtype=torch.bool)
    m[5] = False
    m[7, 3] = False
    cases.append(("bool mask", Lq, Lk, {"attn_mask": m}, m))
    Lq, Lk = 20, 33
    fm = torch.randn(Lq, Lk)
    fm[0] = -inf
    cases.append(("float -inf mask", Lq, Lk, {"attn_mask": fm}, fm))
    Lq = Lk = 18
    kp = torch.zeros(2, Lk, dtype=torch.bool)
    kp[1] = True
    kp[0, 4] = True
    cases.append(("key_padding_mask", Lq, Lk, {"key_padding_mask": A(kp)},
                  (~kp)[:, None, None, :].expand(2, 1, Lq, Lk)))
    Lq, Lk = 40, 23
    cases.append(("causal bottom-right", Lq, Lk, {"is_causal": True, "causal_bottom_right": True},
                  torch.ones(Lq, Lk, dtype=torch.bool).tril(Lk - Lq)))
    Lq, Lk = 30, 21
    i = torch.arange(Lq)[:, None]
    j = torch.arange(Lk)[None, :]
    cases.append(("window (0, 1)", Lq, Lk, {"window": (0, 1)}, (j >= i) & (j <= i + 1)))
    return cases


@pytest.mark.parametrize("path", PATHS)
def test_fully_masked_rows_are_zero_where_torch_gives_nan(path):
    torch.manual_seed(0)
    for name, Lq, Lk, kw, tmask in _mask_cases():
        q, k, v = torch.randn(2, 2, Lq, 16), torch.randn(2, 2, Lk, 16), torch.randn(2, 2, Lk, 12)
        want, _ = torch_sdpa(q.double(), k.double(), v.double(),
                             tmask.double() if tmask.dtype != torch.bool else tmask)
        want = want.numpy()
        nan_rows = np.isnan(want).all(-1)
        assert nan_rows.any() and not np.isnan(want[~nan_rows]).any(), name  # torch: NaN rows
        kw = dict(kw)
        mask = kw.pop("attn_mask", None)
        got = N(ours(path, A(q), A(k), A(v), mask, **kw))
        assert (got[nan_rows] == 0).all(), name
        np.testing.assert_allclose(got[~nan_rows], want[~nan_rows], rtol=0, atol=2e-5,
                                   err_msg=name)


def test_fully_masked_rows_have_zero_weights_and_gradients():
    torch.manual_seed(1)
    L = 6
    m = torch.ones(L, L, dtype=torch.bool)
    m[2] = False
    q, k, v = torch.randn(1, 2, L, 8), torch.randn(1, 2, L, 8), torch.randn(1, 2, L, 8)
    # torch: NaN weights and output in row 2, and NaN in v's gradient.
    tq, tk, tv = (t.clone().requires_grad_() for t in (q, k, v))
    to, tw = torch_sdpa(tq, tk, tv, m)
    to.sum().backward()
    assert torch.isnan(tw[..., 2, :]).all() and torch.isnan(tv.grad).any()
    for path in PATHS:
        aq, ak, av = A(q, True), A(k, True), A(v, True)
        if path == "weights":
            out, w = AF.scaled_dot_product_attention_with_weights(aq, ak, av, attn_mask=A(m))
            assert (N(w)[..., 2, :] == 0).all()
            np.testing.assert_allclose(N(w)[..., [0, 1, 3, 4, 5], :],
                                       N(tw)[..., [0, 1, 3, 4, 5], :], atol=1e-6)
        else:
            out = ours(path, aq, ak, av, m)
        out.sum().backward()
        assert (N(aq.grad)[..., 2, :] == 0).all(), path
        for ours_g, torch_g in ((aq.grad, tq.grad), (ak.grad, tk.grad)):
            np.testing.assert_allclose(N(ours_g), N(torch_g), atol=1e-5, err_msg=path)
        assert np.isfinite(N(av.grad)).all(), path
        # dv is torch's without row 2 (whose NaN weights make torch's dv NaN).
        rows = [0, 1, 3, 4, 5]
        tv2 = v.clone().requires_grad_()
        torch_sdpa(q[..., rows, :], k, tv2, m[rows])[0].sum().backward()
        np.testing.assert_allclose(N(av.grad), N(tv2.grad), atol=1e-5, err_msg=path)


def test_multihead_attention_fully_masked_row():
    torch.manual_seed(2)
    t = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        t.out_proj.bias.normal_()
    a = attn.nn.MultiheadAttention(8, 2, batch_first=True)
    a.load_state_dict({k: A(v) for k, v in t.state_dict().items()})
    x = torch.randn(2, 5, 8)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[1] = True  # batch 1: every key ignored
    am = torch.zeros(5, 5, dtype=torch.bool)
    am[2] = True  # query 2 may attend to nothing
    to, tw = t(x, x, x, key_padding_mask=kpm, attn_mask=am)
    masked = torch.zeros(2, 5, dtype=torch.bool)
    masked[1] = True
    masked[:, 2] = True
    assert torch.isnan(to[masked]).all() and not torch.isnan(to[~masked]).any()
    bias = N(t.out_proj.bias)
    for need_weights in (True, False):
        ao, aw = a(A(x), A(x), A(x), key_padding_mask=A(kpm), attn_mask=A(am),
                   need_weights=need_weights)
        ao = N(ao)
        assert (ao[masked.numpy()] == bias.astype(np.float32)).all()
        np.testing.assert_allclose(ao[~masked.numpy()], N(to)[~masked.numpy()], atol=1e-5)
        if need_weights:
            aw = N(aw)
            assert (aw[masked.numpy()] == 0).all()
            np.testing.assert_allclose(aw[~masked.numpy()], N(tw)[~masked.numpy()], atol=1e-6)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("poison", [nan, inf, -inf])
def test_masked_keys_with_inf_or_nan_take_no_part(path, poison):
    """attn: as if the key's rows were finite. torch: 0 * NaN = NaN reaches every query row."""
    torch.manual_seed(3)
    B, H, L, D = 2, 2, 40, 16
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, H, L, D), torch.randn(B, H, L, D)
    g = torch.randn(B, H, L, D)
    kp = torch.zeros(B, L, dtype=torch.bool)
    kp[:, 6] = True
    kp[0, 30:] = True
    keep = (~kp)[:, None, None, :].expand(B, 1, L, L)
    kb, vb = k.clone(), v.clone()
    kb[kp[:, None, :, None].expand(B, H, L, D)] = poison
    vb[kp[:, None, :, None].expand(B, H, L, D)] = poison
    clean, _ = torch_sdpa(q, k, v, keep)
    assert torch.isnan(torch_sdpa(q, kb, vb, keep)[0]).all()  # torch's math path: 0 * inf
    grads = []
    for kk, vv in ((k, v), (kb, vb)):
        aq, ak, av = A(q, True), A(kk, True), A(vv, True)
        out = ours(path, aq, ak, av, key_padding_mask=A(kp))
        (out * A(g)).sum().backward()
        grads.append((N(out), N(aq.grad), N(ak.grad), N(av.grad)))
    np.testing.assert_allclose(grads[1][0], N(clean), atol=2e-5)
    for got, want in zip(grads[1], grads[0]):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, atol=1e-5)
    pad = kp[:, None, :].expand(B, H, L).numpy()
    assert (grads[1][2][pad] == 0).all() and (grads[1][3][pad] == 0).all()


@pytest.mark.parametrize("path", PATHS)
def test_nan_and_inf_propagate_as_in_torch(path):
    """NaN / inf in a position some query row attends to: the same NaN pattern as torch."""
    torch.manual_seed(4)
    L, D = 24, 8
    q, k, v = torch.randn(1, 1, L, D), torch.randn(1, 1, L, D), torch.randn(1, 1, L, D)
    k[0, 0, 0, 3] = 1.0  # so that +inf in q[9, 3] meets a score of +inf
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    none = torch.ones(L, L, dtype=torch.bool)

    def put(t, idx, value):
        t = t.clone()
        t[idx] = value
        return t

    fmask = torch.zeros(L, L).masked_fill(~causal, -inf)
    cases = [
        ("NaN in q", put(q, (0, 0, 9, 3), nan), k, v, causal),
        ("+inf in q", put(q, (0, 0, 9, 3), inf), k, v, causal),
        ("NaN in k, causal", q, put(k, (0, 0, 5, 2), nan), v, causal),
        ("NaN in k, float -inf mask", q, put(k, (0, 0, 5, 2), nan), v, fmask),
        ("NaN in v, unmasked", q, k, put(v, (0, 0, 5, 4), nan), none),
        ("inf in v, unmasked", q, k, put(v, (0, 0, 5, 4), inf), none),
        ("NaN in the float mask", q, k, v, put(fmask, (3, 1), nan)),
        ("+inf in the float mask", q, k, v, put(fmask, (7, 2), inf)),
    ]
    for name, qq, kk, vv, m in cases:
        want, _ = torch_sdpa(qq, kk, vv, m)
        got = N(ours(path, A(qq), A(kk), A(vv), m))
        np.testing.assert_array_equal(np.isnan(got), torch.isnan(want).numpy(), err_msg=name)
        np.testing.assert_array_equal(np.isinf(got), torch.isinf(want).numpy(), err_msg=name)
        assert not np.isfinite(got).all(), name
        np.testing.assert_allclose(got, N(want), atol=2e-5, err_msg=name)  # NaNs compare equal


@pytest.mark.parametrize("path", PATHS)
def test_large_scores_do_not_overflow(path):
    torch.manual_seed(5)
    q, k, v = torch.randn(1, 2, 9, 8) * 1e20, torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    want, w = torch_sdpa(q, k, v)
    assert torch.isfinite(want).all() and ((w == 0) | (w == 1)).all()
    np.testing.assert_allclose(N(ours(path, A(q), A(k), A(v))), N(want), atol=1e-6)
    # A float mask of -1e30 acts as masking: weight exactly 0.
    m = torch.zeros(9, 9)
    m[:, 4] = -1e30
    want, _ = torch_sdpa(q / 1e20, k, v, m)
    np.testing.assert_allclose(N(ours(path, A(q / 1e20), A(k), A(v), m)), N(want), atol=1e-5)


# ================================================================================================
# NaN policy: softmax, cross_entropy, layer_norm, temperature
# ================================================================================================

def _same(ours_t, torch_t, what, atol=1e-6):
    a, b = N(ours_t), N(torch_t)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=what)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=atol, err_msg=what)


SOFTMAX_ROWS = [[-inf, -inf], [1.0, inf], [1.0, nan, 2.0], [1.0, -inf, 2.0],
                [1e30, 5e29, -1e30], [3e38, -3e38]]


@pytest.mark.parametrize("row", SOFTMAX_ROWS, ids=[str(r) for r in SOFTMAX_ROWS])
def test_softmax_rows_as_torch(row):
    t = torch.tensor(row)
    _same(attn.softmax(A(t), 0), torch.softmax(t, 0), "softmax")
    _same(attn.log_softmax(A(t), 0), torch.log_softmax(t, 0), "log_softmax")


def test_softmax_temperature():
    """Seed 004's softmax(t * 8); temperature 0 (t / 0 = +-inf) gives NaN in both."""
    t = torch.tensor([0.1, -0.2, -0.3, 0.5])
    _same(attn.softmax(A(t) * 8, 0), torch.softmax(t * 8, 0), "t * 8")
    _same(attn.softmax(A(t) / 0.0, 0), torch.softmax(t / 0.0, 0), "t / 0")
    assert np.isnan(N(attn.softmax(A(t) / 0.0, 0))).all()
    model = attn.nn.GPT(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4)
    for temperature in (0.0, -1.0, nan):
        with pytest.raises(ValueError, match=r"^\[GPT.generate\] temperature must be positive"):
            model.generate(attn.zeros(1, 1, dtype=attn.int64), 2, temperature=temperature)


CE_CASES = [([1e30, 0.0, -1e30], 1), ([1e30, 0.0, -1e30], 0), ([3e38, -3e38], 1),
            ([0.0, -inf, 1.0], 1), ([0.0, -inf, 1.0], 0), ([0.0, inf, 1.0], 0),
            ([0.0, inf, 1.0], 1), ([-inf, -inf], 0), ([0.0, nan], 0)]


@pytest.mark.parametrize("logits,target", CE_CASES, ids=[str(c) for c in CE_CASES])
def test_cross_entropy_as_torch(logits, target):
    tx = torch.tensor([logits], requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor([target]))
    tl.backward()
    ax = A(torch.tensor([logits]), True)
    al = AF.cross_entropy(ax, attn.tensor([target]))
    al.backward()
    _same(al, tl, "loss", atol=1e-6)
    _same(ax.grad, tx.grad, "grad", atol=1e-6)


def test_cross_entropy_nan_row_and_all_ignored():
    x = torch.tensor([[0.0, nan], [1.0, 2.0]])
    t = torch.tensor([0, 1])
    _same(AF.cross_entropy(A(x), A(t), reduction="none"),
          torch.nn.functional.cross_entropy(x, t, reduction="none"), "rows")
    t = torch.tensor([-100, -100])
    _same(AF.cross_entropy(A(x), A(t)), torch.nn.functional.cross_entropy(x, t), "all ignored")


def test_layer_norm_non_finite_rows_as_torch_and_large_rows_exact():
    x = torch.tensor([[1.0, nan, 3.0], [1.0, 2.0, 3.0], [1.0, inf, 3.0], [5.0, 5.0, 5.0]])
    _same(AF.layer_norm(A(x), (3,)), torch.nn.functional.layer_norm(x, (3,)), "rows", atol=1e-6)
    # Rows whose squares overflow float32: torch's statistics give NaN (or zeros); attn's, in
    # double, normalise them like (1, 2, 3) and (1, -1, 0).
    big = torch.tensor([[1e20, 2e20, 3e20], [1e30, -1e30, 0.0]])
    t = torch.nn.functional.layer_norm(big, (3,))
    assert torch.isnan(t[0]).all() and (t[1] == 0).all()
    want = torch.nn.functional.layer_norm(torch.tensor([[1.0, 2.0, 3.0], [1.0, -1.0, 0.0]]), (3,),
                                          eps=0.0)
    np.testing.assert_allclose(N(AF.layer_norm(A(big), (3,))), N(want), atol=1e-6)


@pytest.mark.parametrize("path", PATHS)
def test_gradients_of_nan_and_inf_inputs_as_in_torch(path):
    """Without masks (every weight positive): NaN in the same gradient entries as torch."""
    torch.manual_seed(6)
    L, D = 12, 8
    q, k, v = torch.randn(1, 2, L, D), torch.randn(1, 2, L, D), torch.randn(1, 2, L, D)
    g = torch.randn(1, 2, L, D)

    def put(t, value):
        t = t.clone()
        t[0, 1, 5, 3] = value
        return t

    cases = [("NaN in q", put(q, nan), k, v), ("inf in q", put(q, inf), k, v),
             ("NaN in k", q, put(k, nan), v), ("NaN in v", q, k, put(v, nan)),
             ("inf in v", q, k, put(v, inf))]
    for name, qq, kk, vv in cases:
        tq, tk, tv = (t.clone().requires_grad_() for t in (qq, kk, vv))
        (torch_sdpa(tq, tk, tv)[0] * g).sum().backward()
        aq, ak, av = A(qq, True), A(kk, True), A(vv, True)
        (ours(path, aq, ak, av) * A(g)).sum().backward()
        for what, a, t in (("dq", aq, tq), ("dk", ak, tk), ("dv", av, tv)):
            np.testing.assert_array_equal(np.isnan(N(a.grad)), torch.isnan(t.grad).numpy(),
                                          err_msg=name + " " + what)
        assert np.isnan(N(av.grad)).any() or np.isnan(N(ak.grad)).any(), name
