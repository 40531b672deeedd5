"""Same-run A/B timing of attn's layer and element-wise ops between two builds.

    /usr/bin/python3 bench/ab_ops.py --a /path/to/base/build --b build [--rounds 2] [--reps 3]

Each (op, build) sample runs in its own subprocess (the two builds' modules cannot share one
process); the builds alternate within every round. A sample is the median of --reps timings of
back-to-back calls lasting >= 0.3 s each, after 0.5 s of untimed calls (with a single untimed
call, the first timings still paid for the allocator's growth: gelu fwd+bwd read 1.15x where a
4 s loop read 0.82x). Printed: per op the best over the rounds of each build's median, in ms,
and b / a (below 1: b is faster). Threads: --threads (default 2). Shapes are mostly a
GPT-2-small-width training step of 2048 tokens; --only selects cases whose name contains it.

--fixed-malloc runs the children with glibc's mmap and trim thresholds fixed (256 MiB, 1 GiB).
By default glibc serves a block above its dynamic mmap threshold (32 MiB at most) with a fresh
mmap, which page-faults on first touch; the threshold moves with the history of frees, so the
same build of gelu fwd+bwd 2048x3072 (24 MiB tensors) read 4.0 or 8.3 ms from run to run, and
up to 26 ms with every such block mmapped. Fixed thresholds compare the kernels, not the
allocator's state.
"""
import argparse
import json
import os
import subprocess
import sys

CASES = {
    # name: (setup, statement); `a` is the attn module
    "linear fwd+bwd 2048x768->3072":
        ("x = a.randn(2048, 768, requires_grad=True); w = a.randn(3072, 768, requires_grad=True);"
         "b = a.randn(3072, requires_grad=True)",
         "a.nn.functional.linear(x, w, b).sum().backward()"),
    "layer_norm fwd+bwd 2048x768":
        ("x = a.randn(2048, 768, requires_grad=True); w = a.ones(768, requires_grad=True);"
         "b = a.zeros(768, requires_grad=True)",
         "a.nn.functional.layer_norm(x, (768,), w, b).sum().backward()"),
    "gelu fwd+bwd 2048x3072":
        ("x = a.randn(2048, 3072, requires_grad=True)",
         "a.nn.functional.gelu(x).sum().backward()"),
    "cross_entropy fwd+bwd 2048x8192":
        ("x = a.randn(2048, 8192, requires_grad=True); t = a.randint(0, 8192, (2048,))",
         "a.nn.functional.cross_entropy(x, t).backward()"),
    "embedding fwd+bwd 2048 of 8192x768":
        ("w = a.randn(8192, 768, requires_grad=True); t = a.randint(0, 8192, (2048,))",
         "a.nn.functional.embedding(t, w).sum().backward()"),
    "add 2048x3072 + 2048x3072":
        ("x = a.randn(2048, 3072); y = a.randn(2048, 3072)", "x + y"),
    "add bias 2048x3072 + 3072":
        ("x = a.randn(2048, 3072); y = a.randn(3072)", "x + y"),
    "mul transposed 1024x1024":
        ("x = a.randn(1024, 1024); y = a.randn(1024, 1024).t()", "x * y"),
    "lt 2048x3072 < scalar":
        ("x = a.randn(2048, 3072)", "x < 0.5"),
    "exp 2048x3072":
        ("x = a.randn(2048, 3072)", "x.exp()"),
    "sum over rows 2048x3072":
        ("x = a.randn(2048, 3072)", "x.sum(-1)"),
    "mean over columns 2048x3072":
        ("x = a.randn(2048, 3072)", "x.mean(0)"),
    "where 2048x3072":
        ("x = a.randn(2048, 3072); y = a.randn(2048, 3072); c = x > 0", "a.where(c, x, y)"),
    "masked_fill 2048x3072":
        ("x = a.randn(2048, 3072); c = x > 0", "x.masked_fill(c, 0.0)"),
    "cumsum 2048x3072 dim 1":
        ("x = a.randn(2048, 3072)", "x.cumsum(1)"),
    "clamp 2048x3072":
        ("x = a.randn(2048, 3072)", "x.clamp(-0.5, 0.5)"),
    "add int64 2048x768":
        ("x = a.randint(0, 100, (2048, 768)); y = a.randint(0, 100, (2048, 768))", "x + y"),
    "matmul 2048x768 @ 768x768":
        ("x = a.randn(2048, 768); w = a.randn(768, 768)", "x @ w"),
    "matmul batched 12x(256x64 @ 64x256)":
        ("q = a.randn(12, 256, 64); k = a.randn(12, 64, 256)", "q @ k"),
    "matmul small 6x3 @ 3x2 (textbook)":
        ("x = a.randn(6, 3); w = a.randn(3, 2)", "x @ w"),
    "dot 4096":
        ("x = a.randn(4096); y = a.randn(4096)", "a.dot(x, y)"),
    "gather 2048x3072 dim 1":
        ("x = a.randn(2048, 3072); i = a.randint(0, 3072, (2048, 3072))", "x.gather(1, i)"),
    "scatter_add 2048x3072 dim 1":
        ("x = a.zeros(2048, 3072); s = a.randn(2048, 3072); i = a.randint(0, 3072, (2048, 3072))",
         "x.scatter_add(1, i, s)"),
    "sort 512x3072":
        ("x = a.randn(512, 3072)", "x.sort(-1)"),
    "topk 50 of 2048x3072":
        ("x = a.randn(2048, 3072)", "x.topk(50, -1)"),
    "mask select 2048x3072":
        ("x = a.randn(2048, 3072); c = x > 0", "x[c]"),
    "sdpa fwd+bwd causal 4x12x256x64":
        ("q = a.randn(4, 12, 256, 64, requires_grad=True); k = a.randn(4, 12, 256, 64, "
         "requires_grad=True); v = a.randn(4, 12, 256, 64, requires_grad=True)",
         "a.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()"),
    "sdpa fwd 1x12x1x1024 (decode)":
        ("q = a.randn(1, 12, 1, 64); k = a.randn(1, 12, 1024, 64); v = a.randn(1, 12, 1024, 64)",
         "a.nn.functional.scaled_dot_product_attention(q, k, v)"),
}

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, {path!r})
import attn as a
a.set_num_threads({threads})
a.manual_seed(0)
{setup}
f = lambda: ({stmt})
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.5:  # warm-up: the allocator's and the pages' steady state
    f()
