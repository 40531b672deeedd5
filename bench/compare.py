#!/usr/bin/python3
"""Times attn's attention against PyTorch and OpenBLAS sgemm in the same run, alternating.

    PYTHONPATH=build/python /usr/bin/python3 bench/compare.py            # full (< 10 min)
    PYTHONPATH=build/python /usr/bin/python3 bench/compare.py --quick    # subset (< 2 min)

Every case times its contenders in turn, one after the other, several repetitions:
    attn, torch (matmul-softmax-matmul), torch (_scaled_dot_product_attention), sgemm, attn, ...
and reports the median and the best time of each. PyTorch's figure is the better of its two
implementations (a variant more than 1.5x slower than the other at the first, warm, timing is
dropped from the rotation to save time; the report names the variant that won). OpenBLAS sgemm
1024^3 runs inside every case, so "fraction of sgemm" compares with the sgemm measured alongside.

FLOPs as in DESIGN.md: forward 4*B*H*L_q*L_k*D (half when causal), backward 2.5x forward, so
forward+backward is 3.5x forward. Both libraries get the same number of threads (default 2).

The full mode writes BENCHMARKS.md at the repository root, bench/attention_results.json (the raw
results) and bench/attention_gflops.png; --quick prints its markdown (write it somewhere with
--out). These are figures, not tests. The plot is drawn by the built `attn plot` (attn::plot, the
renderer of `attn train`'s loss curve); --replot RESULTS.json redraws it from saved results:

    /usr/bin/python3 bench/compare.py --replot bench/attention_results.json
"""
import argparse
import ctypes
import ctypes.util
import datetime
import gc
import inspect
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import md_section  # noqa: E402
DEFAULT_PLOT = os.path.join(HERE, "attention_gflops.png")
DEFAULT_RESULTS = os.path.join(HERE, "attention_results.json")

MiB = 1 << 20
# Environment variables that change how the thread pools wait or how many threads they use.
OMP_ENV_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OMP_PROC_BIND",
                "OMP_PLACES", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                "OPENBLAS_THREAD_TIMEOUT")


# ---- attn, torch, OpenBLAS -----------------------------------------------------------------------
def import_attn(build_dir):
    try:
        import attn  # noqa: F401  (PYTHONPATH=build/python)
    except ImportError:
        sys.path.insert(0, os.path.join(build_dir, "python"))
        import attn  # noqa: F401
    return sys.modules["attn"]


class OpenBLAS:
    """cblas_sgemm straight from libopenblas.so.0: the same library attn and torch link."""

    def __init__(self):
        name = "libopenblas.so.0"
        self.lib = ctypes.CDLL(name)
        self.path = self._loaded_path("libopenblas") or name
        L = self.lib
        L.cblas_sgemm.restype = None
        c_int, c_float, ptr = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
        L.cblas_sgemm.argtypes = ([c_int] * 6 + [c_float, ptr, c_int, ptr, c_int, c_float, ptr,
                                                 c_int])
        L.openblas_get_num_threads.restype = ctypes.c_int
        L.openblas_set_num_threads.argtypes = [ctypes.c_int]
        try:
            L.openblas_get_corename.restype = ctypes.c_char_p
            L.openblas_get_config.restype = ctypes.c_char_p
            self.corename = L.openblas_get_corename().decode()
            self.config = L.openblas_get_config().decode().strip()
        except AttributeError:
            self.corename = self.config = "?"

    @staticmethod
    def _loaded_path(stem):
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    if stem in line and ".so" in line:
                        return line.split()[-1]
        except OSError:
            pass
        return None

    def sgemm_fn(self, n=1024):
        import numpy as np
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.zeros((n, n), dtype=np.float32)
        pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
        f = self.lib.cblas_sgemm

        def sgemm():
            f(101, 111, 111, n, n, n, 1.0, pa, n, pb, n, 0.0, pc, n)  # RowMajor, NoTrans, NoTrans
        sgemm.keep = (a, b, c)
        return sgemm


def set_threads(n, attn, torch, blas):
    attn.set_num_threads(n)     # OpenMP and OpenBLAS
    torch.set_num_threads(n)    # torch's OpenMP pool (its OpenBLAS is the same library instance)
    blas.lib.openblas_set_num_threads(n)


# ---- cases ---------------------------------------------------------------------------------------
class Case:
    def __init__(self, group, B, H, L_q, L_k, D=64, causal=False, H_kv=None,
                 passes=("fwd", "fwdbwd")):
        self.group, self.B, self.H, self.L_q, self.L_k, self.D = group, B, H, L_q, L_k, D
        self.causal, self.H_kv, self.passes = causal, H_kv or H, passes

    @property
    def shape(self):
        s = "B=%d H=%d" % (self.B, self.H)
        if self.H_kv != self.H:
            s += " H_kv=%d" % self.H_kv
        if self.L_q == self.L_k:
            s += " L=%d" % self.L_q
        else:
            s += " L_q=%d L_k=%d" % (self.L_q, self.L_k)
        return s + " D=%d" % self.D

    @property
    def name(self):
        return "%s %s %s" % (self.group, self.shape, "causal" if self.causal else "full")

    def flops(self, pass_):
        f = 4.0 * self.B * self.H * self.L_q * self.L_k * self.D
        if self.causal:
            f /= 2
        return f * (3.5 if pass_ == "fwdbwd" else 1.0)


def make_cases(quick):
    cases = []
    lengths = (512, 2048) if quick else (512, 1024, 2048, 4096)
    for causal in (False, True):
        for L in lengths:
            cases.append(Case("sweep", 1, 12, L, L, causal=causal))
    if not quick:
        for causal in (False, True):
            cases.append(Case("batch", 4, 12, 1024, 1024, causal=causal))
    cases.append(Case("decode", 1, 12, 1, 4096, passes=("fwd",) if quick else ("fwd", "fwdbwd")))
    gqa_L = 1024 if quick else 2048
    for causal in ((False,) if quick else (False, True)):
        cases.append(Case("gqa", 1, 12, gqa_L, gqa_L, causal=causal, H_kv=4,
                          passes=("fwd",) if quick else ("fwd", "fwdbwd")))
    return cases


