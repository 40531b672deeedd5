"""`attn train` under mpirun (data parallel), driven through the CLI as a user runs it.

    scripts/mpirun.sh N attn train ... --batch-size B   ==  attn train ... --batch-size N*B

Every comparison is between two real runs (no hard-coded losses): the losses printed by the
distributed run and by one process with the same global batch agree to fp32 rounding, and so do the
weights they write; ZeRO-1 changes nothing but where the AdamW state lives; a checkpoint resumes on
another number of ranks (or in one process) and continues the uninterrupted run; a rank that raises,
dies or hangs ends the whole job in bounded time and the last checkpoint stays readable; ranks
started with different flags are stopped before anything is written.

Needs `mpirun` on PATH (Open MPI; the tests are skipped without it) and the corpus
../shared/data/tinyshakespeare.txt relative to the repository root. The binary is the `attn` next
to the Python module (build/attn), or $ATTN_CLI, as in test_checkpoint_torch.py; runs that inject
faults (--debug-fault, --debug-nonfinite) use the test-only build/attn_debug (or $ATTN_DEBUG_CLI),
since `attn` has no such flags.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import attn
from conftest import read_safetensors

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
CLI = os.environ.get("ATTN_CLI", os.path.join(BUILD, "attn"))
DEBUG_CLI = os.environ.get("ATTN_DEBUG_CLI", os.path.join(BUILD, "attn_debug"))
MPIRUN_SH = os.path.join(REPO_ROOT, "scripts", "mpirun.sh")
DATA = os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "data", "tinyshakespeare.txt"))

RUN_TIMEOUT_S = 120  # per command; mpirun.sh's own --timeout is set below it
LOSS_TOL = 2e-4      # absolute, on every evaluated loss
WEIGHT_RTOL = 1e-4   # relative to the tensor's largest magnitude (fp32 reduction order, 30 steps)

pytestmark = [
    pytest.mark.skipif(not attn.distributed.is_mpi_available(),
                       reason="attn was built without MPI (ATTN_MPI=OFF or OpenMPI missing): every "
                              "process is a world of one"),
    pytest.mark.skipif(shutil.which("mpirun") is None,
                       reason="mpirun is not on PATH (install Open MPI: apt-get install "
                              "openmpi-bin) - the distributed training tests need it"),
    pytest.mark.skipif(not os.path.isfile(DATA),
                       reason="corpus %s is missing (../shared/data relative to the repository "
                              "root)" % DATA),
]

# A tiny model: the whole file runs in seconds (the three fault tests wait ~10 s for a hang).
MODEL = ["--n-layer", "2", "--n-embd", "64", "--n-head", "4", "--block-size", "32"]
SCHEDULE = ["--max-iters", "30", "--eval-interval", "10", "--eval-iters", "4"]
PACK = ["--pack", "--doc-separator", "\\n\\n"]
# --threads 1 everywhere: the comparisons are about the ranks, not the thread pool.
COMMON = ["--data", DATA] + MODEL + ["--no-progress", "--threads", "1"]


# ---- running the CLI -----------------------------------------------------------------------------

class Result:
    def __init__(self, args, returncode, stdout, stderr, elapsed):
        self.args, self.returncode, self.stdout, self.stderr = args, returncode, stdout, stderr
        self.elapsed = elapsed

    @property
    def output(self):
        return self.stdout + self.stderr

    def describe(self):
        return ("command: {}\nexit code: {}\nelapsed: {:.1f} s\n--- stdout\n{}\n--- stderr\n{}"
                .format(" ".join(self.args), self.returncode, self.elapsed, self.stdout[-4000:],
                        self.stderr[-4000:]))


def run(args, env=None):
    """Runs a command in its own process group, killed as a group past RUN_TIMEOUT_S (so that no
    rank of a stuck mpirun job outlives the test)."""
    full_env = dict(os.environ)
    full_env["ATTN_MPIRUN_TIMEOUT"] = str(RUN_TIMEOUT_S - 20)  # mpirun ends a stuck job first
    full_env.update(env or {})
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=full_env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail("timed out after {} s: {}\n--- stdout\n{}\n--- stderr\n{}".format(
            RUN_TIMEOUT_S, " ".join(args), out[-4000:], err[-4000:]))
    return Result(args, p.returncode, out, err, time.monotonic() - t0)


def cli_for(flags):
    """attn, or attn_debug for a run with fault-injection flags (--debug-*)."""
    if any(str(f).startswith("--debug-") for f in flags):
        if not os.path.isfile(DEBUG_CLI):
            pytest.skip("no test-only attn_debug at %s (built with the tests)" % DEBUG_CLI)
        return DEBUG_CLI
    return CLI


def train(out, *flags, env=None):
    """One process: `attn train` without mpirun."""
    return run([cli_for(flags), "train"] + COMMON + ["--out", str(out)] + [str(f) for f in flags],
               env=env)


def mpi_train(nranks, out, *flags, env=None):
    """`scripts/mpirun.sh N attn train ...`."""
    return run([MPIRUN_SH, str(nranks), cli_for(flags), "train"] + COMMON + ["--out", str(out)] +
               [str(f) for f in flags], env=env)


def ok(r):
    assert r.returncode == 0, r.describe()
    return r


# ---- reading the results -------------------------------------------------------------------------

STEP_RE = re.compile(r"^step (\d+): train loss (\S+), val loss (\S+)$")
DONE_RE = re.compile(r"^done: iters=(\d+) ms_per_iter=\S+ train_loss=(\S+) val_loss=(\S+) ")


def eval_lines(stdout):
    """[(step, train_loss, val_loss)] of every "step N: train loss X, val loss Y" line."""
    return [(int(m.group(1)), float(m.group(2)), float(m.group(3)))
            for m in map(STEP_RE.match, stdout.splitlines()) if m]


def done_line(stdout):
    """(iters, train_loss, val_loss) of the final "done: ..." line (which must be the last)."""
    last = stdout.strip().splitlines()[-1]
    m = DONE_RE.match(last)
    assert m, "the last line is not `done: ...`: {!r}".format(last)
    return int(m.group(1)), float(m.group(2)), float(m.group(3))


def assert_same_losses(got, want, what):
    """Same evaluation steps, losses within LOSS_TOL (the printed lines and the done line)."""
    g, w = eval_lines(got.stdout), eval_lines(want.stdout)
    assert g, "{}: no `step N: train loss` lines\n{}".format(what, got.describe())
    assert [s for s, _, _ in g] == [s for s, _, _ in w], "{}: evaluated steps differ".format(what)
    np.testing.assert_allclose(np.array([x[1:] for x in g]), np.array([x[1:] for x in w]),
                               rtol=0, atol=LOSS_TOL, err_msg=what + ": evaluation losses")
    gd, wd = done_line(got.stdout), done_line(want.stdout)
    assert gd[0] == wd[0], "{}: done iters {} != {}".format(what, gd[0], wd[0])
    np.testing.assert_allclose(gd[1:], wd[1:], rtol=0, atol=LOSS_TOL, err_msg=what + ": done line")


def assert_same_history(ckpt_a, ckpt_b, what):
    """The full-precision loss history in two ckpt.safetensors agrees within LOSS_TOL."""
    ha = json.loads(read_safetensors(ckpt_a)[1]["history"])
    hb = json.loads(read_safetensors(ckpt_b)[1]["history"])
    assert [h["step"] for h in ha] == [h["step"] for h in hb], what
    for a, b in zip(ha, hb):
        for k in ("train_loss", "val_loss"):
            assert abs(a[k] - b[k]) <= LOSS_TOL, "{}: step {} {}: {} vs {}".format(
                what, a["step"], k, a[k], b[k])


def assert_same_tensors(path_a, path_b, what, prefix=""):
    """Same names, shapes and dtypes; float values within WEIGHT_RTOL of each tensor's scale.
    Returns whether every tensor is bitwise equal."""
    a, _ = read_safetensors(path_a)
    b, _ = read_safetensors(path_b)
    a = {k: v for k, v in a.items() if k.startswith(prefix)}
    b = {k: v for k, v in b.items() if k.startswith(prefix)}
    assert a, "{}: no tensors named {}*".format(what, prefix)
    assert sorted(a) == sorted(b), "{}: tensor names differ".format(what)
    bitwise = True
    for k in sorted(a):
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, "{}: {}".format(what, k)
        if a[k].dtype == np.float32:
            scale = float(np.abs(b[k]).max()) if b[k].size else 0.0
            np.testing.assert_allclose(a[k], b[k], rtol=WEIGHT_RTOL, atol=WEIGHT_RTOL * scale,
                                       err_msg="{}: {}".format(what, k))
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg="{}: {}".format(what, k))
        bitwise = bitwise and a[k].tobytes() == b[k].tobytes()
    return bitwise


# ---- the runs shared by several tests (each made once per module) --------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Lazily made, cached runs: runs(key) -> (Result, out_dir)."""
    base = tmp_path_factory.mktemp("dist_train")
    recipes = {
        "single_b8": lambda d: train(d, "--batch-size", 8, *SCHEDULE),
        "mpi2_b4": lambda d: mpi_train(2, d, "--batch-size", 4, *SCHEDULE),
        "mpi2_b4_zero1": lambda d: mpi_train(2, d, "--batch-size", 4, "--zero", 1, *SCHEDULE),
        "single_b6": lambda d: train(d, "--batch-size", 6, *SCHEDULE),
        "mpi3_b2": lambda d: mpi_train(3, d, "--batch-size", 2, *SCHEDULE),
        # tinyshakespeare's speeches are separated by blank lines.
        "single_b8_pack": lambda d: train(d, "--batch-size", 8, *PACK, *SCHEDULE),
        "mpi2_b4_pack": lambda d: mpi_train(2, d, "--batch-size", 4, *PACK, *SCHEDULE),
    }
    cache = {}

    def get(key):
        if key not in cache:
            d = base / key
            cache[key] = (ok(recipes[key](d)), d)
        return cache[key]
    return get


