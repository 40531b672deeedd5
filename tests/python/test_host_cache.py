"""attn.cpu: the cache of freed host memory (src/tensor/host_cache.h) from Python, and its
setting ATTN_CPU_CACHE_BYTES (read once per process, so each case runs in its own)."""
import os
import subprocess
import sys

import pytest

import attn

PROBE = """
import attn
x = attn.ones(1 << 20) * 2.0   # two 4 MiB storages (ones, and the product)
del x
print(attn.cpu.memory_cached())
attn.cpu.empty_cache()
print(attn.cpu.memory_cached())
"""


def probe(setting):
    env = dict(os.environ)
    env.pop("ATTN_CPU_CACHE_BYTES", None)
    if setting is not None:
        env["ATTN_CPU_CACHE_BYTES"] = setting
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    held, after = (int(v) for v in p.stdout.split())
    return held, after, p.stderr


def test_torch_cpu_names():
    assert attn.cpu.is_available() and attn.cpu.device_count() == 1
    assert attn.cpu.current_device() == "cpu"
    attn.cpu.synchronize()


def test_freed_results_are_held_and_given_back():
    held, after, err = probe(None)
    if held == 0:
        pytest.skip("the cache is off in this build (AddressSanitizer)")
    assert held == 8 << 20 and after == 0 and err == ""


@pytest.mark.parametrize("setting,held", [("0", 0), ("4M", 4 << 20), ("5000000", 4 << 20),
                                          ("1G", 8 << 20), ("8388608", 8 << 20)])
def test_the_limit(setting, held):
    got, after, err = probe(setting)
    if probe(None)[0] == 0:
        pytest.skip("the cache is off in this build (AddressSanitizer)")
    assert (got, after, err) == (held, 0, "")


@pytest.mark.parametrize("setting", ["lots", "-5", "12X", "4MB", "99999999999999999999G",
                                     "99999999999999999999"])
def test_a_setting_that_is_not_a_size_is_reported_and_the_default_kept(setting):
    held, _, err = probe(setting)
    assert "ATTN_CPU_CACHE_BYTES=" + setting in err and "not a number of bytes" in err
    assert held in (0, 8 << 20)  # the default (off under AddressSanitizer)
