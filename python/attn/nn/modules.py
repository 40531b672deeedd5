"""torch.nn.Module's bookkeeping in Python, over C++ parameters.

Module keeps parameters, buffers and submodules in registration order, as torch does, so
state_dict() keys are PyTorch's (``out_proj.weight``) and weights move between the two by name.
Built-in layers create their C++ counterpart (which draws the initial weights from the generator
exactly as PyTorch does) and adopt its tensors as Parameters: the storage is shared, not copied.
"""
import os as _os
from collections import OrderedDict, namedtuple

from .. import _C
from .._C import Tensor
from . import functional as F


class _C_no_grad:
    """Grad mode off for a block (the nn package cannot import attn.no_grad: attn imports it)."""

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


class Parameter(Tensor):
    """A Tensor that a Module registers as a parameter. Shares storage with `data`."""

    def __init__(self, data=None, requires_grad=True, _alias=False):
        if data is None:
            data = _C.empty(0)
        if _alias:  # the very tensor a C++ module computes with (its gradients land here)
            Tensor.__init__(self, data, True)
        else:
            Tensor.__init__(self, data)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    __str__ = __repr__


_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of every module (torch.nn.Module). Subclass it and define forward()."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())

    # ---- registration -------------------------------------------------------------------------
    def _check_init(self, what):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign {} before Module.__init__() call".format(what))

    def _check_name(self, name, what):
        if not isinstance(name, str):
            raise TypeError("{} name should be a string, got {}".format(what, type(name).__name__))
        if name == "" or "." in name:
            raise KeyError("{} name can't be empty or contain \".\", got {!r}".format(what, name))

    def register_parameter(self, name, param):
        self._check_init("parameters")
        self._check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError("attribute '{}' already exists".format(name))
        if param is not None and not isinstance(param, Parameter):
            raise TypeError("cannot assign '{}' object to parameter '{}' (attn.nn.Parameter or "
                            "None required)".format(type(param).__name__, name))
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._check_init("buffers")
        self._check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError("attribute '{}' already exists".format(name))
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError("cannot assign '{}' object to buffer '{}' (attn Tensor or None "
                            "required)".format(type(tensor).__name__, name))
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        self._check_init("child module")
        if module is not None and not isinstance(module, Module):
            raise TypeError("{} is not a Module subclass".format(type(module).__name__))
        self._check_name(name, "module")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            self._check_init("parameters")
            self.__dict__.pop(name, None)
            self._buffers.pop(name, None)
            self._modules.pop(name, None)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError("cannot assign '{}' as parameter '{}' (attn.nn.Parameter or None "
                                "expected)".format(type(value).__name__, name))
            params[name] = None
        elif isinstance(value, Module):
            self._check_init("child module")
            self.__dict__.pop(name, None)
            self._parameters.pop(name, None)
            self._buffers.pop(name, None)
            self._modules[name] = value
        elif self.__dict__.get("_modules") is not None and name in self._modules:
            if value is not None:
                raise TypeError("cannot assign '{}' as child module '{}' (attn.nn.Module or None "
                                "expected)".format(type(value).__name__, name))
            self._modules[name] = None
        elif self.__dict__.get("_buffers") is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError("cannot assign '{}' as buffer '{}' (attn Tensor or None "
                                "expected)".format(type(value).__name__, name))
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError("'{}' object has no attribute '{}'".format(type(self).__name__, name))

    def __delattr__(self, name):
        for store in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(store, {}):
                del self.__dict__[store][name]
                return
        object.__delattr__(self, name)

    # ---- traversal ----------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix=""):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, store, prefix, recurse):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, t in getattr(m, store).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield mprefix + ("." if mprefix else "") + name, t

    def named_parameters(self, prefix="", recurse=True):
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies tensors in by name (in place, so shared C++ storage sees them).

        Raises ValueError listing missing and unexpected keys (strict) or mismatched shapes."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if missing:
                errors.append("Missing key(s) in state_dict: " +
                              ", ".join('"{}"'.format(k) for k in missing) + ".")
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " +
                              ", ".join('"{}"'.format(k) for k in unexpected) + ".")
        converted = {}
        for k, target in own.items():
            if k not in state_dict:
                continue
            value = state_dict[k]
            if not isinstance(value, Tensor):
                value = _C.tensor(value.detach().cpu().numpy() if hasattr(value, "detach")
                                  else value)
            if tuple(value.shape) != tuple(target.shape):
                errors.append("size mismatch for {}: copying a param with shape {} from "
                              "checkpoint, the shape in current model is {}.".format(
                                  k, tuple(value.shape), tuple(target.shape)))
                continue
            converted[k] = value
        if errors:
            raise ValueError("[load_state_dict] Error(s) in loading state_dict for {}:\n\t{}"
                             .format(type(self).__name__, "\n\t".join(errors)))
        for k, value in converted.items():
            own[k].detach().copy_(value)
        return _IncompatibleKeys(missing, unexpected)

    # ---- modes and calls ------------------------------------------------------------------------
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        """Resets the gradients of every parameter: None (the default, as torch's
        set_to_none=True) or zeros."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                g = p.grad
                with _C_no_grad():
                    g.zero_()

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """Module.to(device / dtype): attn modules live on the cpu in float32, so only those are
        accepted (anything else raises instead of being silently ignored)."""
        for a in list(args) + list(kwargs.values()):
            if a is None or isinstance(a, bool) or str(a) in ("cpu", "torch.float32"):
                continue
            raise ValueError("[Module.to] attn modules are float32 on the cpu; cannot move to "
                             "{!r}".format(a))
        return self

    def cpu(self):
        return self

    def float(self):
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            'Module [{}] is missing the required "forward" function'.format(type(self).__name__))

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        children = []
        for name, m in self._modules.items():
            mod = repr(m).replace("\n", "\n  ")
            children.append("(" + name + "): " + mod)
        main = type(self).__name__ + "("
        if lines and not children and len(lines) == 1:
            return main + lines[0] + ")"
        body = lines + children
        if not body:
            return main + ")"
        return main + "\n  " + "\n  ".join(body) + "\n)"

    def __dir__(self):
        keys = list(object.__dir__(self))
        keys += list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(set(keys))


class Identity(Module):
    def forward(self, input):
        return input


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return list(self._modules.values())[i]


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        for m in modules or []:
            self.append(m)

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i):
        return list(self._modules.values())[i]


class Linear(Module):
    """y = x W^T + b, initialised like torch.nn.Linear (same numbers for the same seed)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        impl = _C.modules.Linear(in_features, out_features, bool(bias))
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(impl.weight)
        if bias:
            self.bias = Parameter(impl.bias)
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return "in_features={}, out_features={}, bias={}".format(
            self.in_features, self.out_features, self.bias is not None)


