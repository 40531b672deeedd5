#!/usr/bin/python3
"""Generation with a key/value cache: attn against PyTorch 2.15 on the CPU, tokens/s at batch 1
and 8, 1 and 2 threads, on a trained nanoGPT-config model and a random GPT-2-small-shaped one.

    /usr/bin/python3 bench/generate_compare.py --ckpt out --markdown /tmp/generate.md \\
        --json /tmp/generate.json                          # full: ~15-20 min on 2 cores
    /usr/bin/python3 bench/generate_compare.py --quick     # smoke run: tiny models, < 1 min

Models: (a) `nanogpt`: the attn checkpoint directory --ckpt (`attn train --out DIR`); without
--ckpt, `attn train` trains nanoGPT's shakespeare_char shape (6 layers, 6 heads, 384 wide, block
256) for --train-iters steps into a temporary directory (it only has to exist). (b) `gpt2`:
GPT-2 small's shape (12 layers, 12 heads, 768 wide, vocabulary 50257, block 1024, biases) with
attn's random initialisation, written once as an attn checkpoint (generate_attn.py
--make-random; --gpt2-ckpt DIR reuses one), so every contender loads the same weights.

Contenders, each run in a fresh process (its peak RSS is its own wait4 ru_maxrss) with
OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=N and --threads N:
    attn   attn.nn.GPT.generate(use_cache=True) (bench/generate_attn.py, --python-attn)
    cli    `attn generate --ckpt DIR ...` (batch 1 only; its own timing line: total only,
           no warm-up, no decode split)
    torch  bench/generate_torch.py: train_torch.py's model with its own key/value cache, under
           inference_mode (--python-torch, default .venv-bench/bin/python: torch 2.15)
    hf     transformers' GPT2LMHeadModel.generate (generate_torch.py --impl hf), only if
           transformers imports in --python-torch; skipped otherwise
All sample the same way: the prompt repeated --batch times, temperature --temperature, top-k
--top-k, --new-tokens new tokens after --warmup-tokens untimed ones, capped per model so that
the prompt, the warm-up and the new tokens fit its block (every step a cached one; --past-block
lifts the cap: the context is then cropped and the caches rebuilt every step). Repetitions alternate the
contenders (the order rotates every repetition); the tables show medians. Decode tokens/s leaves
out the prefill (the prompt's pass and the first token); total includes it; both count every
sequence's tokens (batch x steps / s). First / second half: the decode steps split in two, each
rated from its median step time; about equal when the cache is used (time per token does not
grow with the position), falling when the whole context is recomputed.

Before timing, a greedy check (top_k 1) on a tiny random model whose context overflows its block
(so the cache is rebuilt after cropping): attn's Python generate, the CLI and the torch reference
must produce the same tokens; it prints whether they agree (--skip-check leaves it out).

Target (report only): attn decode tokens/s >= 1.5x PyTorch's at batch 1. The exit status is 1
if a run failed or the greedy tokens disagree, else 0.
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

import gen_checkpoint as gc
from train_compare import (ROOT, fnum, git_describe, machine_info, md_table, parse_generate,
                           run_child, text_table, torch_version)

TARGET = 1.5
ORDER = ("attn", "cli", "torch", "hf")
NANOGPT = {"n-layer": 6, "n-head": 6, "n-embd": 384, "block-size": 256}
GPT2 = {"vocab-size": 50257, "block-size": 1024, "n-layer": 12, "n-head": 12, "n-embd": 768}
QUICK_NANOGPT = {"n-layer": 2, "n-head": 2, "n-embd": 64, "block-size": 64}
QUICK_GPT2 = {"vocab-size": 512, "block-size": 128, "n-layer": 2, "n-head": 2, "n-embd": 64}
CHECK_MODEL = {"vocab-size": 128, "block-size": 32, "n-layer": 2, "n-head": 2, "n-embd": 32}


def csv_ints(p, flag, text):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        p.error("%s: expected comma-separated integers, got %r" % (flag, text))
    if not vals or min(vals) < 1:
        p.error("%s: expected integers >= 1, got %r" % (flag, text))
    return vals


def csv_names(p, flag, text, allowed):
    vals = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in vals if v not in allowed]
    if not vals or bad:
        p.error("%s: expected names among %s, got %r" % (flag, ",".join(allowed), text))
    return vals


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tiny models, 24 new tokens, 1 repetition")
    p.add_argument("--ckpt", help="attn checkpoint of the nanoGPT-config model (default: train "
                                  "one briefly into a temporary directory)")
    p.add_argument("--gpt2-ckpt", help="the random GPT-2-shaped checkpoint to reuse (default: "
                                       "write one into a temporary directory)")
    p.add_argument("--models", default="nanogpt,gpt2")
    p.add_argument("--contenders", default="attn,cli,torch,hf")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--new-tokens", type=int, default=None, help="default 200 (--quick 24)")
    p.add_argument("--warmup-tokens", type=int, default=8)
    p.add_argument("--past-block", action="store_true",
                   help="generate --new-tokens even where prompt + tokens outgrow the model's "
                        "block (the caches are then rebuilt from the cropped context every step, "
                        "learned positions shift); by default the count is capped so that every "
                        "step is a cached one")
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 3, --quick 1)")
    p.add_argument("--prompt", default="ROMEO:")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-iters", type=int, default=10,
                   help="steps of the fallback `attn train` without --ckpt")
    p.add_argument("--data", default=os.path.join("..", "shared", "data", "tinyshakespeare.txt"))
    p.add_argument("--attn", help="the attn executable (default: BUILD/attn)")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                   help="attn's build: BUILD/attn, PYTHONPATH=BUILD/python (default: build)")
    p.add_argument("--python-attn", default="/usr/bin/python3")
    p.add_argument("--python-torch", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
    p.add_argument("--skip-check", action="store_true", help="no greedy agreement check")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child run")
    p.add_argument("--markdown", metavar="FILE", help="write the BENCHMARKS.md section to FILE")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="echo the children's output")
    a = p.parse_args(argv)
    a.model_list = csv_names(p, "--models", a.models, ("nanogpt", "gpt2"))
    a.contender_list = csv_names(p, "--contenders", a.contenders, ORDER)
    a.thread_list = csv_ints(p, "--threads", a.threads)
    a.batch_list = csv_ints(p, "--batches", a.batches)
    a.new_tokens = a.new_tokens if a.new_tokens is not None else (24 if a.quick else 200)
    a.reps = a.reps if a.reps is not None else (1 if a.quick else 3)
    if a.new_tokens < 4:
        p.error("--new-tokens must be >= 4 (two halves of decode steps)")
    if a.reps < 1 or a.warmup_tokens < 0 or a.top_k < 0 or a.train_iters < 1:
        p.error("--reps and --train-iters must be >= 1, --warmup-tokens and --top-k >= 0")
    if not (0 < a.temperature < float("inf")):
        p.error("--temperature must be positive and finite")
    if not a.prompt:
        p.error("--prompt must not be empty")
    for flag, path in (("--ckpt", a.ckpt), ("--gpt2-ckpt", a.gpt2_ckpt)):
        if path and not os.path.isfile(gc.model_path(path)):
            p.error("%s: no checkpoint %s" % (flag, gc.model_path(path)))
    for flag, py in (("--python-torch", a.python_torch), ("--python-attn", a.python_attn)):
        if not os.access(py, os.X_OK):
            p.error("%s: %s is not an executable%s" % (flag, py, " (scripts/bench_setup.sh "
                    "creates .venv-bench with torch 2.15)" if flag == "--python-torch" else ""))
    a.build = os.path.abspath(a.build_dir)
    a.attn = os.path.abspath(a.attn) if a.attn else os.path.join(a.build, "attn")
    return a


# ---- children ----------------------------------------------------------------------------------
def env_for(n, args):
    env = dict(os.environ, OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n),
               OPENBLAS_NUM_THREADS=str(n))
    env["PYTHONPATH"] = os.pathsep.join(
        x for x in (os.path.join(args.build, "python"), os.environ.get("PYTHONPATH")) if x)
    return env


def shown(cmd, n, args):
    def rel(c):
        return os.path.relpath(c, ROOT) if os.path.isabs(c) and c.startswith(ROOT + os.sep) else c
    env = "OMP_NUM_THREADS=%d MKL_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d" % (n, n, n)
    if "generate_attn.py" in " ".join(cmd):
        env = "PYTHONPATH=%s/python " % rel(args.build) + env
    return env + " " + " ".join(shlex.quote(rel(c)) for c in cmd)


def child_cmd(impl, ckpt, n, batch, args, new_tokens=None, top_k=None, tokens=False):
    new_tokens = new_tokens or args.new_tokens
    top_k = args.top_k if top_k is None else top_k
    if impl == "cli":
        return [args.attn, "generate", "--ckpt", ckpt, "--prompt", args.prompt,
                "--max-new-tokens", str(new_tokens), "--seed", str(args.seed), "--temperature",
                repr(args.temperature), "--top-k", str(top_k), "--threads", str(n)]
    script = "generate_attn.py" if impl == "attn" else "generate_torch.py"
    py = args.python_attn if impl == "attn" else args.python_torch
    cmd = [py, os.path.join(ROOT, "bench", script), "--ckpt", ckpt, "--prompt", args.prompt,
           "--batch", str(batch), "--max-new-tokens", str(new_tokens), "--temperature",
           repr(args.temperature), "--top-k", str(top_k), "--seed", str(args.seed),
           "--threads", str(n), "--warmup-tokens", str(args.warmup_tokens)]
    if impl == "hf":
        cmd += ["--impl", "hf"]
    return cmd + (["--tokens"] if tokens else [])


def run_one(impl, cmd, n, args, label):
    """Runs a child; returns (figures or None, run record)."""
    run = run_child(cmd, env_for(n, args), label, args.verbose, args.timeout)
    if impl == "cli":
        g = parse_generate(run["stderr"])
        fig = g and {"steps": g["tokens"], "batch": 1, "total_ms": g["ms"],
                     "total_tokens_per_s": g["tokens_per_s"], "stdout": run["stdout"]}
    else:
        fig = gc.parse_result(run["stdout"])
    if run["rc"] != 0 or not fig:
        why = (run["error"] or "exit status %s" % run["rc"]) if run["rc"] != 0 else "no figures"
        print("!! %s failed: %s\n%s" % (label, why, "\n".join(
            "   " + t for t in (run["stderr"] or run["stdout"])[-6:])), flush=True)
        return None, run
    return fig, run


def make_random(directory, spec, args, bias=True, seed=1337):
    cmd = [args.python_attn, os.path.join(ROOT, "bench", "generate_attn.py"), "--make-random",
           directory, "--seed", str(seed)] + [x for k, v in spec.items()
                                              for x in ("--" + k, str(v))]
    cmd += ["--bias"] if bias else []
    run = run_child(cmd, env_for(1, args), "make-random", args.verbose, args.timeout)
    if run["rc"] != 0:
        sys.exit("generate_compare.py: error: cannot write the random model:\n" +
                 "\n".join(run["stderr"][-6:]))
    return directory, shown(cmd, 1, args)


def train_nanogpt(directory, args):
    spec = QUICK_NANOGPT if args.quick else NANOGPT
    data = os.path.abspath(args.data)
    if not os.path.isfile(data):
        sys.exit("generate_compare.py: error: no data file %s (--data, or give --ckpt)" % data)
    cmd = [args.attn, "train", "--data", data, "--out", directory, "--max-iters",
           str(args.train_iters), "--lr-decay-iters", str(args.train_iters), "--warmup-iters",
           "0", "--eval-interval", str(args.train_iters), "--eval-iters", "2", "--batch-size",
           "4", "--no-progress", "--threads", str(max(args.thread_list))]
    cmd += [x for k, v in spec.items() for x in ("--" + k, str(v))]
    n = max(args.thread_list)
    print("training the nanoGPT-config model briefly:\n  " + shown(cmd, n, args), flush=True)
    run = run_child(cmd, env_for(n, args), "train", args.verbose, args.timeout)
    if run["rc"] != 0:
        sys.exit("generate_compare.py: error: attn train failed:\n" +
                 "\n".join(run["stderr"][-6:] or run["stdout"][-6:]))
    return directory, shown(cmd, n, args)


def available(args):
    """The contenders that can run here (cli needs the executable, hf transformers)."""
    out = list(args.contender_list)
    if "cli" in out and not os.access(args.attn, os.X_OK):
        print("-- cli skipped: %s is not an executable" % args.attn)
        out.remove("cli")
    if "hf" in out:
        r = subprocess.run([args.python_torch, "-c", "import transformers"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("-- hf skipped: transformers does not import in %s" % args.python_torch)
            out.remove("hf")
    return out


# ---- greedy agreement --------------------------------------------------------------------------
def greedy_check(workdir, contenders, args):
    """Same tokens from attn, the CLI, the torch reference (and hf) with top_k 1 on a tiny model.
    The context outgrows the block (so the caches are rebuilt after cropping), except for hf,
    which refuses a sequence longer than the model's block: it generates up to the block."""
    ckpt, _ = make_random(os.path.join(workdir, "check"), CHECK_MODEL, args, seed=7)
    _, _, chars = gc.load_meta(ckpt)
    n_new = 2 * CHECK_MODEL["block-size"]
    got = {}
    for impl in [c for c in ("torch", "attn", "cli", "hf") if c in contenders]:
        n = n_new if impl != "hf" else CHECK_MODEL["block-size"] - len(args.prompt)
        if n < 1:
            continue
        cmd = child_cmd(impl, ckpt, 1, 2 if impl != "cli" else 1, args, n, 1, True)
        fig, _ = run_one(impl, cmd, 1, args, "check " + impl)
        if fig is None:
            got[impl] = None
        elif impl == "cli":  # the text after the prompt, back to ids
            text = ("\n".join(fig["stdout"]) + "\n")[len(args.prompt):]
            got[impl] = [gc.encode(text[:n], chars)]
        else:
            got[impl] = fig["tokens"]
    ref = got.get("torch")
    ok = ref is not None and len(got) >= 2
    lines = []
    for impl, toks in got.items():
        same = toks is not None and ref is not None and \
            toks == [row[:len(toks[0])] for row in ref[:len(toks)]]
        ok = ok and same
        lines.append("%s: %s" % (impl, "failed" if toks is None else
                                 ("agrees" if same else "DIFFERS: %s" % toks[0][:16])))
    verdict = "greedy tokens (top_k 1, %d new%s, block %d, batch 2): %s -- %s" % (
        n_new, ", hf up to the block" if "hf" in got else "", CHECK_MODEL["block-size"],
        "AGREE" if ok else "DISAGREE", "; ".join(lines))
    print(verdict, flush=True)
    return ok, verdict


