"""Shared set-up for the Python tests: attn next to the oracle (python3-torch 1.13).

Run with the built module on the path:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python

Every test starts from the default print options and grad mode, and leaves them that way, so that
tests can run in any order (and the generator is re-seeded by the tests that use it).
"""
import json
import os
import struct
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _reset_global_state():
    """Default print options and grad mode before and after every test (attn and torch)."""
    import attn

    def reset():
        attn.set_printoptions(profile="default")
        attn._C._set_grad_enabled(True)
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            torch.set_printoptions(profile="default")
            torch.set_grad_enabled(True)

    reset()
    yield
    reset()


# ---- helpers shared by the test files (imported as `from conftest import ...`) -------------------

def raises_no_gpu(fn_name=None):
    """What using a GPU raises where there is none: torch's AssertionError ("Torch not compiled
    with CUDA enabled") when attn was built without CUDA, RuntimeError (attn::DeviceError) when it
    was built with CUDA but runs without a GPU or a driver. fn_name, when given, must open the
    message ("[zeros] ...")."""
    import attn
    head = r"^\[%s\]" % fn_name if fn_name else ""
    if not attn.cuda._built():
        return pytest.raises(AssertionError, match=head + r".*not compiled with CUDA")
    assert not attn.cuda.is_available(), "a GPU is present: this test expects none"
    return pytest.raises(RuntimeError, match=head + r".*(CUDA is not available|run on the cpu)")


def to_attn(t):
    """A torch tensor as an attn tensor holding the same values (a copy; float64 -> float32)."""
    import attn
    a = t.detach().cpu().numpy()
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return attn.from_numpy(np.array(a, copy=True))


def to_np(t):
    """The values of an attn or torch tensor as a fresh NumPy array."""
    if hasattr(t, "detach") and type(t).__module__.startswith("torch"):
        return t.detach().cpu().numpy().copy()
    return np.array(t.numpy(), copy=True)


def bits(t):
    """The raw bits of a tensor's values (float32 as uint32, int64 as int64, bool as uint8).

    Every float32 NaN is mapped to the one canonical quiet NaN: which NaN a kernel produces (sign,
    payload) is an artefact of its instruction sequence (torch's vectorised max gives 0xffffffff,
    its scalar code 0x7fc00000), not a value. Signed zeros and everything else stay distinct."""
    a = np.ascontiguousarray(to_np(t))
    if a.dtype == np.float32:
        u = a.view(np.uint32).copy()
        u[np.isnan(a)] = 0x7FC00000
        return u
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a


def assert_same_bits(ours, theirs, what=""):
    """Same shape, same dtype and bit-identical values (NaN payloads and -0.0 included)."""
    a, b = to_np(ours), to_np(theirs)
    assert a.shape == b.shape, "{}: shape {} != torch's {}".format(what, a.shape, b.shape)
    assert a.dtype == b.dtype, "{}: dtype {} != torch's {}".format(what, a.dtype, b.dtype)
    ba, bb = bits(ours), bits(theirs)
    if not np.array_equal(ba, bb):
        diff = np.flatnonzero(ba.reshape(-1) != bb.reshape(-1))
        i = diff[0]
        raise AssertionError("{}: {} of {} elements differ from torch's bits; first at flat index "
                             "{}: {!r} vs torch {!r}".format(what, diff.size, ba.size, i,
                                                              a.reshape(-1)[i], b.reshape(-1)[i]))


def read_safetensors(path):
    """{name: array}, metadata: the safetensors format read with json + numpy (8-byte little-endian
    header length, JSON header of dtype/shape/data_offsets, then the data), independently of attn's
    own reader. BF16 tensors come back as their uint16 bit patterns (NumPy has no bfloat16)."""
    raw = open(path, "rb").read()
    assert len(raw) >= 8, "{}: {} bytes, not a safetensors file".format(path, len(raw))
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    dtypes = {"F32": np.float32, "I64": np.int64, "BOOL": np.bool_, "F16": np.float16,
              "BF16": np.uint16}
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        assert 0 <= b <= end <= len(data), "{}: {} lies outside the file".format(path, name)
        out[name] = np.frombuffer(data[b:end], dtype=dtypes[e["dtype"]]).reshape(e["shape"])
    return out, meta
