"""attn's scaled_dot_product_attention and MultiheadAttention against PyTorch (python3-torch 1.13).

Run with the attn module on the path, e.g.
    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python/test_attention_vs_torch.py

Tolerance (FlashAttention's rule): against a float64 reference computed with torch ops, attn's
float32 error must be at most twice torch's own float32 error on the same case, plus a floor of a
one float32 ulp of the output's magnitude (for cases where torch happens to be almost exact).

torch 1.13 has no F.scaled_dot_product_attention; the reference is written with torch ops and
follows PyTorch 2.x's documented semantics (bool mask True = may attend, float mask added,
is_causal = top-left tril). Where attn deliberately differs (a fully masked row gives zeros, not
NaN) the reference maps NaN rows to zeros, and the test says so.
"""
import math
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402

F32_EPS = 2.0 ** -23


# ---- conversions and the tolerance rule -----------------------------------------------------------

def to_attn(t):
    """A torch tensor as an attn tensor (float32 / int64 / bool), copying the values."""
    if t is None:
        return None
    a = t.detach().cpu().contiguous().numpy()
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return attn.from_numpy(np.ascontiguousarray(a))


def to_np(a):
    return np.asarray(a.numpy(), dtype=np.float64)


def check_close(ours, ref64, torch32, what, factor=2.0, ulps=1.0):
    """max|ours - ref64| <= factor * max|torch32 - ref64| + ulps * eps32 * max(1, max|ref64|)."""
    ours = to_np(ours) if not isinstance(ours, np.ndarray) else ours
    ref64 = ref64.detach().numpy().astype(np.float64)
    torch32 = torch32.detach().double().numpy()
    assert ours.shape == ref64.shape, "{}: shape {} != {}".format(what, ours.shape, ref64.shape)
    assert not np.isnan(ours).any(), "{}: NaN in attn's result".format(what)
    err_ours = np.abs(ours - ref64).max() if ours.size else 0.0
    err_torch = np.abs(torch32 - ref64).max() if ours.size else 0.0
    floor = ulps * F32_EPS * max(1.0, np.abs(ref64).max() if ours.size else 0.0)
    assert err_ours <= factor * err_torch + floor, (
        "{}: attn fp32 error {:.3g} vs torch fp32 error {:.3g} (allowed {:.3g})".format(
            what, err_ours, err_torch, factor * err_torch + floor))


# ---- the reference scaled dot-product attention, in torch ops ---------------------------------------

def sdpa_ref(q, k, v, attn_mask=None, is_causal=False, scale=None, bottom_right=False):
    """PyTorch 2.x's math backend, with fully masked rows mapped to zeros (attn's convention)."""
    L, S = q.size(-2), k.size(-2)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        allowed = torch.ones(L, S, dtype=torch.bool).tril(S - L if bottom_right else 0)
        s = s.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, float("-inf"))
        else:
            s = s + attn_mask.to(s.dtype)
    w = torch.softmax(s, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)  # fully masked rows: torch gives NaN, attn zeros
    return w @ v, w


def run_three(fn, *tensors, **kw):
    """(fp64 reference, torch fp32, attn fp32) for fn over float tensors (masks pass through)."""
    def cast(t, dt):
        return t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
    ref = fn(*[cast(t, torch.float64) for t in tensors], **kw)
    t32 = fn(*[cast(t, torch.float32) for t in tensors], **kw)
    return ref, t32


