"""Faults tried on purpose (docs/reliability.md), as a user meets them: from Python, and with the
real `attn` binary in its own process (limits set with setrlimit, a second run started beside the
first, SIGKILL). scripts/faults.sh produces the same faults many times over; these tests keep each
behaviour true in the normal suite.

    allocations        a size that cannot be had is RuntimeError (attn._C.AllocationError), as
                       torch's "DefaultCPUAllocator: can't allocate memory", and the process goes on
    attn train, OOM    under an address-space limit: one clean error line, exit code 1, no signal
    full disk          under a file-size limit: the file and "File too large" named, exit code 1
                       (SIGXFSZ ignored), the last checkpoint byte for byte, no temporary file
    the --out lock     a second run is refused at once naming the first (PID, host, start time);
                       after SIGKILL of the first, the next run takes the lock
    debris             temporary files of a killed writer go at the next run

    no fault flags     `attn` has no --debug-* flags: they are in the test-only attn_debug only

The binary is the `attn` next to the Python module (build/attn), or $ATTN_CLI; the run that needs
fault injection (--debug-slow-save) uses the test-only build/attn_debug, or $ATTN_DEBUG_CLI.
"""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

import attn
from conftest import read_safetensors

BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
CLI = os.environ.get("ATTN_CLI", os.path.join(BUILD, "attn"))
DEBUG_CLI = os.environ.get("ATTN_DEBUG_CLI", os.path.join(BUILD, "attn_debug"))
PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__)))

pytestmark = pytest.mark.skipif(not os.path.isfile(CLI), reason="no attn binary at %s" % CLI)

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8", "--batch-size",
        "4", "--eval-iters", "2", "--warmup-iters", "2", "--lr-decay-iters", "40", "--threads", "1",
        "--no-progress"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the cat sat on the mat; the dog ran to the fog.\n" * 40)
    return str(path)


def train(corpus, out, *more, limits=(), timeout=120):
    """attn train in its own process; `limits` are (resource, soft limit) pairs set in the child."""
    def preexec():
        for res, value in limits:
            _, hard = resource.getrlimit(res)
            resource.setrlimit(res, (value, hard))
    return subprocess.run([CLI, "train", "--data", corpus, "--out", str(out)] + TINY + list(more),
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec if limits else None)


def files_of(directory):
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in sorted(os.listdir(directory)) if name != "train.lock"}


# ---- allocations ---------------------------------------------------------------------------------

def test_allocation_errors_are_runtime_errors_like_torch():
    assert issubclass(attn._C.AllocationError, RuntimeError)
    with pytest.raises(RuntimeError, match=r"^\[zeros\] cannot allocate a \(1099511627776, "
                                           r"1099511627776\) tensor: its number of elements "
                                           r"overflows int64$"):
        attn.zeros(2 ** 40, 2 ** 40)
    with pytest.raises(RuntimeError, match=r"^\[randn\] cannot allocate 576\.5 PB "
                                           r"\(576460752303423488 bytes\) for a "
                                           r"\(144115188075855872,\) float32 tensor: out of "
                                           r"memory$"):
        attn.randn(2 ** 57)
    with pytest.raises(RuntimeError, match=r"more memory than any machine has"):
        attn.ones(2 ** 31, 2 ** 31)
    with pytest.raises(RuntimeError, match=r"^\[full\] cannot allocate"):
        attn.full((2 ** 40, 2 ** 40), 1.0)
    # The process goes on.
    assert attn.ones(4, 4).sum().item() == 16.0


def test_torch_raises_runtime_error_for_the_same_sizes():
    torch = pytest.importorskip("torch")
    for make in (lambda: torch.zeros(2 ** 40, 2 ** 40), lambda: torch.randn(2 ** 57)):
        with pytest.raises(RuntimeError):
            make()


def test_allocation_beyond_an_address_space_limit_is_runtime_error_and_recoverable():
    """8 GiB asked under a 2 GiB address-space limit, in a child interpreter."""
    code = r"""
import resource, attn
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    attn.zeros(2 ** 31)
except RuntimeError as e:
    print(type(e).__name__, e)
x = attn.ones(1000, 1000)
print("after", (x @ x).sum().item())
"""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "AllocationError [zeros] cannot allocate 8.6 GB (8589934592 bytes) for a (2147483648,) "
        "float32 tensor: out of memory",
        "after 1000000000.0"]