class NonDynamicallyQuantizableLinear(Linear):
    pass


class Embedding(Module):
    """A lookup table initialised N(0, 1) like torch.nn.Embedding."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 device=None, dtype=None):
        super().__init__()
        if padding_idx is not None or max_norm is not None:
            raise ValueError("[Embedding] padding_idx and max_norm are not supported")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(_C.modules.Embedding(num_embeddings, embedding_dim).weight)

    def forward(self, input):
        return F.embedding(input, self.weight)

    def extra_repr(self):
        return "{}, {}".format(self.num_embeddings, self.embedding_dim)


class Dropout(Module):
    """Zeroes elements with probability p in training and scales the rest by 1/(1-p)."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        _C.modules.Dropout(float(p))  # validates p
        self.p = float(p)
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return "p={}, inplace={}".format(self.p, self.inplace)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention over the C++ implementation; parameters share its storage and
    carry PyTorch's names (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias, or
    q_proj_weight / k_proj_weight / v_proj_weight when kdim or vdim differ from embed_dim)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise ValueError("[MultiheadAttention] add_bias_kv and add_zero_attn are not supported")
        impl = _C.modules.MultiheadAttention(embed_dim, num_heads, float(dropout), bool(bias),
                                             kdim, vdim, bool(batch_first))
        object.__setattr__(self, "_impl", impl)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        self.head_dim = impl.head_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(impl.in_proj_weight)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(impl.q_proj_weight)
            self.k_proj_weight = Parameter(impl.k_proj_weight)
            self.v_proj_weight = Parameter(impl.v_proj_weight)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(impl.in_proj_bias)
        else:
            self.register_parameter("in_proj_bias", None)
        out_proj = NonDynamicallyQuantizableLinear.__new__(NonDynamicallyQuantizableLinear)
        Module.__init__(out_proj)
        out_proj.in_features = out_proj.out_features = embed_dim
        out_proj.weight = Parameter(impl.out_proj_weight)
        if bias:
            out_proj.bias = Parameter(impl.out_proj_bias)
        else:
            out_proj.register_parameter("bias", None)
        self.out_proj = out_proj
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        impl = self._impl
        impl.train(self.training)
        # The current Parameters (they may have been reassigned since construction).
        impl._set_parameters(self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                             self.v_proj_weight, self.in_proj_bias, self.out_proj.weight,
                             self.out_proj.bias, float(self.dropout))
        return self._impl.forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                                  average_attn_weights, is_causal)

    def extra_repr(self):
        return ""


