"""torch.nn.Module's bookkeeping in Python, over C++ parameters.

Module keeps parameters, buffers and submodules in registration order, as torch does, so
state_dict() keys are PyTorch's (``out_proj.weight``) and weights move between the two by name.
Built-in layers create their C++ counterpart (which draws the initial weights from the generator
exactly as PyTorch does) and adopt its tensors as Parameters: the storage is shared, not copied.
"""
import os as _os
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from .. import Size, _C
from .._C import Tensor
from . import functional as F


def _foreign_to_numpy(value):
    """A torch tensor (any float dtype, bfloat16 included) or array as a NumPy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if getattr(value, "is_floating_point", lambda: False)() and \
                str(value.dtype) not in ("torch.float32", "torch.float64"):
            value = value.float()  # float16 / bfloat16: NumPy cannot read bfloat16
        return value.numpy()
    return value


_FLOAT_DTYPES = ("torch.float32", "torch.bfloat16", "torch.float16")


def _factory_dtype(module, dtype, fn):
    """A layer's dtype= argument (torch's factory kwarg): its parameters made in that dtype."""
    if dtype is None:
        return
    if str(dtype) not in _FLOAT_DTYPES:
        raise ValueError("[{}] dtype must be a floating dtype attn holds (float32, bfloat16, "
                         "float16), got {!r}".format(fn, dtype))
    module._cast(dtype)


def _no_cuda_error(fn):
    """Without CUDA: torch's AssertionError. With it: modules cannot move yet, since the ops of
    their forward passes (linear, layer norm, ...) run on the cpu only; tensors can."""
    from ..cuda import _no_cuda, _built
    if not _built():
        return _no_cuda(fn)
    return RuntimeError("[{}] attn's modules run on the cpu only: the CUDA backend has the fused "
                        "attention kernels and tensor copies, not yet the other ops of a "
                        "module's forward pass".format(fn))


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

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = Parameter(self.detach().clone(), self.requires_grad)
        return memo[id(self)]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict returns: the keys the model had that state_dict lacked, and the
    reverse (torch.nn.modules.module._IncompatibleKeys)."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDictError(RuntimeError, ValueError):
    """load_state_dict's error: a RuntimeError as torch raises (and a ValueError, as attn's
    other argument errors)."""


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
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                       remove_duplicate)

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

    def _local_state(self):
        """This module's own entries of state_dict (parameters, then persistent buffers)."""
        local = OrderedDict((k, v) for k, v in self._parameters.items() if v is not None)
        for k, v in self._buffers.items():
            if v is not None and k not in self._non_persistent_buffers_set:
                local[k] = v
        return local

    def _check_state_dict(self, state_dict, prefix, missing, unexpected, errors, copies):
        """torch's _load_from_state_dict, without copying: what this module would take from
        state_dict (into copies), and its missing and unexpected keys and size mismatches."""
        local = self._local_state()
        for name, target in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                if not hasattr(value, "shape"):
                    errors.append('While copying the parameter named "{}", expected torch.Tensor '
                                  "or Tensor-like object from checkpoint but received {}".format(
                                      key, type(value)))
                    continue
                value = _C.tensor(_foreign_to_numpy(value))
            if target.dim() == 0 and value.dim() == 1:
                value = value[0]  # torch's backward compatibility with 0.3's 1-element params
            if tuple(value.shape) != tuple(target.shape):
                errors.append("size mismatch for {}: copying a param with shape {} from "
                              "checkpoint, the shape in current model is {}.".format(
                                  key, Size(value.shape), Size(target.shape)))
                continue
            copies.append((target, value))
        for key in state_dict:
            if not isinstance(key, str) or not key.startswith(prefix):
                continue
            name = key[len(prefix):].split(".", 1)[0]
            if name not in self._modules and name not in local:
                unexpected.append(key)

    def load_state_dict(self, state_dict, strict=True):
        """Copies tensors in by name, in place (so shared C++ storage sees them), and returns
        (missing_keys, unexpected_keys) as torch's _IncompatibleKeys.

        Missing or unexpected keys (strict) and shape mismatches (always) raise a RuntimeError
        with torch's message naming them; then nothing is copied (torch copies what it could
        before raising)."""
        if not isinstance(state_dict, Mapping):
            raise TypeError("Expected state_dict to be dict-like, got {}.".format(
                type(state_dict)))
        missing, unexpected, errors, copies = [], [], [], []

        def visit(module, prefix):
            module._check_state_dict(state_dict, prefix, missing, unexpected, errors, copies)
            for name, child in module._modules.items():
                if child is not None:
                    visit(child, prefix + name + ".")

        visit(self, "")
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join('"{}"'.format(k) for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join('"{}"'.format(k) for k in missing)))
        if errors:
            raise StateDictError("[load_state_dict] Error(s) in loading state_dict for {}:\n\t{}"
                                 .format(type(self).__name__, "\n\t".join(errors)))
        with _C_no_grad():
            for target, value in copies:
                target.detach().copy_(value)
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
        """Module.to(device / dtype / tensor, non_blocking=...): attn modules live on the cpu; a
        floating dtype (float32, bfloat16, float16) converts every floating parameter and buffer
        in place of the old ones, as torch does (tied parameters stay tied, gradients are
        converted with them). Anything else raises (never silently ignored)."""
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        dtype = None
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, Tensor):
                a = a.dtype
            if a is None or isinstance(a, bool) or str(a) in ("cpu", "cpu:0"):
                continue
            if str(a).startswith("cuda"):
                raise _no_cuda_error("Module.to")
            if str(a) in _FLOAT_DTYPES:
                dtype = a
                continue
            raise ValueError("[Module.to] attn modules hold float32, bfloat16 or float16 on the "
                             "cpu; cannot move to {!r}".format(a))
        if dtype is not None:
            self._cast(dtype)
        return self

    def _cast(self, dtype):
        """Converts the floating parameters and buffers of self and its submodules to dtype."""
        name = str(dtype)
        for m in self.modules():
            if "_impl" not in m.__dict__:
                continue
            if hasattr(m, "_impl_to"):  # the C++ model converts the tensors its parameters share
                m._impl_to(dtype)
            elif name != "torch.float32":  # its forward runs in C++ on the float32 tensors
                raise ValueError("[Module.to] {} computes in float32 (its forward runs in C++ on "
                                 "its own tensors); cannot move to {}".format(
                                     type(m).__name__, name))
        done = {}

        def cast(t, param):
            if t is None or not t.is_floating_point() or str(t.dtype) == name:
                return t
            if id(t) not in done:
                if param:
                    new = Parameter(t.detach().to(dtype), t.requires_grad)
                    if t.grad is not None:
                        new.grad = t.grad.to(dtype)
                else:
                    new = t.to(dtype)
                done[id(t)] = new
            return done[id(t)]

        for m in self.modules():
            for k, p in list(m._parameters.items()):
                m._parameters[k] = cast(p, True)
            for k, b in list(m._buffers.items()):
                m._buffers[k] = cast(b, False)
        return self

    def float(self):
        return self._cast(_C.dtype.float32)

    def cuda(self, device=None):
        raise _no_cuda_error("Module.cuda")

    def get_submodule(self, target):
        """The submodule at a dotted path ("transformer.h.0.attn")."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if item not in mod._modules:
                raise AttributeError(type(mod).__name__ + " has no attribute `" + item + "`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in mod._parameters:
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return mod._parameters[name]

    def cpu(self):
        return self

    def _unsupported(self, what):
        from .._unsupported import UnsupportedError, version
        return UnsupportedError("torch.nn.Module.{} is not supported by attn {} (modules are "
                                "float32 on the cpu, without hooks); see docs/torch_surface.md"
                                .format(what, version()))

    def half(self):
        return self._cast(_C.dtype.float16)

    def bfloat16(self):
        return self._cast(_C.dtype.bfloat16)

    def double(self):
        raise self._unsupported("double")

    def register_forward_hook(self, *args, **kwargs):
        raise self._unsupported("register_forward_hook")

    def register_forward_pre_hook(self, *args, **kwargs):
        raise self._unsupported("register_forward_pre_hook")

    def register_full_backward_hook(self, *args, **kwargs):
        raise self._unsupported("register_full_backward_hook")

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
        _factory_dtype(self, dtype, "Linear")

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
        _factory_dtype(self, dtype, "Embedding")

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


class CrossEntropyLoss(Module):
    """torch.nn.CrossEntropyLoss over F.cross_entropy (the same arguments and limits)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.weight, self.size_average, self.reduce = weight, size_average, reduce
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, self.size_average, self.ignore_index,
                               self.reduce, self.reduction, self.label_smoothing)


