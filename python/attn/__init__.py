"""attn: attention in C++ with PyTorch's names.

The seeds' PyTorch code runs unchanged with ``import attn as torch``. Everything numeric happens in
the C++ library (attn._C); this package only arranges torch's Python surface on top of it.
"""
import builtins as _builtins
import sys as _sys
import contextlib as _contextlib
import math as _math

from . import _C, _compat, cpu, cuda
from ._compat import (compile, float64, get_default_dtype,  # noqa: A004
                      get_float32_matmul_precision, set_default_dtype,
                      set_float32_matmul_precision)
from . import _unsupported
from ._unsupported import NoCudaError, UnsupportedError
from ._C import (Generator, Tensor, allclose, arange, cat, concat, default_generator, dot, empty,
                 empty_like, equal, exp, from_numpy, full, full_like, get_num_threads,
                 get_rng_state, initial_seed, is_grad_enabled, log, log_softmax, manual_seed,
                 masked_fill, matmul, maximum, minimum, ones, ones_like, rand, randint, randn,
                 seed, set_num_threads, set_printoptions, set_rng_state, softmax, sqrt, stack,
                 tanh, tensor, tril, triu, where, zeros, zeros_like)
from ._C import abs  # noqa: A004  (torch.abs shadows the builtin the same way)
from ._C import cos, erfinv, outer, randperm, sin

ger = outer  # torch.ger, the old name of torch.outer
from ._model_ops import (bincount, einsum, finfo, index_add, linspace, nonzero,  # noqa: E402
                         repeat_interleave, where)
from ._model_ops import index_add_ as _index_add_  # noqa: E402

Tensor.repeat_interleave = (lambda self, repeats, dim=None, *, output_size=None:
                            repeat_interleave(self, repeats, dim, output_size=output_size))
Tensor.index_add = lambda self, dim, index, source, *, alpha=1: index_add(
    self, dim, index, source, alpha=alpha)
Tensor.index_add_ = _index_add_
Tensor.bincount = lambda self, weights=None, minlength=0: bincount(self, weights, minlength)
Tensor.nonzero = lambda self, *, as_tuple=False: nonzero(self, as_tuple=as_tuple)
Tensor.type_as = lambda self, other: self.to(other.dtype)  # torch.Tensor.type_as


def _new_factory(make):
    """Tensor.new_full / new_zeros / new_ones / new_empty: self's dtype and device unless given."""
    def new(self, *args, dtype=None, device=None, requires_grad=False, **kwargs):
        t = make(*args, dtype=self.dtype if dtype is None else dtype, **kwargs)
        dev = self.device if device is None else device
        if str(dev) != "cpu":
            t = t.to(dev)
        return t.requires_grad_() if requires_grad else t
    return new


Tensor.new_full = _new_factory(lambda size, fill_value, **kw: _C.full(
    (size,) if isinstance(size, int) else tuple(size), fill_value, **kw))
Tensor.new_zeros = _new_factory(lambda *size, **kw: _C.zeros(*size, **kw))
Tensor.new_ones = _new_factory(lambda *size, **kw: _C.ones(*size, **kw))
Tensor.new_empty = _new_factory(lambda *size, **kw: _C.empty(*size, **kw))

from ._complex import (cfloat, complex, complex64, is_complex, polar,  # noqa: E402,A004
                       view_as_complex, view_as_real)

__version__ = "0.1.0"

dtype = _C.dtype
_dtype_names = {int(v): "torch." + k for k, v in dtype.__members__.items()}
dtype.__repr__ = lambda self: _dtype_names[int(self)]
dtype.__str__ = dtype.__repr__
float32 = _C.dtype.float32
float = float32  # noqa: A001
int64 = _C.dtype.int64
long = int64
bool = _C.dtype.bool  # noqa: A001
# 2-byte floats for storage and conversion: elementwise arithmetic runs in float32 and rounds to
# them; other ops (matmul, reductions, nn) raise and ask for .float().
bfloat16 = _C.dtype.bfloat16
float16 = _C.dtype.float16
half = float16
double = float64

inf = _math.inf
nan = _math.nan
pi = _math.pi


class Size(tuple):
    """torch.Size: a tuple of ints that prints as ``torch.Size([6, 3])``."""

    def __repr__(self):
        return "torch.Size([" + ", ".join(str(s) for s in self) + "])"

    __str__ = __repr__

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):
        r = tuple.__getitem__(self, key)
        return Size(r) if isinstance(key, slice) else r


