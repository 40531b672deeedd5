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
4. `attn train --context-parallel` with a long block (4096) on 1, 2 and 4 ranks: peak RSS per rank.

  /usr/bin/python3 bench/distributed.py --paper [bench/distributed_results.json]

prints the on-paper scaling (communication volume per step, expected efficiency at 8, 64 and 512
ranks on two networks) from the measured compute times in a results file.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import md_section  # noqa: E402  (bench/, the script's directory)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = os.path.join(ROOT, "scripts", "mpirun.sh")
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "tinyshakespeare.txt")

# nanoGPT's shakespeare_char CPU configuration (attn train's defaults) and a larger model.
MODELS = {
    "nanogpt-cpu": ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64"],
    "6x384": ["--n-layer", "6", "--n-head", "6", "--n-embd", "384", "--block-size", "256"],
}


def cpu_model():
    """"model name (family F model M)" from /proc/cpuinfo (ratios move with the CPU)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor()
    return "{} (family {} model {})".format(info.get("model name", "?"), info.get("cpu family", "?"),
                                            info.get("model", "?"))


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


def peak_rss(text):
    m = re.search(r"peak_rss_mib=([\d.]+)", text)
    return float(m.group(1)) if m else None


def cp_memory(build, ranks, block, iters):
    """attn train --context-parallel with a long block: rank 0's peak RSS (every rank holds as much)."""
    out = "/tmp/attn_bench_dist_cp_{}".format(ranks)
    args = [os.path.join(build, "attn"), "train", "--data", DATA, "--out", out, "--max-iters",
            str(iters), "--eval-interval", str(iters), "--eval-iters", "1", "--no-progress",
            "--batch-size", "1", "--block-size", str(block), "--n-layer", "4", "--n-head", "4",
            "--n-embd", "128", "--threads", "1"]
    if ranks == 1:
        text = sh(args)
    else:
        text = sh([MPIRUN, str(ranks)] + args + ["--context-parallel"])
    done = re.search(r"done: iters=\d+ ms_per_iter=([\d.]+)", text)
    return {"ranks": ranks, "block_size": block, "peak_rss_mib_rank0": peak_rss(text),
            "ms_per_iter": float(done.group(1))}


# ---- on paper: communication volume and expected scaling ----------------------------------------

# Published link figures (per direction): 25 Gb/s Ethernet with TCP, and 200 Gb/s HDR InfiniBand;
# alpha is the per-message latency a ring step pays.
NETWORKS = [("25GbE (3.1 GB/s, 25 us)", 3.1e9, 25e-6), ("HDR IB (25 GB/s, 2 us)", 25e9, 2e-6)]


def params_of(model):
    f = dict(zip(MODELS[model][0::2], MODELS[model][1::2]))
    L, C, T = int(f["--n-layer"]), int(f["--n-embd"]), int(f["--block-size"])
    V = 65  # tinyshakespeare's characters
    return L * 12 * C * C + (V + T) * C + (2 * L + 1) * C


