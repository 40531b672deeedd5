#!/usr/bin/env python3
"""flex_attention, attn against PyTorch 2.x on the CPU, in one process.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build-nocuda/python .venv-bench/bin/python bench/flex_compare.py --threads 2

The modifiers of attention-gym (causal, document masking, sliding window, tanh softcap with
causal masking, ALiBi with causal masking, a relative bias table) on q, k, v (B, H, L, D) float32.
Each modifier's source is written once and run by both libraries (the module `T` is torch or
attn). Forward: attn's flex_attention against torch.compile(flex_attention) (PyTorch's CPU
FlexAttention, inductor's C++ kernels; the compile is a warm-up, untimed). Forward + backward
(d out = 1): attn against torch's eager math for the same modifier (torch 2.15's flex_attention
refuses a backward on the CPU): q k^T * scale, the score_mod and mask_mod evaluated on broadcast
index tensors (as create_mask does), masked_fill, softmax, @ v, autograd. The block masks are
built once per library, untimed.
Outputs are compared (max abs difference) before timing. The contenders alternate, --reps times
each after a warm-up; medians and ratios are printed, and the last line is `result: {JSON}`.
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

try:
    import torch
    from torch.nn.attention import flex_attention as tfa
except ImportError:
    sys.exit("flex_compare.py: error: no torch 2.x; run scripts/bench_setup.sh and use its python")
try:
    import attn
    from attn.nn.attention import flex_attention as afa
except ImportError as e:
    sys.exit("flex_compare.py: error: cannot import attn (%s); set PYTHONPATH" % e)


def modifiers(T, L, H, captured):
    doc, slopes, table = captured

    def causal(b, h, q, kv):
        return q >= kv

    def document(b, h, q, kv):
        return (doc[q] == doc[kv]) & (q >= kv)

    def window(b, h, q, kv):
        return (q >= kv) & (q - kv <= 256)

    def softcap(score, b, h, q, kv):
        return T.tanh(score / 20.0) * 20.0

    def alibi(score, b, h, q, kv):
        return score + slopes[h] * (kv - q)

    def rel_table(score, b, h, q, kv):
        return score + table[h, T.clamp(q - kv, 0, 127)]

    return {"causal": (None, causal), "document": (None, document),
            "sliding_window": (None, window), "softcap_causal": (softcap, causal),
            "alibi_causal": (alibi, causal), "rel_table_causal": (rel_table, causal)}


def eager_math(q, k, v, score_mod, mask_mod):
    """FlexAttention's definition in torch ops (the dense (L, L) scores), with autograd."""
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5)
    b = torch.arange(q.shape[0]).view(-1, 1, 1, 1)
    h = torch.arange(q.shape[1]).view(1, -1, 1, 1)
    qi = torch.arange(q.shape[2]).view(1, 1, -1, 1)
    ki = torch.arange(k.shape[2]).view(1, 1, 1, -1)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, ki), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def timed_pair(fa, fb, reps):
    fa(), fb()
    ta, tb = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fa()
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fb()
        tb.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--L", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--D", type=int, default=64)
    p.add_argument("--only", nargs="*", default=None, help="modifier names")
    p.add_argument("--no-backward", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    attn.set_num_threads(a.threads)
    # One compiled function per case, after a reset: dynamo's recompile limit would otherwise
    # send later cases to the unfused eager path.
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)
    rows = []
    for L in a.L:
        B, H, D = a.B, a.H, a.D
        rng = np.random.default_rng(0)
        qn, kn, vn = (rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3))
        docn = (np.arange(L) // (L // 8)).astype(np.int64)
        slopesn = np.array([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], dtype=np.float32)
        tablen = rng.standard_normal((H, 128)).astype(np.float32)
        tcap = (torch.from_numpy(docn), torch.from_numpy(slopesn), torch.from_numpy(tablen))
        acap = (attn.from_numpy(docn), attn.from_numpy(slopesn), attn.from_numpy(tablen))
        tmods, amods = modifiers(torch, L, H, tcap), modifiers(attn, L, H, acap)
        for name in tmods:
            if a.only and name not in a.only:
                continue
            tsm, tmm = tmods[name]
            asm, amm = amods[name]
            torch._dynamo.reset()
            compiled = torch.compile(tfa.flex_attention, dynamic=False)
            tbm = tfa.create_block_mask(tmm, None, None, L, L, device="cpu")
            abm = afa.create_block_mask(amm, None, None, L, L, device="cpu")
            tq, tk, tv = (torch.from_numpy(x) for x in (qn, kn, vn))
            aq, ak, av = (attn.from_numpy(x) for x in (qn, kn, vn))
            want = compiled(tq, tk, tv, score_mod=tsm, block_mask=tbm)
            got = afa.flex_attention(aq, ak, av, score_mod=asm, block_mask=abm)
            diff = float(np.abs(got.numpy() - want.numpy()).max())
            t_attn, t_torch = timed_pair(
                lambda: afa.flex_attention(aq, ak, av, score_mod=asm, block_mask=abm),
                lambda: compiled(tq, tk, tv, score_mod=tsm, block_mask=tbm), a.reps)
            row = {"L": L, "mod": name, "max_abs_diff": diff, "fwd_attn_ms": t_attn * 1e3,
                   "fwd_torch_compiled_ms": t_torch * 1e3, "fwd_speedup": t_torch / t_attn}
            if not a.no_backward:
                tq2, tk2, tv2 = (torch.from_numpy(x).requires_grad_(True) for x in (qn, kn, vn))
                aq2, ak2, av2 = (attn.from_numpy(x).requires_grad_(True) for x in (qn, kn, vn))

                def run_torch():
                    eager_math(tq2, tk2, tv2, tsm, tmm).sum().backward()

                def run_attn():
                    out = afa.flex_attention(aq2, ak2, av2, score_mod=asm, block_mask=abm)
                    out.sum().backward()
                run_torch(), run_attn()
                gdiff = float(np.abs(aq2.grad.numpy() - tq2.grad.numpy()).max())
                b_attn, b_torch = timed_pair(run_attn, run_torch, max(2, a.reps // 2))
                row.update({"dq_max_abs_diff": gdiff, "fwdbwd_attn_ms": b_attn * 1e3,
                            "fwdbwd_torch_eager_math_ms": b_torch * 1e3,
                            "fwdbwd_speedup": b_torch / b_attn})
            rows.append(row)
            print("L={:5d} {:17s} fwd attn {:8.1f} ms torch compiled {:8.1f} ms  x{:5.2f}".format(
                L, name, row["fwd_attn_ms"], row["fwd_torch_compiled_ms"], row["fwd_speedup"])
                + ("" if a.no_backward else
                   "  | fwd+bwd attn {:8.1f} ms torch eager math {:8.1f} ms  x{:5.2f}".format(
                       row["fwdbwd_attn_ms"], row["fwdbwd_torch_eager_math_ms"],
                       row["fwdbwd_speedup"]))
                + "  (diff {:.1e})".format(diff), flush=True)
    print("result: " + json.dumps({"threads": a.threads, "torch": torch.__version__,
                                   "rows": rows}))


if __name__ == "__main__":
    main()