# ---- 1. N ranks with batch B compute what one process with batch N*B computes --------------------

@pytest.mark.parametrize("nranks,per_rank", [(2, 4), (3, 2)])
def test_ranks_match_one_process_with_the_global_batch(runs, nranks, per_rank):
    mpi, mpi_dir = runs("mpi{}_b{}".format(nranks, per_rank))
    single, single_dir = runs("single_b{}".format(nranks * per_rank))
    assert re.search(r"^distributed: {} ranks\b.*\(global batch {}\)".format(
        nranks, nranks * per_rank), mpi.stdout, re.M), mpi.describe()
    # Without mpirun the same command is one rank: no distributed line, plain single-process output.
    assert "distributed:" not in single.stdout, single.describe()
    assert [s for s, _, _ in eval_lines(single.stdout)] == [0, 10, 20, 30]
    assert done_line(single.stdout)[0] == 30
    # Only rank 0 prints: every evaluation line once.
    assert len(eval_lines(mpi.stdout)) == 4 and mpi.stdout.count("done: ") == 1, mpi.describe()

    what = "{} ranks x {} vs 1 process x {}".format(nranks, per_rank, nranks * per_rank)
    assert_same_losses(mpi, single, what)
    assert_same_history(mpi_dir / "ckpt.safetensors", single_dir / "ckpt.safetensors", what)
    # Not bitwise in general: the gradient average sums in another order than one big batch.
    assert_same_tensors(mpi_dir / "model.safetensors", single_dir / "model.safetensors", what)
    assert_same_tensors(mpi_dir / "ckpt.safetensors", single_dir / "ckpt.safetensors", what,
                        prefix="optim.state.")
    _, meta = read_safetensors(mpi_dir / "model.safetensors")
    assert meta["format"] == "attn-gpt" and meta["step"] == "30"


