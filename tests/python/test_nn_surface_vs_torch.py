"""The torch.nn surface of small GPT programs, against torch 1.13: activations and containers
(Sequential, ModuleList, ModuleDict), traversal (named_modules, children, apply), buffers
(persistent or not), state_dict / load_state_dict with torch's keys, results and messages, weight
tying, nn.init with torch's numbers, reprs; and the top level such programs touch (cuda, device,
backends, autocast, compile, no_grad / inference_mode, unsupported names)."""
import copy
import math
import pickle
import warnings
from collections import OrderedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
from conftest import raises_no_gpu  # noqa: E402


def build(lib, tie=True):
    """A minGPT/nanoGPT-shaped model written against lib (torch or attn)."""
    nn = lib.nn

    class NewGELU(nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + lib.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 *
                                                                       lib.pow(x, 3.0))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(8)
            self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(8, 16), act=NewGELU(),
                                          c_proj=nn.Linear(16, 8), drop=nn.Dropout(0.0)))
            self.ffwd = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 8),
                                      nn.GELU(approximate="tanh"), nn.Tanh(), nn.SiLU(),
                                      nn.Sigmoid(), nn.Identity())
            self.register_buffer("tril", lib.tril(lib.ones(4, 4)))
            self.register_buffer("scratch", lib.zeros(3), persistent=False)
            m = self.mlp
            self.mlpf = lambda x: m.drop(m.c_proj(m.act(m.c_fc(x))))

        def forward(self, x):
            x = x + self.mlpf(self.ln(x))
            return x + self.ffwd(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(10, 8), wpe=nn.Embedding(4, 8),
                h=nn.ModuleList([Block() for _ in range(2)]), ln_f=nn.LayerNorm(8)))
            self.lm_head = nn.Linear(8, 10, bias=False)
            if tie:
                self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    lib.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * 2))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    lib.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx):
            pos = lib.arange(0, idx.size(1), dtype=lib.long, device=idx.device).unsqueeze(0)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    lib.manual_seed(0)
    return Model()


