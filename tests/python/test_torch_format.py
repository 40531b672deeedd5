"""attn.save / attn.load against torch.save / torch.load (PyTorch 1.13, the oracle): files cross
both ways, with state dicts, nanoGPT-style checkpoints (optimizer state, tied weights, plain Python
values), views and Parameters; hostile and corrupt files are clear errors."""
import collections
import io
import os
import pathlib
import pickle
import struct
import zipfile

import numpy as np
import pytest
import torch

import attn


def np_of(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def base_ptr(t):
    """The address of element 0 of the tensor's storage (torch and attn alike)."""
    return t.data_ptr() - t.storage_offset() * t.element_size()


def torch_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def attn_bytes(obj):
    buf = io.BytesIO()
    attn.save(obj, buf)
    return buf.getvalue()


def assert_same_tree(a, t):
    """`a` (loaded by attn) holds what `t` (a torch object) holds, tensor by tensor."""
    if isinstance(t, torch.Tensor):
        assert isinstance(a, attn.Tensor), type(a)
        assert tuple(a.shape) == tuple(t.shape)
        assert a.stride() == t.stride() and a.storage_offset() == t.storage_offset()
        assert str(a.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        assert a.requires_grad == t.requires_grad
        assert isinstance(a, attn.nn.Parameter) == isinstance(t, torch.nn.Parameter)
        np.testing.assert_array_equal(np_of(a), np_of(t))
    elif isinstance(t, dict):
        assert type(a) is type(t), (type(a), type(t))
        assert list(a.keys()) == list(t.keys())
        for k in t:
            assert_same_tree(a[k], t[k])
        if isinstance(t, collections.OrderedDict) and hasattr(t, "_metadata"):
            assert a._metadata == t._metadata
    elif isinstance(t, (list, tuple)):
        assert type(a) is type(t) and len(a) == len(t)
        for x, y in zip(a, t):
            assert_same_tree(x, y)
    else:
        assert type(a) is type(t) and a == t, (a, t)


def torch_tree_equal(x, y):
    assert_same_tree_torch(x, y)


def assert_same_tree_torch(x, y):
    if isinstance(y, torch.Tensor):
        assert isinstance(x, torch.Tensor)
        assert x.shape == y.shape and x.stride() == y.stride()
        assert x.storage_offset() == y.storage_offset() and x.dtype == y.dtype
        assert x.requires_grad == y.requires_grad
        assert isinstance(x, torch.nn.Parameter) == isinstance(y, torch.nn.Parameter)
        assert torch.equal(x.detach(), y.detach())
    elif isinstance(y, dict):
        assert type(x) is type(y) and list(x.keys()) == list(y.keys())
        for k in y:
            assert_same_tree_torch(x[k], y[k])
    elif isinstance(y, (list, tuple)):
        assert type(x) is type(y) and len(x) == len(y)
        for a, b in zip(x, y):
            assert_same_tree_torch(a, b)
    else:
        assert type(x) is type(y) and x == y


class TinyGPT(torch.nn.Module):
    """nanoGPT's shape in miniature: token + position embeddings, a block, a tied lm_head."""

    def __init__(self, vocab=11, n_embd=8, block=6):
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(vocab, n_embd), wpe=torch.nn.Embedding(block, n_embd),
            ln_f=torch.nn.LayerNorm(n_embd), h=torch.nn.ModuleList([torch.nn.Linear(n_embd, n_embd)])))
        self.lm_head = torch.nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.register_buffer("mask", torch.tril(torch.ones(block, block, dtype=torch.bool)))
        self.register_buffer("counts", torch.arange(5))

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        x = self.transformer.h[0](x).relu()
        return self.lm_head(self.transformer.ln_f(x))


