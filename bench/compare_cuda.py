#!/usr/bin/env python3
"""attn's fused attention on a GPU against PyTorch's SDPA backends on the same GPU, alternating
case by case in one run.

On the GPU machine (where python3 has PyTorch 2.x with CUDA), after `scripts/test_cuda.sh pack`
here (the bundle carries build-cuda/bench_cuda, attn's side):
    python3 bench/compare_cuda.py --json $OUT/cuda.json          # full grid
    python3 bench/compare_cuda.py --quick                        # L 2048, printed only
Back here, the section of BENCHMARKS.md from the saved run:
    python3 bench/compare_cuda.py --report cuda.json

Contenders in each case (bf16, B=4 H=16 (B, H, L, D) contiguous, random normal inputs):
  attn          attn's kernels through bench_cuda (a subprocess; scaled_dot_product_attention_forward
                and _backward on GPU tensors)
  flash, cudnn, efficient
                torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(backend) for each
                backend (a backend that refuses the case is reported as such)
  flex          torch.nn.attention.flex_attention under torch.compile (--flex; compiling takes a
                while per shape)
  cuBLAS        bf16 GEMM 8192^3 through bench_cuda (cublasGemmEx, fp32 accumulate): the GPU's
                tensor-core speed in the same run, for "fraction of cuBLAS"
Timing: 3 warm-up calls, then --reps calls each between two CUDA events; median and best.
Forward + backward: out = sdpa(q, k, v); out.backward(dout) for torch (grads reset to None each
call), forward then backward kernels for attn. FLOPs as on the CPU (bench/compare_torch.py):
4 B H L^2 D forward (half when causal), backward 2.5x. Targets (issue 11): forward >= 0.8x the
flash backend and forward + backward >= 0.7x at L >= 2048, D 64 and 128.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
TARGETS = {"fwd": 0.8, "fwdbwd": 0.7}
TARGET_MIN_L = 2048


def flops(case):
    f = 4.0 * case["B"] * case["H"] * case["L"] ** 2 * case["D"]
    if case["causal"]:
        f /= 2
    return f * (3.5 if case["pass"] == "fwdbwd" else 1.0)


class Attn:
    """bench_cuda as a subprocess: one case per line in, one JSON line out."""

    def __init__(self, exe):
        env = dict(os.environ)
        lib = os.path.join(os.path.dirname(exe), "lib")
        if os.path.isdir(lib):
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [lib, "/usr/local/cuda/lib64", env.get("LD_LIBRARY_PATH", "")])
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)
        self.device = self._read().get("ready")
        if self.device is None:
            raise SystemExit("compare_cuda: bench_cuda did not start")

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("compare_cuda: bench_cuda exited")
        return json.loads(line)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.close()
        self.p.wait(timeout=60)


def time_torch(fn, reps):
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return {"median_ms": ms[len(ms) // 2], "best_ms": ms[0]}


def torch_case(case, backend, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    shape = (case["B"], case["H"], case["L"], case["D"])
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    bwd = case["pass"] == "fwdbwd"
    for t in (q, k, v):
        t.requires_grad_(bwd)
    causal = bool(case["causal"])
    if backend == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
        mask = None
        if causal:
            mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, case["L"],
                                     case["L"], device="cuda")
        call = lambda: flex(q, k, v, block_mask=mask)  # noqa: E731
    else:
        which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

        def call():
            with sdpa_kernel(which):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def step():
        out = call()
        if bwd:
            q.grad = k.grad = v.grad = None
            out.backward(dout)

    try:
        return time_torch(step, reps)
    except Exception as e:  # a backend that refuses these inputs
        return {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])}


def run(args):
    import torch
    attn = Attn(args.bench)
    contenders = ["flash", "cudnn", "efficient"] + (["flex"] if args.flex else [])
    gemm = attn.ask("gemm 8192 8192 8192 %d" % args.reps)
    cases = [dict(B=4, H=16, L=L, D=D, causal=c, pass_=p)
             for L in args.lengths for D in args.dims for c in (0, 1) for p in ("fwd", "fwdbwd")]
    results = []
    for i, c in enumerate(cases):
        c["pass"] = c.pop("pass_")
        times = {}
        # Alternate who goes first, case by case.
        order = ["attn"] + contenders if i % 2 == 0 else contenders + ["attn"]
        for who in order:
            if who == "attn":
                times["attn"] = attn.ask("sdpa bf16 %d %d %d %d %d %s %d" % (
                    c["B"], c["H"], c["L"], c["D"], c["causal"], c["pass"], args.reps))
            else:
                times[who] = torch_case(c, who, args.reps)
        results.append({"case": c, "flops": flops(c), "times": times})
        print(line(results[-1], gemm), flush=True)
    attn.close()
    return {"date": datetime.date.today().isoformat(), "device": attn.device,
            "torch": torch.__version__, "gemm_8192": gemm, "results": results,
            "command": " ".join(sys.argv)}


def tflops(r, who):
    t = r["times"].get(who, {})
    return r["flops"] / t["median_ms"] / 1e9 if "median_ms" in t else None


def line(r, gemm):
    c = r["case"]
    parts = ["L=%-5d D=%-3d %-6s %-6s" % (c["L"], c["D"], "causal" if c["causal"] else "full",
                                          c["pass"])]
    for who, t in r["times"].items():
        parts.append("%s %s" % (who, "%.3f ms" % t["median_ms"] if "median_ms" in t else "n/a"))
    return "  ".join(parts)


def markdown(data):
    g = data["gemm_8192"]
    gemm_tf = 2 * 8192 ** 3 / g["median_ms"] / 1e9 if "median_ms" in g else None
    out = ["### attn against PyTorch on a GPU (`bench/compare_cuda.py`)", "",
           "%s, PyTorch %s, %s; bf16, B=4 H=16, (B, H, L, D). Median ms per call (3 warm-up "
           "calls, then timed calls between CUDA events); TFLOP/s with 4 B H L^2 D forward (half "
           "causal), backward 2.5x. cuBLAS bf16 GEMM 8192^3 in the same run: %s TFLOP/s. "
           "vs flash: flash's median over attn's (targets: forward >= %.1fx, forward + backward "
           ">= %.1fx at L >= %d). Command: `%s`." % (
               data["device"], data["torch"], data["date"],
               "%.0f" % gemm_tf if gemm_tf else "n/a", TARGETS["fwd"], TARGETS["fwdbwd"],
               TARGET_MIN_L, data["command"]), "",
           "| L | D | mask | pass | attn ms | flash ms | cudnn ms | efficient ms | attn TFLOP/s "
           "| attn / cuBLAS | vs flash |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["results"]:
        c, t = r["case"], r["times"]

        def ms(who):
            return "%.3f" % t[who]["median_ms"] if "median_ms" in t.get(who, {}) else "n/a"
        a = tflops(r, "attn")
        ratio = (t["flash"]["median_ms"] / t["attn"]["median_ms"]
                 if "median_ms" in t.get("flash", {}) and "median_ms" in t.get("attn", {})
                 else None)
        out.append("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            c["L"], c["D"], "causal" if c["causal"] else "none", c["pass"], ms("attn"),
            ms("flash"), ms("cudnn"), ms("efficient"), "%.0f" % a if a else "n/a",
            "%.0f%%" % (100 * a / gemm_tf) if a and gemm_tf else "n/a",
            "%.2fx" % ratio if ratio else "n/a"))
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__)
    p.add_argument("--bench", default=os.path.join(ROOT, ".cuda-bundle", "bench_cuda"),
                   help="attn's bench_cuda (default: the one scripts/test_cuda.sh pack bundles)")
    p.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--quick", action="store_true", help="L 2048 only")
    p.add_argument("--flex", action="store_true", help="also flex_attention (torch.compile)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--report", metavar="JSON", help="only write the markdown of a saved run")
    p.add_argument("--markdown", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = p.parse_args(argv)
    if args.report:
        import md_section
        md_section.replace_section(args.markdown, "compare_cuda.py",
                                   markdown(json.load(open(args.report))))
        return 0
    args.lengths = [2048] if args.quick else [int(x) for x in args.lengths.split(",")]
    args.dims = [int(x) for x in args.dims.split(",")]
    data = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
