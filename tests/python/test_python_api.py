"""The Python surface of attn against torch 1.13: nn.Module subclassing and state dicts,
nn.Parameter, grad_fn printing and grad mode, NumPy interop without copies, and errors.

Errors: every bad input raises ValueError (IndexError for indices and dims) whose message starts
with the name of the function in brackets, e.g. "[view] shape (4, 2) is invalid ...". Nothing may
crash the interpreter: the nastiest inputs run in a child process, so a crash fails one test
instead of killing the run.
"""
import gc
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402
from conftest import assert_same_bits, raises_no_gpu, to_attn  # noqa: E402


# ---- nn.Module subclassing -----------------------------------------------------------------------

def build_block(m):
    """The same module structure written against torch or attn."""

    class Block(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = m.nn.Linear(4, 3)
            self.scale = m.nn.Parameter(m.ones(3))
            self.register_buffer("mask", m.tril(m.ones(3, 3)))
            self.register_buffer("scratch", m.zeros(2), persistent=False)
            self.drop = m.nn.Dropout(0.5)
            self.layers = m.nn.ModuleList([m.nn.Linear(3, 3), m.nn.Linear(3, 2, bias=False)])
            self.seq = m.nn.Sequential(m.nn.Linear(2, 2), m.nn.Dropout(0.1))
            self.emb = m.nn.Embedding(5, 4)
            self.offset = m.nn.Parameter(m.zeros(1))
            self.plain = 3  # not a parameter

        def forward(self, x):
            h = self.drop(self.lin(x) * self.scale)
            return self.seq(self.layers[1](self.layers[0](h))) + self.offset

    return Block()


def test_module_registration_order_and_names():
    ours, theirs = build_block(attn), build_block(torch)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert "scratch" not in ours.state_dict()  # non-persistent buffer
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))
    assert repr(ours) == repr(theirs)
    assert isinstance(ours.scale, attn.nn.Parameter) and isinstance(ours.scale, attn.Tensor)
    assert ours.plain == 3 and "plain" not in dict(ours.named_parameters())
    assert ours.layers[1].bias is None and ours.seq[0].out_features == 2 and len(ours.seq) == 2


