#!/usr/bin/env python3
"""Decoding attention, attn against PyTorch 2.x's scaled_dot_product_attention in one process.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build-nocuda/python .venv-bench/bin/python bench/decode_compare.py --threads 2

Llama-3-8B-shaped decoding: one query per sequence, 32 query heads, 8 key/value heads, D=128,
float32, batch 1 and 8, 4096 and 32768 cached keys. torch gets F.scaled_dot_product_attention(q,
k, v, enable_gqa=True) (PyTorch picks its CPU kernel) and, where it fits in 4 GB, the same with K
and V expanded to the 32 query heads beforehand (untimed); its figure is the better of the two.
attn gets
attn.nn.functional.scaled_dot_product_attention with the same arguments (the fused kernel with
split-K). The contenders alternate, --reps times each after a warm-up; the medians and their
ratio are printed, and the last line is `result: {JSON}`.
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

try:
    import torch
except ImportError:
    sys.exit("decode_compare.py: error: no torch; run scripts/bench_setup.sh and use its python")
try:
    import attn
except ImportError as e:
    sys.exit("decode_compare.py: error: cannot import attn (%s); set PYTHONPATH" % e)


def timed(fn, reps):
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    attn.set_num_threads(a.threads)
    F = torch.nn.functional
    rows = []
    for B, L in ((1, 4096), (1, 32768), (8, 4096), (8, 32768)):
        g = torch.Generator().manual_seed(0)
        q = torch.randn(B, 32, 1, 128, generator=g)
        k = torch.randn(B, 8, L, 128, generator=g)
        v = torch.randn(B, 8, L, 128, generator=g)
        qa, ka, va = (attn.from_numpy(t.numpy()) for t in (q, k, v))
        want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        got = attn.nn.functional.scaled_dot_product_attention(qa, ka, va, enable_gqa=True)
        err = float(np.abs(np.asarray(got.numpy()) - want.numpy()).max())
        # torch's other way: K and V expanded to the 32 query heads beforehand (untimed, 4x the
        # memory), which lets it choose a kernel without grouped-query support; where it fits.
        expand = 2 * B * 32 * L * 128 * 4 <= 4e9
        if expand:
            ke, ve = (t.repeat_interleave(4, dim=1).contiguous() for t in (k, v))
        times = {"torch": [], "torch_expanded": [], "attn": []}
        for _ in range(a.reps):  # alternate, so that all see the same machine
            times["torch"] += timed(lambda: F.scaled_dot_product_attention(q, k, v,
                                                                           enable_gqa=True), 1)
            if expand:
                times["torch_expanded"] += timed(lambda: F.scaled_dot_product_attention(q, ke, ve),
                                                 1)
            times["attn"] += timed(lambda: attn.nn.functional.scaled_dot_product_attention(
                qa, ka, va, enable_gqa=True), 1)
        if expand:
            del ke, ve
        med = {n: statistics.median(t) * 1e3 for n, t in times.items() if t}
        if "torch_expanded" in med:  # torch's figure: the better of its two ways
            med["torch"] = min(med["torch"], med.pop("torch_expanded"))
        gb = 2 * B * 8 * L * 128 * 4 / 1e9
        row = {"B": B, "L_k": L, "torch_ms": med["torch"], "attn_ms": med["attn"],
               "speedup": med["torch"] / med["attn"], "attn_GBps": gb / med["attn"] * 1e3,
               "torch_GBps": gb / med["torch"] * 1e3, "max_abs_diff": err}
        rows.append(row)
        print("B%d L_k %6d: torch %8.2f ms  attn %8.2f ms  attn %.2fx faster  "
              "(K+V %.2f GB: attn %.1f GB/s, torch %.1f GB/s; max |diff| %.1e)"
              % (B, L, med["torch"], med["attn"], row["speedup"], gb, row["attn_GBps"],
                 row["torch_GBps"], err), flush=True)
        del q, k, v, qa, ka, va
    print("result: " + json.dumps({"torch": torch.__version__, "threads": a.threads,
                                   "rows": rows}))


if __name__ == "__main__":
    main()
