"""attn.nn.attention.flex_attention against the dense computation FlexAttention defines, in
PyTorch (python3-torch 1.13, which has no flex_attention: the reference evaluates the same
score_mod and mask_mod source on broadcast coordinate tensors, as torch's create_mask does, then
masks, softmaxes and multiplies in float64, with autograd for every gradient).

The modifiers are attention-gym's (causal, sliding window, prefix LM, document masking, ALiBi,
tanh softcap, relative positional bias) and learnable biases (a full (H, L, L) bias, a relative
bias table), written once against a module `T` that is torch on one side and attn on the other:
the same source runs on both. Tolerance as test_attention_vs_torch.py: attn's float32 error at
most twice torch's float32 error plus one ulp (looser for the captured tensors' gradients, sums
over every score)."""
import math
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from attn.nn.attention.flex_attention import (AuxOutput, AuxRequest,  # noqa: E402
                                              and_masks, create_block_mask, flex_attention,
                                              noop_mask, or_masks)

from test_attention_vs_torch import check_close, to_attn  # noqa: E402

B, H, L, D = 2, 4, 200, 16


def gym_mods(T, captured):
    """attention-gym's modifiers over the module T (torch or attn) and the captured tensors."""
    document_id, slopes, full_bias, rel_table = (captured["document_id"], captured["slopes"],
                                                 captured["full_bias"], captured["rel_table"])

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def sliding_window(b, h, q_idx, kv_idx):
        return q_idx - kv_idx <= 48

    def prefix(b, h, q_idx, kv_idx):
        return kv_idx <= 40

    def document(b, h, q_idx, kv_idx):
        return document_id[b, q_idx] == document_id[b, kv_idx]

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def tanh_softcap(score, b, h, q_idx, kv_idx):
        score = score / 4.0
        score = T.tanh(score)
        return score * 4.0

    def relative_positional(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx) * 0.01

    def full_bias_mod(score, b, h, q_idx, kv_idx):
        return score + full_bias[h, q_idx, kv_idx]

    def rel_table_mod(score, b, h, q_idx, kv_idx):
        return score + rel_table[h, T.clamp(q_idx - kv_idx, -16, 16) + 16]

    # attn's and_masks / or_masks; on the torch side (1.13 has none) the same by hand
    def both(m1, m2):
        if T is attn:
            return and_masks(m1, m2)
        return lambda b, h, q_idx, kv_idx: m1(b, h, q_idx, kv_idx) & m2(b, h, q_idx, kv_idx)

    def either(m1, m2):
        if T is attn:
            return or_masks(m1, m2)
        return lambda b, h, q_idx, kv_idx: m1(b, h, q_idx, kv_idx) | m2(b, h, q_idx, kv_idx)

    def where_mod(score, b, h, q_idx, kv_idx):
        return T.where((h % 2 == 0) & (kv_idx > q_idx - 10), score * 0.5, score - 1.0)

    return {
        "causal": (None, causal),
        "sliding_window": (None, both(causal, sliding_window)),
        "prefix_lm": (None, either(prefix, causal)),
        "document_causal": (None, both(document, causal)),
        "alibi_causal": (alibi, causal),
        "tanh_softcap": (tanh_softcap, None),
        "relative_positional": (relative_positional, causal),
        "full_bias": (full_bias_mod, None),
        "rel_table_window": (rel_table_mod, sliding_window),
        "where": (where_mod, None),
    }


def captured_values(seed):
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.choice(np.arange(20, L - 10), size=(B, 4), replace=False), axis=1)
    doc = np.zeros((B, L), dtype=np.int64)
    for b in range(B):
        for e in ends[b]:
            doc[b, e:] += 1
    return {
        "document_id": doc,
        "slopes": np.array([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)]),
        "full_bias": rng.standard_normal((H, L, L)),
        "rel_table": rng.standard_normal((H, 33)),
    }


def torch_side(values, dtype):
    out = {}
    for name, v in values.items():
        t = torch.tensor(v) if v.dtype == np.int64 else torch.tensor(v, dtype=dtype)
        if v.dtype != np.int64:
            t.requires_grad_(True)
        out[name] = t
    return out


def attn_side(values):
    out = {}
    for name, v in values.items():
        a = v if v.dtype == np.int64 else v.astype(np.float32)
        t = attn.from_numpy(np.ascontiguousarray(a))
        if v.dtype != np.int64:
            t.requires_grad_(True)
        out[name] = t
    return out


