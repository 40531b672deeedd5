"""attn.train.train, the loop of `attn train` from Python: the same keyword arguments as the CLI's
flags print the same losses and write the same checkpoint files, byte for byte (fresh and resumed),
and bad options are ValueError.

The binary is the `attn` next to the Python module (build/attn), or $ATTN_CLI.
"""
import os
import re
import signal
import subprocess
import sys

import pytest

import attn
import attn.train

BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
CLI = os.environ.get("ATTN_CLI", os.path.join(BUILD, "attn"))

TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, batch_size=4, eval_iters=2,
            warmup_iters=2, lr_decay_iters=40, threads=1, seed=7)


def flags(**kwargs):
    """The CLI's flags for attn.train.train's keyword arguments."""
    out = []
    for k, v in kwargs.items():
        name = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            if k == "bias":
                out.append("--bias" if v else "--no-bias")
            elif v:
                out.append(name)
        else:
            out += [name, str(v)]
    return out


def cli_train(**kwargs):
    r = subprocess.run([CLI, "train", "--no-progress"] + flags(**kwargs), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def loss_lines(stdout):
    """Evaluation lines and the losses of the "done:" line (the rest holds timings)."""
    lines = []
    for line in stdout.splitlines():
        if re.match(r"^step \d+: train loss \S+, val loss \S+$", line):
            lines.append(line)
        m = re.match(r"^done: iters=(\d+) ms_per_iter=\S+ (train_loss=\S+ val_loss=\S+) ", line)
        if m:
            lines.append("done %s %s" % m.groups())
    return lines


def same_files(a, b):
    for name in ("model.safetensors", "ckpt.safetensors"):
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            assert fa.read() == fb.read(), "%s differs between %s and %s" % (name, a, b)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the cat sat on the mat; the dog ran to the fog.\n" * 40)
    return str(path)


@pytest.mark.skipif(not os.path.isfile(CLI), reason="no attn binary at %s" % CLI)
@pytest.mark.parametrize("extra", [{}, {"bias": True, "dropout": 0.1, "grad_clip": 0.0},
                                   {"pack": True, "doc_separator": "; ", "dropout": 0.1}])
def test_python_entry_point_matches_attn_train(corpus, tmp_path, capsys, extra):
    args = dict(TINY, data=corpus, max_iters=20, eval_interval=10, **extra)
    cli_out = cli_train(out=str(tmp_path / "cli"), **args)

    capsys.readouterr()
    r = attn.train.train(out=str(tmp_path / "py"), **args)
    py_out = capsys.readouterr().out
    assert loss_lines(py_out) == loss_lines(cli_out), (py_out, cli_out)
    assert len(loss_lines(py_out)) == 4
    same_files(tmp_path / "cli", tmp_path / "py")
    assert [e.step for e in r.history] == [0, 10, 20]
    assert "val loss %.4f" % r.val_loss in py_out.splitlines()[-3]
    assert r.iters == 20 and r.skipped == []

    # Resumed from Python: the uninterrupted run's bytes.
    attn.train.train(out=str(tmp_path / "resumed"), **dict(args, max_iters=10))
    capsys.readouterr()
    attn.train.train(out=str(tmp_path / "resumed"), resume=True, **args)
    assert "resuming from step 10 of" in capsys.readouterr().out
    same_files(tmp_path / "cli", tmp_path / "resumed")


def test_bad_options_are_value_errors(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"invalid value 0 for --batch-size"):
        attn.train.train(data=corpus, out=str(tmp_path / "a"), **dict(TINY, batch_size=0))
    with pytest.raises(ValueError, match=r"--n-embd 16 is not divisible by --n-head 3"):
        attn.train.train(data=corpus, out=str(tmp_path / "a"), **dict(TINY, n_head=3))
    with pytest.raises(ValueError, match="on_nonfinite must be 'stop' or 'skip'"):
        attn.train.train(data=corpus, out=str(tmp_path / "a"), on_nonfinite="ignore", **TINY)
    with pytest.raises(ValueError, match=r"\[train\] .*too short for --block-size 4096"):
        attn.train.train(data=corpus, out=str(tmp_path / "a"), **dict(TINY, block_size=4096))
    with pytest.raises(TypeError):
        attn.train.train(corpus)  # keyword arguments only
    assert not (tmp_path / "a").exists()


def test_attn_train_is_imported_with_attn():
    import importlib
    mod = importlib.import_module("attn")
    assert mod.train.train is attn.train.train


def test_ctrl_c_stops_the_run_with_keyboard_interrupt_and_resume_goes_on(corpus, tmp_path):
    """SIGINT during attn.train.train: KeyboardInterrupt before the next step, as in a Python
    loop; the last checkpoint stays and resume=True continues from it."""
    out = str(tmp_path / "run")
    script = (
        "import sys, attn\n"
        "try:\n"
        "    attn.train.train(data=%r, out=%r, max_iters=10**7, eval_interval=20, "
        "log_interval=1, **%r)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n" % (corpus, out, TINY))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(attn.__file__)))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        # Wait for a checkpoint (step 20's evaluation) and a few steps after it.
        lines = []
        for line in p.stdout:
            lines.append(line)
            m = re.match(r"^step (\d+)/", line)
            if (m and int(m.group(1)) >= 25) or len(lines) > 400:
                break
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, (p.returncode, err[-2000:], "".join(lines)[-2000:])
    assert "interrupted" in rest
    assert os.path.isfile(os.path.join(out, "ckpt.safetensors"))
    # The checkpoint is the last evaluation's ("step N: train loss ..."); the run goes on from it.
    evals = [int(m.group(1)) for m in re.finditer(r"^step (\d+): train loss", "".join(lines) + rest,
                                                  re.M)]
    assert evals and evals[-1] >= 20, evals
    r = attn.train.train(data=corpus, out=out, resume=True, max_iters=evals[-1] + 20,
                         eval_interval=20, **TINY)
    assert r.history[-1].step == evals[-1] + 20
