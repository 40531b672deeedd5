"""bfloat16 and float16 against PyTorch 1.13, bit for bit where torch's result is one rounding.

* Conversions: every one of the 65536 bit patterns of each type to float32; float32 to each type
  on every value, every tie between neighbours and the floats beside it, overflow, subnormals and
  a million random floats; int64 and bool both ways; Python numbers through attn.tensor / full.
* Tensors: creation functions with dtype=, .to / .bfloat16() / .half() / .float(), item, tolist,
  printing (every print_parity case, converted), elementwise arithmetic (computed in float32 and
  rounded once, as torch's CPU kernels), the error an op that computes raises, NumPy interop,
  safetensors and torch.save files both ways, load_state_dict from a bfloat16 state dict.

NaN: torch 1.13 writes bfloat16 NaN as 0x7fc0 or 0xffff depending on the code path; attn keeps
the sign (0x7fc0 / 0xffc0). Both are NaN, so NaNs are compared as NaN, everything else by bits.
"""
import io
import json
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import print_parity  # noqa: E402
from conftest import read_safetensors  # noqa: E402

DTYPES = [(attn.bfloat16, torch.bfloat16), (attn.float16, torch.float16)]
IDS = ["bfloat16", "float16"]


def f32_bits(a):
    """float32 values as uint32 bits, every NaN mapped to 0x7fc00000."""
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    u = a.view(np.uint32).copy()
    u[np.isnan(a)] = 0x7FC00000
    return u


def assert_same_values(ours, theirs, what=""):
    """attn and torch tensors of the same 2-byte dtype: same shape, dtype and (via float32,
    which holds them exactly) the same bits."""
    assert str(ours.dtype) == str(theirs.dtype), what
    assert tuple(ours.shape) == tuple(theirs.shape), what
    a, b = f32_bits(ours.float().numpy()), f32_bits(theirs.float().numpy())
    if not np.array_equal(a, b):
        i = np.flatnonzero(a.reshape(-1) != b.reshape(-1))[0]
        raise AssertionError("{}: {} elements differ; first at {}: {!r} vs torch {!r}".format(
            what, int((a != b).sum()), i, ours.float().numpy().reshape(-1)[i],
            theirs.float().numpy().reshape(-1)[i]))


def lib(t):
    """The module of a tensor: attn or torch."""
    return attn if isinstance(t, attn.Tensor) else torch


def patterns():
    return np.arange(65536, dtype=np.uint32).astype(np.uint16)


def bf16_from_bits(u16):
    """A torch bfloat16 tensor holding these bit patterns."""
    return torch.from_numpy(u16.view(np.int16).copy()).view(torch.bfloat16)


def safetensors_bytes(entries):
    """A safetensors file written here from the format description: [(name, dtype, shape, raw)]."""
    header, data = {}, b""
    for name, dt, shape, raw in entries:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


# ---- dtypes -------------------------------------------------------------------------------------

def test_dtype_objects_mirror_torch():
    assert repr(attn.bfloat16) == repr(torch.bfloat16) == "torch.bfloat16"
    assert str(attn.float16) == str(torch.float16) == "torch.float16"
    assert attn.half is attn.float16 and torch.half is torch.float16
    for a, t in DTYPES:
        assert a.is_floating_point and t.is_floating_point
        assert a.itemsize == torch.empty(0, dtype=t).element_size() == 2
        x = attn.zeros(3, dtype=a)
        assert x.dtype is a and x.is_floating_point() and x.element_size() == 2
    assert not attn.int64.is_floating_point


# ---- conversions --------------------------------------------------------------------------------

def test_every_float16_pattern_to_float32():
    h = patterns().view(np.float16)
    ours = attn.from_numpy(h.copy()).float().numpy()
    theirs = torch.from_numpy(h.copy()).float().numpy()
    # NaNs too: both make them quiet and keep sign and payload.
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_every_bfloat16_pattern_to_float32(tmp_path):
    u = patterns()
    path = tmp_path / "all.safetensors"
    path.write_bytes(safetensors_bytes([("all", "BF16", [65536], u.tobytes())]))
    (name, ours), = attn._C.io.load_safetensors(str(path))[0]
    assert ours.dtype is attn.bfloat16
    theirs = bf16_from_bits(u).float().numpy()
    np.testing.assert_array_equal(ours.float().numpy().view(np.uint32), theirs.view(np.uint32))
    np.testing.assert_array_equal(theirs.view(np.uint32), u.astype(np.uint32) << 16)