# ---- benchmark ---------------------------------------------------------------------------------
def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bench(models, contenders, args):
    rows, commands, failed = [], [], False
    for model, ckpt in models:
        block = gc.load_meta(ckpt)[1]["block_size"]
        new_tokens = args.new_tokens
        if not args.past_block:  # stay in the cached regime: prompt + warm-up + new <= block
            new_tokens = min(new_tokens, block - len(args.prompt) - args.warmup_tokens)
            if new_tokens < 4:
                sys.exit("generate_compare.py: error: the %s model's block (%d) leaves %d new "
                         "tokens after the prompt and warm-up" % (model, block, new_tokens))
        for n in args.thread_list:
            for batch in args.batch_list:
                impls = [c for c in contenders if c != "cli" or batch == 1]
                runs = {c: [] for c in impls}
                for rep in range(args.reps):
                    for impl in impls[rep % len(impls):] + impls[:rep % len(impls)]:
                        cmd = child_cmd(impl, ckpt, n, batch, args, new_tokens=new_tokens)
                        if rep == 0:
                            commands.append(shown(cmd, n, args))
                        label = "%s %s t=%d b=%d rep %d" % (model, impl, n, batch, rep + 1)
                        fig, run = run_one(impl, cmd, n, args, label)
                        failed |= fig is None
                        if fig:
                            fig.pop("stdout", None)
                            fig["peak_rss_mib"] = run["peak_rss_mib"]
                            runs[impl].append(fig)
                            print("  %-32s decode %s tok/s, total %s tok/s, %s MiB" % (
                                label, fnum(fig.get("decode_tokens_per_s"), ".1f"),
                                fnum(fig["total_tokens_per_s"], ".1f"),
                                fnum(run["peak_rss_mib"], ".0f")), flush=True)
                for impl in impls:
                    med = {k: median(f.get(k) for f in runs[impl]) for k in
                           ("decode_tokens_per_s", "total_tokens_per_s", "prefill_ms",
                            "first_half_tokens_per_s", "second_half_tokens_per_s",
                            "peak_rss_mib")}
                    rows.append(dict(med, model=model, threads=n, batch=batch, impl=impl,
                                     new_tokens=new_tokens,
                                     ok=len(runs[impl]), runs=args.reps, all=runs[impl]))
    return rows, commands, failed