def test_packed_documents_on_two_ranks_match_one_process(runs):
    """--pack: the ranks split the rows and their positions; each rank's varlen attention stays
    inside its documents, so 2 ranks x 4 compute what 1 process x 8 does."""
    mpi, mpi_dir = runs("mpi2_b4_pack")
    single, single_dir = runs("single_b8_pack")
    plain, _ = runs("single_b8")
    for r in (mpi, single):
        assert re.search(r'^packed: \d+ documents, each ending with "\\n\\n"', r.stdout, re.M), \
            r.describe()
    assert_same_losses(mpi, single, "--pack, 2 ranks x 4 vs 1 process x 8")
    assert_same_history(mpi_dir / "ckpt.safetensors", single_dir / "ckpt.safetensors", "--pack")
    assert_same_tensors(mpi_dir / "model.safetensors", single_dir / "model.safetensors", "--pack")
    # The same windows as without --pack, but other losses: the boundaries do cut attention.
    assert eval_lines(single.stdout)[1:] != eval_lines(plain.stdout)[1:]


# ---- 2. ZeRO-1 shards the optimizer state, and changes nothing else ------------------------------

def test_zero1_matches_plain_data_parallel(runs):
    zero, zero_dir = runs("mpi2_b4_zero1")
    plain, plain_dir = runs("mpi2_b4")
    assert "ZeRO-1: AdamW state sharded" in zero.stdout, zero.describe()
    assert_same_losses(zero, plain, "--zero 1 vs --zero 0")
    assert_same_history(zero_dir / "ckpt.safetensors", plain_dir / "ckpt.safetensors", "zero")
    assert_same_tensors(zero_dir / "model.safetensors", plain_dir / "model.safetensors", "zero")
    # The checkpoint holds the full (gathered) AdamW state, named as without ZeRO.
    assert_same_tensors(zero_dir / "ckpt.safetensors", plain_dir / "ckpt.safetensors",
                        "zero ckpt")
    tensors, meta = read_safetensors(zero_dir / "ckpt.safetensors")
    weights, _ = read_safetensors(zero_dir / "model.safetensors")
    assert meta["format"] == "attn-train" and meta["step"] == "30"
    # One full-size state entry per parameter (exp_avg, exp_avg_sq, step), none sharded.
    n_params = len(weights)
    expected = {"optim.state.{}.{}".format(i, part) for i in range(n_params)
                for part in ("exp_avg", "exp_avg_sq", "step")}
    assert {k for k in tensors if k.startswith("optim.")} == expected, sorted(tensors)
    shapes = sorted(tensors["optim.state.{}.{}".format(i, part)].shape for i in range(n_params)
                    for part in ("exp_avg", "exp_avg_sq"))
    assert shapes == sorted([w.shape for w in weights.values()] * 2)