def test_train_beyond_an_address_space_limit_is_a_clean_error(corpus, tmp_path):
    # 8192 wide: each MLP matrix alone is 1 GiB (4 x 8192 x 8192 float32).
    r = train(corpus, tmp_path / "run", "--max-iters", "2", "--n-embd", "8192", "--n-head", "1",
              limits=[(resource.RLIMIT_AS, 2 << 30)])
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("attn: error: [")
    assert "cannot allocate" in lines[0] and "bytes) for a (" in lines[0], lines[0]


# ---- a full disk ---------------------------------------------------------------------------------

def test_train_on_a_full_disk_names_the_file_and_keeps_the_checkpoint(corpus, tmp_path):
    out = tmp_path / "run"
    assert train(corpus, out, "--max-iters", "10", "--eval-interval", "10").returncode == 0
    before = files_of(out)
    r = train(corpus, out, "--max-iters", "20", "--eval-interval", "10", "--resume",
              limits=[(resource.RLIMIT_FSIZE, 4096)])
    # Not killed by SIGXFSZ: the write fails and the error names the file.
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr == ("attn: error: [write_file_atomic] cannot write '%s/model.safetensors': "
                        "write failed: File too large\n" % out)
    assert files_of(out) == before


# ---- the --out lock and what killed runs leave ---------------------------------------------------

def wait_for_lock_record(path, pid, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                record = json.loads(f.read())
            if record.get("pid") == pid:
                return record
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError("no lock record of PID %d in %s" % (pid, path))


def test_second_run_is_refused_and_a_killed_run_leaves_no_stuck_lock(corpus, tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([CLI, "train", "--data", corpus, "--out", str(out)] + TINY +
                             ["--max-iters", "1000000", "--eval-interval", "1000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        record = wait_for_lock_record(os.path.join(out, "train.lock"), first.pid)
        assert record["host"] == socket.gethostname()
        assert record["command"] == "attn train"
        t0 = time.time()
        second = train(corpus, out, "--max-iters", "10")
        elapsed = time.time() - t0
        assert second.returncode == 1
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record["started"]))
        assert second.stderr == (
            "attn: error: [train] --out '%s' is in use by PID %d on host %s, started %s "
            "(attn train); lock file '%s/train.lock'; wait for that run to end or choose another "
            "--out\n" % (out, first.pid, socket.gethostname(), started, out))
        assert elapsed < 10
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # Killed: the kernel dropped its lock, and the next run takes it at once.
    third = train(corpus, out, "--max-iters", "10")
    assert third.returncode == 0, third.stderr
    assert json.loads(open(os.path.join(out, "train.lock")).read())["pid"] != first.pid


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_run(corpus, tmp_path):
    out = tmp_path / "run"
    assert train(corpus, out, "--max-iters", "10", "--eval-interval", "5").returncode == 0
    # A writer killed halfway through its temporary file (--debug-slow-save holds it there).
    if not os.path.isfile(DEBUG_CLI):
        pytest.skip("no test-only attn_debug at %s (built with the tests)" % DEBUG_CLI)
    writer = subprocess.Popen([DEBUG_CLI, "train", "--data", corpus, "--out", str(out)] + TINY +
                              ["--max-iters", "20", "--eval-interval", "5", "--resume",
                               "--debug-slow-save", "10000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    debris = []
    while not debris and time.time() < deadline:
        debris = [n for n in os.listdir(out) if ".tmp." in n]
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert len(debris) == 1 and debris[0].startswith("model.safetensors.tmp."), debris
    assert "%d." % writer.pid in debris[0]
    # The checkpoint still loads, at its previous step.
    assert read_safetensors(os.path.join(out, "ckpt.safetensors"))[1]["step"] == "10"
    r = train(corpus, out, "--max-iters", "20", "--eval-interval", "5", "--resume")
    assert r.returncode == 0, r.stderr
    assert "removed '%s/%s', left by a writer that was killed" % (out, debris[0]) in r.stdout
    assert [n for n in os.listdir(out) if ".tmp." in n] == []


@pytest.mark.parametrize("flag,value", [("--debug-fault", "kill:0:3"), ("--debug-nan-at", "3"),
                                        ("--debug-nonfinite", "loss-nan:3"),
                                        ("--debug-slow-save", "100")])
def test_attn_has_no_fault_injection_flags(corpus, tmp_path, flag, value):
    r = train(corpus, tmp_path / "run", "--max-iters", "5", flag, value)
    assert r.returncode == 2, r.stderr
    assert "attn: train: unknown option '%s'" % flag in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()