def ratio(a, b):
    return a / b if a is not None and b else None


def table(rows):
    head = ["model", "threads", "batch", "new tokens", "contender", "decode tok/s", "total tok/s",
            "prefill ms", "1st half", "2nd half", "attn/this (decode)", "peak MiB", "runs"]
    out = []
    for r in rows:
        a = next((x for x in rows if x["impl"] == "attn" and all(
            x[k] == r[k] for k in ("model", "threads", "batch"))), None)
        rel = ratio(a and a["decode_tokens_per_s"], r["decode_tokens_per_s"])
        if r["impl"] == "cli":  # total only: compare totals
            rel = ratio(a and a["total_tokens_per_s"], r["total_tokens_per_s"])
        out.append([r["model"], str(r["threads"]), str(r["batch"]), str(r.get("new_tokens", "")),
                    r["impl"],
                    fnum(r["decode_tokens_per_s"], ".1f"), fnum(r["total_tokens_per_s"], ".1f"),
                    fnum(r["prefill_ms"], ".1f"), fnum(r["first_half_tokens_per_s"], ".1f"),
                    fnum(r["second_half_tokens_per_s"], ".1f"),
                    "-" if r["impl"] == "attn" or rel is None else "%.2fx%s" % (
                        rel, " (total)" if r["impl"] == "cli" else ""),
                    fnum(r["peak_rss_mib"], ".0f"), "%d/%d" % (r["ok"], r["runs"])])
    return head, out