def paper_lines(res):
    out = []
    print = out.append  # noqa: A001  (the lines are collected, not printed)
    print("Data parallel, ring all-reduce of fp32 gradients (bytes per rank per step: 2 (P-1)/P x "
          "4 x parameters; time: that / bandwidth + 2 (P-1) latency; efficiency: compute / (compute"
          " + communication not hidden), with none hidden and with all of it hidden behind the "
          "backward, 2/3 of the step)\n")
    print("| model | parameters | compute ms/step (1 rank, 1 thread) | network | P | MB per rank "
          "| comm ms | efficiency, no overlap | with overlap |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for model in MODELS:
        one = [r for r in res["train"] if r["model"] == model and r["layout"] == "2x1"]
        if not one:
            continue
        # Per-rank compute at 1 thread: the 2-rank step less what it waited for communication.
        tc = (one[0]["ms_per_iter"] - one[0]["comm_wait_ms_per_iter"]) / 1e3
        n = params_of(model)
        for name, bw, alpha in NETWORKS:
            for P in (8, 64, 512):
                vol = 2 * (P - 1) / P * 4 * n
                t = vol / bw + 2 * (P - 1) * alpha
                hidden = max(0.0, t - tc * 2 / 3)
                print("| {} | {:.2f} M | {:.1f} | {} | {} | {:.1f} | {:.2f} | {:.0%} | {:.0%} |".format(
                    model, n / 1e6, tc * 1e3, name, P, vol / 1e6, t * 1e3, tc / (tc + t),
                    tc / (tc + hidden)))
    print("\nContext parallel (ring attention): per layer, forward and backward together, each rank"
          " sends its K/V block P-1 times forward and K/V with dK/dV P-1 times backward: 6 (P-1) x "
          "B x L/P x C x 4 bytes. A block's transfer hides behind the attention on it when L/P >= "
          "2 F / bandwidth (F: the rank's attention FLOP/s):\n")
    ring = [r for r in res["ring"] if r["fwdbwd_tflops"] > 0]
    F = max((r["fwdbwd_tflops"] / r["ranks"] for r in ring), default=0.05) * 1e12
    print("| rank | F (measured per rank here / H100 bf16 FA2 class) | network | L/P needed |")
    print("| --- | ---: | --- | ---: |")
    for who, f in (("this CPU", F), ("H100", 400e12)):
        for name, bw, _ in NETWORKS:
            print("| {} | {:.3g} TFLOP/s | {} | {:,.0f} tokens |".format(who, f / 1e12, name,
                                                                        2 * f / bw))
    return out


def markdown(res):
    """The "Several processes" section of BENCHMARKS.md from a results file."""
    L = ["## Several processes (attn::distributed over OpenMPI)", "",
         "Measured {} on {} ({} cores), with `{}`; the on-paper part from the same file by "
         "`/usr/bin/python3 bench/distributed.py --paper`. Ranks are processes on this one machine "
         "(`scripts/mpirun.sh`: shared memory, oversubscribed beyond 2).".format(
             res["date"], res["cpu"], res["cores"], res["command"].replace(ROOT + "/", "")), ""]
    if res["train"]:
        L += ["### Training: 2 ranks x 1 thread against 1 process x 2 threads (same global batch)",
              "",
              "`attn train` on tinyshakespeare; 1x2 is one process with `--threads 2` and batch "
              "2B, 2x1 is `mpirun -np 2` with `--threads 1` and batch B per rank (the same "
              "examples, the same losses); comm wait is the median time a step waited for "
              "gradient all-reduces after its backward (the part the bucket overlap did not hide; "
              "ZeRO-1's reduce-scatter and all-gather are not overlapped and not counted there). "
              "Median step, the better of two alternating runs.", "",
              "| model | layout | global batch | ms/iter | comm wait ms/iter | tokens/s | val loss |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in res["train"]:
            gb = r["batch_per_rank"] * r["ranks"]
            L.append("| {} | {} | {} | {:.2f} | {:.2f} | {:,} | {:.4f} |".format(
                r["model"], r["layout"], gb, r["ms_per_iter"], r["comm_wait_ms_per_iter"],
                r["tokens_per_s"], r["val_loss"]))
        L.append("")
    if res["allreduce"]:
        L += ["### All-reduce on loopback (float32 SUM, median per call)", "",
              "Bus bandwidth = 2 (P-1)/P x bytes / time, what a ring all-reduce moves per rank.",
              "", "| bytes | P=2 time | P=2 bus GB/s | P=4 time | P=4 bus GB/s |",
              "| ---: | ---: | ---: | ---: | ---: |"]
        by = {}
        for r in res["allreduce"]:
            by.setdefault(r["bytes"], {})[r["ranks"]] = r
        for b in sorted(by):
            cells = []
            for P in (2, 4):
                r = by[b].get(P)
                cells += ["{:.1f} us".format(r["median_s"] * 1e6), "{:.2f}".format(
                    r["bus_gb_s"])] if r else ["", ""]
            L.append("| {:,} | {} |".format(b, " | ".join(cells)))
        L.append("")
    if res["ring"]:
        L += ["### Ring attention (causal, zigzag, B=1 H=2 D=64)", "",
              "P=1 is the fused kernel alone. TFLOP/s count the whole sequence's FLOPs "
              "(4 B H L^2 D / 2 forward, x3.5 forward+backward) over the wall time. Peak RSS is "
              "every rank's ru_maxrss; 'tensors' is what one process holds for q, k, v, out (and "
              "their gradients with dout when there is a backward) at full length.", "",
              "| L | P | fwd s | fwd TFLOP/s | fwd+bwd s | fwd+bwd TFLOP/s | peak RSS per rank MiB | one-process tensors MiB |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
        for r in res["ring"]:
            L.append("| {:,} | {} | {:.2f} | {:.3f} | {} | {} | {} | {:.0f} |".format(
                r["L"], r["ranks"], r["fwd_s"], r["fwd_tflops"],
                "{:.2f}".format(r["fwdbwd_s"]) if r["fwdbwd_s"] else "-",
                "{:.3f}".format(r["fwdbwd_tflops"]) if r["fwdbwd_s"] else "-",
                ", ".join("{:.0f}".format(x) for x in r["peak_rss_mib"]),
                r["one_process_tensors_mib"]))
        L.append("")
    if res.get("cp"):
        L += ["### attn train --context-parallel: memory per rank", "",
              "nanoGPT's CPU model (4 layers, 128 wide) with one sequence of --block-size tokens "
              "per step, 3 steps; rank 0's peak RSS (each rank holds 1/P of every activation).", "",
              "| block size | ranks | peak RSS rank 0 MiB | ms/iter |", "| ---: | ---: | ---: | ---: |"]
        for r in res["cp"]:
            L.append("| {:,} | {} | {:.1f} | {:.0f} |".format(r["block_size"], r["ranks"],
                                                            r["peak_rss_mib_rank0"],
                                                            r["ms_per_iter"]))
        L.append("")
    L += ["### On paper: communication per step and scaling beyond this machine", ""]
    L += paper_lines(res)
    return "\n".join(L) + "\n"


def write_benchmarks(res, path):
    """Replaces this script's section of BENCHMARKS.md (appends it the first time)."""
    md_section.replace_section(path, "distributed.py", markdown(res))


def jsonl(text):
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations, smaller L")
    ap.add_argument("--only", default="train,allreduce,ring,cp")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "distributed_results.json"))
    ap.add_argument("--paper", metavar="RESULTS", help="print the on-paper tables of a results file")
    ap.add_argument("--markdown", metavar="RESULTS",
                    help="write the BENCHMARKS.md section from a results file (no runs)")
    a = ap.parse_args()
    if a.paper:
        print("\n".join(paper_lines(json.load(open(a.paper)))))
        return
    if a.markdown:
        write_benchmarks(json.load(open(a.markdown)), os.path.join(ROOT, "BENCHMARKS.md"))
        print("updated", os.path.join(ROOT, "BENCHMARKS.md"))
        return
    build = os.path.abspath(a.build_dir)
    bench = os.path.join(build, "bench", "bench_distributed")
    only = set(a.only.split(","))
    res = {"cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
           "command": " ".join(sys.argv), "train": [], "allreduce": [], "ring": [], "cp": []}
    if only != {"train", "allreduce", "ring", "cp"} and os.path.exists(a.out):
        # A partial run replaces its own sections of an existing results file and keeps the rest.
        old = json.load(open(a.out))
        for key in ("train", "allreduce", "ring", "cp"):
            if key not in only:
                res[key] = old.get(key, [])
        res["command"] = old.get("command", "") + "; then " + res["command"]

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
        # P = 1 is the fused kernel alone (no communication): the memory and time to compare with.
        cases = [(1, L, 1), (2, L, 1), (4, L, 1)] + ([] if a.quick else [(4, 2 * L, 0)])
        for ranks, length, bwd in cases:
            out = sh([MPIRUN, str(ranks), bench, "ring", "--L", str(length), "--H", "2", "--D",
                      "64", "--causal", "1", "--backward", str(bwd), "--reps", "1"],
                     env={"ATTN_DIST_TIMEOUT": "1800", "ATTN_MPIRUN_TIMEOUT": "1800"})
            res["ring"] += jsonl(out)
            for r in jsonl(out):
                print("ring P={ranks} L={L}: fwd {fwd_s:.1f} s, fwd+bwd {fwdbwd_s:.1f} s, peak RSS "
                      "{peak_rss_mib} MiB (one process would hold {one_process_tensors_mib:.0f} "
                      "MiB of tensors)".format(**r), flush=True)

    if "cp" in only:
        block = 1024 if a.quick else 4096
        for ranks in (1, 2, 4):
            r = cp_memory(build, ranks, block, 3)
            res["cp"].append(r)
            print("train --context-parallel block {block_size}: {ranks} ranks, peak RSS rank 0 "
                  "{peak_rss_mib_rank0} MiB, {ms_per_iter:.0f} ms/iter".format(**r), flush=True)

    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
