#!/usr/bin/python3
"""Trains the same char-level GPT with `attn train` and with PyTorch (bench/train_torch.py), same
flags, same machine, same session, same thread counts, and compares ms/iter, final losses and peak
memory; optionally times `attn generate` with and without the KV cache.

    /usr/bin/python3 bench/train_compare.py                        # threads 1 and 2, 2000 iters
    /usr/bin/python3 bench/train_compare.py --quick                # 200 iters, smoke run
    /usr/bin/python3 bench/train_compare.py --generate --markdown /tmp/train.md

For every thread count N, attn runs first and PyTorch right after it. Both get the same flags
(every training flag is passed explicitly, so the commands in the report are complete). attn gets
--threads N and OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=N. PyTorch 1.13 as Debian builds it has two
thread pools, OpenMP for its own kernels and a pthread OpenBLAS for matmuls, and with both at N
(what --threads N gives) 2N workers spin against each other on N cores. So for N > 1 it runs in
three layouts by default (--torch-layouts best): OpenMP N + OpenBLAS N, OpenMP 1 + OpenBLAS N,
OpenMP N + OpenBLAS 1 (train_torch.py --threads A --blas-threads B, with OMP_NUM_THREADS=A
OPENBLAS_NUM_THREADS=B). The table compares with the fastest and lists them all. Figures come
from the `done:` line each program prints last:
    done: iters=N ms_per_iter=X train_loss=Y val_loss=Z tokens_per_s=W
(ms_per_iter is each program's median step time, evaluation excluded). Peak memory is the
child's ru_maxrss from wait4(), the same measure for both programs; for PyTorch it includes the
interpreter and torch's libraries (the JSON of train_torch.py records the RSS before training).
Both programs draw the same initial weights and batches from the seed, so their evaluation lines
(`step N: train loss X, val loss Y`) should agree closely; the table shows the largest difference.

--generate trains nothing more: it uses the checkpoint `attn train --out DIR` wrote in the first
thread count's run and runs, for every thread count, --gen-repeat times each,
    attn generate --ckpt DIR --prompt "ROMEO:" --max-new-tokens 500 --seed 1 --temperature 0.8
                  --top-k 200 --threads N [--no-cache]
parsing the line attn generate prints last on stderr:
    generate: tokens=N ms=X tokens_per_s=Y cache=on|off
and reports the median tokens/s of each.

Targets checked (report only, the exit status is 0 whenever every run produced its figures):
attn's final val loss <= 1.90 and torch ms/iter / attn ms/iter >= 2.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

VAL_LOSS_TARGET = 1.90
SPEEDUP_TARGET = 2.0

# (flag, default) of every training flag attn train and train_torch.py share, in this order.
TRAIN_FLAGS = (
    ("n-layer", 4), ("n-head", 4), ("n-embd", 128), ("block-size", 64), ("batch-size", 12),
    ("max-iters", 2000), ("lr", 1e-3), ("min-lr", 1e-4), ("warmup-iters", 100),
    ("lr-decay-iters", 2000), ("weight-decay", 0.1), ("beta2", 0.99), ("grad-clip", 1.0),
    ("dropout", 0.0), ("eval-interval", 250), ("eval-iters", 200), ("seed", 1337),
)
QUICK_ITERS = 200
QUICK_EVAL_ITERS = 20

_NUM = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
DONE_RE = re.compile(r"^done: iters=(\d+) ms_per_iter=%s train_loss=%s val_loss=%s "
                     r"tokens_per_s=%s\s*$" % (_NUM, _NUM, _NUM, _NUM))
EVAL_RE = re.compile(r"^step (\d+): train loss %s, val loss %s\s*$" % (_NUM, _NUM))
GEN_RE = re.compile(r"^generate: tokens=(\d+) ms=%s tokens_per_s=%s cache=(on|off)\s*$" %
                    (_NUM, _NUM))


def parse_done(lines):
    """The figures of the last `done:` line among lines, or None."""
    for line in reversed(lines):
        m = DONE_RE.match(line.strip())
        if m:
            return {"iters": int(m.group(1)), "ms_per_iter": float(m.group(2)),
                    "train_loss": float(m.group(3)), "val_loss": float(m.group(4)),
                    "tokens_per_s": float(m.group(5))}
    return None


def parse_evals(lines):
    """{step: (train loss, val loss)} of the `step N: train loss X, val loss Y` lines."""
    out = {}
    for line in lines:
        m = EVAL_RE.match(line.strip())
        if m:
            out[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return out


def max_eval_gap(a, t):
    """Largest |attn - torch| over the evaluations both runs printed, or None."""
    if not a or not t or not a.get("evals") or not t.get("evals"):
        return None
    common = set(a["evals"]) & set(t["evals"])
    if not common:
        return None
    return max(abs(a["evals"][s][i] - t["evals"][s][i]) for s in common for i in (0, 1))


def parse_generate(lines):
    """The figures of the last `generate:` line among lines, or None."""
    for line in reversed(lines):
        m = GEN_RE.match(line.strip())
        if m:
            return {"tokens": int(m.group(1)), "ms": float(m.group(2)),
                    "tokens_per_s": float(m.group(3)), "cache": m.group(4)}
    return None


# ---- running a child ---------------------------------------------------------------------------
def run_child(cmd, env, label, echo=True, timeout=None):
    """Runs cmd, echoing its output line by line with a label. Returns a dict with rc, stdout
    and stderr lines, wall seconds and the child's own peak RSS (wait4's ru_maxrss, MiB)."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                cwd=ROOT, text=True, errors="replace", bufsize=1)
    except OSError as e:
        return {"rc": None, "error": "cannot start %s: %s" % (cmd[0], e), "stdout": [],
                "stderr": [], "wall_s": 0.0, "peak_rss_mib": None}
    out = {"stdout": [], "stderr": []}

    def pump(stream, key):
        for line in stream:
            line = line.rstrip("\n")
            out[key].append(line)
            if echo:
                print("  [%s%s] %s" % (label, "" if key == "stdout" else " err", line),
                      flush=True)
        stream.close()

    readers = [threading.Thread(target=pump, args=(proc.stdout, "stdout"), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "stderr"), daemon=True)]
    for r in readers:
        r.start()
    timer = None
    if timeout:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
    # wait4 rather than Popen.wait: it returns this child's own resource usage (RUSAGE_CHILDREN
    # would give the maximum over every child waited for so far).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if timer:
        timer.cancel()
    for r in readers:
        r.join()
    return {"rc": proc.returncode, "error": None, "stdout": out["stdout"],
            "stderr": out["stderr"], "wall_s": time.perf_counter() - t0,
            "peak_rss_mib": usage.ru_maxrss / 1024.0}


