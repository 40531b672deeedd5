#!/usr/bin/env python3
"""A PyTorch training program run unchanged on attn and on torch 2.x, alternating: ms a step.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build/python .venv-bench/bin/python bench/program_compare.py --threads 2 --reps 3

The program is tests/python/programs/llama_tiny.py (a Llama-3-style char model in the idioms of
the from-scratch tutorials), scaled up: 256 wide, 8 heads in 2 key/value groups, 4 layers, 768
hidden, 256 tokens, batch 16. For attn its imports are rewritten (`import attn as torch`, as
tests/python/test_programs.py does); nothing else changes. Each run is a fresh process on
--steps steps; the time is the mean of steps 2 on (after the warm-up). Printed: each run's ms a
step and peak resident size (ru_maxrss of the child), then the medians and attn / torch. Both
must print the same losses (checked).
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "..", "tests", "python", "programs", "llama_tiny.py")
DATA = os.path.join(HERE, "..", "..", "shared", "data", "tinyshakespeare.txt")


def scaled(src):
    edits = [
        ('"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2,\n'
         '       "n_layers": 2, "hidden_dim": 64,',
         '"context_length": 256, "emb_dim": 256, "n_heads": 8, "n_kv_groups": 2,\n'
         '       "n_layers": 4, "hidden_dim": 768,'),
        ("text = f.read()[:20000]", "text = f.read()[:200000]"),
        ("(8,))", "(16,))"),
        ("import sys\n", "import sys\nimport time\n"),
        ("for step in range(steps + 1):\n",
         "t_start = None\nfor step in range(steps + 1):\n"
         "    if step == 2:\n        t_start = time.perf_counter()\n"),
        ("if bf16:\n    model.to",
         'print(f"ms/step {(time.perf_counter() - t_start) / (steps - 1) * 1e3:.1f}")\n'
         "if bf16:\n    model.to"),
    ]
    for old, new in edits:
        if old not in src:
            sys.exit("program_compare.py: error: %s changed; this script's edits no longer apply"
                     % PROGRAM)
        src = src.replace(old, new, 1)
    return src


def on_attn(src):
    return (src.replace("import torch.nn.functional as F", "import attn.nn.functional as F")
               .replace("import torch.nn as nn", "import attn.nn as nn")
               .replace("import torch\n", "import attn as torch\n"))


def run(path, steps, threads, pythonpath):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = subprocess.run([sys.executable, path, DATA, str(steps)], env=env, capture_output=True,
                       text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit("program_compare.py: %s failed:\n%s" % (path, p.stderr[-3000:]))
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ms = float(re.search(r"ms/step ([\d.]+)", p.stdout).group(1))
    losses = re.findall(r"loss [\d.]+", p.stdout)
    return ms, (rss if rss > before else None), losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    if a.threads < 1 or a.reps < 1 or a.steps < 3:
        ap.error("--threads and --reps at least 1, --steps at least 3")
    attn_path = os.environ.get("PYTHONPATH", "")
    with open(PROGRAM, encoding="utf-8") as f:
        src = scaled(f.read())
    d = tempfile.mkdtemp(prefix="program_compare_")
    paths = {"torch": os.path.join(d, "llama_torch.py"), "attn": os.path.join(d, "llama_attn.py")}
    with open(paths["torch"], "w", encoding="utf-8") as f:
        f.write(src)
    with open(paths["attn"], "w", encoding="utf-8") as f:
        f.write(on_attn(src))
    times = {"attn": [], "torch": []}
    losses = {}
    for rep in range(a.reps):
        for name in ("attn", "torch"):
            ms, rss, loss = run(paths[name], a.steps, a.threads,
                                attn_path if name == "attn" else "")
            times[name].append(ms)
            losses[name] = loss
            print("rep %d %-5s %8.1f ms a step%s" % (
                rep + 1, name, ms, "" if rss is None else ", peak RSS so far %.2f GB" % (rss / 1e6)),
                flush=True)
    if losses["attn"] != losses["torch"]:
        sys.exit("program_compare.py: the losses differ: attn %s, torch %s"
                 % (losses["attn"], losses["torch"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    print("medians: attn %.1f ms, torch %.1f ms a step; torch / attn %.2fx (losses equal: %s)"
          % (med["attn"], med["torch"], med["torch"] / med["attn"], ", ".join(losses["attn"])))


if __name__ == "__main__":
    main()