# ---- 3. A checkpoint resumes on another number of ranks, or in one process -----------------------

def test_resume_on_a_different_number_of_ranks(tmp_path):
    # Global batch 12 throughout (2 x 6, 3 x 4, 1 x 12): the resumed runs must continue the
    # uninterrupted one. A real schedule (warm-up, then cosine decay to step 30) so that a resume
    # at the wrong learning rate would show.
    sched = ["--eval-interval", "10", "--eval-iters", "4", "--warmup-iters", "5",
             "--lr-decay-iters", "30"]
    ref_dir, first_dir = tmp_path / "ref", tmp_path / "first"
    ref = ok(train(ref_dir, "--batch-size", 12, "--max-iters", 30, *sched))
    first = ok(mpi_train(2, first_dir, "--batch-size", 6, "--zero", 1, "--max-iters", 20, *sched))
    assert done_line(first.stdout)[0] == 20
    assert read_safetensors(first_dir / "ckpt.safetensors")[1]["step"] == "20"
    single_dir = tmp_path / "single"
    shutil.copytree(first_dir, single_dir)

    # 3 ranks, ZeRO-1 (the 2-rank sharded state re-sharded over 3).
    r3 = ok(mpi_train(3, first_dir, "--batch-size", 4, "--zero", 1, "--max-iters", 30, *sched,
                      "--resume"))
    # 1 process, no ZeRO.
    r1 = ok(train(single_dir, "--batch-size", 12, "--max-iters", 30, *sched, "--resume"))

    ref_steps = {s: (t, v) for s, t, v in eval_lines(ref.stdout)}
    for r, d, what in ((r3, first_dir, "resumed on 3 ranks"),
                       (r1, single_dir, "resumed in 1 process")):
        assert "resuming from step 20" in r.stdout, what + "\n" + r.describe()
        lines = eval_lines(r.stdout)
        assert [s for s, _, _ in lines] == [20, 30], what + "\n" + r.describe()
        # The repeated step-20 evaluation is the checkpoint's (same weights, same generator state).
        first_20 = [x for x in eval_lines(first.stdout) if x[0] == 20][0]
        np.testing.assert_allclose(lines[0][1:], first_20[1:], rtol=0, atol=LOSS_TOL,
                                   err_msg=what + ": step 20 re-evaluation")
        for s, t, v in lines:
            np.testing.assert_allclose((t, v), ref_steps[s], rtol=0, atol=LOSS_TOL,
                                       err_msg="{} vs uninterrupted: step {}".format(what, s))
        assert done_line(r.stdout)[0] == 30
        assert_same_history(d / "ckpt.safetensors", ref_dir / "ckpt.safetensors", what)
        assert_same_tensors(d / "model.safetensors", ref_dir / "model.safetensors", what)
        assert read_safetensors(d / "ckpt.safetensors")[1]["step"] == "30"


