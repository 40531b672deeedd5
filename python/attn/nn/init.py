"""attn.nn.init: torch.nn.init's in-place initialisers, drawing the same numbers as PyTorch 1.13
for the same seed (the C++ attn::nn::init functions)."""
from .. import _C

_I = _C.init


def _check(tensor, fn):
    if not isinstance(tensor, _C.Tensor):
        raise TypeError("[{}] expects an attn Tensor, got {}".format(fn, type(tensor).__name__))
    return tensor


def uniform_(tensor, a=0.0, b=1.0):
    return _I.uniform_(_check(tensor, "uniform_"), a, b)


def normal_(tensor, mean=0.0, std=1.0):
    return _I.normal_(_check(tensor, "normal_"), mean, std)


def zeros_(tensor):
    return _I.zeros_(_check(tensor, "zeros_"))


def ones_(tensor):
    return _I.ones_(_check(tensor, "ones_"))


def constant_(tensor, val):
    return _I.constant_(_check(tensor, "constant_"), float(val))


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain (1 for linear/conv/sigmoid, 5/3 tanh, sqrt(2) relu,
    sqrt(2 / (1 + slope^2)) leaky_relu, 3/4 selu)."""
    if param is not None and (isinstance(param, bool) or not isinstance(param, (int, float))):
        raise ValueError("negative_slope {} not a valid number".format(param))
    try:
        gain = _I.calculate_gain(nonlinearity, param)
    except ValueError:
        raise ValueError("Unsupported nonlinearity {}".format(nonlinearity)) from None
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                        "conv_transpose2d", "conv_transpose3d", "sigmoid"):
        return 1  # torch returns the int 1 here
    return gain


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    return _I.kaiming_uniform_full(_check(tensor, "kaiming_uniform_"), float(a), mode,
                                   nonlinearity)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    return _I.kaiming_normal_(_check(tensor, "kaiming_normal_"), float(a), mode, nonlinearity)


def xavier_uniform_(tensor, gain=1.0):
    return _I.xavier_uniform_(_check(tensor, "xavier_uniform_"), float(gain))


def xavier_normal_(tensor, gain=1.0):
    return _I.xavier_normal_(_check(tensor, "xavier_normal_"), float(gain))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """N(mean, std) truncated to [a, b] (inverse-CDF sampling: uniform_, erfinv_, clamp), the
    same numbers as torch for the same seed."""
    return _I.trunc_normal_(_check(tensor, "trunc_normal_"), float(mean), float(std), float(a),
                            float(b))


def orthogonal_(tensor, gain=1):
    raise NotImplementedError("[init.orthogonal_] is not supported by attn {} (it needs a QR "
                              "decomposition)".format(__import__("attn").__version__))
