#!/usr/bin/python3
"""attn's fused attention against today's PyTorch (2.15 from PyPI) on the CPU, in one process,
alternating, at 1 and 2 threads.

    /usr/bin/python3 bench/compare_torch.py                 # full grid (~40 min), BENCHMARKS.md
    /usr/bin/python3 bench/compare_torch.py --quick         # a few cases (~3 min), printed only
    /usr/bin/python3 bench/compare_torch.py --lengths 1024,2048 --threads 2 --no-extra

The script runs itself under the Python of .venv-bench (scripts/bench_setup.sh creates it on first
use: torch 2.15 over Debian's Python, so attn's module imports beside it); attn's module is taken
from --build-dir (default build/).

Contenders in each case, in turn, several repetitions (bench/compare.py's method: an idle pause
so the previous contender's spinning workers sleep, one untimed call, then back-to-back timed
calls; median and best of the samples):
  attn        attn.nn.functional.scaled_dot_product_attention (the fused kernel)
  torch       torch.nn.functional.scaled_dot_product_attention, its default dispatch (which picks
              the flash-attention CPU kernel for these inputs; the report says which backend ran)
  torch-math  the same under sdpa_kernel(SDPBackend.MATH): matmul, softmax, matmul (skipped where
              its L x L scores would not fit in memory)
  sgemm       OpenBLAS sgemm 1024^3 (attn's BLAS) and torch.mm 1024^3 (PyTorch's MKL): the
              machine's GEMM speed in the same run, for "fraction of sgemm"
fp32, B=4 H=8 D=64, L = 256 .. 8192, causal and not; forward, and forward + backward
(out.backward(g) with the inputs' .grad reset each call). Extra cases at L=2048: grouped-query
attention (8 query heads over 2 key/value heads, enable_gqa=True on both sides, no copies) and an
additive float mask (B, 1, L, L). FLOPs: 4 B H L^2 D forward (half when causal), backward 2.5x.
Speed-up = the faster PyTorch contender's median / attn's median; the target is >= 1.5x at
L >= 1024, causal and not, forward and forward + backward, at both thread counts.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
TARGET, TARGET_MIN_L = 1.5, 1024


def ensure_torch2(build_dir):
    """Re-executes under .venv-bench's Python unless torch >= 2 already imports here."""
    try:
        import torch
        if int(torch.__version__.split(".")[0]) >= 2:
            return
    except ImportError:
        pass
    if os.environ.get("ATTN_BENCH_REEXEC"):
        sys.exit("compare_torch: torch >= 2 does not import in %s" % sys.executable)
    py = subprocess.run(["bash", os.path.join(ROOT, "scripts", "bench_setup.sh"), "--print"],
                        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    pp = [os.path.join(os.path.abspath(build_dir), "python")]
    if os.environ.get("PYTHONPATH"):
        pp.append(os.environ["PYTHONPATH"])
    env = dict(os.environ, ATTN_BENCH_REEXEC="1", PYTHONPATH=os.pathsep.join(pp))
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)


class Case:
    def __init__(self, B, H, L, D, causal, threads, pass_, H_kv=None, mask=False):
        self.B, self.H, self.L, self.D, self.causal = B, H, L, D, causal
        self.threads, self.pass_, self.H_kv, self.mask = threads, pass_, H_kv or H, mask

    @property
    def kind(self):
        return "gqa" if self.H_kv != self.H else "mask" if self.mask else "plain"

    def label(self):
        s = "B=%d H=%d" % (self.B, self.H)
        if self.H_kv != self.H:
            s += " H_kv=%d" % self.H_kv
        s += " L=%d D=%d" % (self.L, self.D)
        if self.mask:
            s += " +additive mask"
        return s

    def flops(self):
        f = 4.0 * self.B * self.H * self.L * self.L * self.D * (0.5 if self.causal else 1.0)
        return f * (3.5 if self.pass_ == "fwdbwd" else 1.0)

    def math_bytes(self):
        """What the math backend's L x L intermediates need (scores, weights and their grads)."""
        n = self.B * self.H * self.L * self.L * 4
        return n * (5 if self.pass_ == "fwdbwd" else 3)