# ---- 4. A rank that raises, dies or hangs ends the job; the last checkpoint survives -------------

@pytest.mark.parametrize("fault,expected", [
    ("raise:1:5", ["injected failure at step 5", "stopping every rank"]),
    ("kill:1:5", [("stopped by the launcher", "exited on signal 9")]),
    ("hang:0:5", ["timed out after 10 s"]),
])
def test_a_failing_rank_ends_the_job(tmp_path, fault, expected):
    out = tmp_path / "out"
    r = mpi_train(2, out, "--batch-size", 4, *SCHEDULE, "--debug-fault", fault,
                  env={"ATTN_DIST_TIMEOUT": "10"})
    assert r.returncode != 0, r.describe()
    assert r.elapsed < 60, r.describe()
    for e in expected:
        alternatives = e if isinstance(e, tuple) else (e,)
        assert any(a in r.output for a in alternatives), "expected {!r}\n{}".format(
            alternatives, r.describe())
    assert "done:" not in r.stdout, r.describe()
    # The step-0 checkpoint (the last one before the fault) is intact and complete.
    tensors, meta = read_safetensors(out / "ckpt.safetensors")
    assert meta["format"] == "attn-train" and meta["step"] == "0", meta
    assert [h["step"] for h in json.loads(meta["history"])] == [0]
    assert "wte.weight" in tensors  # (AdamW's state is created by the first step: none yet)
    weights, wmeta = read_safetensors(out / "model.safetensors")
    assert wmeta["step"] == "0" and "wte.weight" in weights
    assert all(np.isfinite(w).all() for w in weights.values())


# ---- 4b. One run per --out (rank 0 locks it); non-finite steps agreed by every rank --------------

