"""The linear layer in bfloat16 / float16 against float32, attn against PyTorch 2.x, in one run.

Shapes of a Llama-3.2-1B layer: a decoding step (1 row against the 8192 x 2048 MLP weight: read
from memory, so reported also as GB/s of weight read) and a 512-token prefill (512 x 2048 x 2048).
Each measurement alternates attn and torch, best of --reps. torch's bfloat16 product goes through
oneDNN (AVX512-BF16 / AMX where present); attn's reads the bfloat16 weight as stored and
multiplies in float32 (gemm_half.h).

    PYTHONPATH=build-nocuda/python $(scripts/bench_setup.sh --print) bench/half_linear_compare.py
"""
import argparse
import time

import numpy as np
import torch

import attn
import attn.nn.functional as AF

SHAPES = [("decode 1 x 8192 x 2048", 1, 8192, 2048), ("decode 8 x 8192 x 2048", 8, 8192, 2048),
          ("prefill 512 x 2048 x 2048", 512, 2048, 2048)]


def best(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    attn.set_num_threads(args.threads)
    cpu = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln][0]
    print("# {}, {} threads, torch {}, best of {}".format(cpu, args.threads, torch.__version__,
                                                         args.reps))
    print("| shape | dtype | attn ms | torch ms | attn / torch speed | attn weight GB/s |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, M, N, K in SHAPES:
        x = rng.standard_normal((M, K)).astype(np.float32)
        w = (rng.standard_normal((N, K)) * 0.02).astype(np.float32)
        for dt, adt, tdt in [("float32", attn.float32, torch.float32),
                             ("bfloat16", attn.bfloat16, torch.bfloat16),
                             ("float16", attn.float16, torch.float16)]:
            ax, aw = attn.tensor(x).to(adt), attn.tensor(w).to(adt)
            tx, tw = torch.tensor(x).to(tdt), torch.tensor(w).to(tdt)
            ta, tt = [], []
            for _ in range(3):  # alternate the two sides
                ta.append(best(lambda: AF.linear(ax, aw), args.reps // 3 or 1))
                with torch.no_grad():
                    tt.append(best(lambda: torch.nn.functional.linear(tx, tw), args.reps // 3 or 1))
            a, t = min(ta), min(tt)
            gbs = N * K * aw.element_size() / a / 1e9
            print("| {} | {} | {:.3f} | {:.3f} | {:.2f}x | {:.1f} |".format(
                name, dt, a * 1e3, t * 1e3, t / a, gbs))


if __name__ == "__main__":
    main()
