#!/usr/bin/env python3
"""PyTorch training programs run unchanged on attn and on torch 2.x, alternating: ms a step.

    scripts/bench_setup.sh        # .venv-bench with torch 2.15 from PyPI
    PYTHONPATH=build/python .venv-bench/bin/python bench/program_compare.py --threads 2 --reps 3 \
        --program llama           # or gemma3, gptoss, moe; or all

The programs are tests/python/programs/*_tiny.py, written in the idioms of the from-scratch
tutorials and reference code of each family, scaled up here (PROGRAMS below: the edits of each):
- llama: Llama-3-style, 256 wide, 8 heads in 2 key/value groups, 4 layers, 768 hidden, 256
  tokens, batch 16 (SDPA with enable_gqa, SwiGLU, RMSNorm);
- gemma3: Gemma-3-style, 256 wide, 8 heads of 32 in 2 groups, 3 layers (2 sliding of 64, 1
  global), 768 hidden, 256 tokens, batch 16 (explicit scores with masked_fill from triu masks,
  softmax, QK-norm, GELU-tanh, pre and post RMSNorms written as pow/mean/rsqrt);
- gptoss: gpt-oss-style, 256 wide, 8 heads of 32 in 2 groups, 4 layers, 8 experts (top 2) of
  256, 256 tokens, one sequence a step (sinks, banded masks, einsum experts gathered by index);
- moe: Mixtral / Qwen3-MoE-style, 256 wide, 8 heads of 32, 4 layers, 8 experts (top 2) of 384,
  256 tokens, batch 8 (complex RoPE, topk routing, where / index_add_, bincount).
For attn the imports are rewritten (`import attn as torch`, as tests/python/test_programs.py
does); nothing else changes. Each run is a fresh process on --steps steps; the time is the mean
of steps 2 on (after the warm-up). Printed: each run's ms a step, peak resident size (the
child's own ru_maxrss, from wait4) and page faults (over the whole run), then the medians and
torch / attn. Both must print the same losses, to float rounding (checked: within 2e-4).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS_DIR = os.path.join(HERE, "..", "tests", "python", "programs")
DATA = os.path.join(HERE, "..", "..", "shared", "data", "tinyshakespeare.txt")

# Each program's scaling edits: (old, new) replacements, each of which must apply once. The ms/step
# line is printed before `end` (None: at the end of the file).
PROGRAMS = {
    "llama": {
        "file": "llama_tiny.py",
        "edits": [
            ('"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2,\n'
             '       "n_layers": 2, "hidden_dim": 64,',
             '"context_length": 256, "emb_dim": 256, "n_heads": 8, "n_kv_groups": 2,\n'
             '       "n_layers": 4, "hidden_dim": 768,'),
            ("(8,))", "(16,))"),
        ],
        "end": "if bf16:\n    model.to",
    },
    "gemma3": {
        "file": "gemma3_tiny.py",
        "edits": [
            ('"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2,\n'
             '       "head_dim": 8, "hidden_dim": 48, "n_layers": 3, "sliding_window": 4,',
             '"context_length": 256, "emb_dim": 256, "n_heads": 8, "n_kv_groups": 2,\n'
             '       "head_dim": 32, "hidden_dim": 768, "n_layers": 3, "sliding_window": 64,'),
            ('"query_pre_attn_scalar": 8,', '"query_pre_attn_scalar": 32,'),
            ("(8,))", "(16,))"),
        ],
        "end": None,
    },
    "gptoss": {
        "file": "gptoss_tiny.py",
        "edits": [
            ('"hidden_size": 32, "num_attention_heads": 4,\n'
             '       "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 2, '
             '"sliding_window": 4,\n'
             '       "num_experts": 4, "experts_per_token": 2, "intermediate_size": 16,',
             '"hidden_size": 256, "num_attention_heads": 8,\n'
             '       "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 4, '
             '"sliding_window": 64,\n'
             '       "num_experts": 8, "experts_per_token": 2, "intermediate_size": 256,'),
            ('"context_length": 16}', '"context_length": 256}'),
        ],
        "end": 'print(f"sinks of layer 0',
    },
    "moe": {
        "file": "moe_tiny.py",
        "edits": [
            ('"emb_dim": 32, "n_heads": 4, "n_kv_groups": 2, "head_dim": 8,\n'
             '       "n_layers": 2, "num_experts": 4, "num_experts_per_tok": 2, '
             '"moe_hidden_dim": 24,\n'
             '       "context_length": 16,',
             '"emb_dim": 256, "n_heads": 8, "n_kv_groups": 2, "head_dim": 32,\n'
             '       "n_layers": 4, "num_experts": 8, "num_experts_per_tok": 2, '
             '"moe_hidden_dim": 384,\n'
             '       "context_length": 256,'),
            ("B, T = 4,", "B, T = 8,"),
        ],
        "end": "with torch.no_grad():\n    _, selected",
    },
}


def scaled(name, path, src):
    prog = PROGRAMS[name]
    edits = prog["edits"] + [
        ("text = f.read()[:20000]", "text = f.read()[:200000]"),
        ("import sys\n", "import sys\nimport time\n"),
        ("for step in range(steps + 1):\n",
         "t_start = None\nfor step in range(steps + 1):\n"
         "    if step == 2:\n        t_start = time.perf_counter()\n"),
    ]
    timing = 'print(f"ms/step {(time.perf_counter() - t_start) / (steps - 1) * 1e3:.1f}")\n'
    if prog["end"] is None:
        edits = edits + [None]
    else:
        edits.append((prog["end"], timing + prog["end"]))
    for edit in edits:
        if edit is None:
            src = src + timing
            continue
        old, new = edit
        if src.count(old) != 1:
            sys.exit("program_compare.py: error: %s changed; this script's edits no longer apply"
                     " (%r)" % (path, old))
        src = src.replace(old, new, 1)
    return src


def on_attn(src):
    return (src.replace("import torch.nn.functional as F", "import attn.nn.functional as F")
               .replace("import torch.nn as nn", "import attn.nn as nn")
               .replace("import torch\n", "import attn as torch\n"))


def run(path, steps, threads, pythonpath):
    """One run in a fresh process: (ms a step, its own peak resident size in bytes, its page
    faults, losses)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([sys.executable, path, DATA, str(steps)], env=env, stdout=out,
                             stderr=err, text=True)
        timer = threading.Timer(3600, p.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)  # the child's own rusage: its peak RSS
        finally:
            timer.cancel()
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if rc != 0:
        sys.exit("program_compare.py: %s failed (%d):\n%s" % (path, rc, stderr[-3000:]))
    ms = float(re.search(r"ms/step ([\d.]+)", stdout).group(1))
    losses = re.findall(r"loss [\d.]+", stdout)
    return ms, usage.ru_maxrss * 1024, usage.ru_minflt + usage.ru_majflt, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--program", choices=list(PROGRAMS) + ["all"], default="llama")
    a = ap.parse_args()
    if a.threads < 1 or a.reps < 1 or a.steps < 3:
        ap.error("--threads and --reps at least 1, --steps at least 3")
    attn_path = os.environ.get("PYTHONPATH", "")
    names = list(PROGRAMS) if a.program == "all" else [a.program]
    d = tempfile.mkdtemp(prefix="program_compare_")
    for name in names:
        compare(name, d, a, attn_path)


