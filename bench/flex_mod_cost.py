#!/usr/bin/env python3
"""What a score_mod costs in attn's flex_attention forward, over the same call without one.

    PYTHONPATH=build/python /usr/bin/python3 bench/flex_mod_cost.py [--L 4096] [--reps 5]

q, k, v (1, H, L, 64) float32 with a causal block mask; the modifiers are those of
bench/flex_compare.py (ALiBi, a bias table indexed by q - kv, a tanh softcap), run one after
another in one process, each timed --reps times after a warm-up. Prints the best and median ms of
each, and the median's excess over the causal call without a score_mod.
"""
import argparse
import statistics
import time

import numpy as np

import attn
from attn.nn.attention import flex_attention as afa


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--L", type=int, default=4096)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    attn.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    q, k, v = (attn.from_numpy(rng.standard_normal((1, a.H, a.L, 64)).astype(np.float32))
               for _ in range(3))
    slopes = attn.from_numpy(
        np.array([2.0 ** (-8.0 * (i + 1) / a.H) for i in range(a.H)], dtype=np.float32))
    table = attn.from_numpy(rng.standard_normal((a.H, 128)).astype(np.float32))
    mods = {
        "none": None,
        "alibi": lambda s, b, h, qi, kv: s + slopes[h] * (kv - qi),
        "bias_table": lambda s, b, h, qi, kv: s + table[h, attn.clamp(qi - kv, 0, 127)],
        "softcap": lambda s, b, h, qi, kv: attn.tanh(s / 20.0) * 20.0,
    }
    mask = afa.create_block_mask(lambda b, h, qi, kv: qi >= kv, None, None, a.L, a.L)
    base = None
    for name, mod in mods.items():
        afa.flex_attention(q, k, v, score_mod=mod, block_mask=mask)
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            afa.flex_attention(q, k, v, score_mod=mod, block_mask=mask)
            times.append((time.perf_counter() - t0) * 1e3)
        med = statistics.median(times)
        base = med if base is None else base
        print("{:11s} best {:7.1f} ms  median {:7.1f} ms  over none {:+6.1f} ms".format(
            name, min(times), med, med - base), flush=True)


if __name__ == "__main__":
    main()