from . import return_types  # noqa: E402  (max(dim), min(dim), topk, sort)


def _size(self, dim=None):
    shape = self._shape
    if dim is None:
        return Size(shape)
    n = len(shape)
    if not -_builtins.max(n, 1) <= dim < _builtins.max(n, 1):
        raise IndexError("[size] dimension out of range (expected to be in range of [%d, %d], "
                         "but got %d)" % (-_builtins.max(n, 1), _builtins.max(n, 1) - 1, dim))
    return shape[dim]


class _GradFn:
    """A tensor's grad_fn: the op that produced it, named as PyTorch names its backward node.

    type(t.grad_fn).__name__ and t.grad_fn.name() give the node's name, as in torch; the
    gradients themselves are computed by t.backward()."""

    __slots__ = ()

    def name(self):
        return type(self).__name__

    def __repr__(self):
        return "<%s object at %#x>" % (type(self).__name__, id(self))


_grad_fn_types = {}


def _grad_fn(self):
    name = self._grad_fn_name
    if name is None:
        return None
    cls = _grad_fn_types.get(name)
    if cls is None:
        cls = _grad_fn_types[name] = type(name, (_GradFn,), {"__slots__": ()})
    return cls()


class device:
    """torch.device: "cpu", "cuda", "cuda:1", device("cuda", 0), device(0). Any of them can be
    named, as in torch; attn computes on the cpu and, when built with CUDA, on NVIDIA GPUs.
    Tensors and modules moved to another device raise (AssertionError for cuda when attn was built
    without CUDA, as torch built without it; RuntimeError when no GPU is present)."""

    _types = ("cpu", "cuda", "mps", "meta", "xpu", "hpu", "xla", "vulkan", "ipu", "ort", "mkldnn",
              "opengl", "opencl", "ideep", "hip", "ve", "fpga", "lazy", "privateuseone")

    def __init__(self, type="cpu", index=None):  # noqa: A002
        if isinstance(type, device):
            if index is not None:
                raise TypeError("[device] device(device) takes no index")
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, _builtins.bool):
            type, index = "cuda", type
        else:
            type = str(type)
            if ":" in type:
                if index is not None:
                    raise RuntimeError("type (string) must not include an index because index "
                                       "was passed explicitly: " + type)
                type, _, idx = type.partition(":")
                if not idx.isdigit():
                    raise RuntimeError("Invalid device string: '{}:{}'".format(type, idx))
                index = int(idx)
        if type not in device._types:
            raise RuntimeError("Expected one of {} device type at start of device string: {}"
                               .format(", ".join(device._types), type))
        if index is not None and (not isinstance(index, int) or index < 0):
            raise RuntimeError("Device index must not be negative, got {}".format(index))
        self.type = type
        self.index = index

    def __repr__(self):
        if self.index is None:
            return "device(type='%s')" % self.type
        return "device(type='%s', index=%d)" % (self.type, self.index)

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, TypeError):
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (self.type, self.index))


def _is_device(obj):
    return isinstance(obj, (str, device)) or type(obj).__name__ == "device"


def _check_device(fn, dev):
    """The device as attn.device (None stays None): cpu, or cuda when attn was built with it
    (AssertionError, torch's without CUDA, otherwise); ValueError for any other type."""
    if dev is None:
        return None
    d = dev if isinstance(dev, device) else device(dev if isinstance(dev, int) else str(dev))
    if d.type == "cpu":
        return d
    if d.type == "cuda":
        if not _C._cuda_is_built():
            raise cuda._no_cuda(fn)
        return d
    raise ValueError("[%s] only the cpu and cuda devices are supported, got %s" % (fn, d))


