#!/usr/bin/env python3
"""Element-wise unary functions and copies, attn against PyTorch 2.x on the CPU, in one process.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build/python .venv-bench/bin/python bench/unary_compare.py --threads 2

torch.exp, sigmoid, tanh, sqrt, abs, sin and log (on |x|) of one float32 tensor (--shape,
default 2048 x 3072: a GPT-2-small MLP's activations for 2048 tokens), contiguous, and exp of
its transpose (a strided view); x * 2, x.t() * 2 and x.t() + x.t(); a per-row scale, a square, a
comparison, masked_fill and where (with a mask made each time, and with a causal mask made
once over attention scores), softmax, a row sum and a row max, sums and means over leading,
middle and all dims and over rows of 16; then copies: the transpose
made contiguous, the head split and merge of multi-head attention ((B, L, H, D) <-> (B, H, L, D)
by transpose(1, 2).contiguous()), conversion to bfloat16 and clone. The same values go to both libraries; results are compared
(largest difference relative to the value) before timing. The contenders alternate --reps times,
each sample the median of back-to-back calls lasting at least --min-time seconds after a warm-up;
printed: medians in ms, GB/s (bytes read and written) and attn / torch time (below 1: attn is
faster). The last line is `result: {JSON}`.
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
    sys.exit("unary_compare.py: error: no torch 2.x; run scripts/bench_setup.sh and use its python")
try:
    import attn
except ImportError as e:
    sys.exit("unary_compare.py: error: cannot import attn (%s); set PYTHONPATH" % e)

_CAUSAL = {}


def causal(T):
    """A (256, 256) bool mask above the diagonal, made once per library (as model code does)."""
    if T not in _CAUSAL:
        _CAUSAL[T] = T.triu(T.ones(256, 256, dtype=T.bool), diagonal=1)
    return _CAUSAL[T]


CASES = [
    ("exp", lambda T, x: T.exp(x)),
    ("sigmoid", lambda T, x: T.sigmoid(x)),
    ("tanh", lambda T, x: T.tanh(x)),
    ("sqrt |x|", lambda T, x: T.sqrt(x.abs())),
    ("abs", lambda T, x: T.abs(x)),
    ("sin", lambda T, x: T.sin(x)),
    ("log |x|", lambda T, x: T.log(x.abs())),
    ("exp of x.t()", lambda T, x: T.exp(x.t())),
    # Arithmetic with a Python scalar, on the tensor and on its transpose (a strided view).
    ("x * 2", lambda T, x: x * 2.0),
    ("x.t() * 2", lambda T, x: x.t() * 2.0),
    ("x.t() + x.t()", lambda T, x: x.t() + x.t()),
    # What model code around attention does: a per-row scale, a square, a mask, softmax, reductions.
    ("x * x[:, :1]", lambda T, x: x * x[:, :1]),
    ("x.pow(2)", lambda T, x: x.pow(2)),
    ("x > 0", lambda T, x: x > 0),
    ("masked_fill(x > 0, 0)", lambda T, x: x.masked_fill(x > 0, 0.0)),
    ("where(x > 0, x, 0.5 x)", lambda T, x: T.where(x > 0, x, x * 0.5)),
    # Attention scores (x as (96, 256, 256)) masked with a causal mask made once, as model code
    # does: masked_fill with -inf, and where with a scalar.
    ("scores.masked_fill(causal, -inf)",
     lambda T, x: x.view(-1, 256, 256).masked_fill(causal(T), float("-inf"))),
    ("where(causal, 0, scores)", lambda T, x: T.where(causal(T), 0.0, x.view(-1, 256, 256))),
    ("softmax(x, -1)", lambda T, x: T.softmax(x, -1)),
    ("x.sum(-1)", lambda T, x: x.sum(-1)),
    ("x.max(-1)", lambda T, x: x.max(-1)[0]),
    # Reductions over other dims: leading (a bias gradient), middle (pooling over a sequence:
    # x viewed as (16, 128, 3072) / 16 heads), and the whole tensor; many short rows.
    ("x.sum(0)", lambda T, x: x.sum(0)),
    ("mean over dim 1 of 3-d", lambda T, x: x.view(16, -1, x.shape[1]).mean(1)),
    ("x.mean()", lambda T, x: x.mean()),
    ("sum(-1) of rows of 16", lambda T, x: x.view(-1, 16).sum(-1)),
    # Copies: a transpose made contiguous, attention's head split and merge, dtype conversions.
    ("x.t() copy", lambda T, x: x.t().contiguous()),
    ("heads merge", lambda T, x: x.view(16, 12, 128, 256).transpose(1, 2).contiguous()),
    ("heads split", lambda T, x: x.view(16, 128, 12, 256).transpose(1, 2).contiguous()),
    ("to bfloat16", lambda T, x: x.to(T.bfloat16)),
    ("clone", lambda T, x: x.clone()),
]
# Bytes read and written per element where not 4 + 4 (float32 in, float32 out).
BYTES = {"to bfloat16": 6, "x.t() + x.t()": 12, "x > 0": 5, "masked_fill(x > 0, 0)": 14,
         "where(x > 0, x, 0.5 x)": 22,
         "scores.masked_fill(causal, -inf)": 8, "where(causal, 0, scores)": 8,
         "x.sum(-1)": 4, "x.max(-1)": 4, "x.sum(0)": 4,
         "mean over dim 1 of 3-d": 4, "x.mean()": 4, "sum(-1) of rows of 16": 4.25}


def sample(fn, min_time):
    for _ in range(3):
        fn()
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start >= min_time and len(times) >= 5:
            return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", type=int, nargs="+", default=[2048, 3072])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--only", default="", help="cases whose name contains this")
    args = ap.parse_args()
    if args.threads < 1 or args.reps < 1 or len(args.shape) != 2 or min(args.shape) < 1:
        ap.error("--threads and --reps at least 1, --shape two positive sizes")
    torch.set_num_threads(args.threads)
    attn.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x_np = (rng.standard_normal(args.shape) * 3).astype(np.float32)
    xs = {"torch": torch.from_numpy(x_np.copy()), "attn": attn.from_numpy(x_np.copy())}
    libs = {"torch": torch, "attn": attn}
    n = x_np.size
    print("torch %s, attn, %d threads, shape %s" % (torch.__version__, args.threads, args.shape))
    results = {}
    for name, op in CASES:
        if args.only not in name:
            continue
        want = op(torch, xs["torch"]).float().numpy()
        got = op(attn, xs["attn"]).float().numpy()
        scale = np.maximum(np.abs(want), 1e-30)
        diff = np.where(got == want, 0.0, np.abs(got.astype(np.float64) - want))  # infs equal
        rel = float(np.max(diff / scale))
        times = {"attn": [], "torch": []}
        for _ in range(args.reps):
            for lib in ("attn", "torch"):
                T, x = libs[lib], xs[lib]
                times[lib].append(sample(lambda: op(T, x), args.min_time))
        med = {lib: statistics.median(t) for lib, t in times.items()}
        gbs = {lib: BYTES.get(name, 8) * n / med[lib] / 1e9 for lib in med}
        ratio = med["attn"] / med["torch"]
        results[name] = {"attn_ms": med["attn"] * 1e3, "torch_ms": med["torch"] * 1e3,
                         "ratio": ratio, "max_rel_diff": rel}
        print("%-14s attn %7.2f ms (%5.1f GB/s)  torch %7.2f ms (%5.1f GB/s)  attn/torch %.2f"
              "  max rel diff %.1e" % (name, med["attn"] * 1e3, gbs["attn"], med["torch"] * 1e3,
                                       gbs["torch"], ratio, rel))
    print("result: " + json.dumps({"threads": args.threads, "shape": args.shape,
                                   "cases": results}))


if __name__ == "__main__":
    main()
