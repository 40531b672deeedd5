"""torch.nn's Conv1d and Conv2d and F.conv1d / F.conv2d, composed of attn's ops.

The convolution is an im2col product: the input is zero-padded (F.pad), each kernel offset's
strided window is sliced out (views), the windows are stacked into columns of (channels x kernel
positions) per output position and multiplied by the weight reshaped to (out_channels, channels x
kernel positions), one product per group, so autograd comes from the ops and the reduction runs
in the order of torch's own im2col fallback (channel-major, kernel-minor). The columns take
kernel-size times the input's memory. Results are torch's to float32 rounding (torch's CPU
convolution goes through oneDNN, whose summation order differs). padding: an int, a tuple, 'valid'
or 'same' (odd totals put the extra zero on the right, as torch); padding_mode 'zeros' only.
Parameters are drawn as torch draws them (kaiming_uniform_(a=sqrt(5)), the bias from
U(-1/sqrt(fan_in), 1/sqrt(fan_in))): the same seed gives torch's weights."""
import itertools
import math
import numbers

from .. import _C
from . import functional as F
from . import init
from .modules import Module, Parameter


def _tuple(v, n, name):
    if isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        raise ValueError("{} must be an int or a tuple of {} ints, got {}".format(name, n, v))
    return v


def window_views(x, kernel, stride, dilation, out):
    """The strided window of x (N, C, *spatial) for each kernel offset, in row-major order of the
    offsets: views of shape (N, C, *out)."""
    for offset in itertools.product(*(range(k) for k in kernel)):
        idx = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + s * (m - 1) + 1, s)
            for o, d, s, m in zip(offset, dilation, stride, out))
        yield x[idx]


def windows(x, kernel, stride, dilation, out):
    """window_views stacked into one copy: (N, C, K, *out), K = prod(kernel)."""
    return _C.stack(list(window_views(x, kernel, stride, dilation, out)), 2)


def _conv(fn, nd, input, weight, bias, stride, padding, dilation, groups):
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError("Expected {}D (unbatched) or {}D (batched) input to {}, but got input "
                           "of size: {}".format(nd + 1, nd + 2, fn, list(input.shape)))
    if weight.dim() != nd + 2:
        raise RuntimeError("{}: expected a {}-D weight (out_channels, in_channels / groups, "
                           "kernel...), got size {}".format(fn, nd + 2, list(weight.shape)))
    batched = input.dim() == nd + 2
    x = input if batched else input.unsqueeze(0)
    stride, dilation = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    out_ch, cg = weight.shape[0], weight.shape[1]
    kernel = tuple(weight.shape[2:])
    channels = x.shape[1]
    if cg * groups != channels:
        raise RuntimeError("Given groups={}, weight of size {}, expected input{} to have {} "
                           "channels, but got {} channels instead".format(
                               groups, list(weight.shape), list(x.shape), cg * groups, channels))
    if out_ch % groups:
        raise RuntimeError("Given groups={}, expected weight to be divisible by {} at dimension "
                           "0, but got weight of size {} instead".format(
                               groups, groups, list(weight.shape)))
    if bias is not None and tuple(bias.shape) != (out_ch,):
        raise RuntimeError("Given weight of size {}, expected bias to be 1-dimensional with {} "
                           "elements, but got bias of size {} instead".format(
                               list(weight.shape), out_ch, list(bias.shape)))
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise RuntimeError("Invalid padding string: '{}'".format(padding))
        if padding == "same" and any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, kernel)]
        pads = [(t // 2, t - t // 2) for t in totals]
    else:
        padding = _tuple(padding, nd, "padding")
        if any(p < 0 for p in padding):
            raise RuntimeError("negative padding is not supported")
        pads = [(p, p) for p in padding]
    flat = [a for lr in reversed(pads) for a in lr]  # F.pad: the last dim first
    if any(flat):
        x = F.pad(x, flat)
    size = x.shape[2:]
    out = [(size[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    if any(o <= 0 for o in out):
        raise RuntimeError("Calculated padded input size per channel: {}. Kernel size: {}. "
                           "Kernel size can't be greater than actual input size".format(
                               tuple(size), kernel))
    n = x.shape[0]
    positions = math.prod(out)
    kpos = math.prod(kernel)
    # (N, C, K, *out) -> (N, *out, C, K) -> (N, positions, C x K)
    cols = windows(x, kernel, stride, dilation, out).permute(0, *range(3, 3 + nd), 1, 2)
    og = out_ch // groups
    results = []
    for g in range(groups):
        cg_cols = cols[..., g * cg:(g + 1) * cg, :].reshape(n, positions, cg * kpos)
        w = weight[g * og:(g + 1) * og].reshape(og, cg * kpos)
        results.append(cg_cols.matmul(w.t()))
    y = results[0] if groups == 1 else _C.cat(results, 2)
    if bias is not None:
        y = y + bias
    y = y.permute(0, 2, 1).reshape(n, out_ch, *out)
    return y if batched else y.squeeze(0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv1d: (N, C, L) or (C, L) by (O, C / groups, K)."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d: (N, C, H, W) or (C, H, W) by (O, C / groups, KH, KW)."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


class _ConvNd(Module):
    _nd = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        nd = self._nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError("Invalid padding string {!r}, should be one of {}".format(
                    padding, {"valid", "same"}))
            if padding == "same" and any(s != 1 for s in _tuple(stride, nd, "stride")):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError("padding_mode must be one of {}, but got padding_mode='{}'".format(
                ["zeros", "reflect", "replicate", "circular"], padding_mode))
        if padding_mode != "zeros":
            raise NotImplementedError("attn.nn.Conv{}d: padding_mode={!r} is not supported "
                                      "(zeros only)".format(nd, padding_mode))
        if device not in (None, "cpu") and str(device) != "cpu":
            raise NotImplementedError("attn.nn.Conv{}d: device={!r} (attn's convolution runs "
                                      "on the CPU)".format(nd, device))
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, nd, "kernel_size")
        self.stride = _tuple(stride, nd, "stride")
        self.padding = padding if isinstance(padding, str) else _tuple(padding, nd, "padding")
        self.dilation = _tuple(dilation, nd, "dilation")
        self.output_padding = (0,) * nd
        self.transposed = False
        self.padding_mode = padding_mode
        kw = {} if dtype is None else {"dtype": dtype}
        self.weight = Parameter(_C.empty((out_channels, in_channels // groups)
                                         + self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(_C.empty((out_channels,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return _conv("conv{}d".format(self._nd), self._nd, input, self.weight, self.bias,
                     self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        nd = self._nd
        s = "{}, {}, kernel_size={}, stride={}".format(self.in_channels, self.out_channels,
                                                      self.kernel_size, self.stride)
        if self.padding != (0,) * nd:
            s += ", padding={}".format(self.padding)
        if self.dilation != (1,) * nd:
            s += ", dilation={}".format(self.dilation)
        if self.groups != 1:
            s += ", groups={}".format(self.groups)
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(_ConvNd):
    """torch.nn.Conv1d (padding_mode='zeros')."""
    _nd = 1


class Conv2d(_ConvNd):
    """torch.nn.Conv2d (padding_mode='zeros')."""
    _nd = 2