def test_module_forward_matches_torch():
    theirs = build_block(torch).eval()
    ours = build_block(attn).eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.rand(5, 4)
    out = ours(to_attn(x))
    expected = theirs(x).detach()
    np.testing.assert_allclose(out.detach().numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_parameters_by_attribute_assignment():
    class M(attn.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = attn.nn.Parameter(attn.ones(2))

    m = M()
    assert list(dict(m.named_parameters())) == ["w"]
    m.v = attn.nn.Parameter(attn.zeros(3))
    assert list(dict(m.named_parameters())) == ["w", "v"]
    m.w = None  # a registered parameter may be set to None
    assert list(dict(m.named_parameters())) == ["v"] and m.w is None
    with pytest.raises(TypeError):
        m.v = attn.ones(3)  # a plain tensor is not a Parameter
    del m.v
    assert list(dict(m.named_parameters())) == []
    m.sub = attn.nn.Linear(2, 2)
    assert [n for n, _ in m.named_parameters()] == ["sub.weight", "sub.bias"]
    with pytest.raises(AttributeError):
        m.missing  # noqa: B018

    class Early(attn.nn.Module):
        def __init__(self):
            self.w = attn.nn.Parameter(attn.ones(2))  # before Module.__init__

    with pytest.raises(AttributeError):
        Early()


def test_register_buffer():
    m = attn.nn.Module()
    m.register_buffer("a", attn.ones(2))
    m.register_buffer("b", attn.zeros(2), persistent=False)
    m.register_buffer("c", None)
    assert list(m.state_dict()) == ["a"]
    assert [n for n, _ in m.named_buffers()] == ["a", "b"]
    m.a = attn.full((2,), 5.0)  # re-assigning a buffer keeps it a buffer
    assert m.state_dict()["a"].tolist() == [5.0, 5.0]
    with pytest.raises(TypeError):
        m.register_buffer("d", [1, 2])
    with pytest.raises(KeyError):
        m.register_buffer("x.y", attn.ones(1))
    t = torch.nn.Module()
    t.register_buffer("a", torch.ones(2))
    t.register_buffer("b", torch.zeros(2), persistent=False)
    assert list(t.state_dict()) == ["a"]


def test_state_dict_values_share_storage():
    lin = attn.nn.Linear(3, 2)
    sd = lin.state_dict()
    assert not sd["weight"].requires_grad  # detached, as torch
    sd["weight"][0, 0] = 42.0
    assert lin.weight[0, 0].item() == 42.0
    kept = lin.state_dict(keep_vars=True)
    assert kept["weight"].requires_grad


def test_load_state_dict_from_torch_and_attn():
    torch.manual_seed(0)
    theirs = build_block(torch)
    ours = build_block(attn)
    result = ours.load_state_dict(theirs.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    for k, v in theirs.state_dict().items():
        assert_same_bits(ours.state_dict()[k], v, k)
    # attn -> attn, and the Parameter objects are updated in place (not replaced)
    w = ours.lin.weight
    other = build_block(attn)
    other.load_state_dict(ours.state_dict())
    assert_same_bits(other.lin.weight, w)
    ours.load_state_dict({k: v * 0 for k, v in ours.state_dict().items()})
    assert ours.lin.weight is w and (w == 0).all().item()


def test_load_state_dict_strict_errors():
    m = build_block(attn)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    good = {k: v.clone() + 1 for k, v in m.state_dict().items()}

    missing = dict(good)
    del missing["lin.weight"], missing["mask"]
    with pytest.raises(ValueError, match=r"^\[load_state_dict\]") as e:
        m.load_state_dict(missing)
    assert '"lin.weight"' in str(e.value) and '"mask"' in str(e.value)
    assert "Missing key(s)" in str(e.value)

    unexpected = dict(good, **{"lin.extra": attn.ones(1), "nope": attn.ones(2)})
    with pytest.raises(ValueError, match=r"^\[load_state_dict\]") as e:
        m.load_state_dict(unexpected)
    assert "Unexpected key(s)" in str(e.value) and '"lin.extra"' in str(e.value)
    assert '"nope"' in str(e.value)

    wrong_shape = dict(good, **{"lin.weight": attn.ones(4, 3)})
    with pytest.raises(ValueError, match=r"^\[load_state_dict\]") as e:
        m.load_state_dict(wrong_shape)
    assert "size mismatch for lin.weight" in str(e.value)
    assert "torch.Size([4, 3])" in str(e.value) and "torch.Size([3, 4])" in str(e.value)

    # nothing was copied by a failed load
    for k, v in m.state_dict().items():
        assert_same_bits(v, before[k], k)

    # strict=False loads what matches and reports the rest
    result = m.load_state_dict(unexpected, strict=False)
    assert sorted(result.unexpected_keys) == ["lin.extra", "nope"] and result.missing_keys == []
    result = m.load_state_dict(missing, strict=False)
    assert sorted(result.missing_keys) == ["lin.weight", "mask"]
    with pytest.raises(ValueError, match="size mismatch"):
        m.load_state_dict(wrong_shape, strict=False)  # shapes are checked even when not strict


def test_train_eval_propagate_and_dropout():
    m = build_block(attn)
    assert all(x.training for x in m.modules())
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    x = attn.rand(6, 4)
    assert attn.equal(m(x), m(x))  # dropout off in eval: deterministic
    m.train()
    assert all(x.training for x in m.modules())
    m.seq.train(False)
    assert not m.seq[1].training and m.drop.training
    with pytest.raises(ValueError):
        m.train("yes")

    d = attn.nn.Dropout(0.5)
    y = attn.ones(1000)
    out = d(y)
    assert 400 < (out != 0).sum().item() < 600
    assert ((out == 0) | (out == 2)).all().item()  # survivors scaled by 1 / (1 - p)
    d.eval()
    assert attn.equal(d(y), y)
    assert repr(d) == repr(torch.nn.Dropout(0.5))


def test_module_to_and_calls():
    lin = attn.nn.Linear(2, 3)
    assert lin.to("cpu") is lin and lin.to(attn.float32) is lin and lin.cpu() is lin
    with raises_no_gpu("Module.to"):
        lin.to("cuda")  # without CUDA: what torch built without CUDA raises
    with pytest.raises(ValueError, match=r"^\[Module.to\]"):
        lin.to(attn.int64)
    with pytest.raises(NotImplementedError):
        attn.nn.Module()(attn.ones(1))
    assert lin.requires_grad_(False) is lin and not lin.weight.requires_grad


def test_multihead_attention_uses_reassigned_parameters():
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = attn.nn.MultiheadAttention(8, 2, batch_first=True)
    ours.in_proj_weight = attn.nn.Parameter(to_attn(theirs.in_proj_weight))
    ours.out_proj.weight = attn.nn.Parameter(to_attn(theirs.out_proj.weight))
    ours.in_proj_bias.data = to_attn(theirs.in_proj_bias)
    ours.out_proj.bias.data = to_attn(theirs.out_proj.bias)
    x = torch.rand(2, 5, 8)
    out, w = ours(to_attn(x), to_attn(x), to_attn(x))
    out_t, w_t = theirs(x, x, x)
    np.testing.assert_allclose(out.detach().numpy(), out_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), w_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    ours.in_proj_weight = attn.nn.Parameter(attn.ones(8, 8))
    with pytest.raises(ValueError, match=r"^\[MultiheadAttention\]"):
        ours(to_attn(x), to_attn(x), to_attn(x))
    assert repr(ours) == repr(theirs)


# ---- nn.Parameter --------------------------------------------------------------------------------

def test_parameter_repr_and_flags():
    for data in [[1.0, 2.0], [[0.5, -1.25], [3.0, 4.0]], 2.5]:
        ours = attn.nn.Parameter(attn.tensor(data))
        theirs = torch.nn.Parameter(torch.tensor(data))
        assert repr(ours) == repr(theirs)
        assert repr(ours).startswith("Parameter containing:\ntensor(")
        assert str(ours) == str(theirs)
        assert ours.requires_grad and ours.is_leaf and ours.grad_fn is None
        frozen = attn.nn.Parameter(attn.tensor(data), requires_grad=False)
        assert repr(frozen) == repr(torch.nn.Parameter(torch.tensor(data), requires_grad=False))
        assert not frozen.requires_grad


def test_parameter_shares_its_data():
    t = attn.zeros(3)
    p = attn.nn.Parameter(t)
    t[0] = 7.0
    assert p[0].item() == 7.0
    assert not t.requires_grad  # the argument itself is not changed
    assert isinstance(p * 2, attn.Tensor) and not isinstance(p * 2, attn.nn.Parameter)
    assert (p * 2).grad_fn is not None
    with pytest.raises(ValueError, match=r"^\[requires_grad_\]"):
        attn.nn.Parameter(attn.arange(3))  # only float tensors can require grad


# ---- grad_fn printing and grad mode --------------------------------------------------------------

GRAD_FN_OPS = {
    "mm": lambda m, a, b, v: m.mm(a, b),
    "Tensor.mm": lambda m, a, b, v: a.mm(b),
    "matmul 2-D": lambda m, a, b, v: a @ b,
    "matmul 2-D @ 1-D": lambda m, a, b, v: a @ v,
    "dot": lambda m, a, b, v: m.dot(v, v),
    "softmax": lambda m, a, b, v: m.softmax(a, dim=-1),
    "F.softmax": lambda m, a, b, v: m.nn.functional.softmax(a, dim=0),
    "log_softmax": lambda m, a, b, v: a.log_softmax(-1),
    "add": lambda m, a, b, v: a + a,
    "add scalar": lambda m, a, b, v: a + 1,
    "sub": lambda m, a, b, v: a - 2.5,
    "mul": lambda m, a, b, v: a * a,
    "mul scalar": lambda m, a, b, v: 3 * a,
    "div by scalar": lambda m, a, b, v: a / 2,
    "div": lambda m, a, b, v: a / (a + 1),
    "neg": lambda m, a, b, v: -a,
    "pow": lambda m, a, b, v: a ** 2,
    "exp": lambda m, a, b, v: a.exp(),
    "transpose": lambda m, a, b, v: a.transpose(0, 1),
    "T": lambda m, a, b, v: a.T,
    "permute": lambda m, a, b, v: a.permute(1, 0),
    "view": lambda m, a, b, v: a.view(6),
    "unsqueeze": lambda m, a, b, v: a.unsqueeze(0),
    "select": lambda m, a, b, v: a[0],
    "slice": lambda m, a, b, v: a[:, 1:],
    "expand": lambda m, a, b, v: a[None].expand(2, 2, 3),
    "sum": lambda m, a, b, v: a.sum(),
    "sum dim": lambda m, a, b, v: a.sum(0),
    "mean": lambda m, a, b, v: a.mean(),
    "mean dim": lambda m, a, b, v: a.mean(-1),
    "var": lambda m, a, b, v: a.var(),
    "max": lambda m, a, b, v: a.max(),
    "masked_fill": lambda m, a, b, v: a.masked_fill(a > 0.5, 0.0),
    "where": lambda m, a, b, v: m.where(a > 0.5, a, a * 2),
    "cat": lambda m, a, b, v: m.cat([a, a]),
    "clone": lambda m, a, b, v: a.clone(),
    "dropout": lambda m, a, b, v: m.nn.functional.dropout(a, 0.5),
    "linear no bias": lambda m, a, b, v: m.nn.functional.linear(a, b.T),
    "batched matmul": lambda m, a, b, v: a[None] @ b[None],
}


def _suffix(t):
    """The autograd suffix that ends a repr ("grad_fn=<MmBackward0>", "requires_grad=True"), or ""
    (it may follow the values on the same line or be wrapped onto its own)."""
    m = re.search(r"[ ,\n]((?:grad_fn=<\w+>)|(?:requires_grad=True))\)\Z", repr(t))
    return m.group(1) if m else ""


@pytest.mark.parametrize("name", list(GRAD_FN_OPS))
def test_grad_fn_suffix_matches_torch(name):
    fn = GRAD_FN_OPS[name]
    results = []
    for m in (attn, torch):
        m.manual_seed(0)
        a = m.rand(2, 3, requires_grad=True)
        b = m.rand(3, 2, requires_grad=True)
        v = m.rand(3, requires_grad=True)
        results.append(fn(m, a, b, v))
    ours, theirs = results
    assert _suffix(ours) == _suffix(theirs) != ""
    assert type(ours.grad_fn).__name__ == type(theirs.grad_fn).__name__
    assert ours.grad_fn.name() == theirs.grad_fn.name()
    assert ours.requires_grad and not ours.is_leaf
    assert repr(ours.grad_fn).startswith("<{} object at 0x".format(theirs.grad_fn.name()))


def test_grad_fn_known_difference_1d_at_2d():
    """1-D @ 2-D: attn names the node as torch 2.x does (SqueezeBackward4, as the seed documents
    print it); torch 1.13 says SqueezeBackward3."""
    a, b = attn.rand(3, requires_grad=True), attn.rand(3, 2, requires_grad=True)
    ta, tb = torch.rand(3, requires_grad=True), torch.rand(3, 2, requires_grad=True)
    assert _suffix(a @ b) == "grad_fn=<SqueezeBackward4>"
    assert _suffix(ta @ tb) == "grad_fn=<SqueezeBackward3>"


def test_requires_grad_suffix_and_leaves():
    for m in (attn, torch):
        x = m.ones(2, requires_grad=True)
        assert _suffix(x) == "requires_grad=True" and x.is_leaf and x.grad_fn is None
        y = m.ones(2)
        assert _suffix(y) == "" and _suffix(y * x) == "grad_fn=<MulBackward0>"
        assert not (y * 2).requires_grad
        d = (x * 2).detach()
        assert d.is_leaf and not d.requires_grad and d.grad_fn is None
    z = attn.ones(2, requires_grad=True) * 2
    with pytest.raises(ValueError, match=r"^\[requires_grad"):
        z.requires_grad_(False)  # a non-leaf: torch raises too
    z.detach_()
    assert z.grad_fn is None and not z.requires_grad and z.is_leaf


def test_no_grad_and_grad_modes():
    x = attn.ones(2, requires_grad=True)
    assert attn.is_grad_enabled()
    with attn.no_grad():
        assert not attn.is_grad_enabled()
        y = x * 2
        with attn.enable_grad():
            assert (x * 2).grad_fn is not None
        assert not attn.is_grad_enabled()
    assert attn.is_grad_enabled()
    assert y.grad_fn is None and not y.requires_grad and _suffix(y) == ""

    @attn.no_grad()
    def f(t):
        return t + 1

    assert f(x).grad_fn is None and attn.is_grad_enabled()
    with attn.set_grad_enabled(False):
        assert (x + 1).grad_fn is None
    assert attn.is_grad_enabled()
    attn.set_grad_enabled(False)
    assert not attn.is_grad_enabled()
    attn.set_grad_enabled(True)
    try:
        with attn.no_grad():
            raise KeyError("boom")
    except KeyError:
        pass
    assert attn.is_grad_enabled()  # restored after an exception


# ---- NumPy interop -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_numpy_to_attn_shares_memory(dtype):
    # from_numpy and as_tensor share the array's memory; tensor copies it (as torch's three)
    a = np.arange(4, dtype=dtype) if dtype is not np.bool_ else np.ones(4, dtype=dtype)
    t = attn.tensor(a)
    a[1] = 0
    assert t[1].item() != a[1]
    for make in [attn.from_numpy, attn.as_tensor]:
        a = (np.arange(12) % 3 == 0).astype(dtype).reshape(3, 4) if dtype is np.bool_ else \
            np.arange(12, dtype=dtype).reshape(3, 4)
        t = make(a)
        a[1, 2] = 1  # numpy -> attn
        assert t[1, 2].item() == a[1, 2]
        t[2, 3] = 0  # attn -> numpy
        assert a[2, 3] == 0
        assert t.numpy().__array_interface__["data"][0] == a.__array_interface__["data"][0]


def test_numpy_strided_arrays_are_shared_and_negative_strides_copied():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = attn.from_numpy(a[1:, ::2])
    assert t.shape == (3, 3) and t.stride() == (6, 2)
    a[2, 2] = -1
    assert t[1, 1].item() == -1
    t.T[0, 2] = 99  # through a view of the view
    assert a[3, 0] == 99
    r = a[::-1]
    tr = attn.from_numpy(r)  # negative strides: a copy
    assert_same_bits(tr, torch.from_numpy(r.copy()))
    r[0, 0] = 1234
    assert tr[0, 0].item() != 1234


def test_attn_to_numpy_shares_memory_for_views():
    base = attn.arange(12.0).view(3, 4)
    for view in [lambda x: x, lambda x: x.T, lambda x: x[:, 1:3], lambda x: x[::2],
                 lambda x: x.permute(1, 0)[1:], lambda x: x[None, 1]]:
        v = view(base)
        for n in [v.numpy(), np.asarray(v)]:
            assert n.shape == tuple(v.shape)
            assert n.strides == tuple(s * 4 for s in v.stride())
            assert not n.flags.owndata
            old = float(n.flat[0])
            n.flat[0] = 500.0
            assert v.reshape(-1)[0].item() == 500.0
            n.flat[0] = old
    # the array keeps the storage alive after the tensor is gone, and vice versa
    t = attn.ones(3)
    n = t.numpy()
    del t
    gc.collect()
    assert n.tolist() == [1.0, 1.0, 1.0]
    a = np.full(3, 2.0, np.float32)
    t = attn.from_numpy(a)
    del a
    gc.collect()
    assert t.tolist() == [2.0, 2.0, 2.0]


def test_numpy_conversions_copy():
    d = np.arange(4, dtype=np.float64) / 3
    t = attn.tensor(d)
    assert t.dtype is attn.float32
    assert_same_bits(t, torch.from_numpy(d.astype(np.float32)))
    d[0] = 7
    assert t[0].item() == 0.0  # converted, so not shared
    i32 = np.arange(3, dtype=np.int32)
    ti = attn.from_numpy(i32)
    assert ti.dtype is attn.int64 and ti.tolist() == [0, 1, 2]
    ro = np.frombuffer(b"\x00\x00\x80\x3f" * 2, dtype=np.float32)  # read-only
    tro = attn.from_numpy(ro)
    tro[0] = 5.0
    assert ro[0] == 1.0  # copied, the immutable buffer is untouched
    assert np.asarray(attn.ones(2), dtype=np.float64).dtype == np.float64
    assert np.array(attn.arange(3), copy=True).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"^\[tensor\]"):
        attn.from_numpy(np.zeros(2, dtype=np.complex64))


def test_numpy_operands():
    a = attn.arange(3.0)
    n = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    assert (a + n).tolist() == [1.0, 3.0, 5.0] and isinstance(a + n, attn.Tensor)
    assert isinstance(n + a, attn.Tensor)  # numpy defers to attn's reflected operator
    assert (a * np.float32(2)).tolist() == [0.0, 2.0, 4.0]
    assert (a[np.int64(1)]).item() == 1.0


# ---- errors --------------------------------------------------------------------------------------

ERRORS = [
    ("view of the wrong size", ValueError, "view", lambda: attn.ones(2, 3).view(4, 2)),
    ("view of a transposed tensor", ValueError, "view", lambda: attn.ones(2, 3).T.view(6)),
    ("transpose dim out of range", IndexError, "transpose",
     lambda: attn.ones(2, 3).transpose(0, 2)),
    ("sum dim out of range", IndexError, "sum", lambda: attn.ones(2, 3).sum(-3)),
    ("softmax dim out of range", IndexError, "softmax", lambda: attn.ones(2, 3).softmax(2)),
    ("size dim out of range", IndexError, "size", lambda: attn.ones(2, 3).size(2)),
    ("index out of range", IndexError, "index", lambda: attn.ones(2, 3)[2]),
    ("negative index out of range", IndexError, "index", lambda: attn.ones(2, 3)[:, -4]),
    ("too many indices", IndexError, "index", lambda: attn.ones(2)[0, 0]),
    ("select out of range", IndexError, "select", lambda: attn.ones(2, 3).select(1, 3)),
    ("negative slice step", ValueError, "index", lambda: attn.ones(4)[::-1]),
    ("shapes that do not broadcast", ValueError, "add", lambda: attn.ones(2, 3) + attn.ones(3, 2)),
    ("broadcast in mul", ValueError, "mul", lambda: attn.ones(4) * attn.ones(5)),
    ("matmul mismatch", ValueError, "matmul", lambda: attn.ones(2, 3) @ attn.ones(2, 3)),
    ("mm of a 1-D tensor", ValueError, "mm", lambda: attn.mm(attn.ones(3), attn.ones(3, 2))),
    ("matmul batch mismatch", ValueError, "matmul",
     lambda: attn.ones(2, 2, 3) @ attn.ones(3, 3, 2)),
    ("dropout p > 1", ValueError, "dropout", lambda: AF.dropout(attn.ones(3), 1.5)),
    ("dropout p < 0", ValueError, "dropout", lambda: AF.dropout(attn.ones(3), -0.1)),
    ("Dropout module p", ValueError, "Dropout", lambda: attn.nn.Dropout(2.0)),
    ("num_heads not dividing embed_dim", ValueError, "MultiheadAttention",
     lambda: attn.nn.MultiheadAttention(10, 3)),
    ("softmax of an int tensor", NotImplementedError, "softmax",
     lambda: attn.softmax(attn.arange(4), 0)),
    ("log_softmax of an int tensor", NotImplementedError, "log_softmax",
     lambda: attn.arange(4).log_softmax(0)),
    ("masked_fill with a non-bool mask", ValueError, "masked_fill",
     lambda: attn.ones(3).masked_fill(attn.ones(3), 0.0)),
    ("masked_fill_ with an int mask", ValueError, "masked_fill",
     lambda: attn.ones(3).masked_fill_(attn.arange(3), 0.0)),
    ("Embedding index out of range", IndexError, "embedding",
     lambda: attn.nn.Embedding(5, 2)(attn.tensor([1, 5]))),
    ("Embedding negative index", IndexError, "embedding",
     lambda: attn.nn.Embedding(5, 2)(attn.tensor([-1]))),
    ("tensor() from ragged lists", ValueError, "tensor", lambda: attn.tensor([[1, 2], [3]])),
    ("tensor() from deeper ragged lists", ValueError, "tensor",
     lambda: attn.tensor([[[1.0], [2.0]], [[3.0]]])),
    ("tensor() of strings", ValueError, "scalar", lambda: attn.tensor(["a", "b"])),
    ("tensor() of None", ValueError, "scalar", lambda: attn.tensor(None)),
    ("negative size", ValueError, "zeros", lambda: attn.zeros(2, -1)),
    ("float size", ValueError, "shape", lambda: attn.ones(2.5)),
    ("mean of int", ValueError, "mean", lambda: attn.arange(3).mean()),
    ("item of many", ValueError, "item", lambda: attn.ones(2).item()),
    ("randint empty range", ValueError, "randint", lambda: attn.randint(3, 3, (2,))),
    ("unknown dtype", ValueError, "dtype", lambda: attn.ones(2, dtype="float64")),
    ("linear feature mismatch", ValueError, "linear",
     lambda: attn.nn.Linear(3, 2)(attn.ones(4, 4))),
    ("cat of mismatched shapes", ValueError, "cat",
     lambda: attn.cat([attn.ones(2, 2), attn.ones(3)])),
    ("expand to a smaller size", ValueError, "expand", lambda: attn.ones(3).expand(2)),
    ("int requires grad", ValueError, "requires_grad_",
     lambda: attn.arange(3).requires_grad_()),
    ("setitem shape mismatch", ValueError, "index_put_",
     lambda: attn.ones(2, 3).__setitem__(0, attn.ones(4))),
    ("bad rng state", ValueError, "Generator::set_state",
     lambda: attn.set_rng_state(np.zeros(7, np.uint8))),
    ("sdpa head dim mismatch", ValueError, "scaled_dot_product_attention",
     lambda: AF.scaled_dot_product_attention(attn.ones(1, 2, 4), attn.ones(1, 3, 5),
                                             attn.ones(1, 3, 5))),
    ("MHA wrong width", ValueError, "MultiheadAttention",
     lambda: attn.nn.MultiheadAttention(4, 2)(attn.ones(3, 5), attn.ones(3, 5), attn.ones(3, 5))),
    # Sizes that cannot be allocated are RuntimeError, as torch.ones raises (attn.AllocationError).
    ("huge shape", RuntimeError, "ones", lambda: attn.ones(2**62, 2**62)),
    ("huge expand", ValueError, "shape", lambda: attn.ones(3).expand(2**62, 3)),
]


@pytest.mark.parametrize("what,exc,fn_name,call", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(what, exc, fn_name, call):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert msg.startswith("[" + fn_name), "{}: message {!r} should start with [{}]".format(
        what, msg, fn_name)
    if exc is ValueError:
        assert not isinstance(info.value, IndexError)


def test_error_types_are_python_builtins():
    assert issubclass(attn._C.AttnError, ValueError)
    assert issubclass(attn._C.AttnIndexError, IndexError)
    try:
        attn.ones(2)[5]
    except ValueError:
        pytest.fail("an index error must not be a ValueError")
    except IndexError:
        pass


CRASH_CANDIDATES = """
import numpy as np, attn
calls = [
    lambda: attn.ones(2**62, 2**62), lambda: attn.randn(2**31, 2**31),
    lambda: attn.ones(3).expand(2**62, 3), lambda: attn.ones(3).view(2**62, 2**62),
    lambda: attn.full((2**40, 2**40), 1.0), lambda: attn.zeros(3)[2**70],
    lambda: attn.zeros(3)[::2**62], lambda: attn.zeros(3)[2**62:],
    lambda: attn.zeros(2, 3).narrow(1, 2, 2**62), lambda: attn.tril(attn.zeros(3, 3), 2**62),
    lambda: attn.zeros(0).max(), lambda: attn.zeros(0, 3).max(0),
    lambda: attn.zeros(0, 3).argmax(1),
    lambda: attn.softmax(attn.zeros(0, 3), 0), lambda: repr(attn.zeros(2, 0, 3)),
    lambda: attn.matmul(attn.zeros(0, 3), attn.zeros(3, 0)),
    lambda: attn.nn.functional.embedding(attn.tensor([2**40]), attn.zeros(3, 2)),
    lambda: attn.set_rng_state(b""),
    lambda: attn.default_generator.set_state(np.zeros(5056, np.uint8)),
    lambda: attn.from_numpy(np.lib.stride_tricks.as_strided(np.zeros(3, np.float32), (3, 3),
                                                            (0, 4))),
    lambda: attn.from_numpy(np.zeros((2, 0, 3))), lambda: attn.tensor([]),
    lambda: attn.tensor([[], []]),
    lambda: attn.arange(0, 1e20), lambda: attn.arange(0, float("nan")),
    lambda: attn.zeros(3)[(None,) * 64], lambda: attn.randint(-2**63, 2**63 - 1, (3,)),
    lambda: attn.cat([attn.zeros(2), 5]), lambda: attn.stack([]), lambda: attn.Tensor(),
    lambda: attn.nn.MultiheadAttention(4, 2)(attn.zeros(3, 4), attn.zeros(3, 4), attn.zeros(2, 4)),
    lambda: attn.zeros(2, 3)[attn.tensor([[0], [1]])], lambda: attn.manual_seed(2**70),
    lambda: attn.set_printoptions(precision=10**6), lambda: repr(attn.ones(3) / 3),
    lambda: attn.set_printoptions(linewidth=-5), lambda: repr(attn.ones(40, 3)),
    lambda: attn.set_printoptions(profile="default"),
    lambda: attn.zeros(3, 1).expand(3, 4).normal_(), lambda: attn.zeros(2, 2).bernoulli_(0.5),
]
for i, call in enumerate(calls):
    try:
        call()
    except (ValueError, IndexError, TypeError, MemoryError, RuntimeError):
        pass
print("survived", len(calls))
"""


def test_nothing_crashes_the_interpreter():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(attn.__file__)) + os.pathsep + \
        env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CRASH_CANDIDATES)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120)
    assert proc.returncode == 0, "the interpreter died (exit {}):\n{}".format(
        proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip().startswith("survived")




def test_random_fill_of_expanded_tensor_is_refused():
    with pytest.raises(ValueError):
        attn.zeros(3, 1).expand(3, 4).normal_()