def probe_floats(values):
    """Each finite 2-byte value (as float32, sorted, non-negative), the midpoints between
    neighbours, the floats just beside them, both signs; a million random floats; edge values."""
    v = np.asarray(values, dtype=np.float64)
    mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)
    near = [mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(np.inf)),
            v.astype(np.float32)]
    rs = np.random.RandomState(5)
    rand = rs.randint(0, 2 ** 32, size=1_000_000, dtype=np.uint64).astype(np.uint32).view(
        np.float32)
    edge = np.array([0.0, np.inf, 65504, 65519.996, 65520, 65536, 1e-8, 2 ** -24, 2 ** -25,
                     1.5 * 2 ** -24, 2 ** -14, 3.4e38, 1e-45, 1e-40, 1 + 2 ** -11, 1 + 3 * 2 ** -11,
                     1 + 2 ** -8, 1 + 3 * 2 ** -8, np.nan], dtype=np.float32)
    out = np.concatenate(near + [edge])
    return np.concatenate([out, -out, rand])


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_float32_to_2_bytes_matches_torch(a_dt, t_dt):
    if t_dt == torch.float16:
        finite = patterns()[:0x7C00].view(np.float16).astype(np.float32)
    else:
        finite = (patterns()[:0x7F80].astype(np.uint32) << 16).view(np.float32)
    x = probe_floats(finite)
    ours = attn.from_numpy(x.copy()).to(a_dt)
    theirs = torch.from_numpy(x.copy()).to(t_dt)
    assert_same_values(ours, theirs, "float32 -> {}".format(t_dt))
    if t_dt == torch.float16:  # the stored bits themselves, NaN included
        np.testing.assert_array_equal(ours.numpy().view(np.uint16),
                                      theirs.numpy().view(np.uint16))
    else:  # NaN stays NaN with its sign
        nan = np.isnan(x)
        got = ours.float().numpy()
        assert np.isnan(got[nan]).all()
        np.testing.assert_array_equal(np.signbit(got[nan]), np.signbit(x[nan]))
    # and back: the 2-byte values are float32 values, exactly
    assert_same_values(ours.float().to(a_dt), theirs, "round trip")


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_int64_and_bool_conversions_match_torch(a_dt, t_dt):
    ints = np.array([0, 1, -1, 3, 255, 256, 257, 2049, 4097, 65504, 65519, 65520, 70000,
                     2 ** 24 + 1, 2 ** 31 - 1, -2 ** 40 - 12345, 2 ** 62 + 2 ** 39 + 1,
                     -(2 ** 63)], dtype=np.int64)
    ours = attn.from_numpy(ints.copy()).to(a_dt)
    theirs = torch.from_numpy(ints.copy()).to(t_dt)
    assert_same_values(ours, theirs, "int64 -> {}".format(t_dt))
    flags = np.array([True, False, True])
    assert_same_values(attn.from_numpy(flags.copy()).to(a_dt),
                       torch.from_numpy(flags.copy()).to(t_dt), "bool")
    # 2 bytes -> int64 (finite values, truncated) and -> bool (NaN is true)
    vals = np.array([0.0, -0.0, 0.4, -0.6, 1.5, -2.5, 100.75, 65504, -31744, 1e-6], np.float32)
    a, t = attn.from_numpy(vals.copy()).to(a_dt), torch.from_numpy(vals.copy()).to(t_dt)
    np.testing.assert_array_equal(a.long().numpy(), t.long().numpy())
    np.testing.assert_array_equal(a.to(attn.int64).numpy(), t.to(torch.int64).numpy())
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0], np.float32)
    np.testing.assert_array_equal(attn.from_numpy(special.copy()).to(a_dt).bool().numpy(),
                                  torch.from_numpy(special.copy()).to(t_dt).bool().numpy())
    # between the two 2-byte types (through float32)
    other_a, other_t = (attn.float16, torch.float16) if a_dt is attn.bfloat16 else \
        (attn.bfloat16, torch.bfloat16)
    x = probe_floats([1.0, 2.0])[:200]
    assert_same_values(attn.from_numpy(x.copy()).to(a_dt).to(other_a),
                       torch.from_numpy(x.copy()).to(t_dt).to(other_t), "between the two")


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_python_numbers_round_as_torch(a_dt, t_dt):
    # Doubles go through float32 first in torch (c10::convert), which matters at ties: 1 + 2^-8 +
    # 2^-30 is above bfloat16's tie but a float32 tie. Also ints beyond 2^24 and huge values.
    values = [0.1, 1 / 3, 1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, 1e-8,
              5.9604644775390625e-08, -1e-300, 16777217, True, -0.0]
    # Beyond the largest value: infinity (torch's full and fill_ refuse such a number instead,
    # as they do for float32, which attn fills with infinity as well).
    huge = [65519.999, 1e300, -1e39, 2 ** 60 + 1]
    assert_same_values(attn.tensor(values + huge, dtype=a_dt),
                       torch.tensor(values + huge, dtype=t_dt), "tensor(list)")
    for v in values:
        if a_dt is attn.float16 and abs(v) > 65504:
            continue  # torch: "value cannot be converted to type at::Half without overflow"
        assert_same_values(attn.full((2,), v, dtype=a_dt), torch.full((2,), v, dtype=t_dt),
                           "full {!r}".format(v))
        a, t = attn.zeros(1, dtype=a_dt), torch.zeros(1, dtype=t_dt)
        a.fill_(v)
        t.fill_(v)
        assert_same_values(a, t, "fill_ {!r}".format(v))
        assert attn.tensor(v, dtype=a_dt).item() == torch.tensor(v, dtype=t_dt).item()


