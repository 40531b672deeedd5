#!/usr/bin/env python3
"""Peak memory of a forward and backward pass through gpt-oss-style expert blocks: attn against
torch 2.x, each in a fresh process.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build/python .venv-bench/bin/python bench/backward_memory.py --blocks 1 2 3

Each block is the mixture of experts of gpt-oss's reference code (and of
tests/python/programs/gptoss_tiny.py): top-2 routing over 8 experts, each token's two experts'
weights gathered by index (`w1[indices]`: a (256, 2, 512, 256) copy, 128 MiB), einsum products, the
clamped SwiGLU, and the weighted sum; the blocks are chained with a residual. The backward must
free what each node saved as soon as it has run, as torch's engine does, or the gathered weights
of every block are held at once. Printed: the peak resident size above the size after the inputs
were made (ru_maxrss, MiB), after the forward and after the backward, for each library and
number of blocks; medians over --reps runs.
"""
import argparse
import os
import statistics
import subprocess
import sys

CHILD = r'''
import resource, sys
lib, n = sys.argv[1], int(sys.argv[2])
if lib == "attn":
    import attn as torch
else:
    import torch
torch.manual_seed(0)
B, E, I, H, K = 256, 8, 256, 256, 2
w1 = torch.randn(E, 2 * I, H, requires_grad=True)
b1 = torch.zeros(E, 2 * I, requires_grad=True)
w2 = torch.randn(E, H, I, requires_grad=True)
b2 = torch.zeros(E, H, requires_grad=True)
x = torch.randn(B, H, requires_grad=True)
gate = torch.randn(H, E, requires_grad=True)
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
base = peak()
def swiglu(t, alpha=1.702, limit=7.0):
    glu, linear = t[..., ::2], t[..., 1::2]
    glu = glu.clamp(min=None, max=limit)
    linear = linear.clamp(min=-limit, max=limit)
    return glu * torch.sigmoid(alpha * glu) * (linear + 1)
def block(t):
    experts = torch.topk(t @ gate, k=K, dim=-1, sorted=True)
    weights = torch.nn.functional.softmax(experts.values, dim=1)
    idx = experts.indices
    h = torch.einsum("beck,bk->bec", w1[idx, ...], t) + b1[idx, ...]
    h = torch.einsum("beck,bek->bec", w2[idx, ...], swiglu(h))
    h += b2[idx, ...]
    return torch.einsum("bec,be->bc", h, weights)
t = x
for _ in range(n):
    t = block(t) * 0.01 + t
fwd = peak() - base
t.sum().backward()
print("peaks %.1f %.1f" % (fwd, peak() - base))
'''


def run(lib, n, threads, attn_path):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("PYTHONPATH", None)
    if lib == "attn" and attn_path:
        env["PYTHONPATH"] = attn_path
    p = subprocess.run([sys.executable, "-c", CHILD, lib, str(n)], env=env, capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit("backward_memory.py: %s with %d blocks failed:\n%s" % (lib, n, p.stderr[-3000:]))
    fwd, total = (float(v) for v in p.stdout.split("peaks")[1].split())
    return fwd, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    if a.threads < 1 or a.reps < 1 or any(n < 1 for n in a.blocks):
        ap.error("--threads, --reps and --blocks at least 1")
    attn_path = os.environ.get("PYTHONPATH", "")
    print("| blocks | attn after forward | attn peak | torch after forward | torch peak | "
          "attn / torch |")
    print("|---|---|---|---|---|---|")
    for n in a.blocks:
        got = {"attn": [], "torch": []}
        for _ in range(a.reps):
            for lib in ("attn", "torch"):
                got[lib].append(run(lib, n, a.threads, attn_path))
        med = {lib: [statistics.median(r[i] for r in v) for i in (0, 1)] for lib, v in got.items()}
        print("| %d | %.0f | %.0f | %.0f | %.0f | %.2f |" % (
            n, med["attn"][0], med["attn"][1], med["torch"][0], med["torch"][1],
            med["attn"][1] / med["torch"][1]), flush=True)


if __name__ == "__main__":
    main()