def _to(self, *args, dtype=None, device=None, non_blocking=False, copy=False,
        memory_format=None):
    """Tensor.to(dtype), .to("cuda"), .to(other), .to("cuda:0", dtype): a new tensor only when the
    dtype or the device changes (or copy=True), as in torch."""
    args = list(args)
    if args and isinstance(args[0], Tensor):
        other = args.pop(0)
        dtype, device = other.dtype, other.device
    if args and _is_device(args[0]):
        device = args.pop(0)
    if args and isinstance(args[0], (_C.dtype, _compat._UnsupportedDtype)):
        dtype = args.pop(0)
    if args:
        raise ValueError("[to] unexpected arguments %r (expected a dtype, a device or a tensor)"
                         % (args,))
    device = _check_device("to", device)
    if dtype is not None and not isinstance(dtype, _C.dtype):
        raise TypeError("[to] attn holds float32, int64, bool, bfloat16 and float16, not %s"
                        % (dtype,))
    if device is not None and device != self.device:
        out = self._to_device(str(device), dtype)
    else:
        out = self if dtype is None or dtype == self.dtype else self._to_dtype(dtype)
    return out.clone() if copy and out is self else out


Tensor.shape = property(lambda self: Size(self._shape))
Tensor.size = _size
Tensor.grad_fn = property(_grad_fn)
Tensor.to = _to


def _format(self, spec):
    """format(t, ".4f") / f"{t:.4f}": a one-element 0-d tensor formats as its number, as torch."""
    if self.dim() == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


Tensor.__format__ = _format
Tensor.device = property(lambda self: device(self._device))


def _tensor_cpu(self, memory_format=None):
    return self if self._device == "cpu" else self._to_device("cpu")


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=None):
    if not _C._cuda_is_built():
        raise cuda._no_cuda("Tensor.cuda")
    d = "cuda" if device is None else str(_check_device("Tensor.cuda", device))
    if d == "cpu":
        raise ValueError("[Tensor.cuda] expected a cuda device, got cpu")
    return self._to_device(d)


Tensor.cpu = _tensor_cpu
Tensor.cuda = _tensor_cuda
Tensor.is_cuda = property(lambda self: self._device != "cpu")
# pin_memory: page-locked memory only matters for copies to a GPU, so the tensor itself.
Tensor.pin_memory = lambda self, device=None: self


def _tensor_deepcopy(self, memo):
    """copy.deepcopy(t): a leaf's values in new storage, requires_grad kept (torch's rule: only
    leaves)."""
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the "
                           "deepcopy protocol at the moment")
    new = self.detach().clone()
    if self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    return new


Tensor.__deepcopy__ = _tensor_deepcopy
Tensor.is_pinned = lambda self, device=None: False
Tensor.__array_priority__ = 1000  # numpy defers to our reflected operators


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(input):
    return input.numel()


def sum(input, dim=None, keepdim=False, *, axis=None):  # noqa: A001
    return input.sum(dim, keepdim, axis)


def mean(input, dim=None, keepdim=False, *, axis=None):
    return input.mean(dim, keepdim, axis)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None):
    return input.var(dim, unbiased, keepdim, correction, axis)


def amax(input, dim=(), keepdim=False):
    return input.amax(dim, keepdim)


def max(input, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    return input.max(dim, keepdim)


def min(input, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    return input.min(dim, keepdim)


def argmax(input, dim=None, keepdim=False):
    return input.argmax(dim, keepdim)


def mm(input, mat2):
    """torch.mm: the product of two matrices (no broadcasting, both 2-D)."""
    if input.dim() != 2 or mat2.dim() != 2:
        raise ValueError("[mm] expects two 2-D tensors, got shapes {} and {}".format(
            tuple(input.shape), tuple(mat2.shape)))
    return matmul(input, mat2)


Tensor.mm = mm


def transpose(input, dim0, dim1):
    return input.transpose(dim0, dim1)


def permute(input, dims):
    return input.permute(*dims)


def reshape(input, shape):
    return input.reshape(*shape)


def unsqueeze(input, dim):
    return input.unsqueeze(dim)


def squeeze(input, dim=None):
    return input.squeeze(dim)


def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


def pow(input, exponent):  # noqa: A001
    if isinstance(input, Tensor):
        return input.pow(exponent)
    return exponent.__rpow__(input)


def add(input, other, *, alpha=1):
    return input + (other if alpha == 1 else other * alpha)


def sub(input, other, *, alpha=1):
    return input - (other if alpha == 1 else other * alpha)


def mul(input, other):
    return input * other


def div(input, other, *, rounding_mode=None):
    """torch.div: true division, or rounded toward -inf ("floor") or toward 0 ("trunc"), where
    integer operands stay integers (an integer divisor of 0 is refused, as torch's
    ZeroDivisionError). A Python number as input is a 0-dim tensor, as torch's."""
    if not isinstance(input, Tensor):
        input = tensor(input)
    return input.div(other, rounding_mode=rounding_mode)


def true_divide(input, other):
    return div(input, other)


def floor_divide(input, other):
    """torch.floor_divide (Python's //): div(rounding_mode="floor"), without a derivative."""
    return input // other


def remainder(input, other):
    """torch.remainder (Python's %): the result has the sign of the divisor."""
    return input % other


def fmod(input, other):
    """torch.fmod (C's fmod): the result has the sign of the dividend."""
    return input.fmod(other)


multiply, subtract, divide = mul, sub, div


def clone(input):
    return input.clone()


def isnan(input):
    return input.isnan()


def isinf(input):
    return input.isinf()


def isfinite(input):
    return input.isfinite()


class _GradMode(_contextlib.ContextDecorator):
    _mode = True

    def __new__(cls, *args, **kwargs):
        # @no_grad without parentheses (torch >= 2.0) wraps the function directly.
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]) and not kwargs:
            return cls()(args[0])
        return super().__new__(cls)

    def __enter__(self):
        self._prev = is_grad_enabled()
        _C._set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


