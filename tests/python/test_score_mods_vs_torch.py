"""attn's score modifiers (softcap, ALiBi, a relative-position bias table, attention sinks) in
scaled_dot_product_attention, forward and backward, against PyTorch (python3-torch 1.13).

PyTorch has no such options: the reference is the composite that Gemma 2 (softcap), FlashAttention
(alibi_slopes: -slope * |i + L_k - L_q - j| for bottom-right alignment), T5-style bias tables and
gpt-oss (sinks concatenated to the scores, softmax, the sink column dropped) write with torch ops.
Tolerance (test_attention_vs_torch.py's rule): against the float64 composite, attn's float32 error
is at most twice torch's float32 error plus one ulp of the result's magnitude; the gradients of the
modifiers' own tensors (sums over every score) get a looser factor.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402

from test_attention_vs_torch import check_close, to_attn  # noqa: E402


def reference(q, k, v, *, scale, is_causal=False, bottom_right=False, window=(-1, -1),
              softcap=0.0, alibi=None, rel=None, sinks=None, key_padding=None):
    """The composite in torch ops (q (B, H, L_q, D), k and v (B, H_kv, L_k, D))."""
    B, H, L_q, _ = q.shape
    H_kv, L_k = k.shape[1], k.shape[2]
    if H_kv != H:
        k = k.repeat_interleave(H // H_kv, dim=1)
        v = v.repeat_interleave(H // H_kv, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    off = L_k - L_q if bottom_right else 0
    i = torch.arange(L_q).view(L_q, 1)
    j = torch.arange(L_k).view(1, L_k)
    if alibi is not None:
        slopes = alibi.view(1, H, 1, 1) if alibi.dim() == 1 else alibi.view(-1, H, 1, 1)
        s = s - slopes * (i + off - j).abs().to(s.dtype)
    if rel is not None:
        R = (rel.shape[1] - 1) // 2
        idx = (j - i - off).clamp(-R, R) + R
        s = s + rel[:, idx].unsqueeze(0)
    hidden = torch.zeros(L_q, L_k, dtype=torch.bool)
    if is_causal:
        hidden |= j > i + off
    if window[0] >= 0:
        hidden |= j < i + off - window[0]
    if window[1] >= 0:
        hidden |= j > i + off + window[1]
    s = s.masked_fill(hidden, float("-inf"))
    if key_padding is not None:
        s = s.masked_fill(key_padding.view(B, 1, 1, L_k), float("-inf"))
    if sinks is not None:
        col = sinks.view(1, H, 1, 1).expand(B, H, L_q, 1)
        w = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    else:
        w = torch.softmax(s, dim=-1)
    return w @ v


CASES = [
    # name, (B, H, H_kv, L_q, L_k, D, D_v), options
    ("softcap", (2, 3, 3, 70, 70, 32, 32), dict(softcap=5.0)),
    ("softcap_causal", (1, 2, 2, 130, 130, 64, 64), dict(softcap=2.0, is_causal=True)),
    ("alibi", (2, 4, 4, 65, 65, 16, 16), dict(alibi="h")),
    ("alibi_batch_causal", (2, 4, 2, 77, 77, 24, 24), dict(alibi="bh", is_causal=True)),
    ("rel_short", (1, 2, 2, 90, 90, 32, 32), dict(rel=(2, 5))),
    ("rel_long_shared", (2, 3, 3, 40, 55, 8, 12), dict(rel=(1, 80))),
    ("sinks", (2, 4, 2, 50, 50, 32, 32), dict(sinks=True)),
    ("sinks_window", (1, 2, 2, 100, 100, 16, 16), dict(sinks=True, window=(7, 0))),
    ("all", (2, 4, 2, 70, 90, 32, 40),
     dict(softcap=3.0, alibi="h", rel=(4, 6), sinks=True, is_causal=True, bottom_right=True)),
    ("decode", (2, 8, 2, 1, 150, 64, 64), dict(softcap=4.0, alibi="h", rel=(8, 16), sinks=True,
                                               is_causal=True, bottom_right=True)),
    ("decode_rows", (1, 4, 4, 3, 200, 32, 32), dict(alibi="bh", rel=(4, 3), sinks=True,
                                                    is_causal=True, bottom_right=True)),
    ("key_padding", (2, 2, 2, 33, 47, 16, 16), dict(sinks=True, rel=(2, 4), padding=True)),
]


def make_case(shape, opts, seed):
    B, H, H_kv, L_q, L_k, D, D_v = shape
    g = torch.Generator().manual_seed(seed)
    t = {
        "q": torch.randn(B, H, L_q, D, generator=g, dtype=torch.float64),
        "k": torch.randn(B, H_kv, L_k, D, generator=g, dtype=torch.float64),
        "v": torch.randn(B, H_kv, L_k, D_v, generator=g, dtype=torch.float64),
    }
    if opts.get("alibi") == "h":
        t["alibi"] = torch.rand(H, generator=g, dtype=torch.float64) * 0.5
    elif opts.get("alibi") == "bh":
        t["alibi"] = torch.rand(B, H, generator=g, dtype=torch.float64) * 0.5
    if "rel" in opts:
        heads, R = opts["rel"]
        t["rel"] = torch.randn(1 if heads == 1 else H, 2 * R + 1, generator=g, dtype=torch.float64)
    if opts.get("sinks"):
        t["sinks"] = torch.randn(H, generator=g, dtype=torch.float64) + 1.0
    if opts.get("padding"):
        t["padding"] = torch.rand(B, L_k, generator=g) < 0.3
    return t


def run_ref(t, shape, opts, dtype):
    leaves = {name: x.detach().to(dtype).requires_grad_(x.dtype.is_floating_point)
              for name, x in t.items() if name != "padding"}
    out = reference(leaves["q"], leaves["k"], leaves["v"], scale=1.0 / np.sqrt(shape[5]),
                    is_causal=opts.get("is_causal", False),
                    bottom_right=opts.get("bottom_right", False),
                    window=opts.get("window", (-1, -1)), softcap=opts.get("softcap", 0.0),
                    alibi=leaves.get("alibi"), rel=leaves.get("rel"), sinks=leaves.get("sinks"),
                    key_padding=t.get("padding"))
    return out, leaves


def run_attn(t, opts, reference_kernel=False):
    leaves = {name: to_attn(x).requires_grad_() for name, x in t.items() if name != "padding"}
    out = AF.scaled_dot_product_attention(
        leaves["q"], leaves["k"], leaves["v"], is_causal=opts.get("is_causal", False),
        enable_gqa=True, causal_bottom_right=opts.get("bottom_right", False),
        window=opts.get("window", (-1, -1)), softcap=opts.get("softcap", 0.0),
        alibi_slopes=leaves.get("alibi"), relative_bias=leaves.get("rel"),
        sinks=leaves.get("sinks"), reference=reference_kernel,
        key_padding_mask=to_attn(t["padding"]) if "padding" in t else None)
    return out, leaves


@pytest.mark.parametrize("name,shape,opts", CASES, ids=[c[0] for c in CASES])
def test_forward_and_gradients(name, shape, opts):
    t = make_case(shape, opts, seed=len(name) * 7919)
    ref64, leaves64 = run_ref(t, shape, opts, torch.float64)
    ref32, leaves32 = run_ref(t, shape, opts, torch.float32)
    out, leaves = run_attn(t, opts)
    check_close(out, ref64, ref32, name + " out (fused)")
    out_ref, _ = run_attn(t, opts, reference_kernel=True)
    check_close(out_ref, ref64, ref32, name + " out (reference kernel)")

    g = torch.randn(ref64.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ref64.backward(g)
    ref32.backward(g.float())
    out.backward(to_attn(g))
    for key in leaves:
        factor = 2.0 if key in ("q", "k", "v") else 4.0
        check_close(leaves[key].grad, leaves64[key].grad, leaves32[key].grad,
                    "{} d{}".format(name, key), factor=factor, ulps=8.0)


def test_gradients_bitwise_the_same_for_any_thread_count():
    shape = (2, 4, 2, 150, 150, 32, 32)
    opts = dict(softcap=3.0, alibi="h", rel=(4, 9), sinks=True, is_causal=True)
    t = make_case(shape, opts, seed=3)
    grads = []
    before = attn.get_num_threads()
    try:
        for n in (1, 2, 3):
            attn.set_num_threads(n)
            out, leaves = run_attn(t, opts)
            out.sum().backward()
            grads.append({key: leaf.grad.numpy().copy() for key, leaf in leaves.items()})
    finally:
        attn.set_num_threads(before)
    for other in grads[1:]:
        for key in grads[0]:
            assert np.array_equal(grads[0][key], other[key]), key


def test_sinks_fully_masked_row_gives_zeros_and_lse_is_the_sink():
    q = attn.randn(1, 2, 4, 8)
    k = attn.randn(1, 2, 4, 8)
    v = attn.randn(1, 2, 4, 8)
    sinks = attn.tensor([0.5, -1.0])
    pad = attn.tensor([[True, True, True, True]])
    out = AF.scaled_dot_product_attention(q, k, v, sinks=sinks, key_padding_mask=pad)
    assert np.array_equal(out.numpy(), np.zeros((1, 2, 4, 8), np.float32))


def test_bad_modifiers_are_refused():
    q = attn.randn(2, 4, 5, 8)
    k = attn.randn(2, 4, 5, 8)
    with pytest.raises(ValueError, match=r"alibi_slopes \(3,\) should be \(4\) or \(2, 4\)"):
        AF.scaled_dot_product_attention(q, k, k, alibi_slopes=attn.randn(3))
    with pytest.raises(ValueError, match="relative_bias .* should be"):
        AF.scaled_dot_product_attention(q, k, k, relative_bias=attn.randn(4, 4))
    with pytest.raises(ValueError, match="sinks must be float32"):
        AF.scaled_dot_product_attention(q, k, k, sinks=attn.tensor([1, 2, 3, 4]))
    with pytest.raises(ValueError, match="softcap must be finite"):
        AF.scaled_dot_product_attention(q, k, k, softcap=-1.0)
    with pytest.raises(ValueError, match="fused backward only"):
        AF.scaled_dot_product_attention(q, k, k, attn_mask=attn.zeros(5, 5).requires_grad_(),
                                        sinks=attn.zeros(4))


# ---- packed variable-length batches -----------------------------------------------------------------

VARLEN_CASES = [
    # name, (lengths_q, lengths_k), H, H_kv, D, options
    ("self", ([5, 1, 70, 33], [5, 1, 70, 33]), 4, 2, 16, dict()),
    ("causal_window", ([40, 9, 65], [40, 9, 65]), 2, 2, 32, dict(causal=True, window=(6, 0))),
    ("decode_like", ([1, 3, 2], [50, 7, 90]), 4, 1, 16, dict(causal=True)),
    ("mods", ([17, 0, 64, 30], [17, 4, 64, 45]), 4, 2, 24,
     dict(causal=True, softcap=4.0, alibi="h", sinks=True)),
    ("alibi_per_sequence", ([8, 20], [8, 20]), 2, 2, 8, dict(alibi="nh")),
]


@pytest.mark.parametrize("name,lengths,H,H_kv,D,opts", VARLEN_CASES,
                         ids=[c[0] for c in VARLEN_CASES])
def test_varlen_attention_matches_each_sequence_alone(name, lengths, H, H_kv, D, opts):
    lq, lk = lengths
    N = len(lq)
    g = torch.Generator().manual_seed(len(name))
    q = torch.randn(sum(lq), H, D, generator=g, dtype=torch.float64)
    k = torch.randn(sum(lk), H_kv, D, generator=g, dtype=torch.float64)
    v = torch.randn(sum(lk), H_kv, D, generator=g, dtype=torch.float64)
    dout = torch.randn(sum(lq), H, D, generator=g, dtype=torch.float64)
    alibi = None
    if opts.get("alibi") == "h":
        alibi = torch.rand(H, generator=g, dtype=torch.float64) * 0.3
    elif opts.get("alibi") == "nh":
        alibi = torch.rand(N, H, generator=g, dtype=torch.float64) * 0.3
    sinks = torch.randn(H, generator=g, dtype=torch.float64) if opts.get("sinks") else None
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    window = opts.get("window", (-1, -1))

    def ref(dtype):
        leaves = [x.detach().to(dtype).requires_grad_() if x is not None else None
                  for x in (q, k, v, alibi, sinks)]
        qq, kk, vv, al, sk = leaves
        outs = []
        for b in range(N):
            if lq[b] == 0:
                continue
            qs = qq[cq[b]:cq[b + 1]].transpose(0, 1).unsqueeze(0)
            ks = kk[ck[b]:ck[b + 1]].transpose(0, 1).unsqueeze(0)
            vs = vv[ck[b]:ck[b + 1]].transpose(0, 1).unsqueeze(0)
            a = None if al is None else (al if al.dim() == 1 else al[b])
            o = reference(qs, ks, vs, scale=1.0 / np.sqrt(D), is_causal=opts.get("causal", False),
                          bottom_right=True, window=window, softcap=opts.get("softcap", 0.0),
                          alibi=a, sinks=sk)
            outs.append(o[0].transpose(0, 1))
        out = torch.cat(outs, 0)
        out.backward(dout.to(dtype))
        return out, leaves

    ref64, leaves64 = ref(torch.float64)
    ref32, leaves32 = ref(torch.float32)
    ours = [to_attn(x).requires_grad_() if x is not None else None
            for x in (q, k, v, alibi, sinks)]
    out = AF.varlen_attention(ours[0], ours[1], ours[2], attn.from_numpy(cq), attn.from_numpy(ck),
                              max(lq), max(lk), causal=opts.get("causal", False),
                              window_size=window, softcap=opts.get("softcap", 0.0),
                              alibi_slopes=ours[3], sinks=ours[4])
    check_close(out, ref64, ref32, name + " out")
    out.backward(to_attn(dout))
    for i, what in enumerate(["q", "k", "v", "alibi", "sinks"]):
        if ours[i] is None:
            continue
        check_close(ours[i].grad, leaves64[i].grad, leaves32[i].grad, name + " d" + what,
                    factor=2.0 if i < 3 else 4.0, ulps=8.0)


def test_varlen_attention_refuses_bad_offsets():
    q = attn.randn(10, 2, 8)
    good = attn.from_numpy(np.array([0, 4, 10], np.int64))
    for bad, match in [(np.array([0, 6, 4, 10]), "non-decreasing"),
                       (np.array([1, 10]), "must start at 0"),
                       (np.array([0, 4, 9]), "must end at the packed length 10"),
                       (np.array([0, 10]), "above its max_seqlen 6")]:
        with pytest.raises(ValueError, match=match):
            AF.varlen_attention(q, q, q, attn.from_numpy(bad.astype(np.int64)),
                                attn.from_numpy(bad.astype(np.int64)), 6, 6)
    with pytest.raises(ValueError, match="has 2 sequences and cu_seqlens_k 1"):
        AF.varlen_attention(q, q, q, good, attn.from_numpy(np.array([0, 10], np.int64)), 6, 10)


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "float16"])
def test_attention_with_kvcache_matches_each_sequence_alone(kv_dtype):
    """flash_attn_with_kvcache's arguments: sequences of different lengths in shuffled pages of
    a pool, attended with softcap, ALiBi and sinks, equal the torch composite on each sequence's
    keys (bfloat16 and float16 pools: on the keys rounded to that dtype)."""
    g = torch.Generator().manual_seed(3)
    B, H, H_kv, D, page, L_q = 3, 4, 2, 16, 5, 2
    lens = [12, 3, 21]
    pages = [(n + page - 1) // page for n in lens]
    num_pages = sum(pages) + 2
    k_cache = torch.randn(num_pages, page, H_kv, D, generator=g)
    v_cache = torch.randn(num_pages, page, H_kv, D, generator=g)
    if kv_dtype != "float32":
        tdt = getattr(torch, kv_dtype)
        k_cache, v_cache = k_cache.to(tdt).float(), v_cache.to(tdt).float()
    order = torch.randperm(num_pages, generator=g).tolist()
    table = torch.zeros(B, max(pages), dtype=torch.int64)
    at = 0
    for b in range(B):
        for n in range(pages[b]):
            table[b, n] = order[at]
            at += 1
    q = torch.randn(B, L_q, H, D, generator=g)
    alibi = torch.rand(H, generator=g) * 0.3
    sinks = torch.randn(H, generator=g)
    kc, vc = to_attn(k_cache), to_attn(v_cache)
    if kv_dtype != "float32":
        kc, vc = kc.to(getattr(attn, kv_dtype)), vc.to(getattr(attn, kv_dtype))
    out, lse = AF.attention_with_kvcache(
        to_attn(q), kc, vc, attn.tensor(lens), to_attn(table), causal=True, softcap=3.0,
        alibi_slopes=to_attn(alibi), sinks=to_attn(sinks), return_softmax_lse=True)
    assert tuple(out.shape) == (B, L_q, H, D) and tuple(lse.shape) == (B, H, L_q)
    for b in range(B):
        rows = torch.cat([torch.arange(table[b, n] * page, table[b, n] * page + page)
                          for n in range(pages[b])])[:lens[b]]
        k = k_cache.reshape(-1, H_kv, D)[rows].transpose(0, 1).unsqueeze(0).double()
        v = v_cache.reshape(-1, H_kv, D)[rows].transpose(0, 1).unsqueeze(0).double()
        want = reference(q[b].transpose(0, 1).unsqueeze(0).double(), k, v, scale=D ** -0.5,
                         is_causal=True, bottom_right=True, softcap=3.0, alibi=alibi.double(),
                         sinks=sinks.double())
        got = np.array(out.tolist())[b].transpose(1, 0, 2)
        np.testing.assert_allclose(got, want[0].numpy(), rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match=r"block_table\[0, 0\] = 99 points outside the "):
        bad = table.clone()
        bad[0, 0] = 99
        AF.attention_with_kvcache(to_attn(q), kc, vc, attn.tensor(lens), to_attn(bad))
    with pytest.raises(ValueError, match="window_size right must be -1, or 0 with causal"):
        AF.attention_with_kvcache(to_attn(q), kc, vc, attn.tensor(lens), to_attn(table),
                                  window_size=(4, 2))