# ---- the contenders ------------------------------------------------------------------------------
class Env:
    """attn/torch modules and what attn supports, probed once."""

    def __init__(self, attn, torch, blas, reference=False):
        self.attn, self.torch, self.blas = attn, torch, blas
        self.reference = reference  # time attn's naive reference kernel instead of the default
        self.F = attn.nn.functional
        self.grad_reset = False
        params = inspect.signature(self.F.scaled_dot_product_attention).parameters
        self.attn_gqa = "enable_gqa" in params
        self.backward_mode, self.backward_note = self._probe_backward()

    def _probe_backward(self):
        """'autograd', 'tensor' (a Tensor-level backward function) or None, and a note."""
        attn, F = self.attn, self.F
        try:
            q = attn.randn(1, 2, 8, 4).requires_grad_()
            k = attn.randn(1, 2, 8, 4).requires_grad_()
            v = attn.randn(1, 2, 8, 4).requires_grad_()
            out = F.scaled_dot_product_attention(q, k, v)
            out.backward(attn.ones_like(out))
            if q.grad is not None and k.grad is not None and v.grad is not None:
                try:
                    q.grad = None
                    self.grad_reset = True
                except Exception:  # noqa: BLE001
                    self.grad_reset = False
                return "autograd", ("attn autograd: q.requires_grad_(); out.backward(g)%s" % (
                    "" if self.grad_reset else
                    " (.grad cannot be reset to None: gradients accumulate across calls)"))
            autograd_error = "backward() left .grad unset"
        except Exception as e:  # noqa: BLE001  (anything: autograd has not landed)
            autograd_error = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:120])
        C = attn._C.functional
        fwd = getattr(C, "scaled_dot_product_attention_forward", None)
        bwd = getattr(C, "scaled_dot_product_attention_backward", None)
        if fwd is not None and bwd is not None:
            try:
                q = attn.randn(1, 2, 8, 4)
                r = fwd(q, q, q)
                bwd(attn.ones_like(q), q, q, q, r)
                return "tensor", ("attn autograd unavailable (%s); fwd+bwd timed through the "
                                  "Tensor-level scaled_dot_product_attention_forward/_backward"
                                  % autograd_error)
            except Exception as e:  # noqa: BLE001
                autograd_error += "; Tensor-level backward: %s" % str(e).splitlines()[0][:120]
        return None, ("attn has no backward yet (%s): forward+backward rows show PyTorch only"
                      % autograd_error)

    def inputs(self, case, grad):
        torch, attn = self.torch, self.attn
        g = torch.Generator().manual_seed(1234)
        shp_q = (case.B, case.H, case.L_q, case.D)
        shp_kv = (case.B, case.H_kv, case.L_k, case.D)
        tq, tk, tv = (torch.randn(s, generator=g) for s in (shp_q, shp_kv, shp_kv))
        tg = torch.randn(shp_q, generator=g)
        aq, ak, av, ag = (attn.from_numpy(t.numpy().copy()) for t in (tq, tk, tv, tg))
        if grad:
            for t in (tq, tk, tv):
                t.requires_grad_()
            if self.backward_mode == "autograd":
                for t in (aq, ak, av):
                    t.requires_grad_()
        return (aq, ak, av, ag), (tq, tk, tv, tg)

    # attn ---------------------------------------------------------------------------------------
    def attn_forward(self, case, a):
        F = self.F
        q, k, v = a[:3]
        kw = dict(is_causal=case.causal)
        if self.reference:
            kw["reference"] = True
        if case.L_q != case.L_k and case.causal:
            kw["causal_bottom_right"] = True
        if case.H_kv != case.H:
            if self.attn_gqa:
                kw["enable_gqa"] = True
            else:
                # No enable_gqa keyword: broadcast instead (no copies): query head h = h_kv * G + g
                # uses key/value head h_kv, as torch's repeat_interleave below.
                G = case.H // case.H_kv
                q = q.view(case.B, case.H_kv, G, case.L_q, case.D)
                k, v = k.unsqueeze(2), v.unsqueeze(2)

                def gqa():
                    return F.scaled_dot_product_attention(q, k, v, **kw)
                return gqa

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, **kw)
        return fwd

    def attn_fn(self, case, pass_, a):
        fwd = self.attn_forward(case, a)
        if pass_ == "fwd":
            return fwd
        if self.backward_mode == "autograd":
            leaves, g = a[:3], a[3]
            q5 = case.H_kv != case.H and not self.attn_gqa

            reset = self.grad_reset

            def fwdbwd():
                if reset:
                    for t in leaves:
                        t.grad = None
                out = fwd()
                out.backward(g.view(out.shape) if q5 else g)
                return out
            return fwdbwd
        if self.backward_mode == "tensor":
            C = self.attn._C.functional
            q, k, v, g = a
            if case.H_kv != case.H:
                return None  # the Tensor-level path is timed for plain shapes only

            def fwdbwd_tensor():
                r = C.scaled_dot_product_attention_forward(q, k, v, is_causal=case.causal)
                C.scaled_dot_product_attention_backward(g, q, k, v, r, is_causal=case.causal)
                return r
            return fwdbwd_tensor
        return None

    # torch ----------------------------------------------------------------------------------------
    def torch_forwards(self, case, t):
        """{variant: forward fn} for the PyTorch contenders."""
        torch = self.torch
        q, k, v = t[:3]
        scale = 1.0 / math.sqrt(case.D)
        G = case.H // case.H_kv
        # Causal the usual way: a bool buffer made once, masked_fill with -inf each call.
        masked = None
        if case.causal:
            off = case.L_k - case.L_q if case.L_q != case.L_k else 0
            masked = ~torch.ones(case.L_q, case.L_k, dtype=torch.bool).tril(off)

        def kv():
            if G == 1:
                return k, v
            # torch 1.13 has no GQA: repeat the key/value heads (inside the timed call).
            return k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)

        def math_fwd():
            kk, vv = kv()
            s = (q * scale) @ kk.transpose(-2, -1)
            if masked is not None:
                s = s.masked_fill(masked, float("-inf"))
            return torch.softmax(s, dim=-1) @ vv

        sdpa = torch._C._nn._scaled_dot_product_attention
        # 1.13: (query, key, value, attn_mask=None, dropout_p=0.0, need_attn_weights=False,
        #        is_causal=False) -> (out, weights); is_causal is top-left only.
        fns = {"matmul-softmax-matmul": math_fwd}
        if not (case.causal and case.L_q != case.L_k):
            def sdpa_fwd():
                kk, vv = kv()
                return sdpa(q, kk, vv, None, 0.0, False, case.causal)[0]
            fns["_scaled_dot_product_attention"] = sdpa_fwd
        return fns

    def torch_fns(self, case, pass_, t):
        fwds = self.torch_forwards(case, t)
        if pass_ == "fwd":
            return fwds
        leaves, g = t[:3], t[3]
        out = {}
        for name, fwd in fwds.items():
            def fwdbwd(fwd=fwd):
                for x in leaves:
                    x.grad = None
                o = fwd()
                o.backward(g)  # the gradient of sum(o * g)
                return o
            out[name] = fwdbwd
        return out