times = []
for _ in range({reps}):
    n, t0 = 0, time.perf_counter()
    while True:
        f(); n += 1
        el = time.perf_counter() - t0
        if el >= 0.3: break
    times.append(el / n * 1e3)
print(json.dumps(statistics.median(times)))
"""


def sample(build, case, threads, reps, env=None):
    setup, stmt = CASES[case]
    code = CHILD.format(path=os.path.join(os.path.abspath(build), "python"), threads=threads,
                        setup=setup.replace("; ", "\n").replace(";", "\n"), stmt=stmt, reps=reps)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the build folder of A (the base)")
    ap.add_argument("--b", required=True, help="the build folder of B")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--fixed-malloc", action="store_true",
                    help="fix glibc's mmap and trim thresholds in the children")
    args = ap.parse_args()
    env = None
    if args.fixed_malloc:
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(256 << 20),
                   MALLOC_TRIM_THRESHOLD_=str(1 << 30))
    cases = [c for c in CASES if args.only in c]
    best = {c: [float("inf"), float("inf")] for c in cases}
    for _ in range(args.rounds):
        for c in cases:
            for i, build in enumerate((args.a, args.b)):
                best[c][i] = min(best[c][i], sample(build, c, args.threads, args.reps, env))
    print("| op | A ms | B ms | B / A |\n| --- | ---: | ---: | ---: |")
    for c in cases:
        ta, tb = best[c]
        print("| %s | %.3f | %.3f | %.3f |" % (c, ta, tb, tb / ta))


if __name__ == "__main__":
    main()