def test_a_locked_out_is_refused_under_mpirun_and_only_rank_0_writes(tmp_path):
    import fcntl
    out = tmp_path / "out"
    out.mkdir()
    record = {"pid": os.getpid(), "host": "testhost", "started": 1700000000, "command": "a test"}
    with open(out / "train.lock", "w") as lock:
        lock.write(json.dumps(record))
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = mpi_train(2, out, "--batch-size", 4, *SCHEDULE)
        assert r.returncode != 0, r.describe()
        assert ("is in use by PID %d on host testhost, started 2023-11-14 22:13:20 UTC (a test)"
                % os.getpid()) in r.stderr, r.describe()
        assert sorted(os.listdir(out)) == ["train.lock"]
    r = ok(mpi_train(2, out, "--batch-size", 4, *SCHEDULE))
    assert sorted(os.listdir(out)) == ["ckpt.safetensors", "loss.png", "model.safetensors",
                                       "train.lock"]
    assert json.loads(open(out / "train.lock").read())["command"] == "attn train"


@pytest.mark.parametrize("zero", [0, 1])
def test_non_finite_gradients_are_skipped_or_stop_on_every_rank(tmp_path, zero):
    inject = ["--debug-nonfinite", "grad-nan:12:h.1.mlp.c_fc.weight"]
    stop = mpi_train(2, tmp_path / "stop", "--batch-size", 4, "--zero", zero, *SCHEDULE, *inject,
                     env={"ATTN_DIST_TIMEOUT": "20"})
    assert stop.returncode != 0, stop.describe()
    assert "step 12: the gradient of 'h.1.mlp.c_fc.weight' (" in stop.stderr, stop.describe()
    assert read_safetensors(tmp_path / "stop" / "ckpt.safetensors")[1]["step"] == "10"
    skip = ok(mpi_train(2, tmp_path / "skip", "--batch-size", 4, "--zero", zero, *SCHEDULE,
                        *inject, "--on-nonfinite", "skip", env={"ATTN_DIST_TIMEOUT": "20"}))
    assert "step 12 skipped (--on-nonfinite skip: no update): the gradient of " \
           "'h.1.mlp.c_fc.weight'" in skip.stdout, skip.describe()
    tensors, _ = read_safetensors(tmp_path / "skip" / "ckpt.safetensors")
    assert all(np.isfinite(t).all() for t in tensors.values() if t.dtype == np.float32)
    assert int(tensors["optim.state.0.step"]) == 29  # 30 steps, one skipped
    if zero:
        # ZeRO-1 keeps gradients local until its step: a NaN on rank 1 only must make rank 0 skip
        # too (they agree through an all-reduce), or the ranks' collectives would part ways.
        one = ok(mpi_train(2, tmp_path / "one", "--batch-size", 4, "--zero", 1, *SCHEDULE,
                           "--debug-nonfinite", "grad-nan:12:h.1.mlp.c_fc.weight@1",
                           "--on-nonfinite", "skip", env={"ATTN_DIST_TIMEOUT": "20"}))
        assert "step 12 skipped (--on-nonfinite skip: no update): the gradient of " \
               "'h.1.mlp.c_fc.weight' (on another rank) is not finite" in one.stdout, one.describe()
        assert_same_losses(one, skip, "a NaN on one rank vs on both")


# ---- 4c. The Python entry point under mpirun: the run of `attn train`, byte for byte -------------