# ---- tensors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_creation_functions_and_methods(a_dt, t_dt):
    for name in ["zeros", "ones"]:
        assert_same_values(getattr(attn, name)(2, 3, dtype=a_dt),
                           getattr(torch, name)(2, 3, dtype=t_dt), name)
    assert attn.empty(4, dtype=a_dt).dtype is a_dt
    like = attn.ones(2, 2)
    assert attn.zeros_like(like, dtype=a_dt).dtype is a_dt
    assert_same_values(attn.full_like(like, 0.3, dtype=a_dt),
                       torch.full_like(torch.ones(2, 2), 0.3, dtype=t_dt), "full_like")
    assert_same_values(attn.arange(0, 5, dtype=a_dt), torch.arange(0, 5, dtype=t_dt), "arange")
    rs = np.random.RandomState(1)
    x = (rs.standard_normal((3, 5)) * 100).astype(np.float32)
    a, t = attn.tensor(x), torch.tensor(x)
    conversions = [(a.to(a_dt), t.to(t_dt)), (a.to(dtype=a_dt), t.to(dtype=t_dt)),
                   (a.type(a_dt), t.type(t_dt))]
    if a_dt is attn.bfloat16:
        conversions.append((a.bfloat16(), t.bfloat16()))
    else:
        conversions.append((a.half(), t.half()))
    for ours, theirs in conversions:
        assert_same_values(ours, theirs, "conversion")
        assert ours.dtype is a_dt
    h, th = a.to(a_dt), t.to(t_dt)
    assert h.to(a_dt) is h  # same dtype: the tensor itself, as torch
    assert h.float().dtype is attn.float32
    np.testing.assert_array_equal(h.float().numpy(), th.float().numpy())
    assert h.tolist() == th.tolist()
    assert h[1, 2].item() == th[1, 2].item()
    assert float(h[0, 0]) == float(th[0, 0]) and int(h[0, 1]) == int(th[0, 1])
    assert bool(h[0, 0]) == bool(th[0, 0])
    # views and copies keep the dtype and the values
    for f in [lambda v: v.T, lambda v: v[1:, ::2], lambda v: v.reshape(5, 3), lambda v: v[None],
              lambda v: v.permute(1, 0).contiguous(), lambda v: v.clone(), lambda v: v.flatten(),
              lambda v: v.unsqueeze(1).expand(3, 2, 5), lambda v: v.narrow(1, 1, 2),
              lambda v: v[v > 0], lambda v: v[[2, 0]], lambda v: v.masked_fill(v < 0, 0.5),
              lambda v: v.tril(), lambda v: v[:, [4, 0]],
              lambda v: lib(v).index_select(v, 1, lib(v).tensor([4, 0]))]:
        assert_same_values(f(h), f(th), "view")
    assert_same_values(attn.cat([h, h], 1), torch.cat([th, th], 1), "cat")
    assert_same_values(attn.stack([h, h]), torch.stack([th, th]), "stack")
    assert_same_values(attn.where(h > 0, h, attn.zeros(1, dtype=a_dt)),
                       torch.where(th > 0, th, torch.zeros(1, dtype=t_dt)), "where")
    c, tc = attn.zeros(3, 5, dtype=a_dt), torch.zeros(3, 5, dtype=t_dt)
    c.copy_(a)
    tc.copy_(t)
    assert_same_values(c, tc, "copy_ across dtypes")
    c[0] = 7.1
    tc[0] = 7.1
    assert_same_values(c, tc, "setitem")
    assert attn.equal(h, h.clone()) and not attn.equal(h, h + 1)
    assert attn.allclose(h.float(), a, rtol=1e-2)


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_arithmetic_rounds_like_torch(a_dt, t_dt):
    rs = np.random.RandomState(2)
    x = (rs.standard_normal((7, 65)) * 3).astype(np.float32)
    y = (rs.standard_normal((65,)) * 3).astype(np.float32)
    a, b = attn.tensor(x).to(a_dt), attn.tensor(y).to(a_dt)
    ta, tb = torch.tensor(x).to(t_dt), torch.tensor(y).to(t_dt)
    exact = [
        ("add", lambda p, q: p + q), ("sub", lambda p, q: p - q), ("mul", lambda p, q: p * q),
        ("div", lambda p, q: p / q), ("scalar mul", lambda p, q: p * 0.1),
        ("scalar add", lambda p, q: 1.3 + p), ("scalar div", lambda p, q: p / 3),
        ("rdiv", lambda p, q: 2 / q), ("neg", lambda p, q: -p), ("abs", lambda p, q: abs(p)),
        ("pow 2", lambda p, q: p ** 2),
        ("maximum", lambda p, q: lib(p).maximum(p, q)),
        ("relu", lambda p, q: p.relu()), ("clamp", lambda p, q: p.clamp(-1.01, 1.5)),
        ("int tensor", lambda p, q: p * lib(p).arange(65)),
        ("f32 0-dim", lambda p, q: p + lib(p).tensor(0.1)),
        ("max", lambda p, q: p.max()), ("sort", lambda p, q: p.sort(dim=1)[0]),
    ]
    for name, f in exact:
        ours = f(a, b)
        try:
            theirs = f(ta, tb)
        except RuntimeError:  # torch 1.13 lacks some float16 kernels on the cpu (relu, clamp):
            theirs = f(ta.float(), tb.float()).to(t_dt)  # their results are exact in float32
        assert str(ours.dtype) == str(theirs.dtype), name
        assert_same_values(ours, theirs, name)
    for name, f in [("eq", lambda p, q: p == q), ("lt", lambda p, q: p < q),
                    ("ge scalar", lambda p, q: p >= 0.5), ("isnan", lambda p, q: p.isnan())]:
        np.testing.assert_array_equal(f(a, b).numpy(), f(ta, tb).numpy(), err_msg=name)
    # promotion: with float32 the result is float32; bfloat16 with float16 is float32
    assert (a + attn.tensor(y)).dtype is attn.float32
    assert (torch.ones(1, dtype=torch.bfloat16) + torch.ones(1, dtype=torch.half)).dtype == \
        torch.float32
    assert (attn.ones(1, dtype=attn.bfloat16) + attn.ones(1, dtype=attn.half)).dtype is \
        attn.float32
    # in place: the result rounded into the tensor
    c, tc = a.clone(), ta.clone()
    c.mul_(1.7)
    tc.mul_(1.7)
    c.add_(b)
    tc.add_(tb)
    assert_same_values(c, tc, "in place")
    # transcendental functions: torch's kernels and attn's may differ by the float32 rounding
    # before the last one, so the results agree within one unit of the 2-byte type.
    ulp = 2.0 ** -7 if a_dt is attn.bfloat16 else 2.0 ** -10
    for name in ["exp", "tanh", "sigmoid", "log", "sqrt"]:
        src, tsrc = (abs(a) + 0.1, abs(ta) + 0.1) if name in ("log", "sqrt") else (a, ta)
        ours = getattr(src, name)()
        assert ours.dtype is a_dt
        try:
            theirs = getattr(tsrc, name)().float().numpy()
        except RuntimeError:  # torch 1.13 lacks some float16 kernels on the cpu
            theirs = getattr(tsrc.float(), name)().to(t_dt).float().numpy()
        np.testing.assert_allclose(ours.float().numpy(), theirs, rtol=ulp, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_ops_that_compute_take_them_in_the_dtype(a_dt, t_dt):
    # test_half_dtypes.py checks the values; here: each op keeps the dtype, as torch's do, and
    # mixed dtypes in a product are refused as torch refuses them.
    x = attn.ones(2, 3, dtype=a_dt)
    cases = [x.sum(), x.mean(1), x.softmax(-1), attn.nn.Linear(3, 2, dtype=a_dt)(x),
             attn.nn.functional.layer_norm(x, (3,)),
             attn.nn.functional.scaled_dot_product_attention(x, x, x), x.cumsum(0),
             attn.dot(x[0], x[0]), attn.matmul(x, x.T)]
    for r in cases:
        assert r.dtype is a_dt
    with pytest.raises(ValueError, match="same dtype"):
        attn.matmul(x, x.float().T)
    assert x.requires_grad_().requires_grad
    with pytest.raises(ValueError, match="torch.int64"):
        attn.ones(2, dtype=attn.int64).requires_grad_()


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("case", print_parity.cases(n_random=150, seed=3),
                         ids=lambda c: c.name)
def test_printing_matches_torch(case, a_dt, t_dt):
    src = case.tensor.detach()
    theirs = src.to(t_dt)
    ours = attn.from_numpy(src.numpy().copy()).to(a_dt)
    try:
        expected = print_parity.torch_repr(print_parity.Case(case.name, theirs, case.options))
    except RuntimeError:
        expected = None
    attn.set_printoptions(profile="default")
    if case.options:
        attn.set_printoptions(**case.options)
    try:
        if expected is None:
            with pytest.raises(ValueError, match=r"^\["):
                repr(ours)
        else:
            assert repr(ours) == expected, "options {}:\nattn:\n{}\ntorch:\n{}".format(
                case.options, repr(ours), expected)
    finally:
        attn.set_printoptions(profile="default")


# ---- NumPy --------------------------------------------------------------------------------------

def test_numpy_float16_both_ways_shares_memory():
    arr = np.array([[1.5, -2.0], [65504, 1e-7]], dtype=np.float16)
    t = attn.from_numpy(arr)
    assert t.dtype is attn.float16 and torch.from_numpy(arr).dtype == torch.float16
    arr[0, 0] = 3.0
    assert t[0, 0].item() == 3.0  # shares the array's memory, as torch.from_numpy
    back = t.numpy()
    assert back.dtype == np.float16
    back[1, 0] = -1.0
    assert arr[1, 0] == -1.0
    np.testing.assert_array_equal(np.asarray(t), arr)
    c = attn.tensor(arr)  # float16 as torch.tensor(arr), and a copy as torch's
    assert c.dtype is attn.float16 and torch.tensor(arr).dtype == torch.float16
    arr[0, 1] = 9.0
    assert c[0, 1].item() == -2.0
    # a strided view
    np.testing.assert_array_equal(attn.from_numpy(arr[:, ::-1].copy()[:, :1]).numpy(),
                                  arr[:, ::-1][:, :1])
    # attn.tensor(np16, dtype=bfloat16) converts
    assert_same_values(attn.tensor(arr, dtype=attn.bfloat16),
                       torch.tensor(arr, dtype=torch.bfloat16), "np16 -> bfloat16")


def test_bfloat16_numpy_raises_as_torch():
    with pytest.raises(TypeError) as theirs:
        torch.ones(2, dtype=torch.bfloat16).numpy()
    with pytest.raises(TypeError) as ours:
        attn.ones(2, dtype=attn.bfloat16).numpy()
    assert str(ours.value) == str(theirs.value) == "Got unsupported ScalarType BFloat16"
    assert attn.ones(2, dtype=attn.bfloat16).float().numpy().dtype == np.float32


# ---- files --------------------------------------------------------------------------------------

def test_safetensors_written_by_attn_read_by_torch(tmp_path):
    rs = np.random.RandomState(4)
    x = (rs.standard_normal((4, 6)) * 1000).astype(np.float32)
    b, h = attn.tensor(x).bfloat16(), attn.tensor(x).half()
    path = tmp_path / "w.safetensors"
    attn._C.io.save_safetensors([("b", b.T), ("h", h), ("f", attn.tensor(x))], str(path),
                                {"format": "pt"})
    raw, meta = read_safetensors(path)
    assert meta == {"format": "pt"}
    header = json.loads(path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    assert header["b"]["dtype"] == "BF16" and header["h"]["dtype"] == "F16"
    tb = bf16_from_bits(raw["b"].view(np.uint16))
    assert tb.shape == (6, 4)
    assert torch.equal(tb, torch.tensor(x).bfloat16().T)
    assert torch.equal(torch.from_numpy(raw["h"].copy()), torch.tensor(x).half())
    # and back into attn, the same tensors
    tensors, meta = attn._C.io.load_safetensors(str(path))
    got = dict(tensors)
    assert got["b"].dtype is attn.bfloat16 and attn.equal(got["b"], b.T)
    assert got["h"].dtype is attn.float16 and attn.equal(got["h"], h)


def test_safetensors_written_by_hand_read_by_attn(tmp_path):
    x = torch.linspace(-70000, 70000, 33)
    entries = [("bf", "BF16", [3, 11], x.bfloat16().view(torch.int16).numpy().tobytes()),
               ("f16", "F16", [33], x.half().numpy().tobytes())]
    path = tmp_path / "h.safetensors"
    path.write_bytes(safetensors_bytes(entries))
    got = dict(attn._C.io.load_safetensors(str(path))[0])
    assert_same_values(got["bf"], x.bfloat16().reshape(3, 11), "BF16")
    assert_same_values(got["f16"], x.half(), "F16")


@pytest.mark.parametrize("a_dt,t_dt", DTYPES, ids=IDS)
def test_torch_save_files_both_ways(tmp_path, a_dt, t_dt):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)) * 50
    buf = io.BytesIO()
    w = x.to(t_dt)
    torch.save({"w": w, "v": w.T}, buf)
    got = attn.load(io.BytesIO(buf.getvalue()))
    assert_same_values(got["w"], x.to(t_dt), "torch.save -> attn.load")
    assert_same_values(got["v"], x.to(t_dt).T, "view")
    path = tmp_path / "a.pt"
    attn.save({"w": got["w"], "v": got["v"]}, str(path))
    back = torch.load(str(path))
    assert back["w"].dtype == t_dt and torch.equal(back["w"], x.to(t_dt))
    assert torch.equal(back["v"], x.to(t_dt).T)
    assert back["v"].data_ptr() == back["w"].data_ptr()  # one storage, as written


def test_load_state_dict_converts_bfloat16_values():
    torch.manual_seed(0)
    attn.manual_seed(0)
    t, a = torch.nn.Linear(4, 3), attn.nn.Linear(4, 3)
    sd = {k: attn.tensor(v.detach().numpy()).bfloat16() for k, v in t.state_dict().items()}
    a.load_state_dict(sd)
    assert a.weight.dtype is attn.float32
    np.testing.assert_array_equal(a.weight.detach().numpy(),
                                  t.weight.detach().bfloat16().float().numpy())