class LayerNorm(Module):
    """torch.nn.LayerNorm over the last dim; bias optional (bias=False as in torch 2.1+)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        n = F._normalized_dim(normalized_shape, "LayerNorm")
        if n <= 0:
            raise ValueError("[LayerNorm] normalized_shape must be positive, got {}".format(n))
        self.normalized_shape = (n,)
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_C.ones(n))
            if bias:
                self.bias = Parameter(_C.zeros(n))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "{}, eps={}, elementwise_affine={}".format(self.normalized_shape, self.eps,
                                                          self.elementwise_affine)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError("[GELU] approximate must be 'none' or 'tanh', got {!r}".format(
                approximate))
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, self.approximate)

    def extra_repr(self):
        return "approximate={!r}".format(self.approximate)


class GPT(Module):
    """nanoGPT's GPT (include/attn/gpt.h) over the C++ model. Parameters share the C++ storage and
    carry its dotted names (wte.weight, h.0.attn.in_proj_weight, ...); load weights with
    load_state_dict (in-place copies). forward(idx, targets=None) returns (logits, loss) as nanoGPT
    does; generate() samples with a key/value cache."""

    def __init__(self, vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128,
                 dropout=0.0, bias=True, generator=None):
        super().__init__()
        c = _C.modules.GPTConfig()
        c.vocab_size, c.block_size, c.n_layer = int(vocab_size), int(block_size), int(n_layer)
        c.n_head, c.n_embd, c.dropout, c.bias = int(n_head), int(n_embd), float(dropout), bool(bias)
        self._attach(_C.modules.GPT(c, generator))

    def _attach(self, impl):
        """Takes the C++ model `impl` and mirrors its parameters (shared storage, dotted names)."""
        c = impl.config
        object.__setattr__(self, "_impl", impl)
        object.__setattr__(self, "config", dict(vocab_size=c.vocab_size, block_size=c.block_size,
                                                n_layer=c.n_layer, n_head=c.n_head,
                                                n_embd=c.n_embd, dropout=c.dropout, bias=c.bias))
        for name, t in self._impl.named_parameters():
            *path, leaf = name.split(".")
            owner = self
            for part in path:
                child = owner._modules.get(part)
                if child is None:
                    child = _Container()
                    owner.add_module(part, child)
                owner = child
            owner.register_parameter(leaf, Parameter(t, _alias=True))

    def forward(self, idx, targets=None):
        if targets is None:
            return self._impl.forward(idx), None
        return self._impl.forward_loss(idx, targets)

    def train(self, mode=True):
        super().train(mode)
        self._impl.train(bool(mode))
        return self

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True,
                 generator=None, callback=None):
        """Samples max_new_tokens tokens after idx (B, T); callback(tokens (B,)) streams them."""
        return self._impl.generate(idx, int(max_new_tokens), float(temperature), top_k,
                                   bool(use_cache), generator, callback)

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def from_pretrained(cls, path):
        """A Hugging Face GPT-2 directory (config.json + model.safetensors, as
        GPT2LMHeadModel.save_pretrained(path, safe_serialization=True) writes it) as attn's GPT:
        the same logits as transformers' model (include/attn/hf_gpt2.h for what maps and what is
        refused). Unlike nanoGPT's from_pretrained("gpt2"), nothing is downloaded: `path` is a
        local directory. The model is in evaluation mode, as transformers returns it."""
        self = cls.__new__(cls)
        Module.__init__(self)
        self._attach(_C.hf.load_gpt2(_os.fspath(path)))
        self.eval()
        c = self._impl.config
        self.config.update(gelu_approximate=c.gelu_approximate, layer_norm_eps=c.layer_norm_eps,
                           n_inner=c.n_inner or None)
        return self

    def save_pretrained(self, path):
        """Writes config.json and model.safetensors to the directory `path` (created if missing),
        so that transformers' GPT2LMHeadModel.from_pretrained(path) loads this model."""
        _C.hf.save_gpt2(self._impl, _os.fspath(path))

    def configure_optimizers(self, weight_decay, learning_rate, betas, eps=1e-8):
        """AdamW with nanoGPT's groups: 2-D parameters decay, the others do not."""
        from ..optim import AdamW
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        return AdamW([{"params": decay, "weight_decay": weight_decay},
                      {"params": no_decay, "weight_decay": 0.0}], lr=learning_rate, betas=betas,
                     eps=eps)


class _Container(Module):
    """A plain node of GPT's parameter tree (named like the C++ submodules)."""