def test_python_entry_point_under_mpirun_matches_attn_train(tmp_path):
    ref = ok(mpi_train(2, tmp_path / "cli", "--batch-size", 4, *SCHEDULE))
    code = ("import attn.train; attn.train.train(data=%r, out=%r, n_layer=2, n_embd=64, n_head=4, "
            "block_size=32, batch_size=4, max_iters=30, eval_interval=10, eval_iters=4, threads=1)"
            % (DATA, str(tmp_path / "py")))
    py = ok(run([MPIRUN_SH, "2", sys.executable, "-c", code],
                env={"PYTHONPATH": os.path.dirname(os.path.dirname(attn.__file__))}))
    assert "distributed: 2 ranks, batch 4 per rank (global batch 8)" in py.stdout, py.describe()
    assert eval_lines(py.stdout) == eval_lines(ref.stdout), py.describe()
    assert done_line(py.stdout)[1:] == done_line(ref.stdout)[1:], py.describe()
    for name in ("model.safetensors", "ckpt.safetensors"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name


# ---- 5. Ranks started with different settings are stopped, and the setting named ---------------

def test_mismatched_settings_across_ranks_are_caught(tmp_path):
    out = tmp_path / "out"
    base = [CLI, "train"] + COMMON + ["--out", str(out), "--batch-size", "4"] + SCHEDULE
    # MPMD: mpirun.sh passes its arguments on to mpirun, so rank 0 and rank 1 get different flags.
    r = run([MPIRUN_SH, "1"] + base + ["--lr", "1e-3", ":", "-np", "1"] + base + ["--lr", "2e-3"],
            env={"ATTN_DIST_TIMEOUT": "10"})
    assert r.returncode != 0, r.describe()
    assert r.elapsed < 60, r.describe()
    assert "differs across ranks" in r.output, r.describe()
    assert '"lr":0.001' in r.output and '"lr":0.002' in r.output, r.describe()
    # Checked before anything is written.
    assert not out.exists(), sorted(os.listdir(out))


def test_zero_without_mpirun_is_a_clear_error(tmp_path):
    out = tmp_path / "out"
    r = train(out, "--batch-size", 4, "--zero", 1, *SCHEDULE)
    assert r.returncode != 0, r.describe()
    assert "--zero 1" in r.stderr and "mpirun" in r.stderr, r.describe()
    assert not out.exists()


# ---- settings that differ across ranks are named ---------------------------------------------

def _mpmd(out, flags0, flags1):
    base = [CLI, "train"] + COMMON + ["--out", str(out), "--batch-size", "4"] + SCHEDULE
    return run([MPIRUN_SH, "1"] + base + flags0 + [":", "-np", "1"] + base + flags1,
               env={"ATTN_DIST_TIMEOUT": "10"})


def test_mismatched_zero_is_named(tmp_path):
    out = tmp_path / "out"
    r = _mpmd(out, [], ["--zero", "1"])
    assert r.returncode != 0, r.describe()
    line = [l.replace(str(out), "OUT") for l in r.output.splitlines()
            if "differs across ranks" in l]  # (the test's name, in tmp_path, says zero)
    assert line and "zero" in line[0], r.describe()


def test_mismatched_bucket_size_is_named(tmp_path):
    r = _mpmd(tmp_path / "out", [], ["--bucket-kib", "64"])
    assert r.returncode != 0, r.describe()
    assert "differs across ranks" in r.output and "bucket_kib" in r.output, r.describe()


# ---- context parallel: every sequence split over the ranks, ring attention between them ---------

@pytest.mark.parametrize("nranks,extra", [(2, []), (4, ["--zero", "1"])])
def test_context_parallel_matches_one_process_with_the_same_batch(runs, tmp_path, nranks, extra):
    single = ok(train(tmp_path / "single", "--batch-size", 4, *SCHEDULE))
    cp = ok(mpi_train(nranks, tmp_path / "cp", "--batch-size", 4, "--context-parallel", *extra,
                      *SCHEDULE))
    assert "context parallel" in cp.stdout, cp.describe()
    what = "--context-parallel on {} ranks vs 1 process, batch 4".format(nranks)
    assert_same_losses(cp, single, what)
    assert_same_tensors(tmp_path / "cp" / "model.safetensors",
                        tmp_path / "single" / "model.safetensors", what)


def test_context_parallel_needs_a_block_size_it_can_cut(tmp_path):
    # 3 ranks cut each sequence into 6 zigzag chunks: 32 positions do not divide.
    r = mpi_train(3, tmp_path / "out", "--batch-size", 2, "--context-parallel", *SCHEDULE,
                  env={"ATTN_DIST_TIMEOUT": "10"})
    assert r.returncode != 0 and "must be divisible by 6" in r.output, r.describe()
    r = train(tmp_path / "out2", "--context-parallel", "--dropout", "0.1", *SCHEDULE)
    assert r.returncode == 2 and "--context-parallel needs --dropout 0" in r.stderr, r.describe()
