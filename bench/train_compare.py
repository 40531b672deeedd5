#!/usr/bin/python3
"""Trains the same char-level GPT with `attn train` and with PyTorch (bench/train_torch.py:
eager and torch.compile), same flags, same machine, same session, and compares ms/iter, the
loss curves and peak memory on two models; optionally times `attn generate` with and without
the KV cache. Writes a markdown section for BENCHMARKS.md (--markdown FILE).

    /usr/bin/python3 bench/train_compare.py --markdown /tmp/train.md     # full: both models,
                                                # threads 1,2, attn + PyTorch 2.15 eager + compile
    /usr/bin/python3 bench/train_compare.py --quick --markdown /tmp/q.md # smoke run
    /usr/bin/python3 bench/train_compare.py --torch-python /usr/bin/python3 \\
        --contenders attn,eager --markdown /tmp/train113.md   # against Debian's PyTorch 1.13
    /usr/bin/python3 bench/train_compare.py --model nanogpt --generate --markdown /tmp/t.md

On the 2-core VM (a step of 6x384 takes ~3.7 s with 1 thread, nanogpt's ~60 ms) the full run
takes about 1.5 hours, --quick about 15 minutes, --model nanogpt alone about 30 minutes. The
machine should be otherwise idle: OpenMP's spinning workers (both programs') slow down many
times over when another process takes a core.

PyTorch: --torch-python runs train_torch.py (default: the python of .venv-bench, PyPI's torch
2.15, from `scripts/bench_setup.sh --print`, which installs it the first time; give
/usr/bin/python3 for Debian's 1.13, which has no torch.compile: its compile contender is
skipped). --contenders picks among attn, eager, compile (default all three).

Models (--model, default both), with their default run lengths (full / --quick):
    nanogpt  nanoGPT's CPU config: 4 layers, 4 heads, 128 wide, block 64, batch 12;
             500 steps (lr decay to 2000), eval every 250 over 50 batches / 200 steps,
             every 100 over 20
    6x384    6 layers, 6 heads, 384 wide, block 256, batch 16 (nanoGPT's shakespeare_char
             shape, smaller batch); 24 steps, eval every 12 over 4 batches (lr decay to
             2000) / 10 steps, every 5 over 2
Every other training flag has attn train's default. A training flag given here (--max-iters,
--n-layer, ...) overrides it for every model run (tiny shapes for smoke tests).

For each model and thread count N: attn train --threads N (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=
N), then each PyTorch contender at its own fastest thread layout. A layout AxB is A intra-op
threads and B BLAS threads (train_torch.py --threads A --blas-threads B, OMP_NUM_THREADS=A,
OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=B; see train_torch.py for what B sets under each torch).
For N = 1 the only layout is 1x1; for N > 1 (--torch-layouts best) NxN, 1xN, Nx1 and NxN with
OMP_WAIT_POLICY=PASSIVE. The search runs each layout for --search-iters steps (default per
model: 100 / 10, --quick 20 / 3; eval over 1 batch, a probe) and then trains the full run with
the fastest; --search-iters 0 trains every layout the full length and keeps the fastest.
torch.compile runs get --skip-steps min(10, steps/2): those first steps compile and are left
out of the median.

Figures come from the `done:` line each program prints last (ms_per_iter = median step time,
evaluation excluded), the loss curve from its `step N: train loss X, val loss Y` lines (the
report says whether every line equals attn's), peak memory from wait4()'s ru_maxrss of the
child. Target (report only; the exit status is 0 whenever every run produced its figures):
attn at least 1.3x faster than the best PyTorch configuration at every thread count, both models.

--generate uses the checkpoint of the first attn run and runs, for every thread count,
--gen-repeat times each, attn generate --ckpt DIR --prompt "ROMEO:" --max-new-tokens 500
--seed 1 --temperature 0.8 --top-k 200 --threads N [--no-cache], reporting median tokens/s.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

import train_report as report
from train_report import fnum, md_table, text_table  # noqa: F401 (bench scripts import them)
from train_runs import (ROOT, bench_python, git_describe, machine_info,  # noqa: F401
                        parse_done, parse_evals, parse_generate, run_child, show, thread_env,
                        torch_info, torch_version)

# (flag, default) of every training flag attn train and train_torch.py share, in this order.
TRAIN_FLAGS = (
    ("n-layer", 4), ("n-head", 4), ("n-embd", 128), ("block-size", 64), ("batch-size", 12),
    ("max-iters", 2000), ("lr", 1e-3), ("min-lr", 1e-4), ("warmup-iters", 100),
    ("lr-decay-iters", 2000), ("weight-decay", 0.1), ("beta2", 0.99), ("grad-clip", 1.0),
    ("dropout", 0.0), ("eval-interval", 250), ("eval-iters", 200), ("seed", 1337),
)
# Per model: its flags, the full run's length and --quick's; "search" is --search-iters.
MODELS = {
    "nanogpt": {
        "shape": {"n-layer": 4, "n-head": 4, "n-embd": 128, "block-size": 64, "batch-size": 12},
        "full": {"max-iters": 500, "lr-decay-iters": 2000, "eval-interval": 250,
                 "eval-iters": 50, "search": 100},
        "quick": {"max-iters": 200, "lr-decay-iters": 200, "eval-interval": 100,
                  "eval-iters": 20, "search": 20}},
    "6x384": {
        "shape": {"n-layer": 6, "n-head": 6, "n-embd": 384, "block-size": 256,
                  "batch-size": 16},
        "full": {"max-iters": 24, "lr-decay-iters": 2000, "eval-interval": 12,
                 "eval-iters": 4, "search": 4},
        "quick": {"max-iters": 10, "lr-decay-iters": 2000, "eval-interval": 5, "eval-iters": 2,
                  "search": 3}},
}
CONTENDERS = ("attn", "eager", "compile")
POSITIVE_FLAGS = ("n-layer", "n-head", "n-embd", "block-size", "batch-size", "max-iters",
                  "eval-interval", "eval-iters")

def torch_layouts(n, mode, fixed_blas):
    """(intra-op threads, BLAS threads, passive wait) layouts PyTorch tries for n threads. Debian's
    1.13 has two pools (OpenMP, OpenBLAS's pthreads) that spin against each other at NxN; PyPI's
    2.x has one libgomp pool shared with MKL, resized whenever the two counts differ. Which is
    fastest depends on the machine, hence the search."""
    if fixed_blas:
        return [(n, fixed_blas, False)]
    if mode == "same" or n == 1:
        return [(n, n, False)]
    return [(n, n, False), (1, n, False), (n, 1, False), (n, n, True)]


def layout_name(omp, blas, passive):
    return "%dx%d%s" % (omp, blas, " passive" if passive else "")


def fmt_flag_value(v):
    return repr(v) if isinstance(v, float) else str(v)


# ---- running -----------------------------------------------------------------------------------
def model_flags(args, model, kind):
    """The training flags of one run of model: its shape, its run length (kind "full", or
    "probe" for the layout search), every other flag's default, and what the command line
    gave, which wins."""
    preset = MODELS[model]
    length = preset["quick" if args.quick else "full"]
    values = dict(TRAIN_FLAGS)
    values.update(preset["shape"])
    values.update({k: v for k, v in length.items() if k != "search"})
    for flag, _ in TRAIN_FLAGS:
        given = getattr(args, flag.replace("-", "_"))
        if given is not None:
            values[flag] = given
    if kind == "probe":
        steps = args.search_iters if args.search_iters is not None else length["search"]
        values.update({"max-iters": steps, "eval-interval": steps, "eval-iters": 1})
    flags = []
    for flag, _ in TRAIN_FLAGS:
        flags += ["--" + flag, fmt_flag_value(values[flag])]
    flags.append("--bias" if args.bias else "--no-bias")
    return flags + ["--data", args.data_path], values


def model_label(values):
    return "%d layers, %d heads, %d wide, block %d, batch %d" % tuple(
        values[k] for k in ("n-layer", "n-head", "n-embd", "block-size", "batch-size"))


def run_one(args, impl, n, flags, values, layout, kind, ckpt=None):
    """One child: attn train, or train_torch.py (impl eager / compile) at layout. Returns its
    record (see train_report.py)."""
    omp, blas, passive = layout
    json_path = None
    if impl == "attn":
        cmd = [args.attn_path, "train"] + flags + ["--threads", str(n), "--out", ckpt]
    else:
        cmd = [args.torch_python, os.path.join(ROOT, "bench", "train_torch.py")] + flags + \
              ["--threads", str(omp), "--blas-threads", str(blas)]
        if impl == "compile":
            cmd += ["--compile", "--skip-steps", str(min(10, values["max-iters"] // 2))]
    shown = show(cmd, omp, blas, passive)
    if impl != "attn":  # figures the `done:` line lacks; not part of the command shown
        fd, json_path = tempfile.mkstemp(prefix="train_torch_", suffix=".json")
        os.close(fd)
        cmd += ["--json", json_path]
    name = layout_name(*layout)
    print("\n== %s, %d thread(s), %s, %s run\n%s" % (impl, n, name, kind, shown), flush=True)
    run = run_child(cmd, thread_env(omp, blas, passive), "%s %s" % (impl, name),
                    not args.no_echo, args.timeout)
    figures = parse_done(run["stdout"]) or parse_done(run["stderr"])
    if figures:
        figures["evals"] = parse_evals(run["stdout"]) or parse_evals(run["stderr"])
    rec = {"impl": impl, "cmd": shown, "rc": run["rc"], "wall_s": run["wall_s"],
           "peak_rss_mib": run["peak_rss_mib"], "figures": figures, "ckpt": ckpt,
           "layout": name, "kind": kind, "iters": values["max-iters"], "error": run["error"]}
    if json_path:
        try:
            with open(json_path) as f:
                extra = json.load(f)
            rec.update({k: extra.get(k) for k in ("blas", "blas_threads", "blas_threads_at_end",
                                                  "attention", "skipped_steps_ms")})
        except (OSError, ValueError):
            pass
        os.unlink(json_path)
    if run["rc"] != 0 or figures is None:
        rec["figures"] = None
        rec["error"] = run["error"] or ("exit status %s" % run["rc"] if run["rc"] != 0
                                        else "no 'done:' line in its output")
        tail = (run["stderr"] or run["stdout"])[-5:]
        print("!! %s with %d thread(s), %s failed: %s\n%s" %
              (impl, n, name, rec["error"], "\n".join("   " + t for t in tail)), flush=True)
    return rec


def choose_layouts(args, impl, n, model):
    """PyTorch contender impl with n threads on model: the layouts for its full runs (the
    fastest probe's, or every layout when there is no search) and the probes run."""
    layouts = torch_layouts(n, args.torch_layouts, args.torch_blas_threads)
    tried = []
    if len(layouts) > 1 and args.search_iters != 0:
        pflags, pvalues = model_flags(args, model, "probe")
        for layout in layouts:
            tried.append(run_one(args, impl, n, pflags, pvalues, layout, "probe"))
        ok = [(r, l) for r, l in zip(tried, layouts) if report.ms_of(r)]
        layouts = [min(ok, key=lambda x: report.ms_of(x[0]))[1]] if ok else layouts[:1]
    return layouts, tried


def fastest(runs):
    ok = [r for r in runs if report.ms_of(r)]
    return min(ok, key=report.ms_of) if ok else runs[0]


def run_generation(args, ckpt):
    gen, gen_commands, failed = [], [], False
    for n in args.thread_list:
        for cache in ("on", "off"):
            cmd = [args.attn_path, "generate", "--ckpt", ckpt, "--prompt", "ROMEO:",
                   "--max-new-tokens", str(args.gen_tokens), "--seed", "1", "--temperature",
                   "0.8", "--top-k", "200", "--threads", str(n)] + \
                  (["--no-cache"] if cache == "off" else [])
            shown = show(cmd, n)
            gen_commands.append(shown)
            print("\n== generate, %d thread(s), cache %s\n%s" % (n, cache, shown), flush=True)
            figs = []
            for rep in range(args.gen_repeat):
                # The generated text goes to stdout: echo it for the first run only.
                run = run_child(cmd, thread_env(n), "gen t=%d %s" % (n, cache),
                                not args.no_echo and rep == 0, args.timeout)
                f = parse_generate(run["stderr"])
                if run["rc"] != 0 or f is None or f["cache"] != cache:
                    failed = True
                    print("!! generate failed (status %s, figures %s)\n%s" %
                          (run["rc"], f, "\n".join("   " + t for t in run["stderr"][-5:])),
                          flush=True)
                    continue
                figs.append(f)
            med = None
            if figs:
                med = {"tokens": figs[0]["tokens"], "cache": cache,
                       "ms": statistics.median(x["ms"] for x in figs),
                       "tokens_per_s": statistics.median(x["tokens_per_s"] for x in figs)}
            gen.append({"threads": n, "cache": cache, "cmd": shown, "runs": args.gen_repeat,
                        "ok": len(figs), "figures": med, "all": figs})
    return gen, gen_commands, failed


# ---- main --------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--model", choices=("nanogpt", "6x384", "both"), default="both")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    p.add_argument("--contenders", default="attn,eager,compile",
                   help="comma-separated, among attn, eager, compile (default all)")
    p.add_argument("--attn", help="the attn executable (default: build/attn in the repository)")
    p.add_argument("--torch-python", "--python", dest="torch_python", metavar="PATH",
                   help="the Python that runs train_torch.py (default: .venv-bench's, PyTorch "
                        "2.15, from scripts/bench_setup.sh --print; /usr/bin/python3: 1.13)")
    p.add_argument("--data", default=os.path.join("..", "shared", "data", "tinyshakespeare.txt"))
    p.add_argument("--quick", action="store_true", help="smoke run: the models' short lengths")
    for flag, default in TRAIN_FLAGS:
        p.add_argument("--" + flag, type=type(default), default=None,
                       help="for every model (default: the model's, else %s)" % default)
    p.add_argument("--bias", dest="bias", action="store_true", default=False)
    p.add_argument("--no-bias", dest="bias", action="store_false")
    p.add_argument("--torch-layouts", choices=("best", "same"), default="best",
                   help="best (default): search NxN, 1xN, Nx1, NxN passive for N > 1; "
                        "same: NxN only")
    p.add_argument("--torch-blas-threads", type=int, default=None, metavar="K",
                   help="PyTorch only at N x K (overrides --torch-layouts)")
    p.add_argument("--search-iters", type=int, default=None, metavar="K",
                   help="steps of each layout's probe (default: the model's; 0: train every "
                        "layout the full length)")
    p.add_argument("--rounds", type=int, default=1, metavar="R",
                   help="full runs of every contender, in R interleaved rounds; each "
                        "contender's figure is its fastest round (default 1)")
    p.add_argument("--out-dir", help="where attn train writes its checkpoints "
                                     "(default: a new directory under /tmp)")
    p.add_argument("--generate", action="store_true", help="also time attn generate")
    p.add_argument("--gen-tokens", type=int, default=500)
    p.add_argument("--gen-repeat", type=int, default=3)
    p.add_argument("--ckpt", help="checkpoint for --generate (default: the first attn run's)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per child run")
    p.add_argument("--markdown", metavar="FILE", help="write the markdown section to FILE")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("-q", "--no-echo", action="store_true", help="do not echo the children's output")
    a = p.parse_args(argv)
    try:
        a.thread_list = [int(x) for x in a.threads.split(",") if x.strip()]
    except ValueError:
        p.error("--threads: expected comma-separated integers, got %r" % a.threads)
    if not a.thread_list or min(a.thread_list) < 1:
        p.error("--threads: expected counts >= 1, got %r" % a.threads)
    a.contender_list = [c.strip() for c in a.contenders.split(",") if c.strip()]
    bad = [c for c in a.contender_list if c not in CONTENDERS]
    if bad or not a.contender_list:
        p.error("--contenders: expected some of %s, got %r" % (",".join(CONTENDERS),
                                                             a.contenders))
    for flag, _ in TRAIN_FLAGS:
        v = getattr(a, flag.replace("-", "_"))
        least = 1 if flag in POSITIVE_FLAGS else 0
        if v is not None and v < least:
            p.error("--%s must be >= %d" % (flag, least))
    if a.torch_blas_threads is not None and a.torch_blas_threads < 1:
        p.error("--torch-blas-threads must be >= 1")
    if a.search_iters is not None and a.search_iters < 0:
        p.error("--search-iters must be >= 0")
    if a.search_iters is not None and 0 < a.search_iters < 2:
        p.error("--search-iters must be 0 or >= 2")
    if a.gen_tokens < 1 or a.gen_repeat < 1:
        p.error("--gen-tokens and --gen-repeat must be >= 1")
    if a.timeout is not None and a.timeout <= 0:
        p.error("--timeout must be > 0")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    a.models = list(MODELS) if a.model == "both" else [a.model]
    return a


def main(argv=None):
    args = parse_args(argv)
    # The children run in the repository root; paths given are taken from the current directory.
    args.attn_path = os.path.abspath(args.attn) if args.attn else os.path.join(ROOT, "build",
                                                                               "attn")
    args.data_path = os.path.abspath(args.data)
    if not os.path.isfile(args.data_path):
        sys.exit("train_compare.py: error: no data file %s" % args.data_path)
    if "attn" in args.contender_list and not os.access(args.attn_path, os.X_OK):
        sys.exit("train_compare.py: error: %s is not an executable (build it, or --attn PATH)"
                 % args.attn_path)
    torch_contenders = [c for c in args.contender_list if c != "attn"]
    tinfo = {"version": None, "blas": None}
    if torch_contenders:
        args.torch_python = args.torch_python or bench_python()
        tinfo = torch_info(args.torch_python)
        if tinfo["version"] is None:
            sys.exit("train_compare.py: error: %s does not import torch" % args.torch_python)
        if "compile" in torch_contenders and tinfo["version"].startswith("1."):
            print("torch %s has no torch.compile: the compile contender is skipped" %
                  tinfo["version"], flush=True)
            torch_contenders.remove("compile")
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="attn_train_compare_")
    os.makedirs(out_dir, exist_ok=True)

    search = ("layouts searched with probes of %s steps (1 evaluation batch), the full run at "
              "the fastest" % ", ".join("%s %d" % (m, args.search_iters or MODELS[m][
                  "quick" if args.quick else "full"]["search"]) for m in args.models)
              if args.search_iters != 0 else "every layout trained the full length")
    info = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": machine_info(), "git": git_describe(), "torch": tinfo,
            "torch_python": args.torch_python and (
                os.path.relpath(args.torch_python, ROOT)
                if args.torch_python.startswith(ROOT + os.sep) else args.torch_python),
            "search_note": "Search: %s." % search if max(args.thread_list) > 1 else "",
            "rounds": args.rounds,
            "argv": ["bench/train_compare.py"] + (sys.argv[1:] if argv is None else list(argv))}
    print("machine: %s, %s CPU(s), load average %s; torch %s (%s) from %s; git %s" %
          (info["machine"].get("model"), info["machine"].get("cpus"),
           info["machine"].get("loadavg"), tinfo["version"], tinfo["blas"], args.torch_python,
           info["git"]), flush=True)

    results, commands, failed, first_ckpt = [], [], False, None
    for model in args.models:
        flags, values = model_flags(args, model, "full")
        for n in args.thread_list:
            entry = {"model": model, "label": model_label(values), "threads": n, "attn": None,
                     "torch": {}, "steps": values["max-iters"],
                     "preset": all(values[k] == v for k, v in MODELS[model]["shape"].items()),
                     "eval": (values["eval-interval"], values["eval-iters"])}
            # The PyTorch layouts first, then --rounds rounds of full runs, one of each contender
            # after another, so that a slow spell of a shared machine falls on all of them; each
            # contender's figure is its fastest round.
            layouts, tried = {}, {}
            for c in torch_contenders:
                layouts[c], tried[c] = choose_layouts(args, c, n, model)
            attn_runs = []
            for rnd in range(args.rounds):
                if "attn" in args.contender_list:
                    ckpt = os.path.join(out_dir, "%s_threads%d%s" %
                                        (model, n, "_round%d" % (rnd + 1) if rnd else ""))
                    run = run_one(args, "attn", n, flags, values, (n, n, False), "full", ckpt)
                    run["round"], run["rounds"] = rnd + 1, args.rounds
                    attn_runs.append(run)
                    if rnd == 0:
                        commands.append(run["cmd"])
                    failed |= run["figures"] is None
                    if first_ckpt is None and run["figures"]:
                        first_ckpt = ckpt
                for c in torch_contenders:
                    for layout in layouts[c]:
                        run = run_one(args, c, n, flags, values, layout, "full")
                        run["round"], run["rounds"] = rnd + 1, args.rounds
                        tried[c].append(run)
                        if rnd == 0:
                            commands.append(run["cmd"])
            if attn_runs:
                entry["attn"] = dict(fastest(attn_runs))
                entry["attn"]["all_rounds"] = attn_runs
            else:
                entry["attn"] = {"skipped": True, "figures": None}
            for c in torch_contenders:
                full = [r for r in tried[c] if r["kind"] == "full"]
                entry["torch"][c] = {"best": fastest(full), "tried": tried[c]}
                failed |= any(r["figures"] is None for r in tried[c])
            results.append(entry)

    gen, gen_commands = [], []
    if args.generate:
        ckpt = args.ckpt or first_ckpt
        if ckpt is None:
            print("!! --generate: no checkpoint (no attn train run succeeded; give --ckpt)")
            failed = True
        else:
            gen, gen_commands, gen_failed = run_generation(args, ckpt)
            failed |= gen_failed

    shown = [c for c in ("eager", "compile") if c in torch_contenders]
    print("\n" + report.text_table(report.main_head(shown), report.main_rows(results, shown)))
    if report.layout_rows(results):
        print("\nPyTorch thread layouts:\n" +
              report.text_table(report.LAYOUT_HEAD, report.layout_rows(results)))
    for v in report.verdicts(results):
        print(v)
    if gen:
        print("\n" + report.text_table(report.GEN_HEAD, report.generation_rows(gen)))
        for s in report.generation_summary(gen):
            print(s)
    print("checkpoints: %s" % out_dir)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.markdown(info, results, shown, commands, gen, gen_commands,
                                    args.gen_tokens))
        print("wrote %s" % args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, "train": results, "generate": gen,
                       "config": {k: v for k, v in vars(args).items()}}, f, indent=2)
            f.write("\n")
        print("wrote %s" % args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