# ---- timing --------------------------------------------------------------------------------------
def now():
    return time.perf_counter()


def time_calls(fn, n):
    t0 = now()
    for _ in range(n):
        fn()
    return (now() - t0) / n


def run_alternating(contenders, reps, min_reps, budget_s, target_s, log, settle_s=0.0):
    """contenders: [(key, fn, before)] with `before` a callable run untimed before each sample
    (thread settings). Each sample is an idle pause of settle_s, `before(); fn()` untimed, then the mean of `inner` timed
    back-to-back calls. Returns {key: [seconds per call, ...]} and the dropped torch variants."""
    inner, first = {}, {}
    for key, fn, before in contenders:  # warm-up, then one timed call to calibrate
        time.sleep(settle_s)
        before()
        fn()
        before()
        dt = time_calls(fn, 1)
        first[key] = dt
        inner[key] = max(1, int(math.ceil(target_s / max(dt, 1e-6))))
    # Drop a torch variant far slower than the other (its warm figure is kept for the record).
    torch_keys = [k for k, _, _ in contenders if k.startswith("torch:")]
    dropped = {}
    if len(torch_keys) > 1:
        best = min(first[k] for k in torch_keys)
        for k in torch_keys:
            if first[k] > 1.5 * best:
                dropped[k] = first[k]
        contenders = [c for c in contenders if c[0] not in dropped]
    per_rep = sum(first[k] * (inner[k] + 1) for k, _, _ in contenders)  # + the warm-up call
    reps = max(min_reps, min(reps, int(budget_s / max(per_rep, 1e-9))))
    samples = {k: [] for k, _, _ in contenders}
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            for key, fn, before in contenders:
                time.sleep(settle_s)  # the previous contender's spinning workers go to sleep
                before()
                # One untimed call first, for every contender alike: on this VM a worker thread
                # (libgomp's or OpenBLAS's) that slept through the previous contender's sample
                # takes milliseconds to wake, which would land on the first timed call.
                fn()
                samples[key].append(time_calls(fn, inner[key]))
    finally:
        gc.enable()
    for k, dt in dropped.items():
        log("    dropped %s (warm call %.1f ms, > 1.5x the best torch variant)" % (k, dt * 1e3))
    return samples, dropped


def summarize(samples):
    return {"median": statistics.median(samples), "best": min(samples), "n": len(samples)}


# ---- memory (a subprocess) -----------------------------------------------------------------------
def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def memory_child(L, threads, mode):
    """Runs in a fresh process: peak RSS added by attention over its inputs at (1, 1, L, 64)."""
    import attn
    attn.set_num_threads(threads)
    F = attn.nn.functional
    D = 64
    q, k, v, g = (attn.randn(1, 1, L, D) for _ in range(4))
    if mode == "autograd":
        for t in (q, k, v):
            t.requires_grad_()
    tensor_bytes = L * D * 4
    reset = False
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        pass
    base_rss, base_hwm = _status_kib("VmRSS"), _status_kib("VmHWM")
    t0 = time.perf_counter()
    if mode == "autograd":
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)
        kept = 4  # out, dq, dk, dv
    elif mode == "tensor":
        C = attn._C.functional
        r = C.scaled_dot_product_attention_forward(q, k, v, is_causal=True)
        C.scaled_dot_product_attention_backward(g, q, k, v, r, is_causal=True)
        kept = 4
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        kept = 1
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    base = base_rss  # without a reset, VmHWM may predate the inputs (then "added" is a floor)
    print(json.dumps({
        "L": L, "mode": mode, "threads": threads, "seconds": seconds, "hwm_reset": reset,
        "base_rss_kib": base_rss, "base_hwm_kib": base_hwm, "peak_kib": peak,
        "added_mib": (peak - base) / 1024.0,
        "kept_mib": kept * tensor_bytes / MiB,
        "beyond_mib": (peak - base) / 1024.0 - kept * tensor_bytes / MiB,
        "inputs_mib": 4 * tensor_bytes / MiB,
    }))


