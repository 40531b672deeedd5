#!/usr/bin/python3
"""Markdown tables of build/bench/bench_gemm's JSON output: GFLOP/s of every library on every
shape, per thread count, the fastest in bold, and each library's geometric-mean speed relative to
single-threaded-per-call OpenBLAS over the training shapes and over the decoding shapes.

    build/bench/bench_gemm --benchmark_out=gemm.json --benchmark_out_format=json
    /usr/bin/python3 bench/gemm_report.py gemm.json
"""
import argparse
import collections
import json
import math
import sys

LIBS = ("openblas", "attn", "blis", "onednn", "libxsmm")


def load(path):
    """{threads: {(set, layer.pass, shape): {lib: GFLOP/s}}} and the run's context."""
    with open(path) as f:
        d = json.load(f)
    out = collections.defaultdict(lambda: collections.OrderedDict())
    for b in d.get("benchmarks", []):
        parts = b["name"].split("/")  # gemm/<set>/<layer>.<pass>/<shape>/<lib>/t<n>/real_time
        if len(parts) < 6 or parts[0] != "gemm" or "GFLOP" not in b:
            continue
        threads = int(parts[5].lstrip("t"))
        out[threads].setdefault(tuple(parts[1:4]), {})[parts[4]] = b["GFLOP"]  # GFLOP/s
    return out, d.get("context", {})


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report(rows_by_threads, context):
    libs = [l for l in LIBS if any(l in v for rows in rows_by_threads.values()
                                   for v in rows.values())]
    out = ["From the run's context: %s CPUs; %s." % (context.get("num_cpus", "?"), "; ".join(
        "%s %s" % (k, context[k]) for k in ("openblas", "blis", "onednn", "libxsmm")
        if k in context))]
    for threads, rows in sorted(rows_by_threads.items()):
        out += ["", "#### %d thread%s (GFLOP/s)" % (threads, "" if threads == 1 else "s"), "",
                "| set | product | M x N x K | " + " | ".join(libs) + " |",
                "|---|---|---|" + "---:|" * len(libs)]
        for (set_, prod, shape), v in rows.items():
            best = max(v.values())
            cells = [("**%.1f**" if v.get(l) == best else "%.1f") % v[l] if l in v else "-"
                     for l in libs]
            out.append("| %s | %s | %s | %s |" % (set_, prod, shape, " | ".join(cells)))
        for kind, pick in (("training", lambda s: not s.startswith("decode")),
                           ("decoding", lambda s: s.startswith("decode"))):
            sel = [v for (s, _, _), v in rows.items() if pick(s) and "openblas" in v]
            rel = ["%s %.2fx" % (l, geomean([v[l] / v["openblas"] for v in sel if l in v]))
                   for l in libs if l != "openblas"]
            if sel:
                out.append("\n%d thread%s, %s shapes, geometric mean against OpenBLAS: %s." % (
                    threads, "" if threads == 1 else "s", kind, ", ".join(rel)))
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", help="bench_gemm --benchmark_out file (JSON)")
    a = p.parse_args(argv)
    try:
        rows, context = load(a.json)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("gemm_report.py: cannot read %s: %s" % (a.json, e))
    if not rows:
        sys.exit("gemm_report.py: no gemm/ benchmarks with a GFLOP counter in %s" % a.json)
    print(report(rows, context))


if __name__ == "__main__":
    main()