def thread_env(n, blas=None):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(n)
    env["OPENBLAS_NUM_THREADS"] = str(n if blas is None else blas)
    return env


def env_prefix(n, blas=None):
    return "OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d" % (n, n if blas is None else blas)


def show(cmd, n, blas=None):
    """cmd as a shell line run from the repository root, with its thread environment."""
    def rel(c):
        if os.path.isabs(c) and c.startswith(ROOT + os.sep):
            return os.path.relpath(c, ROOT)
        return c
    return env_prefix(n, blas) + " " + " ".join(shlex.quote(rel(c)) for c in cmd)


def torch_layouts(n, mode, fixed_blas):
    """(OpenMP threads, OpenBLAS threads) layouts PyTorch runs with for n threads. torch 1.13 on
    Debian keeps two pools: OpenMP for its own kernels and pthread OpenBLAS for matmuls, so
    --threads n alone gives 2n workers that spin against each other on n cores. 'best' also
    tries each pool alone at n (the other at 1) and the table reports the fastest."""
    if fixed_blas:
        return [(n, fixed_blas)]
    if mode == "same" or n == 1:
        return [(n, n)]
    return [(n, n), (1, n), (n, 1)]


def fmt_flag_value(v):
    return repr(v) if isinstance(v, float) else str(v)