def verdicts(rows):
    out = []
    for r in rows:
        if r["impl"] == "torch" and r["batch"] == 1:
            a = next((x for x in rows if x["impl"] == "attn" and x["model"] == r["model"] and
                      x["threads"] == r["threads"] and x["batch"] == 1), None)
            q = ratio(a and a["decode_tokens_per_s"], r["decode_tokens_per_s"])
            out.append("%s, %d thread(s), batch 1: attn %s PyTorch's decode tokens/s -> %s "
                       "(target >= %.1fx)" % (r["model"], r["threads"], fnum(q, ".2f") + "x",
                                              "n/a" if q is None else
                                              "MEETS" if q >= TARGET else "MISSES", TARGET))
    for r in rows:
        h1, h2 = r["first_half_tokens_per_s"], r["second_half_tokens_per_s"]
        if h1 and h2 and h2 / h1 < 0.8:
            out.append("%s %s t=%d b=%d: second-half decode %.0f%% of the first half's: "
                       "time per token grows with the position" %
                       (r["model"], r["impl"], r["threads"], r["batch"], 100 * h2 / h1))
    if not any("grows" in v for v in out):
        out.append("time per token does not grow with the position for any contender (second "
                   "half of the decode steps >= 80% of the first half's rate, median step "
                   "times): the caches work")
    return out