def test_model_structure_names_and_values_match_torch():
    t, a = build(torch), build(attn)
    assert list(a.state_dict()) == list(t.state_dict())
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in a.named_modules()] == [n for n, _ in t.named_modules()]
    assert [type(m).__name__ for m in a.modules()] == [type(m).__name__ for m in t.modules()]
    assert [n for n, _ in a.named_children()] == [n for n, _ in t.named_children()]
    assert [n for n, _ in a.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert len(list(a.buffers())) == len(list(t.buffers()))
    assert (sum(p.numel() for p in a.parameters()) == sum(p.numel() for p in t.parameters()))
    assert len(list(a.parameters(recurse=False))) == len(list(t.parameters(recurse=False)))
    assert "transformer.h.0.scratch" not in a.state_dict()  # persistent=False
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(a.state_dict()[k].numpy(), v.numpy(), err_msg=k)
    assert a.transformer.wte.weight is a.lm_head.weight  # tied
    idx = [[1, 2, 3, 4], [5, 6, 7, 9]]
    np.testing.assert_allclose(a(attn.tensor(idx)).detach().numpy(),
                               t(torch.tensor(idx)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert repr(a) == repr(t)


def test_load_state_dict_results_and_messages_match_torch():
    t, a = build(torch), build(attn)
    sd_t = t.state_dict()
    # torch -> attn and back, exact
    assert repr(a.load_state_dict(sd_t)) == repr(t.load_state_dict(sd_t)) == \
        "<All keys matched successfully>"
    cases = []
    missing = OrderedDict((k, v) for k, v in sd_t.items() if "ln_f" not in k)
    extra = OrderedDict(sd_t, **{"transformer.h.0.bogus": torch.zeros(1), "head.x": torch.zeros(1),
                                 "transformer.h.0.scratch": torch.zeros(3)})
    shape = OrderedDict(sd_t, **{"lm_head.weight": torch.zeros(3, 8)})
    cases = [missing, extra, shape]
    for sd in cases:
        with pytest.raises(RuntimeError) as et:
            t.load_state_dict(sd)
        with pytest.raises(RuntimeError) as ea:
            a.load_state_dict(sd)
        assert str(ea.value) == "[load_state_dict] " + str(et.value)
        assert isinstance(ea.value, ValueError)  # and attn's usual argument error
    for sd in cases[:2]:
        rt = t.load_state_dict(sd, strict=False)
        ra = a.load_state_dict(sd, strict=False)
        assert (ra.missing_keys, ra.unexpected_keys) == (rt.missing_keys, rt.unexpected_keys)
        assert repr(ra) == repr(rt)
    # foreign dtypes are converted (float64, bfloat16 checkpoints)
    for dt in (torch.float64, torch.bfloat16):
        a.load_state_dict({k: v.to(dt) if v.is_floating_point() else v for k, v in sd_t.items()})
        np.testing.assert_array_equal(a.lm_head.weight.detach().numpy(),
                                      t.lm_head.weight.to(dt).float().detach().numpy())
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        a.load_state_dict([1, 2])


def test_load_state_dict_copies_in_place_and_fails_atomically():
    a = build(attn)
    w = a.lm_head.weight
    sd = {k: v * 0 + 1 for k, v in a.state_dict().items()}
    a.load_state_dict(sd)
    assert a.lm_head.weight is w and (w == 1).all().item()
    bad = dict(sd, **{"lm_head.weight": attn.zeros(2, 8)})
    bad["transformer.ln_f.bias"] = attn.full((8,), 5.0)
    with pytest.raises(RuntimeError, match="size mismatch for lm_head.weight"):
        a.load_state_dict(bad)
    assert (a.transformer.ln_f.bias == 1).all().item()  # nothing copied


def test_containers_match_torch():
    for lib in (torch, attn):
        nn = lib.nn
        lib.manual_seed(0)
        s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
        assert len(s) == 3 and isinstance(s[-1], nn.Linear) and isinstance(s[1], nn.ReLU)
        assert isinstance(s[0:2], nn.Sequential) and len(s[0:2]) == 2
        assert [type(m).__name__ for m in s] == ["Linear", "ReLU", "Linear"]
        with pytest.raises(IndexError):
            s[3]
        s.append(nn.Tanh())
        assert list(s.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        od = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.GELU())]))
        assert list(od.state_dict()) == ["fc.weight", "fc.bias"] and od.act is od[1]
        ml = nn.ModuleList([nn.Linear(1, 1) for _ in range(3)])
        ml.append(nn.Linear(1, 2))
        ml.extend([nn.Identity()])
        ml += [nn.ReLU()]
        assert len(ml) == 6 and isinstance(ml[-1], nn.ReLU) and len(ml[1:3]) == 2
        md = nn.ModuleDict({"a": nn.Linear(1, 1)})
        md["b"] = nn.Tanh()
        md.update([("c", nn.ReLU())])
        assert list(md.keys()) == ["a", "b", "c"] and "b" in md and len(md) == 3
        assert [k for k in md] == ["a", "b", "c"] and isinstance(md.pop("b"), nn.Tanh)
    t = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.GELU(), torch.nn.SiLU(),
                            torch.nn.ReLU(inplace=True), torch.nn.Dropout(0.1),
                            torch.nn.ModuleDict({"x": torch.nn.Tanh()}), torch.nn.Identity())
    a = attn.nn.Sequential(attn.nn.Linear(2, 3), attn.nn.GELU(), attn.nn.SiLU(),
                           attn.nn.ReLU(inplace=True), attn.nn.Dropout(0.1),
                           attn.nn.ModuleDict({"x": attn.nn.Tanh()}), attn.nn.Identity())
    assert repr(a) == repr(t)