def nanogpt_checkpoint():
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW([
        {"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    idx = torch.randint(0, 11, (2, 6))
    for _ in range(3):
        loss = model(idx).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "model_args": dict(n_layer=1, n_head=2, n_embd=8, block_size=6, bias=True,
                           vocab_size=11, dropout=0.0),
        "iter_num": 5,
        "best_val_loss": torch.tensor(2.25),
        "best_val_loss_float": 2.25,
        "config": {"out_dir": "out", "eval_interval": 2000, "learning_rate": 6e-4,
                   "compile": False, "init_from": "scratch", "wandb_run_name": None,
                   "betas": (0.9, 0.95), "big": 2**40, "neg": -7},
    }


# ---- PyTorch -> attn ---------------------------------------------------------------------------

def test_torch_state_dict_loads_in_attn(tmp_path):
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    m.register_buffer("steps", torch.tensor([3, -1, 2**40]))
    m.register_buffer("flags", torch.tensor([True, False, True]))
    sd = m.state_dict()
    path = tmp_path / "sd.pt"
    torch.save(sd, path)
    loaded = attn.load(path)
    assert_same_tree(loaded, sd)
    assert isinstance(loaded, collections.OrderedDict)
    # The same file through str path, an open file and bytes in memory.
    assert list(attn.load(str(path)).keys()) == list(sd.keys())
    with open(path, "rb") as f:
        assert_same_tree(attn.load(f), sd)
    assert_same_tree(attn.load(io.BytesIO(path.read_bytes()), map_location="cpu"), sd)
    # ... and drives an attn model to torch's outputs.
    am = attn.nn.Sequential(attn.nn.Linear(4, 3), attn.nn.LayerNorm(3), attn.nn.Linear(3, 2))
    am.load_state_dict({k: v for k, v in loaded.items() if k not in ("steps", "flags")})
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(am(attn.tensor(x)).detach().numpy(),
                               m(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_nanogpt_checkpoint_from_torch(tmp_path):
    model, ckpt = nanogpt_checkpoint()
    path = tmp_path / "ckpt.pt"
    torch.save(ckpt, path)
    got = attn.load(path, map_location=torch.device("cpu"))
    assert_same_tree(got, ckpt)
    state = got["optimizer"]["state"]
    assert sorted(state) == sorted(ckpt["optimizer"]["state"])  # int keys
    first = state[0]
    assert set(first) == {"step", "exp_avg", "exp_avg_sq"}
    assert first["step"].item() == 3.0
    groups = got["optimizer"]["param_groups"]
    assert groups[0]["betas"] == (0.9, 0.95) and groups[0]["weight_decay"] == 0.1
    assert groups[1]["params"] == ckpt["optimizer"]["param_groups"][1]["params"]
    # The tied weights come back as two tensors on one storage, as in PyTorch.
    wte, head = got["model"]["transformer.wte.weight"], got["model"]["lm_head.weight"]
    assert base_ptr(wte) == base_ptr(head)
    head.fill_(0.5)
    assert wte.sum().item() == pytest.approx(0.5 * wte.numel())


def test_views_from_torch_keep_strides_and_storage():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    obj = {"base": base, "t": base.t(), "slice": base[1:3, 2:5], "col": base[:, 4],
           "expanded": torch.tensor([1.0, 2.0]).expand(3, 2), "empty": base[4:],
           "scalar": torch.tensor(7), "long_view": torch.arange(10)[2::3]}
    got = attn.load(io.BytesIO(torch_bytes(obj)))
    assert_same_tree(got, obj)
    assert got["slice"].storage_offset() == 8 and got["expanded"].stride() == (0, 1)
    assert base_ptr(got["t"]) == base_ptr(got["base"]) == base_ptr(got["slice"])
    got["base"].fill_(-1.0)
    assert got["col"].tolist() == [-1.0] * 4


def test_parameters_and_requires_grad_from_torch():
    obj = {"p": torch.nn.Parameter(torch.ones(2, 2)),
           "frozen": torch.nn.Parameter(torch.zeros(3), requires_grad=False),
           "leaf": torch.ones(2).requires_grad_(), "plain": torch.ones(2)}
    got = attn.load(io.BytesIO(torch_bytes(obj)))
    assert_same_tree(got, obj)
    assert isinstance(got["p"], attn.nn.Parameter) and got["p"].requires_grad
    assert isinstance(got["frozen"], attn.nn.Parameter) and not got["frozen"].requires_grad
    assert got["leaf"].requires_grad and not isinstance(got["leaf"], attn.nn.Parameter)


def test_shared_python_objects_stay_shared():
    shared = [1, 2]
    t = torch.ones(3)
    got = attn.load(io.BytesIO(torch_bytes({"a": shared, "b": shared, "t1": t, "t2": t})))
    assert got["a"] is got["b"] and got["t1"] is got["t2"]


# ---- attn -> PyTorch ---------------------------------------------------------------------------

def test_attn_state_dict_loads_in_torch_weights_only(tmp_path):
    attn.manual_seed(3)
    m = attn.nn.Sequential(attn.nn.Linear(4, 3), attn.nn.LayerNorm(3), attn.nn.Linear(3, 2))
    sd = m.state_dict()
    sd["steps"] = attn.tensor([5, -2, 2**50])
    sd["flags"] = attn.tensor([True, False])
    path = tmp_path / "attn.pt"
    attn.save(sd, path)
    got = torch.load(path, weights_only=True)
    assert isinstance(got, collections.OrderedDict) and list(got) == list(sd)
    for k, v in sd.items():
        np.testing.assert_array_equal(got[k].numpy(), v.numpy())
        assert str(got[k].dtype) == "torch." + str(v.dtype).split(".")[-1]
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    tm.load_state_dict({k: v for k, v in got.items() if k not in ("steps", "flags")})
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(tm(torch.tensor(x)).detach().numpy(),
                               m(attn.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_attn_file_layout_matches_torch():
    data = attn_bytes({"w": attn.ones(3)})
    z = zipfile.ZipFile(io.BytesIO(data))
    names = [i.filename for i in z.infolist()]
    assert names[0] == "archive/data.pkl" and "archive/data/0" in names
    assert z.read("archive/version") == torch_bytes_version()
    for info in z.infolist():
        assert info.compress_type == zipfile.ZIP_STORED
        assert z.testzip() is None
    # Storage records start 64-byte aligned, as torch's writer puts them.
    info = z.getinfo("archive/data/0")
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0


def torch_bytes_version():
    return zipfile.ZipFile(io.BytesIO(torch_bytes({"w": torch.ones(1)}))).read("archive/version")


def test_nanogpt_checkpoint_round_trip_through_attn(tmp_path):
    model, ckpt = nanogpt_checkpoint()
    got = attn.load(io.BytesIO(torch_bytes(ckpt)))
    path = tmp_path / "back.pt"
    attn.save(got, path)
    back = torch.load(path)
    assert_same_tree_torch(back, ckpt)
    assert back["model"]._metadata == ckpt["model"]._metadata
    # Tied weights are one storage in torch again; the model and optimizer resume from it.
    assert (back["model"]["transformer.wte.weight"].data_ptr()
            == back["model"]["lm_head.weight"].data_ptr())
    m2 = TinyGPT()
    m2.load_state_dict(back["model"])
    opt = torch.optim.AdamW(
        [{"params": [p for p in m2.parameters() if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in m2.parameters() if p.dim() < 2], "weight_decay": 0.0}])
    opt.load_state_dict(back["optimizer"])
    idx = torch.randint(0, 11, (2, 6))
    assert torch.equal(m2(idx), model(idx))
    # And the bytes attn writes for the same tree again are identical (deterministic writer).
    assert attn_bytes(attn.load(path)) == path.read_bytes()


def test_views_and_parameters_from_attn():
    base = attn.arange(24, dtype=attn.float32).reshape(4, 6)
    p = attn.nn.Parameter(attn.ones(2, 3))
    frozen = attn.nn.Parameter(attn.zeros(2), requires_grad=False)
    obj = {"base": base, "t": base.t(), "row": base[2], "cols": base[:, 1:4], "p": p,
           "frozen": frozen, "leaf": attn.ones(2).requires_grad_(), "i": attn.tensor(3)}
    got = torch.load(io.BytesIO(attn_bytes(obj)))
    for k in obj:
        assert got[k].shape == tuple(obj[k].shape), k
        assert got[k].stride() == obj[k].stride(), k
        assert got[k].storage_offset() == obj[k].storage_offset(), k
        assert got[k].requires_grad == obj[k].requires_grad, k
        np.testing.assert_array_equal(got[k].detach().numpy(), obj[k].detach().numpy())
    assert isinstance(got["p"], torch.nn.Parameter) and got["p"].requires_grad
    assert isinstance(got["frozen"], torch.nn.Parameter) and not got["frozen"].requires_grad
    assert not isinstance(got["leaf"], torch.nn.Parameter)
    assert got["base"].data_ptr() == got["t"].data_ptr() == base_ptr(got["cols"])
    assert len(zipfile.ZipFile(io.BytesIO(attn_bytes(obj))).namelist()) == 3 + 5  # 5 storages


def test_python_values_round_trip():
    obj = collections.OrderedDict([
        ("none", None), ("t", True), ("f", False), ("ints", [0, 255, 256, 65535, 65536, -1,
                                                             2**31 - 1, -2**31, 2**31, -2**63,
                                                             2**63 - 1]),
        ("floats", [0.0, -0.0, 1.5, 1e300, float("inf")]), ("s", "héllo ✓ 𝄞"),
        ("tup", (1, (2, 3), ())), ("nested", {"a": [{"b": {(1, "x"): "tuple key", 3: "int"}}]}),
        ("empty", {}), ("od", collections.OrderedDict(z=1, a=2)), ("many", list(range(2500))),
        ("bigdict", {str(i): i for i in range(1200)})])
    via_attn = attn.load(io.BytesIO(attn_bytes(obj)))
    assert via_attn == obj and type(via_attn["od"]) is collections.OrderedDict
    via_torch = torch.load(io.BytesIO(attn_bytes(obj)))
    assert via_torch == obj
    assert attn.load(io.BytesIO(torch_bytes(obj))) == obj
    nan = attn.load(io.BytesIO(attn_bytes([float("nan")])))[0]
    assert nan != nan


# ---- what cannot be loaded or saved ------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.int32,
                                   torch.uint8, torch.int8, torch.int16, torch.complex64])
def test_other_dtypes_are_named_errors(dtype):
    obj = {"model": collections.OrderedDict(ok=torch.ones(2), w=torch.zeros(2, 3, dtype=dtype))}
    with pytest.raises(NotImplementedError) as e:
        attn.load(io.BytesIO(torch_bytes(obj)))
    name = str(dtype).split(".")[-1]
    assert "['model']['w']" in str(e.value) and name in str(e.value) and "(2, 3)" in str(e.value)
    assert "[attn {}]".format(attn.__version__) in str(e.value)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned_by_pickle",))


def zip_with_pickle(pkl, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        for name, data in extra:
            z.writestr(name, data)
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def test_arbitrary_globals_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for payload in [Evil(), {"a": Evil()}, [collections.Counter("ab")], {1, 2},
                    {"f": os.path.join}]:
        data = zip_with_pickle(pickle.dumps(payload, protocol=2))
        with pytest.raises(pickle.UnpicklingError) as ours:
            attn.load(io.BytesIO(data))
        with pytest.raises(pickle.UnpicklingError):  # the oracle refuses it too
            torch.load(io.BytesIO(data), weights_only=True)
        assert not (tmp_path / "pwned_by_pickle").exists()
        if isinstance(payload, Evil):
            assert "Unsupported global: posix.system" in str(ours.value)
    # A protocol-4 pickle of allowed content loads (STACK_GLOBAL, MEMOIZE, FRAME, ...).
    obj = {"x": [1, 2.5, "s"], "o": collections.OrderedDict(a=(1, None))}
    assert attn.load(io.BytesIO(zip_with_pickle(pickle.dumps(obj, protocol=4)))) == obj


def test_save_refuses_what_it_cannot_write(tmp_path):
    class Thing:
        pass

    for obj, err, words in [({"x": Thing()}, NotImplementedError, "['x']"),
                            ({"t": torch.ones(2)}, NotImplementedError, "torch.save"),
                            ({1, 2}, NotImplementedError, "set"),
                            (b"bytes", NotImplementedError, "bytes"),
                            (2**70, NotImplementedError, "64 bits")]:
        with pytest.raises(err) as e:
            attn.save(obj, io.BytesIO())
        assert words in str(e.value) and "[attn {}]".format(attn.__version__) in str(e.value)
    rec = [1]
    rec.append(rec)
    with pytest.raises(ValueError, match="recursive"):
        attn.save(rec, io.BytesIO())
    deep = []
    for _ in range(1100):
        deep = [deep]
    with pytest.raises(ValueError, match="deeper"):
        attn.save(deep, io.BytesIO())
    with pytest.raises(RuntimeError, match="cpu"):
        attn.load(io.BytesIO(attn_bytes([1])), map_location="cuda")
    with pytest.raises(TypeError):
        attn.save([1], 42)
    # Paths fail as torch's do.
    for lib in (attn, torch):
        with pytest.raises(RuntimeError, match="Parent directory"):
            lib.save([1], tmp_path / "no" / "such.pt")
        with pytest.raises(FileNotFoundError):
            lib.load(tmp_path / "missing.pt")


def test_corrupt_archives_are_clear_errors():
    good = torch_bytes({"w": torch.arange(6.0), "i": torch.arange(3)})
    errors = (RuntimeError, pickle.UnpicklingError, NotImplementedError)
    # Every truncation, and a byte flipped at many places: an error of the documented kinds (or
    # the same value when the flip hit padding), never a crash.
    for n in list(range(0, len(good), 7)) + [len(good) - 1]:
        with pytest.raises(errors):
            attn.load(io.BytesIO(good[:n]))
    for at in range(0, len(good), 3):
        bad = bytearray(good)
        bad[at] ^= 0x41
        try:
            attn.load(io.BytesIO(bytes(bad)))
        except errors:
            pass
    legacy = io.BytesIO()
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(NotImplementedError, match="legacy torch.save file"):
        attn.load(io.BytesIO(legacy.getvalue()))
    with pytest.raises(RuntimeError, match="not a zip archive"):
        attn.load(io.BytesIO(b"not a zip file at all, just text"))
    with pytest.raises(RuntimeError, match="data.pkl"):
        attn.load(io.BytesIO(zip_with_pickle(b"")[:0] or _zip_without_pkl()))
    # A storage record missing, or too short for the tensor's size and offset.
    pkl = zipfile.ZipFile(io.BytesIO(good)).read("archive/data.pkl")
    with pytest.raises(RuntimeError, match="no record 'archive/data/0'"):
        attn.load(io.BytesIO(zip_with_pickle(pkl)))
    with pytest.raises(RuntimeError, match="needs 24 bytes but its record holds 8"):
        attn.load(io.BytesIO(zip_with_pickle(pkl, [("archive/data/0", b"\0" * 8),
                                                   ("archive/data/1", b"\0" * 24)])))
    view = torch_bytes(torch.arange(6.0)[2:])
    z = zipfile.ZipFile(io.BytesIO(view))
    short = zip_with_pickle(z.read("archive/data.pkl").replace(b"K\x06t", b"K\x04t"),
                            [("archive/data/0", b"\0" * 16)])
    with pytest.raises(RuntimeError, match="reaches past the end of the storage"):
        attn.load(io.BytesIO(short))
    with pytest.raises(RuntimeError):  # the oracle also refuses that file
        torch.load(io.BytesIO(short))
    # A compressed record (written by another zip tool).
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zz:
        zz.writestr("archive/data.pkl", pickle.dumps(1, protocol=2))
    with pytest.raises(NotImplementedError, match="compressed"):
        attn.load(io.BytesIO(buf.getvalue()))


def _zip_without_pkl():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def test_malformed_pickles_are_unpickling_errors():
    cases = [b"", b"\x80\x02", b"\x80\x02(K\x01", b"\x80\x02a.", b"\x80\x02h\x05.",
             b"\x80\x02K\x01K\x02s.", b"\x80\x02]q\x00h\x00a.",  # a list holding itself
             b"\x80\x02" + b"]" * 2000 + b"a" * 1999 + b".",  # nested too deeply
             b"\x80\x02N" + b"\x85" * 5000 + b".",  # tuples nested too deeply
             b"\x80\x02\xff.", b"\x80\x09N."]
    for pkl in cases:
        with pytest.raises(pickle.UnpicklingError):
            attn.load(io.BytesIO(zip_with_pickle(pkl)))
    with pytest.raises(NotImplementedError, match="64-bit"):
        attn.load(io.BytesIO(zip_with_pickle(pickle.dumps(2**80, protocol=2))))


def test_parameter_with_state_as_torch_2_writes_it(monkeypatch):
    """PyTorch 2.x pickles Parameters through torch._utils._rebuild_parameter_with_state(data,
    requires_grad, hooks, state). torch 1.13 lacks it: the test gives it one for the pickler,
    which then writes the bytes 2.x writes."""
    def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
        return torch.nn.Parameter(data, requires_grad)

    monkeypatch.setattr(torch._utils, "_rebuild_parameter_with_state",
                        _rebuild_parameter_with_state, raising=False)
    _rebuild_parameter_with_state.__module__ = "torch._utils"
    _rebuild_parameter_with_state.__qualname__ = "_rebuild_parameter_with_state"
    monkeypatch.setattr(torch.nn.Parameter, "__reduce_ex__", lambda self, proto: (
        torch._utils._rebuild_parameter_with_state,
        (self.data, self.requires_grad, collections.OrderedDict(), {})))
    data = torch_bytes({"p": torch.nn.Parameter(torch.arange(3.0)),
                        "f": torch.nn.Parameter(torch.ones(1), requires_grad=False)})
    assert b"_rebuild_parameter_with_state" in data
    got = attn.load(io.BytesIO(data))
    assert isinstance(got["p"], attn.nn.Parameter) and got["p"].requires_grad
    assert got["p"].tolist() == [0.0, 1.0, 2.0]
    assert isinstance(got["f"], attn.nn.Parameter) and not got["f"].requires_grad