SHAPES = [  # (B, H, L_q, L_k, D, D_v)
    (1, 1, 1, 1, 1, 1),
    (2, 3, 7, 7, 16, 16),
    (1, 2, 63, 65, 32, 16),
    (2, 1, 65, 63, 7, 9),
    (1, 1, 129, 127, 64, 64),
    (1, 2, 1, 129, 65, 1),
]
MASKS = ["none", "bool_LqLk", "bool_B11Lk", "float_1HLqLk", "causal_tl", "causal_br"]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}_H{}_Lq{}_Lk{}_D{}_Dv{}".format(*s))
def test_sdpa_matches_torch(shape, mask):
    B, H, Lq, Lk, D, Dv = shape
    g = torch.Generator().manual_seed(zlib.crc32(repr((shape, mask)).encode()))
    q = torch.randn(B, H, Lq, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, Lk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, Lk, Dv, generator=g, dtype=torch.float64)
    kw, akw = {}, {}
    if mask == "bool_LqLk":
        m = torch.rand(Lq, Lk, generator=g) > 0.3
        kw["attn_mask"] = m
        akw["attn_mask"] = to_attn(m)
    elif mask == "bool_B11Lk":
        m = torch.rand(B, 1, 1, Lk, generator=g) > 0.2
        kw["attn_mask"] = m
        akw["attn_mask"] = to_attn(m)
    elif mask == "float_1HLqLk":
        m = torch.randn(1, H, Lq, Lk, generator=g).float()
        kw["attn_mask"] = m
        akw["attn_mask"] = to_attn(m)
    elif mask in ("causal_tl", "causal_br"):
        kw["is_causal"] = akw["is_causal"] = True
        if mask == "causal_br":
            kw["bottom_right"] = akw["causal_bottom_right"] = True
    (ref, ref_w), (t32, t32_w) = run_three(sdpa_ref, q, k, v, **kw)
    q32, k32, v32 = (to_attn(t) for t in (q, k, v))
    ours = AF.scaled_dot_product_attention(q32, k32, v32, **akw)
    check_close(ours, ref, t32, "out")
    ours_o, ours_w = AF.scaled_dot_product_attention_with_weights(q32, k32, v32, **akw)
    check_close(ours_o, ref, t32, "out (with weights)")
    check_close(ours_w, ref_w, t32_w, "weights")


def test_sdpa_broadcast_noncontiguous_and_explicit_scale():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 3, 8, generator=g, dtype=torch.float64).transpose(1, 2)  # (B, H, L, D) view
    k = torch.randn(1, 3, 6, 8, generator=g, dtype=torch.float64)
    v = torch.randn(6, 4, generator=g, dtype=torch.float64)
    mask = torch.randn(5, 6, generator=g, dtype=torch.float64)
    (ref, _), (t32, _) = run_three(sdpa_ref, q, k, v, attn_mask=mask, scale=0.2)
    qa = to_attn(q.float().transpose(1, 2).contiguous()).transpose(1, 2)  # keep the strided view
    ours = AF.scaled_dot_product_attention(qa, to_attn(k), to_attn(v), to_attn(mask), scale=0.2)
    check_close(ours, ref, t32, "broadcast + strided q + scale")


def test_sdpa_huge_scores_and_fully_masked_rows():
    # Seed 001's scores reach -318; scale the inputs so that scores reach +-1e4.
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64) * 40
    k = torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64) * 40
    v = torch.randn(1, 2, 9, 5, generator=g, dtype=torch.float64)
    m = torch.rand(9, 9, generator=g) > 0.5
    m[3] = False  # query 3 may attend nothing: zeros (torch: NaN)
    (ref, ref_w), (t32, t32_w) = run_three(sdpa_ref, q, k, v, attn_mask=m)
    out, w = AF.scaled_dot_product_attention_with_weights(to_attn(q), to_attn(k), to_attn(v),
                                                          to_attn(m))
    check_close(out, ref, t32, "huge scores out")
    check_close(w, ref_w, t32_w, "huge scores weights")
    assert np.all(to_np(out)[:, :, 3] == 0.0)