# ---- machine -----------------------------------------------------------------------------------
def machine_info():
    info = {"model": None, "cpus": os.cpu_count()}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name" and info["model"] is None:
                info["model"] = value.strip()
            elif key.strip() == "CPU(s)":
                info["cpus"] = int(value.strip())
            elif key.strip() == "Core(s) per socket":
                info["cores_per_socket"] = int(value.strip())
            elif key.strip() == "Socket(s)":
                info["sockets"] = int(value.strip())
    except (OSError, ValueError):
        pass
    try:
        info["loadavg"] = os.getloadavg()
    except OSError:
        pass
    return info


def git_describe():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return rev + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def torch_version(python):
    try:
        return subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# ---- report ------------------------------------------------------------------------------------
def fnum(x, spec):
    return "-" if x is None else format(x, spec)


def train_rows(results):
    rows = []
    for r in results:
        a, t = r["attn"], r["torch"]
        am, tm = a["figures"], t["figures"]
        ratio = (tm["ms_per_iter"] / am["ms_per_iter"]
                 if am and tm and am["ms_per_iter"] > 0 else None)

        def ms(rec, f):
            if f:
                return fnum(f["ms_per_iter"], ".2f")
            return "skipped" if rec.get("skipped") else "failed"

        rows.append([
            str(r["threads"]), ms(a, am), ms(t, tm), t.get("layout") or "-",
            fnum(ratio, ".2f") + ("x" if ratio is not None else ""),
            fnum(am and am["val_loss"], ".4f"), fnum(tm and tm["val_loss"], ".4f"),
            fnum(max_eval_gap(am, tm), ".4f"),
            fnum(a["peak_rss_mib"], ".1f"), fnum(t["peak_rss_mib"], ".1f"),
        ])
    return rows


TRAIN_HEAD = ["threads", "attn ms/iter", "torch ms/iter", "torch layout", "torch/attn",
              "attn val loss", "torch val loss", "max loss diff", "attn peak MiB",
              "torch peak MiB"]
LAYOUT_HEAD = ["threads", "torch layout", "torch ms/iter", "torch/attn", "torch peak MiB"]


def layout_rows(results):
    """Every PyTorch thread layout tried, where more than one was."""
    rows = []
    for r in results:
        layouts = r.get("torch_layouts") or []
        if len(layouts) < 2:
            continue
        am = r["attn"]["figures"]
        for t in layouts:
            tm = t["figures"]
            ratio = (tm["ms_per_iter"] / am["ms_per_iter"]
                     if am and tm and am["ms_per_iter"] > 0 else None)
            rows.append([str(r["threads"]), t["layout"],
                         fnum(tm and tm["ms_per_iter"], ".2f") if tm else "failed",
                         fnum(ratio, ".2f") + ("x" if ratio is not None else ""),
                         fnum(t["peak_rss_mib"], ".1f")])
    return rows
GEN_HEAD = ["threads", "cache", "tokens", "ms (median)", "tokens/s (median)", "runs"]


def gen_rows(gen):
    rows = []
    for g in gen:
        f = g["figures"]
        rows.append([str(g["threads"]), g["cache"], str(f["tokens"]) if f else "-",
                     fnum(f and f["ms"], ".1f"), fnum(f and f["tokens_per_s"], ".1f"),
                     "%d/%d" % (g["ok"], g["runs"])])
    return rows


def text_table(head, rows):
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(len(head))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def md_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def verdicts(results, iters):
    out = []
    for r in results:
        am, tm = r["attn"]["figures"], r["torch"]["figures"]
        if am:
            ok = am["val_loss"] <= VAL_LOSS_TARGET
            out.append("threads %d: attn val loss %.4f at %d iterations %s %.2f: %s" %
                       (r["threads"], am["val_loss"], am["iters"], "<=" if ok else ">",
                        VAL_LOSS_TARGET, ("met" if ok else "missed") +
                        ("" if am["iters"] == 2000 else " (the target is for 2000 iterations)")))
        if am and tm and am["ms_per_iter"] > 0:
            ratio = tm["ms_per_iter"] / am["ms_per_iter"]
            out.append("threads %d: torch/attn ms per iteration %.2fx %s %.1fx: %s "
                       "(against PyTorch's fastest layout tried, %s)" %
                       (r["threads"], ratio, ">=" if ratio >= SPEEDUP_TARGET else "<",
                        SPEEDUP_TARGET, "met" if ratio >= SPEEDUP_TARGET else "missed",
                        r["torch"].get("layout")))
    return out