class no_grad(_GradMode):
    """Context manager (and decorator): ops inside record no graph, so their results have no
    grad_fn and do not require grad (torch.no_grad)."""

    _mode = False


class enable_grad(_GradMode):
    """Context manager (and decorator) that turns graph recording back on (torch.enable_grad)."""

    _mode = True


class inference_mode(_GradMode):
    """torch.inference_mode(mode=True): no graph is recorded inside (as no_grad; attn has no
    separate inference tensors). Context manager and decorator."""

    def __init__(self, mode=True):
        self._mode = not _builtins.bool(mode)


def is_inference_mode_enabled():
    return False


class set_grad_enabled(_GradMode):
    """torch.set_grad_enabled(mode): sets the mode now; used as a context manager, restores the
    previous mode on exit."""

    def __init__(self, mode):
        self._prev = is_grad_enabled()
        self._mode = _builtins.bool(mode)
        _C._set_grad_enabled(self._mode)

    def __enter__(self):
        return self


from ._select import (argmin, argsort, bmm, chunk, clamp, clip, cumprod, cumsum,  # noqa: E402
                    gather, index_select, multinomial, neg, negative, relu, rsqrt, scatter,
                    scatter_add, sigmoid, sort, split, square, topk, unbind)
from . import _composite  # noqa: E402
_composite.install(_sys.modules[__name__])  # torch names composed of the ops above
from . import _composite_extra  # noqa: E402
_composite_extra.install(_sys.modules[__name__])  # movedim, addcmul_, unique, ...
from . import _composite_scan  # noqa: E402
_composite_scan.install(_sys.modules[__name__])  # cummax, cummin, scatter_reduce
from . import _random  # noqa: E402
_random.install(_sys.modules[__name__])  # normal, bernoulli, randint_like
from . import _composite_math  # noqa: E402
_composite_math.install(_sys.modules[__name__])  # atan2, hypot, aliases, in-place forms, ...
from . import _composite_shape  # noqa: E402
_composite_shape.install(_sys.modules[__name__])  # tensordot, cov, isin, histc, mode, ...
from . import nn  # noqa: E402  (nn uses the names above)
from .nn._composite import norm  # noqa: E402  (torch.norm, Tensor.norm: p-norms)
Tensor.norm = (lambda self, p="fro", dim=None, keepdim=False, dtype=None:
               norm(self, p, dim, keepdim, dtype))
from . import optim  # noqa: E402
from . import distributed  # noqa: E402
from .serialization import load, save  # noqa: E402
from . import amp, backends, utils  # noqa: E402
from .amp import autocast  # noqa: E402
from . import data  # noqa: E402  (tokenizers: attn.data.BpeTokenizer)
from . import train  # noqa: E402  (attn.train.train: the loop of `attn train`)
from . import autograd  # noqa: E402  (torch.autograd; Tensor.register_hook, retain_grad)

__all__ = [n for n in dir() if not n.startswith("_")]
__getattr__ = _unsupported.module_getattr("attn")


def _tensor_getattr(self, name):
    raise _unsupported.unsupported("attn.Tensor" if not name.startswith("_")
                                   else "'Tensor' object", name)


Tensor.__getattr__ = _tensor_getattr