class RMSNorm(Module):
    """torch.nn.RMSNorm over the trailing dims normalized_shape (weight ones with
    elementwise_affine); eps None: float32's machine epsilon, as torch."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        self.normalized_shape = tuple(int(n) for n in shape)
        if any(n <= 0 for n in self.normalized_shape):
            raise ValueError("[RMSNorm] normalized_shape must be positive, got {}".format(
                self.normalized_shape))
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_C.ones(*self.normalized_shape))
        else:
            self.register_parameter("weight", None)
        _factory_dtype(self, dtype, "RMSNorm")

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return "{}, eps={}, elementwise_affine={}".format(self.normalized_shape, self.eps,
                                                           self.elementwise_affine)


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
        _factory_dtype(self, dtype, "LayerNorm")

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "{}, eps={}, elementwise_affine={}".format(self.normalized_shape, self.eps,
                                                          self.elementwise_affine)


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
        _mirror_parameters(self, impl)

    def forward(self, idx, targets=None, position_ids=None):
        """position_ids (B, T): packed sequences, Hugging Face's convention (0 begins a sequence,
        else the previous position + 1); attention stays inside each (GPT::forward_packed)."""
        if position_ids is not None:
            if targets is None:
                logits, _ = self._impl.forward_packed(idx, _C.full_like(idx, -100), position_ids)
                return logits, None
            return self._impl.forward_packed(idx, targets, position_ids)
        if targets is None:
            return self._impl.forward(idx), None
        return self._impl.forward_loss(idx, targets)

    def generate_paged(self, prompts, max_new_tokens, temperature=1.0, top_k=None,
                       kv_dtype="float32", page_size=16, generator=None):
        """generate() for prompts (lists of ids) of different lengths at once through a paged
        key/value cache holding kv_dtype ("float32", "bfloat16", "float16" or "int8"); identical prompts
        share their pages. Returns each prompt followed by its new ids (include/attn/gpt.h)."""
        return self._impl.generate_paged([list(map(int, p)) for p in prompts], int(max_new_tokens),
                                         float(temperature), top_k, kv_dtype, int(page_size),
                                         generator)

    def make_paged_cache(self, num_pages, page_size=16, kv_dtype="float32"):
        """A paged key/value cache shaped for this model (attn.PagedKVCache's methods:
        add_sequence, fork, remove, truncate, length, free_pages, ...)."""
        return self._impl.make_paged_cache(int(num_pages), int(page_size), kv_dtype)

    def forward_paged(self, idx, cache, seqs):
        """Logits (N, T, V) of idx (N, T) following the tokens of the cache's sequences seqs,
        whose keys and values are appended (no gradients)."""
        return self._impl.forward_paged(idx, cache, [int(s) for s in seqs])

    def attention_maps(self, idx):
        """The attention weights of every layer and head on idx (B, T): a tensor (n_layer, B,
        n_head, T, T) whose row i is the causal softmax over keys 0..i (call eval() first to
        leave dropout out). `attn heatmap --ckpt` draws them."""
        return self._impl.attention_maps(idx)

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


def _mirror_parameters(module, impl):
    """Registers the C++ model impl's parameters on `module` under their dotted names (sharing
    storage), creating the submodules on the way."""
    for name, t in impl.named_parameters():
        *path, leaf = name.split(".")
        owner = module
        for part in path:
            child = owner._modules.get(part)
            if child is None:
                child = _Container()
                owner.add_module(part, child)
            owner = child
        owner.register_parameter(leaf, Parameter(t, _alias=True))


class _Container(Module):
    """A plain node of GPT's parameter tree (named like the C++ submodules)."""