def generation_summary(gen):
    out = []
    by = {(g["threads"], g["cache"]): g["figures"] for g in gen}
    for n in sorted({g["threads"] for g in gen}):
        on, off = by.get((n, "on")), by.get((n, "off"))
        if on and off and off["tokens_per_s"] > 0:
            out.append("threads %d: KV cache speeds generation up %.2fx (%.1f vs %.1f tokens/s)"
                       % (n, on["tokens_per_s"] / off["tokens_per_s"], on["tokens_per_s"],
                          off["tokens_per_s"]))
    return out


def markdown(args, info, results, gen, commands, gen_commands):
    m = info["machine"]
    cores = m.get("cpus")
    lines = ["## Training (attn train vs PyTorch)", ""]
    lines.append("Measured %s on %s (%s CPU(s)%s), PyTorch %s, attn at git %s. Load average "
                 "at the start: %s. attn gets `--threads N` (one OpenMP pool, OpenBLAS "
                 "single-threaded inside it). PyTorch 1.13 (Debian) has two pools, OpenMP for "
                 "its kernels and pthread OpenBLAS for matmuls; its layout `ompA+blasB` means "
                 "`--threads A --blas-threads B` with OMP_NUM_THREADS=A OPENBLAS_NUM_THREADS=B, "
                 "and the main table shows the fastest layout tried with at most N threads per "
                 "pool. For each N attn runs first, then PyTorch's layouts." %
                 (info["date"], m.get("model") or "unknown CPU", cores,
                  ", %d core(s) per socket x %d socket(s)" % (m["cores_per_socket"],
                                                             m["sockets"])
                  if "cores_per_socket" in m and "sockets" in m else "",
                  info["torch_version"], info["git"],
                  " ".join("%.2f" % x for x in m.get("loadavg", ())) or "unknown"))
    lines.append("")
    lines.append("ms/iter is each program's median training-step time (evaluation excluded); "
                 "losses are the mean over %d evaluation batches at the last step; peak MiB is "
                 "the process's ru_maxrss (PyTorch's includes the Python interpreter and the "
                 "torch libraries). Both programs draw the same initial weights and batches from "
                 "the same seed; max loss diff is the largest difference between their "
                 "train or val losses over the evaluations along the run." % args.eval_iters)
    lines.append("")
    lines.append(md_table(TRAIN_HEAD, train_rows(results)))
    lines.append("")
    if layout_rows(results):
        lines.append("Every PyTorch thread layout tried:")
        lines.append("")
        lines.append(md_table(LAYOUT_HEAD, layout_rows(results)))
        lines.append("")
    for v in verdicts(results, args.max_iters):
        lines.append("- " + v)
    lines.append("")
    lines.append("Commands (from the repository root):")
    lines.append("")
    lines.append("```")
    lines.append("/usr/bin/python3 " + " ".join(shlex.quote(a) for a in info["argv"]))
    lines.extend(commands)
    lines.append("```")
    if gen:
        lines.append("")
        lines.append("### Generation (attn generate, %d new tokens)" % args.gen_tokens)
        lines.append("")
        lines.append("Median of %d runs each; tokens/s as attn generate reports it." %
                     args.gen_repeat)
        lines.append("")
        lines.append(md_table(GEN_HEAD, gen_rows(gen)))
        lines.append("")
        for s in generation_summary(gen):
            lines.append("- " + s)
        lines.append("")
        lines.append("```")
        lines.extend(gen_commands)
        lines.append("```")
    return "\n".join(lines) + "\n"