def run_memory(env, L, threads, timeout, log):
    mode = env.backward_mode or "forward"
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", str(L), str(threads), mode]
    log("  memory: %s" % " ".join(shlex.quote(c) for c in cmd[1:]))
    try:
        path = [os.path.dirname(os.path.dirname(os.path.abspath(env.attn.__file__)))]
        if os.environ.get("PYTHONPATH"):
            path.append(os.environ["PYTHONPATH"])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)))
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %d s" % timeout, "mode": mode, "L": L}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1],
                "mode": mode, "L": L}
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- machine -------------------------------------------------------------------------------------
def machine_info():
    info = {"model": platform.processor() or "?", "cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            v = v.strip()
            if k == "Model name":
                info["model"] = v
            elif k == "CPU(s)":
                info["cpus"] = v
            elif k == "Core(s) per socket":
                info["cores_per_socket"] = v
            elif k == "Thread(s) per core":
                info["threads_per_core"] = v
            elif k == "Socket(s)":
                info["sockets"] = v
            elif k == "Model":
                info["model_number"] = v
            elif k == "CPU family":
                info["family"] = v
            elif k == "L2 cache":
                info["l2"] = v
            elif k == "Hypervisor vendor":
                info["hypervisor"] = v
        info["avx512"] = " avx512f " in out
    except OSError:
        pass
    try:
        info["loadavg"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    return info


def torch_capability(torch):
    m = re.search(r"CPU capability usage: (\S+)", torch.__config__.show())
    return m.group(1) if m else "?"


# ---- report --------------------------------------------------------------------------------------
def fmt_ms(s):
    if s is None:
        return "n/a"
    ms = s * 1e3
    return "%.3g" % ms if ms < 10 else "%.0f" % ms if ms >= 1000 else "%.1f" % ms


def fmt_g(x):
    return "n/a" if x is None else ("%.1f" % x if x < 100 else "%.0f" % x)


def pass_name(p):
    return "fwd" if p == "fwd" else "fwd+bwd"


def verdicts(rows, threads_rows, memory, targets_threads):
    """[(target, verdict, detail)]."""
    out = []

    def ratio_target(label, pass_, causal, need):
        rs = [r for r in rows if r["pass"] == pass_ and r["causal"] == causal
              and r["group"] in ("sweep", "batch")]
        got = [r for r in rs if r.get("speedup") is not None]
        if not got:
            out.append((label, "not measured", "attn has no %s path yet" % pass_name(pass_)
                        if rs else "no such case in this run"))
            return
        worst = min(got, key=lambda r: r["speedup"])
        detail = "min %.2fx (%s); all: %s" % (
            worst["speedup"], worst["shape"],
            ", ".join("%.2fx" % r["speedup"] for r in got))
        if worst["speedup"] >= need:
            out.append((label, "met", detail))
        else:
            out.append((label, "missed: %.3fx < %.0fx (%.1f%% short)" % (
                worst["speedup"], need, 100 * (1 - worst["speedup"] / need)), detail))

    ratio_target("forward, no mask: >= 3x PyTorch", "fwd", False, 3.0)
    ratio_target("forward, causal: >= 5x PyTorch", "fwd", True, 5.0)
    ratio_target("forward+backward, no mask: >= 3x PyTorch", "fwdbwd", False, 3.0)
    ratio_target("forward+backward, causal: >= 5x PyTorch", "fwdbwd", True, 5.0)

    rs = [r for r in rows if r["pass"] == "fwd" and not r["causal"] and r["group"] == "sweep"
          and r["L_q"] >= 1024 and r.get("frac_sgemm") is not None]
    if rs:
        worst = min(rs, key=lambda r: r["frac_sgemm"])
        detail = "min %.0f%% (%s); all: %s" % (100 * worst["frac_sgemm"], worst["shape"],
                                                ", ".join("%.0f%%" % (100 * r["frac_sgemm"])
                                                          for r in rs))
        v = "met" if worst["frac_sgemm"] >= 0.6 else "missed by %.0f points" % (
            100 * (0.6 - worst["frac_sgemm"]))
        out.append(("forward, no mask, L >= 1024: >= 60% of sgemm GFLOP/s", v, detail))
    else:
        out.append(("forward, no mask, L >= 1024: >= 60% of sgemm GFLOP/s", "not measured", ""))

    label = "memory: fwd+bwd B=H=1 L=32768 D=64 causal adds <= 96 MiB"
    if memory is None:
        out.append((label, "not measured", "not in this run"))
    elif "error" in memory:
        out.append((label, "not measured", memory["error"]))
    elif memory["mode"] == "forward":
        out.append((label, "not measured (forward only)",
                    "attn has no backward yet; the forward alone added %.1f MiB beyond its output"
                    % memory["beyond_mib"]))
    else:
        b = memory["beyond_mib"]
        v = "met" if b <= 96 else "missed by %.1f MiB" % (b - 96)
        out.append((label, v, "%.1f MiB beyond out+dq+dk+dv (peak RSS rose %.1f MiB over the "
                              "inputs; those four tensors are %.0f MiB)"
                    % (b, memory["added_mib"], memory["kept_mib"])))

    label = "2 threads >= 1.7x faster than 1 thread at L=2048"
    got = [r for r in threads_rows if r.get("attn_speedup") is not None]
    if not got:
        out.append((label, "not measured", ""))
    else:
        worst = min(got, key=lambda r: r["attn_speedup"])
        detail = "min %.2fx (%s); all: %s" % (
            worst["attn_speedup"], worst["what"],
            ", ".join("%s %.2fx" % (r["what"], r["attn_speedup"]) for r in got))
        v = "met" if worst["attn_speedup"] >= targets_threads else "missed by %.2fx" % (
            targets_threads - worst["attn_speedup"])
        out.append((label, v, detail))
    return out


def render_markdown(res):
    m = res["machine"]
    L = []
    w = L.append
    w("## Attention against PyTorch %s and OpenBLAS sgemm (bench/compare.py)" % res["torch_version"])
    w("")
    w("Generated by `bench/compare.py`%s on %s. These are figures, not tests."
      % (" --quick" if res["quick"] else "", res["date"]))
    w("")
    w("### Reproduce")
    w("")
    w("```sh")
    w("cmake -S . -B build -DPython_EXECUTABLE=/usr/bin/python3 && cmake --build build -j2")
    w(res["command"])
    w("build/bench/bench_attention --benchmark_min_time=0.2 --benchmark_filter='fwd/fused/sweep'"
      "   # the C++ kernels alone (Google Benchmark; no filter: all cases, --threads=1 for one)")
    w("```")
    w("")
    w("### Machine and settings")
    w("")
    w("- CPU: %s (family %s model %s), %s logical CPUs (%s core(s) per socket, %s thread(s) per "
      "core)%s; load average at start %s, at end %s."
      % (m.get("model"), m.get("family", "?"), m.get("model_number", "?"), m.get("cpus"),
         m.get("cores_per_socket", "?"), m.get("threads_per_core", "?"),
         ", under %s" % m["hypervisor"] if m.get("hypervisor") else "",
         " ".join(m.get("loadavg", [])), " ".join(res.get("loadavg_end", []))))
    w("- Threads: %d for attn and for PyTorch (`attn.set_num_threads`, `torch.set_num_threads`, "
      "`openblas_set_num_threads`); the scaling rows also use 1." % res["threads"])
    w("- PyTorch %s (Debian, CPU capability %s); attn %s (%s); %s, core %s."
      % (res["torch_version"], res["torch_capability"], res["attn_version"], res["attn_path"],
         res["openblas_config"], res["openblas_core"]))
    w("- attn backward: %s." % res["backward_note"])
    if res.get("gqa_note"):
        w("- %s" % res["gqa_note"])
    w("- OpenBLAS sgemm 1024^3 (timed inside every case): median %.1f GFLOP/s, best %.1f."
      % (res["sgemm_median_gflops"], res["sgemm_best_gflops"]))
    w("- Method: each case alternates attn, PyTorch (each variant) and sgemm, %s repetitions "
      "(fewer for the slowest cases, at least %d); times are per call, median (best). Speedup = "
      "PyTorch median / attn median, PyTorch being the faster of matmul-softmax-matmul (causal: "
      "a precomputed bool mask, `masked_fill(-inf)`) and "
      "`torch._C._nn._scaled_dot_product_attention`; forward+backward is `out.backward(g)` "
      "(the gradient of `sum(out * g)`) with .grad reset each call. GFLOP/s counts "
      "4·B·H·L_q·L_k·D per forward (half when causal), backward 2.5x forward."
      % (res["reps"], res["min_reps"]))
    env = res.get("omp_env") or {}
    w("- Idle and spinning threads: on this VM a worker thread that has slept (about 50 ms "
      "idle) takes several ms to wake, and OpenBLAS's pthread workers keep spinning for 2^28 "
      "cycles (~0.1 s) after each BLAS call, taking a core from whatever runs next (attn at "
      "L=512 right after sgemm: 4.2 -> 15-24 ms per call for ~0.1 s). So every contender, attn, "
      "PyTorch and sgemm alike, in the same process and environment (%s; attn and PyTorch share "
      "one libgomp, sgemm and PyTorch's matmuls one OpenBLAS pthread pool), gets the same "
      "sample: an idle pause of %.0f ms (the previous contender's workers go to sleep), one "
      "untimed warm-up call (its own workers wake), then back-to-back timed calls (>= %.0f ms "
      "in all). What stays is each library's own behaviour in its default settings (PyTorch's "
      "softmax shares the cores with OpenBLAS workers spinning between its matmuls, hence its "
      "spread). Rejected: `OMP_WAIT_POLICY=active` (libgomp's threads then spin on both cores "
      "and halve OpenBLAS: sgemm 1024^3 ~11.8 -> ~23 ms, PyTorch L=1024 forward ~75 -> ~120 ms, "
      "which would flatter attn) and `OPENBLAS_THREAD_TIMEOUT=4` (steadier, but PyTorch's best "
      "L=512 forward went from ~13 to ~23 ms). The verdicts use medians (of the per-sample "
      "means); the best sample is shown in brackets."
      % (", ".join("%s=%s" % kv for kv in sorted(env.items())) or
         "no OMP_*/GOMP_*/OPENBLAS_* variables set: library defaults", res["settle_ms"],
         res["target_ms"]))
    w("")
    w("### Targets (2 threads, ratios from this run)")
    w("")
    w("| target | verdict | detail |")
    w("|---|---|---|")
    for t, v, d in res["verdicts"]:
        w("| %s | **%s** | %s |" % (t, v, d))
    w("")
    w("### Results")
    w("")
    w("| shape | causal | pass | attn ms: median (best) | torch ms: median (best) | "
      "torch variant | attn GFLOP/s | torch GFLOP/s | speedup (torch/attn) | fraction of sgemm |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        a, t = r.get("attn"), r.get("torch")
        w("| %s %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["group"], r["shape"], "yes" if r["causal"] else "no", pass_name(r["pass"]),
            "%s (%s)" % (fmt_ms(a["median"]), fmt_ms(a["best"])) if a else "n/a",
            "%s (%s)" % (fmt_ms(t["median"]), fmt_ms(t["best"])) if t else "n/a",
            r.get("torch_variant", ""),
            fmt_g(r.get("attn_gflops")), fmt_g(r.get("torch_gflops")),
            "%.2fx" % r["speedup"] if r.get("speedup") is not None else "n/a",
            "%.0f%%" % (100 * r["frac_sgemm"]) if r.get("frac_sgemm") is not None else "n/a"))
    w("")
    notes = [r for r in res["rows"] if r.get("note")]
    if notes:
        for r in notes:
            w("- %s %s %s %s: %s" % (r["group"], r["shape"], "causal" if r["causal"] else "no mask",
                                    pass_name(r["pass"]), r["note"]))
        w("")
    w(("GQA rows: attn is called with `enable_gqa=True` (k and v keep their H_kv heads, no "
       "copies); " if not res.get("gqa_note") else "GQA rows: ") +
      "PyTorch 1.13 has no grouped-query attention, so its key/value heads are repeated "
      "(`repeat_interleave`) inside the timed call. Decode: one query against 4096 keys.")
    w("")
    w("### Threads: 1 vs %d at L=2048 (B=1, H=12, D=64)" % res["threads"])
    w("")
    w("| case | attn 1 thread ms | attn %d threads ms | attn speedup | torch 1 thread ms | "
      "torch %d threads ms | torch speedup |" % (res["threads"], res["threads"]))
    w("|---|---|---|---|---|---|---|")
    for r in res["threads_rows"]:
        w("| %s | %s | %s | %s | %s | %s | %s |" % (
            r["what"], fmt_ms(r.get("attn1")), fmt_ms(r.get("attnN")),
            "%.2fx" % r["attn_speedup"] if r.get("attn_speedup") else "n/a",
            fmt_ms(r.get("torch1")), fmt_ms(r.get("torchN")),
            "%.2fx" % r["torch_speedup"] if r.get("torch_speedup") else "n/a"))
    w("")
    w("### Memory")
    w("")
    mem = res.get("memory")
    if mem is None:
        w("Not measured in this run.")
    elif "error" in mem:
        w("Not measured: %s." % mem["error"])
    else:
        w("B=H=1, L=%d, D=64, causal, %s, %d threads, in a fresh process: peak RSS (VmHWM%s) "
          "rose %.1f MiB over the inputs; out%s account for %.0f MiB of that, leaving "
          "**%.1f MiB** of working memory (target <= 96 MiB; a kernel that materialises the "
          "scores and weights needs 2·L² floats = 8 GiB). Time: %.2f s."
          % (mem["L"], {"autograd": "forward+backward (autograd)",
                        "tensor": "forward+backward (Tensor-level)",
                        "forward": "forward only (attn has no backward yet)"}[mem["mode"]],
             mem["threads"], ", reset after the inputs" if mem["hwm_reset"] else "",
             mem["added_mib"], "" if mem["mode"] == "forward" else ", dq, dk and dv",
             mem["kept_mib"], mem["beyond_mib"], mem["seconds"]))
    w("")
    if res.get("plot"):
        w("### Plot")
        w("")
        w("![GFLOP/s against L](%s)" % res["plot"])
        w("")
    return "\n".join(L)


class PlotError(RuntimeError):
    pass


def find_attn_cli(build_dir):
    """The `attn` command-line tool of the build (it draws the plot: `attn plot`)."""
    exe = os.path.join(build_dir, "attn")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise PlotError("%s not found: build it (cmake --build %s --target attn_cli) or give "
                        "--build-dir" % (exe, build_dir))
    return exe


def _hex(rgb):
    return "#%02x%02x%02x" % rgb


def plot_spec(res):
    """The figure as `attn plot` reads it (include/attn/plot.h, attn::plot::figure_from_json):
    forward and forward+backward GFLOP/s against L, attn and PyTorch, causal or not, with the
    sgemm measured alongside as a reference line; one legend under both panels."""
    rows = [r for r in res["rows"] if r["group"] == "sweep"]
    if not rows:
        return None
    blue, lblue, red, orange = (31, 100, 180), (90, 170, 230), (200, 40, 40), (240, 150, 40)
    torch_name = "PyTorch %s" % ".".join(res["torch_version"].split(".")[:2])
    sgemm = res.get("sgemm_median_gflops")
    charts = []
    for pass_ in ("fwd", "fwdbwd"):
        series, attn_points = [], 0
        for who, causal, color, dash, marker in (
                ("attn", False, blue, [], "disc"), ("attn", True, lblue, [], "triangle"),
                ("torch", False, red, [12, 7], "square"), ("torch", True, orange, [12, 7],
                                                           "square")):
            pts = sorted((r["L_q"], r[who + "_gflops"]) for r in rows
                         if r["pass"] == pass_ and r["causal"] == causal
                         and isinstance(r.get(who + "_gflops"), (int, float))
                         and math.isfinite(r[who + "_gflops"]))
            if who == "attn":
                attn_points += len(pts)
            series.append({
                "name": "%s, %s" % ("attn" if who == "attn" else torch_name,
                                    "causal" if causal else "no mask"),
                "x": [p[0] for p in pts], "y": [p[1] for p in pts], "color": _hex(color),
                "dash": dash, "marker": marker, "marker_size": 5, "line_width": 3})
        title = "%s, B=1 H=12 D=64, %d threads" % ("forward" if pass_ == "fwd" else
                                                    "forward+backward", res["threads"])
        if not attn_points and pass_ == "fwdbwd":
            title += " (attn: no backward yet)"
        chart = {"title": title, "x_label": "sequence length L", "y_label": "GFLOP/s",
                 "log_x": True, "y_min": 0, "series": series}
        if isinstance(sgemm, (int, float)) and math.isfinite(sgemm) and sgemm > 0:
            chart["reference_lines"] = [{"y": sgemm, "label": "OpenBLAS sgemm 1024^3",
                                         "color": _hex((110, 110, 110)), "dash": [10, 6],
                                         "line_width": 2}]
        charts.append(chart)
    return {"width": 1400, "height": 620, "columns": 2, "legend": "below",
            "footer": "attn bench/compare.py, %s" % res["date"][:10], "charts": charts}


def draw_plot(res, path, build_dir):
    """Writes the plot through the built `attn plot` (the renderer of `attn train`'s loss curve);
    the spec goes to its standard input. Raises PlotError when it cannot."""
    spec = plot_spec(res)
    if spec is None:
        return False
    exe = find_attn_cli(build_dir)
    text = json.dumps(spec, allow_nan=False)
    p = subprocess.run([exe, "plot", "-", "--out", path], input=text, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise PlotError("%s plot failed (exit %d): %s" % (exe, p.returncode, p.stderr.strip()))
    return True


def write_json(path, res):
    """The raw results, atomically (--replot reads them back)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def replot(args):
    """--replot RESULTS.json: draws the plot again from saved results, no benchmark run."""
    with open(args.replot) as f:
        res = json.load(f)
    path = args.plot
    if not path:
        if res.get("quick"):
            sys.exit("compare.py: %s holds quick-mode results: give --plot PATH (the default, %s, "
                     "is the full run's figure)" % (args.replot, DEFAULT_PLOT))
        path = DEFAULT_PLOT
    try:
        drawn = draw_plot(res, path, args.build_dir)
    except PlotError as e:
        sys.exit("compare.py: %s" % e)
    if not drawn:
        sys.exit("compare.py: %s has no sweep rows to plot" % args.replot)
    print("wrote %s (from %s, measured %s)" % (path, args.replot, res.get("date", "?")),
          file=sys.stderr)


# ---- main ----------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="subset, fewer repetitions (< 2 min)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, help="repetitions per case (default 5, quick 3)")
    ap.add_argument("--budget", type=float, help="seconds per case before cutting repetitions "
                    "down to the minimum (default 25, quick 8)")
    ap.add_argument("--only", help="regex on case names (e.g. 'sweep.*L=1024')")
    ap.add_argument("--out", help="markdown path (default: BENCHMARKS.md in full mode; "
                    "quick mode prints only)")
    ap.add_argument("--plot", help="image path, .png, .svg or .pdf (default: "
                    "bench/attention_gflops.png in full mode)")
    ap.add_argument("--json", help="write the raw results here (default: "
                    "bench/attention_results.json in full mode; quick mode: none)")
    ap.add_argument("--replot", metavar="RESULTS.json",
                    help="only draw the plot again from results saved by --json (no benchmark; "
                    "needs the attn tool of --build-dir, not torch); --plot names the image")
    ap.add_argument("--reference", action="store_true",
                    help="time attn's naive reference kernel instead of the default one")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-threads", action="store_true")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                    help="the build: its python/ is used when attn is not on PYTHONPATH, and its "
                    "attn tool draws the plot (default: build)")
    ap.add_argument("--memory-child", nargs=3, metavar=("L", "THREADS", "MODE"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--settle", type=float, default=0.15, metavar="SECONDS",
                    help="idle pause before each sample so the previous contender's spinning "
                    "workers have gone to sleep (default 0.15; OpenBLAS spins ~0.1 s)")
    ap.add_argument("--openblas-thread-timeout", default="unset", metavar="N",
                    help="set OPENBLAS_THREAD_TIMEOUT (idle OpenBLAS workers spin 2^N cycles "
                    "before sleeping) for this process; default: leave the environment alone")
    args = ap.parse_args()
    # Before torch, numpy or attn load OpenBLAS (it reads the variable when it starts).
    if args.openblas_thread_timeout != "unset":
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(args.openblas_thread_timeout)
    if args.memory_child:
        memory_child(int(args.memory_child[0]), int(args.memory_child[1]), args.memory_child[2])
        return
    if args.replot:
        replot(args)
        return

    quick = args.quick
    reps = args.reps or (3 if quick else 5)
    min_reps = 3 if reps >= 3 else reps
    budget = args.budget or (8.0 if quick else 25.0)
    target_s = 0.02 if quick else 0.05  # inner loop: at least this long per sample
    out_path = args.out or (None if quick else os.path.join(ROOT, "BENCHMARKS.md"))
    plot_path = args.plot or (None if quick else DEFAULT_PLOT)
    json_path = args.json or (None if quick else DEFAULT_RESULTS)
    if plot_path:
        try:
            find_attn_cli(args.build_dir)  # fail now rather than after the benchmarks
        except PlotError as e:
            sys.exit("compare.py: %s" % e)
    started = now()

    def log(*a):
        print(*a, file=sys.stderr, flush=True)

    machine = machine_info()
    import torch
    attn = import_attn(args.build_dir)
    blas = OpenBLAS()
    env = Env(attn, torch, blas, reference=args.reference)
    N = args.threads
    set_threads(N, attn, torch, blas)
    sgemm = blas.sgemm_fn(1024)
    sgemm_flops = 2.0 * 1024 ** 3
    noop = (lambda: None)

    log("attn %s from %s; torch %s; OpenBLAS %s (%s); %d threads"
        % (attn.__version__, os.path.dirname(attn.__file__), torch.__version__, blas.corename,
           blas.path, N))
    log("attn backward: %s" % env.backward_note)
    gqa_note = None
    if not env.attn_gqa:
        gqa_note = ("attn's Python scaled_dot_product_attention has no enable_gqa keyword here: "
                    "GQA rows broadcast q (B, H_kv, H/H_kv, L, D) against k, v (B, H_kv, 1, L, D) "
                    "(no copies).")

    rows, sgemm_samples = [], []
    cases = make_cases(quick)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    for case in cases:
        for pass_ in case.passes:
            grad = pass_ == "fwdbwd"
            a, t = env.inputs(case, grad)
            afn = env.attn_fn(case, pass_, a)
            tfns = env.torch_fns(case, pass_, t)
            row = {"group": case.group, "shape": case.shape, "causal": case.causal,
                   "pass": pass_, "B": case.B, "H": case.H, "H_kv": case.H_kv, "L_q": case.L_q,
                   "L_k": case.L_k, "D": case.D, "flops": case.flops(pass_)}
            log("%-48s %-7s" % (case.name, pass_name(pass_)))
            # Agreement check (forward outputs), outside the timing.
            if pass_ == "fwd" and afn is not None:
                import numpy as np
                ao = afn().numpy().reshape(case.B, case.H, case.L_q, case.D)
                to = next(iter(tfns.values()))().detach().numpy()
                row["max_abs_diff"] = float(np.max(np.abs(ao - to)))
                if not row["max_abs_diff"] < 1e-3:
                    row["note"] = "attn and torch outputs differ by %.3g" % row["max_abs_diff"]
            contenders = []
            if afn is not None:
                contenders.append(("attn", afn, noop))
            contenders += [("torch:" + k, f, noop) for k, f in tfns.items()]
            contenders.append(("sgemm", sgemm, noop))
            samples, dropped = run_alternating(contenders, reps, min_reps, budget, target_s, log,
                                               args.settle)
            sgemm_samples += samples["sgemm"]
            sg = summarize(samples["sgemm"])
            row["sgemm_gflops"] = sgemm_flops / sg["median"] / 1e9
            if "attn" in samples:
                row["attn"] = summarize(samples["attn"])
                row["attn_gflops"] = row["flops"] / row["attn"]["median"] / 1e9
                row["frac_sgemm"] = row["attn_gflops"] / row["sgemm_gflops"]
            tv = {k[6:]: summarize(v) for k, v in samples.items() if k.startswith("torch:")}
            best_v = min(tv, key=lambda k: tv[k]["median"])
            row["torch"], row["torch_variant"] = tv[best_v], best_v
            row["torch_variants"] = {k: v["median"] for k, v in tv.items()}
            row["torch_dropped"] = dropped
            row["torch_gflops"] = row["flops"] / row["torch"]["median"] / 1e9
            if row.get("attn"):
                row["speedup"] = row["torch"]["median"] / row["attn"]["median"]
                row["speedup_best"] = row["torch"]["best"] / row["attn"]["best"]
            log("    attn %s ms  torch %s ms (%s)  %s  sgemm %.0f GFLOP/s  [%d reps]" % (
                fmt_ms(row["attn"]["median"]) if row.get("attn") else "n/a",
                fmt_ms(row["torch"]["median"]), best_v,
                "speedup %.2fx, attn %.1f GFLOP/s (%.0f%% of sgemm)" % (
                    row["speedup"], row["attn_gflops"], 100 * row["frac_sgemm"])
                if row.get("speedup") else "", row["sgemm_gflops"], sg["n"]))
            rows.append(row)
            del a, t, afn, tfns, contenders

    # ---- threads: 1 vs N at L=2048 ----
    threads_rows = []
    if not args.skip_threads and N > 1:
        tcases = [(Case("sweep", 1, 12, 2048, 2048), "fwd")]
        if not quick:
            tcases += [(Case("sweep", 1, 12, 2048, 2048, causal=True), "fwd"),
                       (Case("sweep", 1, 12, 2048, 2048), "fwdbwd")]
        for case, pass_ in tcases:
            if args.only and not re.search(args.only, "threads " + case.name):
                continue
            what = "%s %s" % ("causal" if case.causal else "no mask", pass_name(pass_))
            log("threads 1 vs %d: %s" % (N, what))
            a, t = env.inputs(case, pass_ == "fwdbwd")
            afn = env.attn_fn(case, pass_, a)
            tfns = env.torch_fns(case, pass_, t)
            tfn = tfns["matmul-softmax-matmul"]
            one = (lambda: set_threads(1, attn, torch, blas))
            many = (lambda: set_threads(N, attn, torch, blas))
            contenders = []
            if afn is not None:
                contenders += [("attn1", afn, one), ("attnN", afn, many)]
            contenders += [("torch1", tfn, one), ("torchN", tfn, many)]
            samples, _ = run_alternating(contenders, reps, min_reps, budget, target_s, log,
                                         args.settle)
            set_threads(N, attn, torch, blas)
            r = {"what": what}
            for k, v in samples.items():
                r[k] = statistics.median(v)
            if "attn1" in r:
                r["attn_speedup"] = r["attn1"] / r["attnN"]
            r["torch_speedup"] = r["torch1"] / r["torchN"]
            log("    attn %s -> %s ms (%s)  torch %s -> %s ms (%.2fx)" % (
                fmt_ms(r.get("attn1")), fmt_ms(r.get("attnN")),
                "%.2fx" % r["attn_speedup"] if "attn_speedup" in r else "n/a",
                fmt_ms(r["torch1"]), fmt_ms(r["torchN"]), r["torch_speedup"]))
            threads_rows.append(r)

    # ---- memory ----
    memory = None
    if not args.skip_memory and not args.only:
        memory = run_memory(env, 32768, N, 150 if quick else 300, log)
        log("    %s" % json.dumps(memory))

    set_threads(N, attn, torch, blas)
    res = {
        "quick": quick, "threads": N, "reps": reps, "min_reps": min_reps,
        "target_ms": 1e3 * target_s, "settle_ms": 1e3 * args.settle,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "PYTHONPATH=build/python /usr/bin/python3 bench/compare.py"
                   + (" --quick" if quick else "")
                   + ("" if N == 2 else " --threads %d" % N)
                   + (" --reference" if args.reference else "")
                   + ("" if args.openblas_thread_timeout == "unset" else
                      " --openblas-thread-timeout %s" % args.openblas_thread_timeout),
        "omp_env": {k: os.environ[k] for k in OMP_ENV_VARS if k in os.environ},
        "machine": machine, "loadavg_end": open("/proc/loadavg").read().split()[:3],
        "torch_version": torch.__version__.split("+")[0],
        "torch_capability": torch_capability(torch),
        "attn_version": attn.__version__,
        "attn_path": os.path.relpath(os.path.dirname(attn.__file__), ROOT),
        "openblas_config": blas.config, "openblas_core": blas.corename,
        "backward_note": env.backward_note, "gqa_note": gqa_note,
        "sgemm_median_gflops": sgemm_flops / statistics.median(sgemm_samples) / 1e9
        if sgemm_samples else float("nan"),
        "sgemm_best_gflops": sgemm_flops / min(sgemm_samples) / 1e9
        if sgemm_samples else float("nan"),
        "rows": rows, "threads_rows": threads_rows, "memory": memory,
        "seconds": now() - started,
    }
    res["verdicts"] = verdicts(rows, threads_rows, memory, 1.7)
    plot_failed = None
    if plot_path:
        res["plot"] = os.path.relpath(plot_path, ROOT) if out_path and os.path.dirname(
            os.path.abspath(out_path)) == ROOT else os.path.abspath(plot_path)
    if json_path:  # before the plot: a failed plot can be redrawn with --replot
        write_json(json_path, res)
        log("wrote %s" % json_path)
    if plot_path:
        try:
            if not draw_plot(res, plot_path, args.build_dir):
                res.pop("plot")
        except PlotError as e:
            plot_failed = str(e)
            res.pop("plot")
            log("plot not drawn: %s%s" % (e, "; redraw it with --replot %s" % json_path
                                          if json_path else ""))
    md = render_markdown(res)
    if out_path:
        md_section.replace_section(out_path, "compare.py", md)
        log("wrote %s" % out_path)
    if plot_path and not plot_failed and res.get("plot"):
        log("wrote %s" % plot_path)
    print(md)
    log("total %.0f s" % (now() - started))
    if plot_failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