def dense_flex(q, k, v, score_mod, mask_mod):
    """FlexAttention's definition in torch ops: (out, lse, each row's largest score after the
    mods and the mask), fully masked rows -> zeros (and -inf)."""
    Hq, Hkv = q.shape[1], k.shape[1]
    if Hkv != Hq:
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    b = torch.arange(q.shape[0]).view(-1, 1, 1, 1)
    h = torch.arange(Hq).view(1, -1, 1, 1)
    qi = torch.arange(q.shape[2]).view(1, 1, -1, 1)
    ki = torch.arange(k.shape[2]).view(1, 1, 1, -1)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, ki).expand(s.shape), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return w @ v, lse, s.detach().amax(-1)


@pytest.mark.parametrize("name", ["causal", "sliding_window", "prefix_lm", "document_causal",
                                  "alibi_causal", "tanh_softcap", "relative_positional",
                                  "full_bias", "rel_table_window", "where"])
@pytest.mark.parametrize("gqa", [False, True])
def test_gym_modifiers_forward_and_backward(name, gqa):
    H_kv = H // 2 if gqa else H
    rng = np.random.default_rng(zlib.crc32(name.encode()) % 1000 + gqa)  # not hash(): salted per process
    qn = rng.standard_normal((B, H, L, D)) * (3.0 if name == "tanh_softcap" else 1.0)
    kn = rng.standard_normal((B, H_kv, L, D))
    vn = rng.standard_normal((B, H_kv, L, D))
    gn = rng.standard_normal((B, H, L, D))
    values = captured_values(7)

    results = {}
    for dtype in (torch.float64, torch.float32):
        cap = torch_side(values, dtype)
        sm, mm = gym_mods(torch, cap)[name]
        q, k, v = (torch.tensor(x, dtype=dtype, requires_grad=True) for x in (qn, kn, vn))
        out, lse, _ = dense_flex(q, k, v, sm, mm)
        (out * torch.tensor(gn, dtype=dtype)).sum().backward()
        grads = [q.grad, k.grad, v.grad] + [t.grad for t in cap.values() if t.requires_grad]
        used = [g if g is not None else torch.zeros(1, dtype=dtype) for g in grads]
        results[dtype] = (out, lse, used)

    cap = attn_side(values)
    sm, mm = gym_mods(attn, cap)[name]
    q, k, v = (attn.from_numpy(x.astype(np.float32)).requires_grad_(True) for x in (qn, kn, vn))
    bm = create_block_mask(mm, B, None, L, L, device="cpu", BLOCK_SIZE=64) if mm else None
    out, lse = flex_attention(q, k, v, score_mod=sm, block_mask=bm, enable_gqa=gqa,
                              return_lse=True)
    (out * attn.from_numpy(gn.astype(np.float32))).sum().backward()
    ours = [q.grad, k.grad, v.grad] + [t.grad for t in cap.values() if t.requires_grad]

    ref64, ref32 = results[torch.float64], results[torch.float32]
    check_close(out, ref64[0], ref32[0], name + " out")
    lse_np = lse.numpy().astype(np.float64)
    ref_lse = ref64[1].detach().numpy()
    finite = np.isfinite(ref_lse)
    assert (np.isfinite(lse_np) == finite).all(), name + " lse: masked rows"
    def finite_part(t):
        return torch.where(t.isfinite(), t, 0 * t)
    check_close(np.where(finite, lse_np, 0.0), finite_part(ref64[1]), finite_part(ref32[1]),
                name + " lse")
    for i, (a, r64, r32) in enumerate(zip(ours, ref64[2], ref32[2])):
        what = "{} grad {}".format(name, ["q", "k", "v", "slopes", "full_bias", "rel_table"][i]
                                   if i < 3 else i)
        if a is None:
            assert float(r64.abs().sum()) == 0.0, what + ": attn gave no gradient"
            continue
        # A captured tensor's gradient is a sum of dS over every score, here weighted by position
        # (ALiBi: kv_idx - q_idx). The fused backward forms dS = P * (dP - rowsum(dO * O)) with O
        # the float32 output, as FlashAttention does; its rounding shifts every row's dS by P times
        # a few ulps of dO . O, which such position-weighted sums do not cancel (torch's dense
        # backward takes sum(P * dP) instead). Over 300 random draws attn's error there reached 5x
        # torch's, hence the wider factor.
        check_close(a, r64, r32, what, factor=2.0 if i < 3 else 8.0, ulps=4.0)


