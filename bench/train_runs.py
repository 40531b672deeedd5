"""Running the children of bench/train_compare.py (attn train, bench/train_torch.py, attn
generate) and reading what they print; the machine and version facts its report gives.
bench/train_compare.py re-exports these names (other bench scripts import them from there).
"""
import os
import re
import shlex
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

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


def thread_env(omp, blas=None, passive=False):
    env = dict(os.environ)
    blas = omp if blas is None else blas
    env.update({"OMP_NUM_THREADS": str(omp), "OPENBLAS_NUM_THREADS": str(blas),
                "MKL_NUM_THREADS": str(blas)})
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        env.pop("OMP_WAIT_POLICY", None)
    return env


def show(cmd, omp, blas=None, passive=False):
    """cmd as a shell line run from the repository root, with its thread environment."""
    def rel(c):  # paths in the repository or beside it (../shared) relative to it
        if os.path.isabs(c) and c.startswith(os.path.dirname(ROOT) + os.sep):
            return os.path.relpath(c, ROOT)
        return c
    blas = omp if blas is None else blas
    prefix = "OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d MKL_NUM_THREADS=%d" % (omp, blas, blas)
    if passive:
        prefix += " OMP_WAIT_POLICY=PASSIVE"
    return prefix + " " + " ".join(shlex.quote(rel(c)) for c in cmd)


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
    return torch_info(python)["version"]


def torch_info(python):
    """{"version", "blas"} of the torch that python imports (Nones when it does not)."""
    code = ("import torch; print(torch.__version__); "
            "print('MKL' if torch.backends.mkl.is_available() else 'OpenBLAS')")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                             timeout=300).stdout.split()
        return {"version": out[0], "blas": out[1]}
    except (OSError, subprocess.SubprocessError, IndexError):
        return {"version": None, "blas": None}


def bench_python():
    """The python of .venv-bench (PyPI's torch 2.15), from scripts/bench_setup.sh --print, which
    installs it when missing."""
    script = os.path.join(ROOT, "scripts", "bench_setup.sh")
    if not os.path.isfile(script):
        sys.exit("train_compare.py: error: no %s; give --torch-python PATH" % script)
    r = subprocess.run(["bash", script, "--print"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not os.access(path, os.X_OK):
        sys.exit("train_compare.py: error: scripts/bench_setup.sh --print failed (status %d); "
                 "give --torch-python PATH" % r.returncode)
    return path