# ---- main --------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    p.add_argument("--attn", help="the attn executable (default: build/attn in the repository)")
    p.add_argument("--python", default="/usr/bin/python3", help="Python with torch 1.13")
    p.add_argument("--data", default=os.path.join("..", "shared", "data", "tinyshakespeare.txt"))
    p.add_argument("--quick", action="store_true",
                   help="smoke run: %d iterations, %d evaluation batches, eval interval 100"
                        % (QUICK_ITERS, QUICK_EVAL_ITERS))
    for flag, default in TRAIN_FLAGS:
        p.add_argument("--" + flag, type=type(default), default=None,
                       help="passed to both programs (default %s)" % default)
    p.add_argument("--bias", dest="bias", action="store_true", default=False)
    p.add_argument("--no-bias", dest="bias", action="store_false")
    p.add_argument("--only", choices=("attn", "torch"), help="run just one of the two")
    p.add_argument("--torch-layouts", choices=("best", "same"), default="best",
                   help="PyTorch's thread pools for N threads. same: OpenMP N and OpenBLAS N "
                        "(--threads N alone; 2N workers on N cores). best (default): also "
                        "OpenMP 1 + OpenBLAS N and OpenMP N + OpenBLAS 1, report the fastest")
    p.add_argument("--torch-blas-threads", type=int, default=None, metavar="K",
                   help="run PyTorch only with OpenMP N + OpenBLAS K (overrides --torch-layouts)")
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
    defaults = dict(TRAIN_FLAGS)
    if a.quick:
        defaults.update({"max-iters": QUICK_ITERS, "lr-decay-iters": QUICK_ITERS,
                         "eval-iters": QUICK_EVAL_ITERS, "eval-interval": 100})
    for flag, _ in TRAIN_FLAGS:
        attr = flag.replace("-", "_")
        if getattr(a, attr) is None:
            setattr(a, attr, defaults[flag])
    return a