@pytest.mark.parametrize("name", ["ReLU", "Tanh", "SiLU", "Sigmoid", "GELU", "Identity"])
def test_activations_match_torch(name):
    x = np.linspace(-4, 4, 33).astype(np.float32)
    kw = [{}] + ([{"approximate": "tanh"}] if name == "GELU" else [])
    for k in kw:
        tx = torch.tensor(x, requires_grad=True)
        ax = attn.tensor(x, requires_grad=True)
        ty = getattr(torch.nn, name)(**k)(tx)
        ay = getattr(attn.nn, name)(**k)(ax)
        np.testing.assert_allclose(ay.detach().numpy(), ty.detach().numpy(), rtol=1e-6,
                                   atol=1e-6)
        ty.sum().backward()
        ay.sum().backward()
        np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_module_methods():
    a = build(attn)
    assert a.train() is a and a.training and all(m.training for m in a.modules())
    assert a.eval() is a and not any(m.training for m in a.modules())
    assert a.to("cpu") is a and a.to(attn.device("cpu")) is a and a.to(attn.float32) is a
    assert a.to("cpu", non_blocking=True) is a
    assert a.get_submodule("transformer.h.1.mlp.c_fc") is a.transformer.h[1].mlp["c_fc"]
    seen = []
    assert a.apply(lambda m: seen.append(type(m).__name__)) is a
    assert seen[-1] == "Model" and seen.count("Block") == 2  # children first, as torch
    out = a(attn.tensor([[1, 2]])).sum()
    out.backward()
    assert a.lm_head.weight.grad is not None
    a.zero_grad()
    assert a.lm_head.weight.grad is None
    assert a.requires_grad_(False) is a and not any(p.requires_grad for p in a.parameters())
    p = attn.nn.Parameter(attn.arange(6.0)[:3])
    assert p.requires_grad and p.tolist() == [0.0, 1.0, 2.0]
    with raises_no_gpu("Module.cuda"):
        a.cuda()
    for name in ["double", "register_forward_hook"]:
        with pytest.raises(NotImplementedError, match=r"torch.nn.Module.%s is not supported by "
                                                      r"attn" % name):
            getattr(a, name)(*([] if name != "register_forward_hook" else [print]))
    assert not hasattr(a.transformer.h[0], "no_such_attribute")
    # half() / bfloat16() convert the parameters (test_half_dtypes.py checks the values).
    for name, dt in [("half", attn.float16), ("bfloat16", attn.bfloat16)]:
        assert getattr(a, name)() is a and all(p.dtype is dt for p in a.parameters())
        assert a(attn.tensor([[1, 2]])).dtype is dt


def test_register_buffer_errors_match_torch():
    for lib in (torch, attn):
        m = lib.nn.Linear(2, 2)
        with pytest.raises(KeyError):
            m.register_buffer("weight", lib.zeros(1))
        with pytest.raises(KeyError):
            m.register_buffer("a.b", lib.zeros(1))
        with pytest.raises(TypeError):
            m.register_buffer("c", 3)


# ---- nn.init and erfinv -------------------------------------------------------------------------

INITS = [("normal_", dict(mean=0.1, std=0.02)), ("uniform_", dict(a=-0.5, b=0.3)),
         ("constant_", dict(val=0.3)), ("zeros_", {}), ("ones_", {}),
         ("xavier_uniform_", dict(gain=0.5)), ("xavier_normal_", dict(gain=2.0)),
         ("kaiming_uniform_", dict(a=math.sqrt(5))),
         ("kaiming_uniform_", dict(mode="fan_out", nonlinearity="relu")),
         ("kaiming_normal_", {}), ("kaiming_normal_", dict(a=0.2, mode="fan_out")),
         ("kaiming_normal_", dict(nonlinearity="tanh")),
         ("trunc_normal_", dict(std=0.02)),
         ("trunc_normal_", dict(mean=0.5, std=1.0, a=-0.3, b=1.2))]


@pytest.mark.parametrize("name,kw", INITS)
@pytest.mark.parametrize("shape", [(7, 5), (64, 48), (3, 4, 5)])
def test_init_same_numbers_as_torch(name, kw, shape):
    torch.manual_seed(5)
    attn.manual_seed(5)
    t, a = torch.empty(shape), attn.empty(shape)
    assert getattr(attn.nn.init, name)(a, **kw) is a
    getattr(torch.nn.init, name)(t, **kw)
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    assert attn.rand(3).tolist() == torch.rand(3).tolist()  # the same draws consumed