def make_cases(lengths, threads, extra):
    cases = []
    for t in threads:
        for causal in (False, True):
            for L in lengths:
                for p in ("fwd", "fwdbwd"):
                    cases.append(Case(4, 8, L, 64, causal, t, p))
        if extra:
            for p in ("fwd", "fwdbwd"):
                cases.append(Case(4, 8, 2048, 64, True, t, p, H_kv=2))
                cases.append(Case(4, 8, 2048, 64, False, t, p, mask=True))
    return cases


def build_contenders(case, attn, torch, blas, math_limit):
    """[(key, fn, before)] for compare.run_alternating, and the backend PyTorch's default ran."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator().manual_seed(1234)
    qs, kvs = (case.B, case.H, case.L, case.D), (case.B, case.H_kv, case.L, case.D)
    tq, tk, tv, tg = (torch.randn(s, generator=g) for s in (qs, kvs, kvs, qs))
    tm = torch.randn((case.B, 1, case.L, case.L), generator=g) if case.mask else None
    aq, ak, av, ag = (attn.from_numpy(t.numpy().copy()) for t in (tq, tk, tv, tg))
    am = attn.from_numpy(tm.numpy().copy()) if case.mask else None
    bwd = case.pass_ == "fwdbwd"
    if bwd:
        for t in (tq, tk, tv, aq, ak, av):
            t.requires_grad_()
    kw = dict(is_causal=case.causal, attn_mask=None)
    if case.H_kv != case.H:
        kw["enable_gqa"] = True

    def wrap(fwd, leaves, grad):
        if not bwd:
            return fwd

        def fwdbwd():
            for x in leaves:
                x.grad = None
            o = fwd()
            o.backward(grad)
            return o
        return fwdbwd

    AF, TF = attn.nn.functional, torch.nn.functional
    akw, tkw = dict(kw, attn_mask=am), dict(kw, attn_mask=tm)
    a_fn = wrap(lambda: AF.scaled_dot_product_attention(aq, ak, av, **akw), (aq, ak, av), ag)
    t_fn = wrap(lambda: TF.scaled_dot_product_attention(tq, tk, tv, **tkw), (tq, tk, tv), tg)

    def t_math_fwd():
        with sdpa_kernel(SDPBackend.MATH):
            return TF.scaled_dot_product_attention(tq, tk, tv, **tkw)
    backend = "?"
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)):
        try:
            with sdpa_kernel(be):
                TF.scaled_dot_product_attention(tq[:, :, :8], tk[:, :, :8], tv[:, :, :8],
                                                **dict(kw, attn_mask=None if tm is None else
                                                       tm[:, :, :8, :8]))
            backend = name
            break
        except RuntimeError:
            continue
    n = case.threads

    def threads():
        attn.set_num_threads(n)
        torch.set_num_threads(n)
        blas.lib.openblas_set_num_threads(n)

    sg = blas.sgemm_fn(1024)
    ma, mb = torch.randn(1024, 1024), torch.randn(1024, 1024)
    out = [("attn", a_fn, threads), ("torch:sdpa", t_fn, threads)]
    if case.math_bytes() <= math_limit:
        out.append(("torch:math", wrap(t_math_fwd, (tq, tk, tv), tg), threads))
    out += [("sgemm:openblas", sg, threads), ("sgemm:mkl", lambda: torch.mm(ma, mb), threads)]
    return out, backend


def run_case(case, attn, torch, blas, args, log):
    import compare
    contenders, backend = build_contenders(case, attn, torch, blas, args.math_limit_gb * 2**30)
    samples, dropped = compare.run_alternating(contenders, args.reps, args.min_reps, args.budget,
                                         args.target_s, log, settle_s=0.15)
    res = {"case": dict(vars(case), kind=case.kind), "label": case.label(), "flops": case.flops(),
           "torch_default_backend": backend, "times": {},
           "dropped_ms": {k: v * 1e3 for k, v in dropped.items()}}
    for key, s in samples.items():
        res["times"][key] = compare.summarize(s)
    t = res["times"]
    tkeys = [k for k in t if k.startswith("torch:")]
    best = min(tkeys, key=lambda k: t[k]["median"])
    res["torch_best"] = best
    res["speedup"] = t[best]["median"] / t["attn"]["median"]
    res["speedup_vs_sdpa"] = t["torch:sdpa"]["median"] / t["attn"]["median"]
    for k in ("attn", "torch:sdpa", "torch:math"):
        if k in t:
            t[k]["gflops"] = case.flops() / t[k]["median"] / 1e9
    for k in ("sgemm:openblas", "sgemm:mkl"):
        t[k]["gflops"] = 2.0 * 1024**3 / t[k]["median"] / 1e9
    return res


# ---- report -------------------------------------------------------------------------------------
def ms(x):
    v = x * 1e3
    return "%.3g" % v if v < 100 else "%.0f" % v


def table(results):
    head = ("threads", "case", "causal", "pass", "attn ms", "torch SDPA ms (backend)",
            "torch math ms", "attn GFLOP/s", "torch GFLOP/s", "speed-up", "attn / sgemm")
    rows = []
    for r in results:
        c, t = r["case"], r["times"]
        tm = t.get("torch:math")
        sg = max(t["sgemm:openblas"]["gflops"], t["sgemm:mkl"]["gflops"])
        rows.append((
            str(c["threads"]), r["label"], "yes" if c["causal"] else "no",
            "fwd" if c["pass_"] == "fwd" else "fwd+bwd",
            "%s (%s)" % (ms(t["attn"]["median"]), ms(t["attn"]["best"])),
            "%s (%s) %s" % (ms(t["torch:sdpa"]["median"]), ms(t["torch:sdpa"]["best"]),
                            r["torch_default_backend"]),
            "%s (%s)" % (ms(tm["median"]), ms(tm["best"])) if tm else
            "dropped (warm call %s)" % ms(r["dropped_ms"]["torch:math"] / 1e3)
            if "torch:math" in r.get("dropped_ms", {}) else "skipped (memory)",
            "%.0f" % t["attn"]["gflops"], "%.0f" % t[r["torch_best"]]["gflops"],
            "**%.2fx**" % r["speedup"], "%.0f%%" % (100 * t["attn"]["gflops"] / sg)))
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def verdicts(results):
    lines = []
    for th in sorted({r["case"]["threads"] for r in results}):
        for causal in (False, True):
            for p in ("fwd", "fwdbwd"):
                sel = [r for r in results if r["case"]["threads"] == th and
                       r["case"]["causal"] == causal and r["case"]["pass_"] == p and
                       r["case"]["L"] >= TARGET_MIN_L]
                if not sel:
                    continue
                worst = min(sel, key=lambda r: r["speedup"])
                ok = worst["speedup"] >= TARGET
                lines.append("| %d | %s | %s | %s | %s |" % (
                    th, "yes" if causal else "no", "fwd" if p == "fwd" else "fwd+bwd",
                    "**met**" if ok else "**missed**",
                    "min %.2fx (%s); all: %s" % (
                        worst["speedup"], worst["label"],
                        ", ".join("%.2fx" % r["speedup"] for r in sel))))
    return ("| threads | causal | pass | >= %.1fx at L >= %d | detail |\n|---|---|---|---|---|\n"
            % (TARGET, TARGET_MIN_L)) + "\n".join(lines)


def markdown(results, info, cmd):
    ob = [r["times"]["sgemm:openblas"]["gflops"] for r in results]
    mk = [r["times"]["sgemm:mkl"]["gflops"] for r in results]
    return "\n".join([
        "## Attention against PyTorch %s (bench/compare_torch.py)" % info["torch"],
        "",
        "Measured %s on %s (%s CPUs), PyTorch %s from PyPI (.venv-bench, CPU capability %s), "
        "attn at %s. Command:" % (info["date"], info["cpu"], info["cpus"], info["torch"],
                                   info["capability"], info["git"]),
        "",
        "```", cmd, "```", "",
        "fp32; each case alternates attn, PyTorch's SDPA (default dispatch; the backend it ran is "
        "named), PyTorch's math backend and two 1024^3 sgemms (OpenBLAS, attn's BLAS: median %.0f "
        "GFLOP/s over the cases; PyTorch's MKL: %.0f), median (best) ms per call. Speed-up: the "
        "faster PyTorch contender's median over attn's. attn / sgemm: attn's GFLOP/s over the "
        "faster sgemm of the same case. FLOPs 4 B H L^2 D forward (half causal), backward 2.5x."
        % (statistics.median(ob), statistics.median(mk)),
        "",
        "### Targets", "", verdicts(results), "",
        "### Results", "", table(results)])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--quick", action="store_true", help="L 1024,2048, 2 threads, no extras")
    p.add_argument("--lengths", default="256,512,1024,2048,4096,8192")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--no-extra", action="store_true", help="skip the GQA and mask cases")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--budget", type=float, default=60.0, help="seconds per case (soft)")
    p.add_argument("--target-s", type=float, default=0.05, help="timed seconds per sample")
    p.add_argument("--math-limit-gb", type=float, default=6.0,
                   help="skip the math backend where its L x L intermediates exceed this")
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--report", metavar="JSON",
                   help="no runs: write the markdown from a --json file of an earlier run")
    p.add_argument("--markdown", help="write the section here (default: BENCHMARKS.md, full runs)")
    a = p.parse_args(argv)
    try:
        a.lengths = [int(x) for x in a.lengths.split(",")]
        a.threads = [int(x) for x in a.threads.split(",")]
    except ValueError:
        p.error("--lengths and --threads take comma-separated integers")
    if a.quick:
        a.lengths, a.threads, a.no_extra = [1024, 2048], [2], True
    if any(L < 16 for L in a.lengths) or any(t < 1 for t in a.threads):
        p.error("lengths must be >= 16 and threads >= 1")
    if a.min_reps < 1 or a.reps < a.min_reps:
        p.error("need 1 <= --min-reps <= --reps")
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        import md_section
        with open(args.report) as f:
            saved = json.load(f)
        md = markdown(saved["results"], saved["info"], saved["command"])
        if args.markdown:
            md_section.replace_section(args.markdown, "compare_torch.py", md)
        else:
            print(md)
        return
    ensure_torch2(args.build_dir)
    import compare
    import md_section
    import torch
    attn = compare.import_attn(args.build_dir)
    blas = compare.OpenBLAS()
    mi = compare.machine_info()
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    info = {"date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": mi.get("model", "?"), "cpus": mi.get("cpus", "?"), "torch": torch.__version__,
            "capability": compare.torch_capability(torch), "git": git}
    cases = make_cases(args.lengths, args.threads, not args.no_extra)
    results = []
    t0 = time.time()
    for i, c in enumerate(cases):
        print("[%d/%d] %d thread(s) %s %s %s" % (i + 1, len(cases), c.threads, c.label(),
                                                 "causal" if c.causal else "full", c.pass_),
              flush=True)
        r = run_case(c, attn, torch, blas, args, lambda s: print(s, flush=True))
        t = r["times"]
        print("    attn %s ms, torch sdpa %s ms (%s)%s -> %.2fx" % (
            ms(t["attn"]["median"]), ms(t["torch:sdpa"]["median"]), r["torch_default_backend"],
            ", math %s ms" % ms(t["torch:math"]["median"]) if "torch:math" in t else "",
            r["speedup"]), flush=True)
        results.append(r)
    print("total %.0f s" % (time.time() - t0))
    argv_s = " ".join(sys.argv[1:])
    cmd = "/usr/bin/python3 bench/compare_torch.py" + (" " + argv_s if argv_s else "")
    md = markdown(results, info, cmd)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, "results": results, "command": cmd}, f, indent=1)
    path = args.markdown or (None if args.quick else os.path.join(ROOT, "BENCHMARKS.md"))
    if path:
        md_section.replace_section(path, "compare_torch.py", md)
        print("wrote", path)
    else:
        print(md)


if __name__ == "__main__":
    main()