def main(argv=None):
    args = parse_args(argv)
    # The children run in the repository root; paths given are taken from the current directory.
    attn = os.path.abspath(args.attn) if args.attn else os.path.join(ROOT, "build", "attn")
    data = os.path.abspath(args.data)
    if not os.path.isfile(data):
        sys.exit("train_compare.py: error: no data file %s" % data)
    if args.only != "torch" and not os.access(attn, os.X_OK):
        sys.exit("train_compare.py: error: %s is not an executable (build it, or --attn PATH)"
                 % attn)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="attn_train_compare_")
    os.makedirs(out_dir, exist_ok=True)

    flags = []
    for flag, _ in TRAIN_FLAGS:
        flags += ["--" + flag, fmt_flag_value(getattr(args, flag.replace("-", "_")))]
    flags.append("--bias" if args.bias else "--no-bias")
    flags += ["--data", data]

    info = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": machine_info(), "git": git_describe(),
            "torch_version": torch_version(args.python), "argv": ["bench/train_compare.py"] +
            (sys.argv[1:] if argv is None else list(argv))}
    print("machine: %s, %s CPU(s), load average %s; torch %s; git %s" %
          (info["machine"].get("model"), info["machine"].get("cpus"),
           info["machine"].get("loadavg"), info["torch_version"], info["git"]), flush=True)

    results, commands, failed = [], [], False
    first_ckpt = None
    for n in args.thread_list:
        entry = {"threads": n}
        jobs = [("attn", n, None)]
        jobs += [("torch", omp, blas) for omp, blas in
                 torch_layouts(n, args.torch_layouts, args.torch_blas_threads)]
        for impl, omp, blas in jobs:
            if args.only and args.only != impl:
                entry[impl] = {"figures": None, "peak_rss_mib": None, "rc": None,
                               "skipped": True}
                continue
            if impl == "attn":
                ckpt = os.path.join(out_dir, "threads%d" % n)
                cmd = [attn, "train"] + flags + ["--threads", str(n), "--out", ckpt]
                layout = None
            else:
                ckpt = None
                cmd = [args.python, os.path.join(ROOT, "bench", "train_torch.py")] + flags + \
                      ["--threads", str(omp), "--blas-threads", str(blas)]
                layout = "omp%d+blas%d" % (omp, blas)
            shown = show(cmd, omp, blas)
            commands.append(shown)
            print("\n== %s, %d thread(s)%s\n%s" %
                  (impl, n, ", " + layout if layout else "", shown), flush=True)
            run = run_child(cmd, thread_env(omp, blas), "%s t=%d" % (impl, n),
                            not args.no_echo, args.timeout)
            figures = parse_done(run["stdout"]) or parse_done(run["stderr"])
            if figures:
                figures["evals"] = parse_evals(run["stdout"]) or parse_evals(run["stderr"])
            rec = {"cmd": shown, "rc": run["rc"], "error": run["error"],
                   "wall_s": run["wall_s"], "peak_rss_mib": run["peak_rss_mib"],
                   "figures": figures, "ckpt": ckpt, "layout": layout}
            if run["rc"] != 0 or figures is None:
                failed = True
                rec["figures"] = None
                why = run["error"] or ("exit status %s" % run["rc"] if run["rc"] != 0
                                       else "no 'done:' line in its output")
                rec["error"] = why
                tail = (run["stderr"] or run["stdout"])[-5:]
                print("!! %s with %d thread(s) failed: %s\n%s" %
                      (impl, n, why, "\n".join("   " + t for t in tail)), flush=True)
            elif impl == "attn" and first_ckpt is None:
                first_ckpt = ckpt
            if impl == "attn":
                entry["attn"] = rec
                continue
            # PyTorch: keep every layout, report the fastest that produced its figures.
            entry.setdefault("torch_layouts", []).append(rec)
            ok = [r for r in entry["torch_layouts"] if r["figures"]]
            entry["torch"] = (min(ok, key=lambda r: r["figures"]["ms_per_iter"]) if ok
                              else entry["torch_layouts"][0])
        results.append(entry)

    gen, gen_commands = [], []
    if args.generate:
        ckpt = args.ckpt or first_ckpt
        if ckpt is None:
            print("!! --generate: no checkpoint (no attn train run succeeded; give --ckpt)")
            failed = True
        else:
            for n in args.thread_list:
                for cache in ("on", "off"):
                    cmd = [attn, "generate", "--ckpt", ckpt, "--prompt", "ROMEO:",
                           "--max-new-tokens", str(args.gen_tokens), "--seed", "1",
                           "--temperature", "0.8", "--top-k", "200", "--threads", str(n)]
                    if cache == "off":
                        cmd.append("--no-cache")
                    shown = show(cmd, n)
                    gen_commands.append(shown)
                    print("\n== generate, %d thread(s), cache %s\n%s" % (n, cache, shown),
                          flush=True)
                    figs = []
                    for rep in range(args.gen_repeat):
                        # The generated text goes to stdout: echo it for the first run only.
                        run = run_child(cmd, thread_env(n), "gen t=%d %s" % (n, cache),
                                        not args.no_echo and rep == 0, args.timeout)
                        f = parse_generate(run["stderr"])
                        if run["rc"] != 0 or f is None:
                            failed = True
                            why = run["error"] or ("exit status %s" % run["rc"]
                                                   if run["rc"] != 0 else
                                                   "no 'generate:' line on stderr")
                            print("!! generate failed: %s\n%s" %
                                  (why, "\n".join("   " + t for t in run["stderr"][-5:])),
                                  flush=True)
                            continue
                        if f["cache"] != cache:
                            print("!! generate reported cache=%s for a cache=%s run" %
                                  (f["cache"], cache), flush=True)
                            failed = True
                        figs.append(f)
                    med = None
                    if figs:
                        med = {"tokens": figs[0]["tokens"],
                               "ms": statistics.median(x["ms"] for x in figs),
                               "tokens_per_s": statistics.median(x["tokens_per_s"]
                                                                 for x in figs),
                               "cache": cache}
                    gen.append({"threads": n, "cache": cache, "cmd": shown, "runs":
                                args.gen_repeat, "ok": len(figs), "figures": med,
                                "all": figs})

    print("\n" + text_table(TRAIN_HEAD, train_rows(results)))
    if layout_rows(results):
        print("\nPyTorch thread layouts:\n" + text_table(LAYOUT_HEAD, layout_rows(results)))
    for v in verdicts(results, args.max_iters):
        print(v)
    if gen:
        print("\n" + text_table(GEN_HEAD, gen_rows(gen)))
        for s in generation_summary(gen):
            print(s)
    print("checkpoints: %s" % out_dir)

    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(args, info, results, gen, commands, gen_commands))
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