def test_block_mask_fields_match_the_dense_mask():
    values = captured_values(3)
    cap = attn_side(values)
    _, mm = gym_mods(attn, cap)["document_causal"]
    bm = create_block_mask(mm, B, None, L, L, BLOCK_SIZE=32)
    assert bm.shape == (B, 1, L, L) and bm.BLOCK_SIZE == (32, 32)
    tcap = torch_side(values, torch.float64)
    _, tm = gym_mods(torch, tcap)["document_causal"]
    dense = tm(torch.arange(B).view(-1, 1, 1, 1), torch.zeros(1, 1, 1, 1, dtype=torch.long),
               torch.arange(L).view(1, 1, -1, 1), torch.arange(L).view(1, 1, 1, -1))
    dense = dense.expand(B, 1, L, L)
    nb = (L + 31) // 32
    pad = torch.zeros(B, 1, nb * 32, nb * 32, dtype=torch.bool)
    pad[:, :, :L, :L] = dense
    blocks = pad.view(B, 1, nb, 32, nb, 32)
    any_ = blocks.any(-1).any(-2)
    valid = torch.zeros(nb * 32, nb * 32, dtype=torch.bool)
    valid[:L, :L] = True
    full = (blocks | ~valid.view(1, 1, nb, 32, nb, 32)).all(-1).all(-2) & any_
    assert bm.to_dense().numpy().tolist() == any_.long().numpy().tolist()
    num = bm.full_kv_num_blocks.numpy()
    assert num.tolist() == full.sum(-1).numpy().tolist()
    assert (bm.kv_num_blocks.numpy() + num).tolist() == any_.sum(-1).numpy().tolist()
    assert 0 < bm.sparsity() < 100