def test_sdpa_dropout_uses_torch_draws():
    """torch.manual_seed(s); dropout(weights) and attn.manual_seed(s); sdpa(dropout_p) drop the same
    positions: the factors come from the same Bernoulli draws in the same row-major order."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 3, 11, 8, generator=g)
    k = torch.randn(2, 3, 13, 8, generator=g)
    v = torch.randn(2, 3, 13, 4, generator=g)
    p = 0.3
    _, w = sdpa_ref(q.double(), k.double(), v.double())
    torch.manual_seed(1234)
    dropped = torch.nn.functional.dropout(w, p)  # float64 weights: the same draws as float32
    ref = dropped @ v.double()
    attn.manual_seed(1234)
    out, ours_w = AF.scaled_dot_product_attention_with_weights(to_attn(q), to_attn(k), to_attn(v),
                                                               dropout_p=p)
    ours_w = to_np(ours_w)
    assert np.array_equal(ours_w == 0, dropped.numpy() == 0), "different positions dropped"
    np.testing.assert_allclose(ours_w, dropped.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(to_np(out), ref.numpy(), rtol=1e-4, atol=2e-6)
    frac = float((ours_w == 0).mean())
    assert abs(frac - p) < 5 * math.sqrt(p * (1 - p) / ours_w.size)


def test_functional_dropout_draws_like_torch_for_strided_inputs():
    base = torch.randn(6, 10, generator=torch.Generator().manual_seed(6))
    for view in (lambda t: t, lambda t: t.T, lambda t: t[:, ::3],
                 lambda t: t[:1].expand(4, 10)):
        torch.manual_seed(31)
        want = torch.nn.functional.dropout(view(base), 0.4)
        attn.manual_seed(31)
        got = AF.dropout(view_attn(to_attn(base), view), 0.4)
        np.testing.assert_array_equal(to_np(got), want.double().numpy())


def view_attn(a, view):
    """Applies the same view to an attn tensor (transpose, step slice, expand)."""
    probe = view(torch.zeros(6, 10))
    if probe.shape == (6, 10):
        return a
    if probe.shape == (10, 6):
        return a.T
    if probe.shape == (6, 4):
        return a[:, ::3]
    return a[:1].expand(4, 10)


def test_sdpa_errors_are_value_errors():
    q = attn.zeros(2, 4, 8, 16)
    with pytest.raises(ValueError, match=r"\[scaled_dot_product_attention\] q \(2, 4, 8, 16\) and k "
                                         r"\(2, 4, 9, 32\) differ in head dim"):
        AF.scaled_dot_product_attention(q, attn.zeros(2, 4, 9, 32), attn.zeros(2, 4, 9, 32))
    with pytest.raises(ValueError, match="dropout_p"):
        AF.scaled_dot_product_attention(q, q, q, dropout_p=1.0)


# ---- parameter initialisation draws like torch ------------------------------------------------------

def assert_same_state(torch_module, attn_module):
    ts, as_ = torch_module.state_dict(), attn_module.state_dict()
    assert list(ts.keys()) == list(as_.keys())
    for name in ts:
        np.testing.assert_array_equal(to_np(as_[name]), ts[name].double().numpy(), err_msg=name)


@pytest.mark.parametrize("kw", [
    dict(embed_dim=8, num_heads=2),
    dict(embed_dim=12, num_heads=3, bias=False),
    dict(embed_dim=6, num_heads=2, kdim=4, vdim=5),
    dict(embed_dim=16, num_heads=4, kdim=16, vdim=7, batch_first=True),
], ids=lambda kw: "_".join("{}{}".format(k, v) for k, v in kw.items()))
def test_multihead_init_is_bitwise_torch(kw):
    torch.manual_seed(11)
    t = torch.nn.MultiheadAttention(**kw)
    attn.manual_seed(11)
    a = attn.nn.MultiheadAttention(**kw)
    assert_same_state(t, a)


def test_linear_and_embedding_init_are_bitwise_torch():
    torch.manual_seed(12)
    tl, te = torch.nn.Linear(7, 5), torch.nn.Embedding(40, 6)
    attn.manual_seed(12)
    al, ae = attn.nn.Linear(7, 5), attn.nn.Embedding(40, 6)
    assert_same_state(tl, al)
    assert_same_state(te, ae)


# ---- MultiheadAttention ------------------------------------------------------------------------------

def make_pair(seed, **kw):
    """A torch MultiheadAttention with random non-zero biases and attn's copy loaded by name."""
    torch.manual_seed(seed)
    t = torch.nn.MultiheadAttention(**kw)
    with torch.no_grad():
        for name, p in t.named_parameters():
            if "bias" in name:
                p.copy_(torch.randn_like(p) * 0.3)
    a = attn.nn.MultiheadAttention(**kw)
    a.load_state_dict(t.state_dict())  # PyTorch's names, torch tensors converted
    t64 = torch.nn.MultiheadAttention(**kw).double()
    t64.load_state_dict({k: v.double() for k, v in t.state_dict().items()})
    return t, t64, a


