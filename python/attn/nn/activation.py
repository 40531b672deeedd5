"""Activation modules (torch.nn.modules.activation): ReLU, GELU, Tanh, SiLU, Sigmoid and Identity
over the C++ kernels; LeakyReLU, ELU, SELU, CELU, GLU, Softplus, LogSigmoid, Hardtanh, ReLU6,
Mish, Hardswish, Hardsigmoid, Softsign, Softmax, LogSoftmax, Softmin and Threshold over
attn.nn.functional's compositions; and the small shape and distance modules (Flatten, Unflatten,
CosineSimilarity, PairwiseDistance)."""
from . import functional as F
from .modules import Module


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    def forward(self, input):
        return input.tanh()


class Sigmoid(Module):
    def forward(self, input):
        return input.sigmoid()


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """GELU, exact (erf) or approximate='tanh'."""

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


class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments, as torch's."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class _Elementwise(Module):
    """An activation module over one functional with fixed keyword arguments."""

    _fn = None
    _args = ()

    def __init__(self, *args, **kwargs):
        super().__init__()
        names = self._args
        if len(args) > len(names):
            raise TypeError("{}() takes at most {} arguments ({} given)".format(
                type(self).__name__, len(names), len(args)))
        values = dict(self._defaults)
        values.update(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError("{}() got an unexpected keyword argument '{}'".format(
                    type(self).__name__, k))
            values[k] = v
        for k, v in values.items():
            setattr(self, k, v)

    def forward(self, input):
        return type(self)._fn(input, **{k: getattr(self, k) for k in self._args})

    def extra_repr(self):
        return ", ".join("{}={}".format(k, getattr(self, k)) for k in self._args
                         if getattr(self, k) != self._defaults[k] or k != "inplace")


def _activation(name, fn, **defaults):
    return type(name, (_Elementwise,), {"_fn": staticmethod(fn), "_args": tuple(defaults),
                                        "_defaults": defaults, "__module__": __name__,
                                        "__doc__": "torch.nn.{} over F.{}.".format(
                                            name, fn.__name__)})


LeakyReLU = _activation("LeakyReLU", F.leaky_relu, negative_slope=0.01, inplace=False)
ELU = _activation("ELU", F.elu, alpha=1.0, inplace=False)
SELU = _activation("SELU", F.selu, inplace=False)
CELU = _activation("CELU", F.celu, alpha=1.0, inplace=False)
GLU = _activation("GLU", F.glu, dim=-1)
Softplus = _activation("Softplus", F.softplus, beta=1, threshold=20)
LogSigmoid = _activation("LogSigmoid", F.logsigmoid)
Hardtanh = _activation("Hardtanh", F.hardtanh, min_val=-1.0, max_val=1.0, inplace=False)
ReLU6 = _activation("ReLU6", F.relu6, inplace=False)
Mish = _activation("Mish", F.mish, inplace=False)
Hardswish = _activation("Hardswish", F.hardswish, inplace=False)
Hardsigmoid = _activation("Hardsigmoid", F.hardsigmoid, inplace=False)
Softsign = _activation("Softsign", F.softsign)
Softmax = _activation("Softmax", F.softmax, dim=None)
LogSoftmax = _activation("LogSoftmax", F.log_softmax, dim=None)
Softmin = _activation("Softmin", F.softmin, dim=None)


class Threshold(Module):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return "start_dim={}, end_dim={}".format(self.start_dim, self.end_dim)


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return "dim={}, unflattened_size={}".format(self.dim, self.unflattened_size)