@pytest.mark.parametrize("name", ["causal", "document_causal", "tanh_softcap", "rel_table_window"])
def test_return_aux_gives_the_lse_and_the_largest_score_of_each_row(name):
    """torch 2.x's return_aux=AuxRequest(lse=True, max_scores=True): the log-sum-exp and the
    largest score after score_mod and the mask per row (-inf for a fully masked row), against the
    dense scores in float64. 2 query rows against 3000 keys also go through split-K's merge (for
    the modifiers whose captured tensors are not sized by L)."""
    values = captured_values(3)
    shapes = [(L, L)] + ([(2, 3000)] if name in ("causal", "tanh_softcap") else [])
    for Lq, Lk in shapes:
        rng = np.random.default_rng(Lk)
        qn = rng.standard_normal((B, H, Lq, D)) * (3.0 if name == "tanh_softcap" else 1.0)
        kn, vn = (rng.standard_normal((B, H // 2, Lk, D)) for _ in range(2))
        sm, mm = gym_mods(torch, torch_side(values, torch.float64))[name]
        _, want_lse, want_max = dense_flex(*(torch.tensor(x) for x in (qn, kn, vn)), sm, mm)
        want_lse, want_max = want_lse.detach().numpy(), want_max.numpy()

        asm, amm = gym_mods(attn, attn_side(values))[name]
        bm = create_block_mask(amm, B, None, Lq, Lk, device="cpu") if amm else None
        aq, ak, av = (attn.from_numpy(x.astype(np.float32)) for x in (qn, kn, vn))
        out, aux = flex_attention(aq, ak, av, score_mod=asm, block_mask=bm, enable_gqa=True,
                                  return_aux=AuxRequest(lse=True, max_scores=True))
        assert isinstance(aux, AuxOutput)
        for got, want, what in ((aux.max_scores.numpy(), want_max, "max_scores"),
                                (aux.lse.numpy(), want_lse, "lse")):
            assert got.shape == (B, H, Lq), what
            finite = np.isfinite(want)
            assert (got[~finite] == want[~finite]).all(), (name, what, "masked rows")
            err = np.abs(np.where(finite, got - want, 0.0)).max()
            assert err < 2e-5 * max(1.0, np.abs(want[finite]).max()), (name, what, Lk, err)
        # Only what is asked for; return_lse gives the same lse.
        out2, only_lse = flex_attention(aq, ak, av, score_mod=asm, block_mask=bm, enable_gqa=True,
                                        return_aux=AuxRequest(lse=True))
        assert only_lse.max_scores is None
        _, lse = flex_attention(aq, ak, av, score_mod=asm, block_mask=bm, enable_gqa=True,
                                return_lse=True)
        assert np.array_equal(only_lse.lse.numpy(), lse.numpy(), equal_nan=True)
        assert np.array_equal(out2.numpy(), out.numpy())
        _, none = flex_attention(aq, ak, av, score_mod=asm, block_mask=bm, enable_gqa=True,
                                 return_aux=AuxRequest())
        assert none == AuxOutput(None, None)


def test_return_aux_and_kernel_options_are_checked_as_torch_checks_them():
    q = attn.randn(1, 2, 8, 4)
    with pytest.raises(ValueError, match="Cannot specify both return_lse and return_aux"):
        flex_attention(q, q, q, return_lse=True, return_aux=AuxRequest(lse=True))
    with pytest.raises(TypeError, match="return_aux must be an AuxRequest"):
        flex_attention(q, q, q, return_aux=True)
    with pytest.raises(ValueError, match="Invalid BACKEND value 'CUTLASS'"):
        flex_attention(q, q, q, kernel_options={"BACKEND": "CUTLASS"})
    with pytest.raises(TypeError, match="kernel_options must be a dict"):
        flex_attention(q, q, q, kernel_options=[("BACKEND", "AUTO")])
    # Known options tune torch's Triton kernels; here they change nothing.
    tuned = flex_attention(q, q, q, kernel_options={"BACKEND": "AUTO", "BLOCK_M": 32})
    assert np.array_equal(tuned.numpy(), flex_attention(q, q, q).numpy())


def test_noop_mask_and_no_score_mod_are_plain_attention():
    rng = np.random.default_rng(0)
    q, k, v = (attn.from_numpy(rng.standard_normal((1, 2, 50, 8)).astype(np.float32))
               for _ in range(3))
    bm = create_block_mask(noop_mask, None, None, 50, 50)
    a = flex_attention(q, k, v, block_mask=bm)
    ref = attn.nn.functional.scaled_dot_product_attention(q, k, v)
    assert np.abs(a.numpy() - ref.numpy()).max() < 1e-5


def test_untraceable_modifiers_are_refused_naming_the_construct():
    q = attn.randn(1, 1, 16, 8)

    def branchy(score, b, h, q_idx, kv_idx):
        if q_idx > kv_idx:
            return score
        return score * 2

    with pytest.raises(TypeError, match="bool\\(\\), if, and, or, not"):
        flex_attention(q, q, q, score_mod=branchy)
    with pytest.raises(TypeError, match="float\\(\\) or math"):
        flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + math.exp(qi))
    table = attn.randn(4, 4)
    with pytest.raises(ValueError, match="indexed with float"):
        flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + table[h, qi / 2])
    with pytest.raises(IndexError, match="score_mod reads captured tensor 0 .* out of range"):
        flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + table[h, qi])
    with pytest.raises(ValueError, match="mask_mod returned a float32"):
        create_block_mask(lambda b, h, qi, ki: qi * 0.5, None, None, 16, 16)
    with pytest.raises(TypeError, match="returned str"):
        flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: "x")
    with pytest.raises(TypeError, match="shape \\(4, 4\\) used as a value"):
        flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + table)
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, 32, 32)
    with pytest.raises(ValueError, match="made for Q_LEN 32"):
        flex_attention(q, q, q, block_mask=bm)


def test_scalar_parameter_and_tensor_on_the_left():
    rng = np.random.default_rng(1)
    qn = rng.standard_normal((1, 2, 30, 8))
    temp = attn.tensor(1.5, requires_grad=True)
    q = attn.from_numpy(qn.astype(np.float32))
    out = flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: temp * s)
    out.sum().backward()
    tq = torch.tensor(qn)
    tt = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    ref, _, _ = dense_flex(tq, tq, tq, lambda s, b, h, qi, ki: tt * s, None)
    ref.sum().backward()
    assert np.abs(out.numpy() - ref.detach().numpy()).max() < 1e-5
    assert abs(float(temp.grad) - float(tt.grad)) < 1e-4 * max(1.0, abs(float(tt.grad)))