def mha_case(seed, kw, L, S, B, *, kpm=None, attn_mask=None, need_weights=True, average=True,
             unbatched=False, attn_is_causal=False, train_seed=None):
    """Runs torch fp64, torch fp32 and attn on the same inputs and checks attn's error.

    Float masks are given to each torch module in its own dtype (torch 1.13 does not promote them).
    attn_is_causal: attn gets is_causal=True and no attn_mask, torch gets attn_mask (causal).
    train_seed: dropout is active; every run starts from manual_seed(train_seed)."""
    t, t64, a = make_pair(seed, **kw)
    g = torch.Generator().manual_seed(seed + 1)
    E = kw["embed_dim"]
    kdim, vdim = kw.get("kdim") or E, kw.get("vdim") or E
    bf = kw.get("batch_first", False)

    def shaped(L_, F_):
        if unbatched:
            return torch.randn(L_, F_, generator=g, dtype=torch.float64)
        return torch.randn(*((B, L_, F_) if bf else (L_, B, F_)), generator=g, dtype=torch.float64)

    def cast(m, dt):
        return m.to(dt) if m is not None and m.is_floating_point() else m

    q, k, v = shaped(L, E), shaped(S, kdim), shaped(S, vdim)
    outs = []
    for module, dt in ((t64, torch.float64), (t, torch.float32)):
        if train_seed is not None:
            torch.manual_seed(train_seed)
        outs.append(module(q.to(dt), k.to(dt), v.to(dt), key_padding_mask=cast(kpm, dt),
                           need_weights=need_weights, attn_mask=cast(attn_mask, dt),
                           average_attn_weights=average))
    r64, r32 = outs
    aargs = dict(key_padding_mask=to_attn(kpm), need_weights=need_weights,
                 attn_mask=None if attn_is_causal else to_attn(attn_mask),
                 average_attn_weights=average)
    if attn_is_causal:
        aargs["is_causal"] = True
    if train_seed is not None:
        attn.manual_seed(train_seed)
    ra = a(to_attn(q), to_attn(k), to_attn(v), **aargs)
    check_close(ra[0], r64[0], r32[0], "MHA output")
    if need_weights:
        check_close(ra[1], r64[1], r32[1], "MHA weights")
    else:
        assert ra[1] is None and r32[1] is None


def test_mha_self_attention_sequence_first():
    mha_case(20, dict(embed_dim=16, num_heads=4), L=7, S=7, B=3)


def test_mha_cross_kdim_vdim_batch_first_bool_padding_float_mask_per_head():
    kpm = torch.zeros(2, 9, dtype=torch.bool)
    kpm[0, -2:] = True
    kpm[1, 0] = True
    am = torch.randn(5, 9, dtype=torch.float64).float()
    mha_case(21, dict(embed_dim=12, num_heads=3, kdim=5, vdim=7, batch_first=True), L=5, S=9, B=2,
             kpm=kpm, attn_mask=am, average=False)


def test_mha_bool_3d_mask_bool_padding_no_bias_with_and_without_weights():
    g = torch.Generator().manual_seed(22)
    am = torch.rand(2 * 2, 6, 8, generator=g) > 0.7  # (B * H, L, S), True = not allowed
    am[:, :, 0] = False  # no fully masked row (torch 1.13 gives NaN there)
    kpm = torch.zeros(2, 8, dtype=torch.bool)
    kpm[1, 5:] = True
    for need_weights in (False, True):
        mha_case(22, dict(embed_dim=8, num_heads=2, bias=False), L=6, S=8, B=2, kpm=kpm,
                 attn_mask=am, need_weights=need_weights)


def test_mha_float_padding_mask_is_added():
    # torch 1.13 adds a float key_padding_mask when there is no attn_mask (torch 2.x always does;
    # 1.13 would treat it as bool when combined with a bool attn_mask, which attn does not copy).
    kpm = torch.randn(3, 7, generator=torch.Generator().manual_seed(27))
    mha_case(27, dict(embed_dim=8, num_heads=2, batch_first=True), L=4, S=7, B=3, kpm=kpm)


