#!/usr/bin/env python3
"""Figures for attn::distributed on this machine (not a test): writes bench/distributed_results.json
and prints markdown tables for BENCHMARKS.md.

  /usr/bin/python3 bench/distributed.py [--build-dir build] [--quick] [--only train,allreduce,ring]

1. Training: `attn train` ms/iter for 1 process x 2 threads against `mpirun -np 2` x 1 thread
   (data parallel, same global batch, so the same losses), for nanoGPT's CPU configuration and a
   larger model, with the time each step waited for gradient all-reduces after the backward
   (what the overlap did not hide); also 2 ranks with --zero 1.
2. All-reduce bandwidth on loopback (shared memory) against the message size, 2 and 4 ranks.
3. Ring attention at L = 65536 (2 and 4 ranks, forward and forward + backward) and L = 131072 (4
   ranks, forward), with every rank's peak RSS against what one process would hold.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = os.path.join(ROOT, "scripts", "mpirun.sh")
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "tinyshakespeare.txt")

# nanoGPT's shakespeare_char CPU configuration (attn train's defaults) and a larger model.
MODELS = {
    "nanogpt-cpu": ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64"],
    "6x384": ["--n-layer", "6", "--n-head", "6", "--n-embd", "384", "--block-size", "256"],
}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def sh(cmd, timeout=1800, env=None):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    if p.returncode != 0:
        raise SystemExit("failed ({}): {}\n{}\n{}".format(p.returncode, " ".join(cmd),
                                                         p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


def train(build, model, ranks, batch, iters, extra=()):
    out = "/tmp/attn_bench_dist_{}_{}".format(model, ranks)
    args = [os.path.join(build, "attn"), "train", "--data", DATA, "--out", out, "--max-iters",
            str(iters), "--eval-interval", str(iters), "--eval-iters", "2", "--no-progress",
            "--log-interval", str(iters), "--batch-size", str(batch), *MODELS[model], *extra]
    if ranks == 1:
        text = sh(args + ["--threads", "2"])
    else:
        text = sh([MPIRUN, str(ranks)] + args + ["--threads", "1"])
    done = re.search(r"done: iters=\d+ ms_per_iter=([\d.]+) train_loss=([\d.]+) "
                     r"val_loss=([\d.]+) tokens_per_s=(\d+)", text)
    wait = re.search(r"comm_wait_ms_per_iter=([\d.]+)", text)
    return {"model": model, "ranks": ranks, "batch_per_rank": batch, "iters": iters,
            "extra": list(extra), "ms_per_iter": float(done.group(1)),
            "train_loss": float(done.group(2)), "val_loss": float(done.group(3)),
            "tokens_per_s": int(done.group(4)),
            "comm_wait_ms_per_iter": float(wait.group(1)) if wait else 0.0}


def jsonl(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations, smaller L")
    ap.add_argument("--only", default="train,allreduce,ring")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "distributed_results.json"))
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    bench = os.path.join(build, "bench", "bench_distributed")
    only = set(a.only.split(","))
    res = {"cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
           "command": " ".join(sys.argv), "train": [], "allreduce": [], "ring": []}

    if "train" in only:
        iters = {"nanogpt-cpu": 60 if a.quick else 300, "6x384": 6 if a.quick else 20}
        for model, B in (("nanogpt-cpu", 12), ("6x384", 8)):
            n = iters[model]
            # Alternate the contenders, twice, and keep each one's best median.
            runs = {}
            for _ in range(1 if a.quick else 2):
                for key, ranks, batch, extra in (("1x2", 1, 2 * B, ()), ("2x1", 2, B, ()),
                                                 ("2x1 zero1", 2, B, ("--zero", "1"))):
                    r = train(build, model, ranks, batch, n, extra)
                    if key not in runs or r["ms_per_iter"] < runs[key]["ms_per_iter"]:
                        runs[key] = dict(r, layout=key)
            res["train"] += list(runs.values())
            for r in runs.values():
                print("train {model} {layout}: {ms_per_iter:.2f} ms/iter, comm wait "
                      "{comm_wait_ms_per_iter:.2f} ms, val {val_loss}".format(**r), flush=True)

    if "allreduce" in only:
        for ranks in (2, 4):
            out = sh([MPIRUN, str(ranks), bench, "allreduce", "--seconds",
                      "0.2" if a.quick else "0.5"])
            res["allreduce"] += jsonl(out)
            for r in jsonl(out):
                print("allreduce P={ranks} {bytes} B: {median_s:.2e} s, bus {bus_gb_s:.2f} GB/s"
                      .format(**r), flush=True)

    if "ring" in only:
        L = 16384 if a.quick else 65536
        cases = [(2, L, 1), (4, L, 1)] + ([] if a.quick else [(4, 2 * L, 0)])
        for ranks, length, bwd in cases:
            out = sh([MPIRUN, str(ranks), bench, "ring", "--L", str(length), "--H", "2", "--D",
                      "64", "--causal", "1", "--backward", str(bwd), "--reps", "1"],
                     env={"ATTN_DIST_TIMEOUT": "1800", "ATTN_MPIRUN_TIMEOUT": "1800"})
            res["ring"] += jsonl(out)
            for r in jsonl(out):
                print("ring P={ranks} L={L}: fwd {fwd_s:.1f} s, fwd+bwd {fwdbwd_s:.1f} s, peak RSS "
                      "{peak_rss_mib} MiB (one process would hold {one_process_tensors_mib:.0f} "
                      "MiB of tensors)".format(**r), flush=True)

    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
