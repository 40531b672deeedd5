"""One optimizer step over a large parameter, attn against PyTorch 2.x in one run (CPU).

Every torch.optim optimizer attn has (AdamW, Adam with weight decay, SGD with and without
momentum, RMSprop centered with momentum, Adagrad), in float32 and bfloat16 (the state in the
parameter's dtype, as torch's), with the same gradient every step. Each case alternates attn and
torch --rounds times; the best step of --reps per round is kept, and the table gives the best
over the rounds and the ratio torch / attn (above 1: attn faster). Run with the threads you want
to measure (OMP_NUM_THREADS / --threads).

    PYTHONPATH=build/python $(scripts/bench_setup.sh --print) bench/optim_step_compare.py
"""
import argparse
import platform
import time

import torch

import attn

CASES = [
    ("AdamW", lambda lib, ps: lib.optim.AdamW(ps, lr=1e-3)),
    ("Adam, weight decay", lambda lib, ps: lib.optim.Adam(ps, lr=1e-3, weight_decay=0.1)),
    ("SGD", lambda lib, ps: lib.optim.SGD(ps, lr=1e-3)),
    ("SGD, momentum", lambda lib, ps: lib.optim.SGD(ps, lr=1e-3, momentum=0.9)),
    ("RMSprop, centered, momentum",
     lambda lib, ps: lib.optim.RMSprop(ps, lr=1e-3, momentum=0.9, centered=True)),
    ("Adagrad", lambda lib, ps: lib.optim.Adagrad(ps, lr=1e-2)),
]


def best_step(lib, make, n, dtype, reps):
    p = lib.randn(n).to(dtype).requires_grad_()
    p.grad = lib.randn(n).to(dtype)
    opt = make(lib, [p])
    opt.step()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--numel", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    attn.set_num_threads(args.threads)
    print("{} ({}), {} threads, torch {}, {} parameters, best of {} steps x {} rounds".format(
        platform.processor() or platform.machine(), cpu_model(), args.threads,
        torch.__version__, args.numel, args.reps, args.rounds))
    print("\n| optimizer | dtype | attn ms | torch ms | torch / attn |\n|---|---|---|---|---|")
    for name, make in CASES:
        for dname in ("float32", "bfloat16"):
            a = t = float("inf")
            for _ in range(args.rounds):
                a = min(a, best_step(attn, make, args.numel, getattr(attn, dname), args.reps))
                t = min(t, best_step(torch, make, args.numel, getattr(torch, dname), args.reps))
            print("| {} | {} | {:.2f} | {:.2f} | {:.2f}x |".format(name, dname, a * 1e3, t * 1e3,
                                                                   t / a))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