def test_mha_unbatched():
    g = torch.Generator().manual_seed(23)
    am = torch.randn(4, 5, 6, generator=g)  # (H, L, S) for unbatched input
    kpm = torch.zeros(6, dtype=torch.bool)
    kpm[2] = True
    mha_case(23, dict(embed_dim=8, num_heads=4, kdim=3, vdim=3), L=5, S=6, B=None, kpm=kpm,
             attn_mask=am, average=False, unbatched=True)
    mha_case(23, dict(embed_dim=8, num_heads=4), L=5, S=6, B=None, unbatched=True)


def test_mha_is_causal_equals_torch_with_causal_mask():
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch's MHA: True = not allowed
    mha_case(24, dict(embed_dim=8, num_heads=2, batch_first=True), L=6, S=6, B=2,
             attn_mask=causal, attn_is_causal=True)


def test_mha_dropout_draws_like_torch():
    mha_case(25, dict(embed_dim=8, num_heads=2, dropout=0.3, batch_first=True), L=5, S=7, B=3,
             average=False, train_seed=99)


def test_mha_state_dict_round_trip_to_torch():
    torch.manual_seed(26)
    a = attn.nn.MultiheadAttention(6, 3, kdim=4, vdim=5)
    t = torch.nn.MultiheadAttention(6, 3, kdim=4, vdim=5)
    t.load_state_dict({k: torch.from_numpy(np.array(v.numpy())) for k, v in a.state_dict().items()})
    assert_same_state(t, a)


def test_mha_errors_are_value_errors():
    with pytest.raises(ValueError, match=r"\[MultiheadAttention\].*divisible"):
        attn.nn.MultiheadAttention(10, 3)
    m = attn.nn.MultiheadAttention(8, 2)
    with pytest.raises(ValueError, match=r"\[MultiheadAttention\].*expected embed_dim 8"):
        m(attn.zeros(5, 2, 7), attn.zeros(5, 2, 8), attn.zeros(5, 2, 8))
    with pytest.raises(ValueError, match=r"Missing key\(s\)"):
        m.load_state_dict({"in_proj_weight": torch.zeros(24, 8)})


# ---- sliding window and key padding (fused kernel vs an fp64 torch composition) -----------------

@pytest.mark.parametrize("window,bottom_right", [((3, 0), False), ((2, 1), True), ((-1, 4), False)])
def test_sdpa_window_and_key_padding_vs_torch(window, bottom_right):
    rng = np.random.default_rng(7)
    B, H, Lq, Lk, D = 2, 3, 9, 13, 8
    q = rng.standard_normal((B, H, Lq, D)).astype(np.float32)
    k = rng.standard_normal((B, H, Lk, D)).astype(np.float32)
    v = rng.standard_normal((B, H, Lk, D)).astype(np.float32)
    pad = np.zeros((B, Lk), dtype=bool)
    pad[0, -3:] = True
    out = attn.nn.functional.scaled_dot_product_attention(
        attn.tensor(q), attn.tensor(k), attn.tensor(v), window=window,
        causal_bottom_right=bottom_right, key_padding_mask=attn.tensor(pad))
    # fp64 reference: visible iff inside the window around the (aligned) diagonal and not padding
    off = Lk - Lq if bottom_right else 0
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    visible = np.ones((Lq, Lk), dtype=bool)
    if window[0] >= 0:
        visible &= j >= i + off - window[0]
    if window[1] >= 0:
        visible &= j <= i + off + window[1]
    allowed = visible[None, None] & ~pad[:, None, None, :]
    s = torch.tensor(q, dtype=torch.float64) @ torch.tensor(k, dtype=torch.float64).mT / D ** 0.5
    s = s.masked_fill(~torch.tensor(allowed), float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    ref = (w @ torch.tensor(v, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    # the reference kernel agrees
    out_ref = attn.nn.functional.scaled_dot_product_attention(
        attn.tensor(q), attn.tensor(k), attn.tensor(v), window=window,
        causal_bottom_right=bottom_right, key_padding_mask=attn.tensor(pad), reference=True)
    np.testing.assert_allclose(out.numpy(), out_ref.numpy(), rtol=1e-5, atol=1e-6)
