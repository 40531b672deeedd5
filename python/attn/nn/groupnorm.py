"""torch.nn.GroupNorm and F.group_norm (torch 1.13), composed of attn's ops: the channels of
each sample split into num_groups groups, each normalized with its own mean and biased variance
over its channels and every other dim, x_hat = (x - mean) / sqrt(var + eps), then scaled and
shifted per channel. Autograd comes from the ops; results are torch's to float32 rounding."""
from .. import _C
from . import init
from .modules import Module, Parameter, _factory_dtype


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.group_norm: input (N, C, *)."""
    if input.dim() < 2:  # torch's F.group_norm reads input.size(1) first
        raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but got "
                         "1)".format(-max(input.dim(), 1), max(input.dim(), 1) - 1))
    n, channels = input.shape[0], input.shape[1]
    if num_groups <= 0 or channels % num_groups:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, "
                           "but got input of shape {} and num_groups={}".format(
                               list(input.shape), num_groups))
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.numel() != channels):
            raise RuntimeError("Expected {} to be a vector of size equal to the number of "
                               "channels in input, but got {} of shape {} and input of shape "
                               "{}".format(name, name, list(t.shape), list(input.shape)))
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdim=True)
    out = (centered * (var + float(eps)).rsqrt()).reshape(tuple(input.shape))
    shape = (1, channels) + (1,) * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


class GroupNorm(Module):
    """torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        if device not in (None, "cpu") and str(device) != "cpu":
            raise NotImplementedError("attn.nn.GroupNorm: device={!r} (attn's GroupNorm runs "
                                      "on the CPU)".format(device))
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        if affine:
            self.weight = Parameter(_C.empty((num_channels,)))
            self.bias = Parameter(_C.empty((num_channels,)))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()
        _factory_dtype(self, dtype, "GroupNorm")

    def reset_parameters(self):
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "{num_groups}, {num_channels}, eps={eps}, affine={affine}".format(**self.__dict__)