def test_init_gain_and_errors_match_torch():
    for nl in ["linear", "conv1d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]:
        assert attn.nn.init.calculate_gain(nl) == torch.nn.init.calculate_gain(nl)
    assert attn.nn.init.calculate_gain("leaky_relu", 0.2) == \
        torch.nn.init.calculate_gain("leaky_relu", 0.2)
    for fn, args in [("calculate_gain", ("swish",)), ("kaiming_normal_", (None,))]:
        with pytest.raises(ValueError):
            getattr(torch.nn.init, fn)(*[torch.empty(2, 2) if a is None else a for a in args],
                                       **({"mode": "fan_avg"} if fn == "kaiming_normal_" else {}))
        with pytest.raises(ValueError):
            getattr(attn.nn.init, fn)(*[attn.empty(2, 2) if a is None else a for a in args],
                                      **({"mode": "fan_avg"} if fn == "kaiming_normal_" else {}))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        attn.nn.init.xavier_normal_(attn.empty(3))
    with pytest.raises(NotImplementedError, match="orthogonal_"):
        attn.nn.init.orthogonal_(attn.empty(3, 3))


def test_skip_init_matches_torch():
    # torch.nn.utils.skip_init draws nothing: the generator is where it was. attn's parameters are
    # zeros (torch's are uninitialised memory, so only their shapes compare).
    torch.manual_seed(3)
    attn.manual_seed(3)
    t = torch.nn.utils.skip_init(torch.nn.Linear, 6, 4)
    a = attn.nn.utils.skip_init(attn.nn.Linear, 6, 4)
    assert [p.shape for p in a.parameters()] == [tuple(p.shape) for p in t.parameters()]
    assert all(p.abs().max().item() == 0 for p in a.parameters())
    assert attn.rand(3).tolist() == torch.rand(3).tolist()
    # Construction outside it draws as before.
    torch.manual_seed(3)
    attn.manual_seed(3)
    np.testing.assert_array_equal(attn.nn.Linear(6, 4).weight.detach().numpy(),
                                  torch.nn.Linear(6, 4).weight.detach().numpy())
    # A user module: the initialisers it calls draw nothing either.
    class Net(attn.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.emb = attn.nn.Embedding(n, 3)
            self.w = attn.nn.Parameter(attn.empty(n, 3))
            attn.nn.init.kaiming_uniform_(self.w)

    attn.manual_seed(8)
    net = attn.nn.utils.skip_init(Net, 5)
    assert net.w.abs().max().item() == 0 and net.emb.weight.abs().max().item() == 0
    after = attn.rand(2).tolist()
    attn.manual_seed(8)
    assert after == attn.rand(2).tolist()
    with pytest.raises(RuntimeError, match="Expected a Module"):
        torch.nn.utils.skip_init(int)
    with pytest.raises(RuntimeError, match="Expected a Module"):
        attn.nn.utils.skip_init(int)


def test_erfinv_bit_for_bit_and_grad():
    x = np.concatenate([np.linspace(-1, 1, 20001), [-1.5, 1.5, np.nan, -0.0]]).astype(np.float32)
    np.testing.assert_array_equal(attn.from_numpy(x).erfinv().numpy(),
                                  torch.from_numpy(x).erfinv().numpy())
    tx = torch.tensor([-0.9, -0.2, 0.0, 0.5, 0.99], requires_grad=True)
    ax = attn.tensor([-0.9, -0.2, 0.0, 0.5, 0.99], requires_grad=True)
    torch.erfinv(tx).sum().backward()
    attn.erfinv(ax).sum().backward()
    np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    y = attn.tensor([0.1, 0.2])
    assert y.erfinv_() is y
    assert y.tolist() == torch.tensor([0.1, 0.2]).erfinv_().tolist()


# ---- the top level ------------------------------------------------------------------------------

def test_cuda_queries_and_device():
    assert attn.cuda.is_available() is False and attn.cuda.device_count() == 0
    attn.cuda.manual_seed(1)
    attn.cuda.manual_seed_all(1)
    for spec in ["cpu", "cuda", "cuda:1", ("cuda", 0), (0,), ("cpu", 0)]:
        args = spec if isinstance(spec, tuple) else (spec,)
        t, a = torch.device(*args), attn.device(*args)
        assert (str(a), repr(a), a.type, a.index) == (str(t), repr(t), t.type, t.index)
    assert attn.device("cpu") == "cpu" and attn.device("cuda:0") != attn.device("cpu")
    assert pickle.loads(pickle.dumps(attn.device("cuda:1"))) == attn.device("cuda:1")
    with pytest.raises(RuntimeError):
        attn.device("gpu")
    x = attn.ones(2)
    assert x.device == attn.device("cpu") and x.device.type == "cpu" and not x.is_cuda
    assert x.to("cpu", non_blocking=True) is x and x.pin_memory() is x
    for fn in [lambda: x.to("cuda"), lambda: x.cuda(), lambda: x.to(attn.device("cuda", 0)),
               lambda: attn.zeros(2, device="cuda"), lambda: attn.arange(3, device="cuda:0"),
               lambda: attn.randn(2, device=attn.device("cuda"))]:
        with raises_no_gpu():
            fn()
    with pytest.raises(AssertionError):
        torch.zeros(2, device="cuda")  # what torch built without CUDA raises too


def test_creation_functions_take_dtype_and_device():
    dev = attn.device("cpu")
    made = [attn.zeros(2, 3, dtype=attn.long, device=dev), attn.ones((2,), device="cpu"),
            attn.empty(2, device=dev), attn.full((2,), 3, dtype=attn.float32, device=dev),
            attn.arange(4, dtype=attn.long, device="cpu"), attn.arange(0, 4, device=dev),
            attn.tensor([1, 2], dtype=attn.long, device=dev), attn.rand(2, device=dev),
            attn.randn(2, device=dev), attn.randint(0, 5, (2,), device=dev),
            attn.zeros_like(attn.ones(2), device=dev), attn.ones_like(attn.ones(2), device=dev),
            attn.randperm(3, device=dev), attn.zeros(2, pin_memory=False)]
    assert all(m.device == dev for m in made)
    assert attn.get_default_dtype() == attn.float32 and attn.get_default_dtype() is attn.float
    assert isinstance(attn.ones(1), attn.Tensor) and attn.long == attn.int64


def test_backends_autocast_compile_and_precision():
    attn.backends.cuda.matmul.allow_tf32 = True
    attn.backends.cudnn.allow_tf32 = True
    assert attn.backends.cuda.matmul.allow_tf32 and attn.backends.cudnn.allow_tf32
    assert not attn.backends.mps.is_available()
    attn.set_float32_matmul_precision("high")
    assert attn.get_float32_matmul_precision() == "high"
    attn.set_float32_matmul_precision("highest")
    with pytest.raises(RuntimeError):
        attn.set_float32_matmul_precision("fast")
    m = attn.nn.Linear(2, 2)
    assert attn.compile(m) is m and attn.compile(mode="max-autotune")(m) is m
    x = attn.ones(1, 2)
    with pytest.warns(UserWarning, match="CPU Autocast only supports"):  # as torch 2.x
        with attn.autocast(device_type="cpu", dtype=attn.float32):
            y = m(x)
    assert y.dtype is attn.float32
    with attn.autocast(device_type="cpu"):  # bfloat16, torch's default on the cpu
        assert m(x).dtype is attn.bfloat16
    with attn.amp.autocast(device_type="cpu", enabled=False):
        assert attn.equal(m(x), y)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with attn.autocast("cuda", dtype=attn.bfloat16):
            assert attn.equal(m(x), y)  # float32 all the same
    with pytest.raises(RuntimeError):
        attn.autocast("gpu")
    ptdtype = {"float32": attn.float32, "bfloat16": attn.bfloat16, "float16": attn.float16}
    assert str(ptdtype["bfloat16"]) == str(torch.bfloat16)
    # nanoGPT on a cpu: GradScaler(enabled=True) warns and disables itself, as torch does
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = attn.cuda.amp.GradScaler(enabled=True)
    assert not scaler.is_enabled()
    loss = m(x).sum()
    assert scaler.scale(loss) is loss
    opt = attn.optim.AdamW(m.parameters(), lr=0.1)
    loss.backward()
    w = m.weight.clone()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert not attn.equal(m.weight, w)


def test_grad_modes_as_decorators_and_contexts():
    w = attn.ones(2, requires_grad=True)

    @attn.no_grad()
    def f():
        return w * 2

    @attn.no_grad
    def g():
        return w * 2

    @attn.inference_mode()
    def h():
        return w * 2

    assert not f().requires_grad and not g().requires_grad and not h().requires_grad
    with attn.inference_mode():
        assert not (w * 2).requires_grad
        with attn.enable_grad():
            assert (w * 2).requires_grad
    with attn.inference_mode(False):
        assert (w * 2).requires_grad
    assert (w * 2).requires_grad


def test_unsupported_names_raise_not_implemented_naming_them():
    for owner, name in [(attn, "fft"), (attn.nn, "Conv3d"), (attn.nn.functional, "conv3d"),
                        (attn.ones(1), "stft")]:
        with pytest.raises(NotImplementedError, match=r"\b%s\b.*attn %s" % (name,
                                                                            attn.__version__)):
            getattr(owner, name)
        assert not hasattr(owner, name)  # an AttributeError too: feature probes work
    assert hasattr(attn.nn.functional, "scaled_dot_product_attention")
    assert hasattr(attn, "compile") and hasattr(attn.nn, "ModuleDict")
    with pytest.raises(AttributeError) as e:
        attn._no_such_private
    assert not isinstance(e.value, NotImplementedError)
    with pytest.raises(AttributeError) as e:
        attn.ones(1).__no_such_dunder__
    assert not isinstance(e.value, NotImplementedError)
    # introspection keeps working
    t = attn.arange(3.0)
    assert copy.copy(attn.device('cpu')) == 'cpu'
    assert np.asarray(t).tolist() == [0.0, 1.0, 2.0]
