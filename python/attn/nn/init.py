"""attn.nn.init: torch.nn.init's in-place initialisers, drawing the same numbers as PyTorch."""
import math

from .. import _C

_I = _C.init


def uniform_(tensor, a=0.0, b=1.0):
    return _I.uniform_(tensor, a, b)


def normal_(tensor, mean=0.0, std=1.0):
    return _I.normal_(tensor, mean, std)


def zeros_(tensor):
    return _I.zeros_(tensor)


def ones_(tensor):
    return _I.ones_(tensor)


def constant_(tensor, val):
    return tensor.fill_(val)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    if mode != "fan_in" or nonlinearity != "leaky_relu":
        raise ValueError("[kaiming_uniform_] only mode='fan_in', nonlinearity='leaky_relu' "
                         "are supported")
    return _I.kaiming_uniform_(tensor, float(a))


def xavier_uniform_(tensor, gain=1.0):
    return _I.xavier_uniform_(tensor, gain)


def calculate_gain(nonlinearity, param=None):
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d", "conv3d"):
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError("[calculate_gain] unsupported nonlinearity {}".format(nonlinearity))