def markdown(args, info, rows, commands, check, setup):
    m = info["machine"]
    lines = ["## Generation with a KV cache (attn vs PyTorch %s)" % info["torch"], "",
             "Measured %s on %s (%s CPU(s)), PyTorch %s (%s), attn at git %s; load average at "
             "the start %s. %d new tokens after the prompt %r (+%d untimed warm-up tokens in "
             "the same process), temperature %g, top_k %d; median of %d runs, each contender "
             "in a fresh process, contenders alternating." % (
                 info["date"], m.get("model") or "unknown CPU", m.get("cpus"), info["torch"],
                 args.python_torch, info["git"],
                 " ".join("%.2f" % x for x in m.get("loadavg", ())) or "?", args.new_tokens,
                 args.prompt, args.warmup_tokens, args.temperature, args.top_k, args.reps), "",
             "Decode tok/s leaves the prefill out (the prompt's pass and the first token); total "
             "includes it; rates count every sequence (batch x steps / s). `cli` is `attn "
             "generate` (batch 1, its own total, no warm-up). 1st/2nd half: decode rate over "
             "each half of the steps (equal when the cache works). attn/this: attn's rate over "
             "the row's. Peak MiB: the process's ru_maxrss (Python, libraries and model "
             "included).", "", md_table(*table(rows)), ""]
    lines += ["- " + v for v in verdicts(rows)]
    if check:
        lines.append("- " + check)
    lines += ["", "Commands (from the repository root; first repetition of each):", "", "```",
              "/usr/bin/python3 " + " ".join(shlex.quote(x) for x in info["argv"])]
    lines += setup + commands + ["```"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="attn_generate_compare_")
    info = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": machine_info(), "git": git_describe(),
            "torch": torch_version(args.python_torch) or "?",
            "argv": ["bench/generate_compare.py"] + (sys.argv[1:] if argv is None else argv)}
    print("machine: %s, %s CPU(s), load %s; torch %s (%s); git %s; work dir %s" % (
        info["machine"].get("model"), info["machine"].get("cpus"),
        info["machine"].get("loadavg"), info["torch"], args.python_torch, info["git"], workdir),
        flush=True)
    contenders = available(args)
    ok, check = True, None
    if not args.skip_check:
        ok, check = greedy_check(workdir, contenders, args)
    models, setup = [], []
    if "nanogpt" in args.model_list:
        ckpt = args.ckpt
        if not ckpt:
            ckpt, cmd = train_nanogpt(os.path.join(workdir, "nanogpt"), args)
            setup.append(cmd)
        models.append(("nanogpt", ckpt))
    if "gpt2" in args.model_list:
        ckpt = args.gpt2_ckpt
        if not ckpt:
            ckpt, cmd = make_random(os.path.join(workdir, "gpt2"),
                                    QUICK_GPT2 if args.quick else GPT2, args)
            setup.append(cmd)
        models.append(("gpt2" if not args.quick else "gpt2-tiny", ckpt))
    rows, commands, failed = bench(models, contenders, args)
    print("\n" + text_table(*table(rows)))
    for v in verdicts(rows):
        print(v)
    if check:
        print(check)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(args, info, rows, commands, check, setup))
        print("wrote %s" % args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, "rows": rows, "check": check, "commands": setup + commands,
                       "models": models, "config": {k: v for k, v in vars(args).items()}},
                      f, indent=2)
            f.write("\n")
        print("wrote %s" % args.json)
    print("checkpoints and models: %s" % workdir)
    return 1 if failed or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