def compare(name, d, a, attn_path):
    path = os.path.join(PROGRAMS_DIR, PROGRAMS[name]["file"])
    with open(path, encoding="utf-8") as f:
        src = scaled(name, path, f.read())
    paths = {lib: os.path.join(d, "%s_%s.py" % (name, lib)) for lib in ("torch", "attn")}
    with open(paths["torch"], "w", encoding="utf-8") as f:
        f.write(src)
    with open(paths["attn"], "w", encoding="utf-8") as f:
        f.write(on_attn(src))
    print("%s (%s), %d thread%s" % (name, PROGRAMS[name]["file"], a.threads,
                                    "" if a.threads == 1 else "s"), flush=True)
    times = {"attn": [], "torch": []}
    peaks = {"attn": [], "torch": []}
    losses = {}
    for rep in range(a.reps):
        for lib in ("attn", "torch"):
            ms, rss, faults, loss = run(paths[lib], a.steps, a.threads,
                                        attn_path if lib == "attn" else "")
            times[lib].append(ms)
            peaks[lib].append(rss)
            losses[lib] = loss
            print("rep %d %-5s %8.1f ms a step, peak RSS %.2f GB, %d page faults"
                  % (rep + 1, lib, ms, rss / 1e9, faults), flush=True)
    # The printed losses (4 decimals) agree to float rounding: a last digit may differ.
    la = [float(v.split()[1]) for v in losses["attn"]]
    lt = [float(v.split()[1]) for v in losses["torch"]]
    if len(la) != len(lt) or any(abs(x - y) > 2e-4 * max(1.0, abs(y)) for x, y in zip(la, lt)):
        sys.exit("program_compare.py: %s: the losses differ: attn %s, torch %s"
                 % (name, losses["attn"], losses["torch"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    rss = {k: statistics.median(v) / 1e9 for k, v in peaks.items()}
    print("%s medians: attn %.1f ms, torch %.1f ms a step; torch / attn %.2fx; peak RSS attn "
          "%.2f GB, torch %.2f GB (losses: attn %s, torch %s)"
          % (name, med["attn"], med["torch"], med["torch"] / med["attn"], rss["attn"],
             rss["torch"], ", ".join(losses["attn"]), ", ".join(losses["torch"])), flush=True)

if __name__ == "__main__":
    main()
