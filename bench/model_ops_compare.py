#!/usr/bin/env python3
"""The routing and indexing idioms of mixture-of-experts and grouped-query attention code,
forward and backward, attn against PyTorch 2.x on the CPU: ms a call.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build/python .venv-bench/bin/python bench/model_ops_compare.py --threads 2

Cases (2048 tokens of 256 features, 8 experts, 2 per token, as bench/program_compare.py's moe
program at its scale):
- Mistral's reference MoE loop: torch.where(selected == e), results[rows] += w[rows, nth, None] *
  x[rows], then backward;
- the gradient of x[rows] alone, and of w[rows, nth, None] alone (two index tensors);
- transformers' Qwen3-MoE loop: F.one_hot masks, torch.where(mask[e]), x[None, top],
  final.index_add_(0, top, ...), then backward;
- grouped-query attention's keys.repeat_interleave(4, dim=1) of (16, 2, 256, 32), forward and
  backward;
- masked_fill(causal, -inf) of (16, 8, 256, 256) scores, then softmax, forward and backward;
- complex RoPE as Meta's reference Llama code: view_as_complex of (16, 256, 8, 64) queries and
  (16, 256, 2, 64) keys, times polar frequencies, view_as_real, forward and backward.
Each library runs in its own process (the two are never loaded together), alternating --reps
times; each sample is the mean of --calls calls after one warm-up call. Printed: the medians and
attn / torch (below 1: attn is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, time
lib, threads, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if lib == "attn":
    import attn as torch
    import attn.nn.functional as F
else:
    import torch
    import torch.nn.functional as F
torch.set_num_threads(threads)
torch.manual_seed(0)
N, D, E = 2048, 256, 8
x = torch.randn(N, D, requires_grad=True)
sel = torch.randint(0, E, (N, 2))
w = torch.randn(N, 2, requires_grad=True)


def mistral():
    res = torch.zeros_like(x)
    for i in range(E):
        b, nth = torch.where(sel == i)
        res[b] += w[b, nth, None] * x[b]
    res.sum().backward()


def rows_grad():
    tot = 0
    for i in range(E):
        b, nth = torch.where(sel == i)
        tot = tot + x[b].sum()
    tot.backward()


def weights_grad():
    tot = 0
    for i in range(E):
        b, nth = torch.where(sel == i)
        tot = tot + w[b, nth, None].sum()
    tot.backward()


def qwen():
    final = torch.zeros((N, D))
    mask = F.one_hot(sel, num_classes=E).permute(2, 1, 0)
    for e in range(E):
        idx, top = torch.where(mask[e])
        cur = x[None, top].reshape(-1, D) * w[top, idx, None]
        final.index_add_(0, top, cur)
    final.sum().backward()


k = torch.randn(16, 2, 256, 32, requires_grad=True)
s = torch.randn(16, 8, 256, 256, requires_grad=True)
causal = torch.triu(torch.ones(256, 256, dtype=torch.bool), diagonal=1)
q = torch.randn(16, 256, 8, 64, requires_grad=True)
kr = torch.randn(16, 256, 2, 64, requires_grad=True)
inv = 1.0 / (10000.0 ** (torch.arange(0, 64, 2).float() / 64))
freqs_cis = torch.polar(torch.ones(256, 32), torch.outer(torch.arange(256).float(), inv))


def rope():
    fc = freqs_cis.view(1, 256, 1, 32)
    xq = torch.view_as_complex(q.float().reshape(16, 256, 8, -1, 2))
    xk = torch.view_as_complex(kr.float().reshape(16, 256, 2, -1, 2))
    oq = torch.view_as_real(xq * fc).flatten(3)
    ok = torch.view_as_real(xk * fc).flatten(3)
    (oq.sum() + ok.sum()).backward()


cases = {
    "Mistral MoE loop fwd+bwd": mistral,
    "x[rows] fwd+bwd": rows_grad,
    "w[rows, nth, None] fwd+bwd": weights_grad,
    "Qwen3-MoE loop (index_add_) fwd+bwd": qwen,
    "repeat_interleave(4, dim=1) fwd+bwd": lambda: k.repeat_interleave(4, dim=1).sum().backward(),
    "masked_fill(causal) + softmax fwd+bwd":
        lambda: torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1).sum().backward(),
    "complex RoPE (Meta's) fwd+bwd": rope,
}
out = {}
for name, f in cases.items():
    f()
    t0 = time.perf_counter()
    for _ in range(calls):
        f()
    out[name] = (time.perf_counter() - t0) / calls * 1e3
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    a = ap.parse_args()
    if a.threads < 1 or a.reps < 1 or a.calls < 1:
        ap.error("--threads, --reps and --calls at least 1")
    attn_path = os.environ.get("PYTHONPATH", "")
    times = {"attn": [], "torch": []}
    for _ in range(a.reps):
        for lib in ("attn", "torch"):
            env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
            env.pop("PYTHONPATH", None)
            if lib == "attn" and attn_path:
                env["PYTHONPATH"] = attn_path
            p = subprocess.run([sys.executable, "-c", CHILD, lib, str(a.threads), str(a.calls)],
                               env=env, capture_output=True, text=True, timeout=1800)
            if p.returncode != 0:
                sys.exit("model_ops_compare.py: the %s run failed:\n%s" % (lib, p.stderr[-3000:]))
            times[lib].append(json.loads(p.stdout.strip().splitlines()[-1]))
    print("%d threads, medians of %d runs of %d calls, ms" % (a.threads, a.reps, a.calls))
    for name in times["attn"][0]:
        med = {lib: statistics.median(r[name] for r in times[lib]) for lib in times}
        print("%-40s attn %8.2f  torch %8.2f  attn/torch %.2f"
              % (name, med["attn"], med["torch"], med["attn"] / med["torch"]))


if __name__ == "__main__":
    main()
