"""torch.nn's max and average pooling (1-d and 2-d) and adaptive average pooling, with their
functional forms, composed of attn's ops as torch 1.13 computes them on the CPU.

The windows come from conv.window_views (strided views, kernel offsets in row-major order).
max_pool: the input padded with -inf, the first largest value of each window (a nan wins, as in
torch's scan) taken by gather, so the gradient goes to that element only; return_indices gives
torch's flat indices into each plane. avg_pool: the zero-padded windows summed in the order
torch's kernel sums them and divided by torch's divisor (the window clipped to the padded input
with count_include_pad, to the input without; divisor_override), so the results are torch's
floats. ceil_mode follows torch's output size rule (the last window starts inside the input or
its left padding). adaptive_avg_pool: each output averages input[floor(i L / n) : ceil((i + 1) L
/ n)]."""
import math
import numbers

from .. import _C
from . import functional as F
from .conv import window_views, windows
from .modules import Module


def _tuple(v, n, name, fn):
    if isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise RuntimeError("{}: {} must either be a single int, or a tuple of {} ints".format(
            fn, name, n))
    return v


def _out_size(size, k, pad, stride, dil, ceil_mode):
    """torch's pooling_output_shape."""
    num = size + 2 * pad - dil * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _prepare(fn, nd, input, kernel_size, stride, padding, dilation, ceil_mode, max_pool):
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError("{}: Expected {}D or {}D (batch mode) tensor for input, got {}D "
                           "input of size {}".format(fn, nd + 1, nd + 2, input.dim(),
                                                     list(input.shape)))
    k = _tuple(kernel_size, nd, "kernel_size", fn)
    s = k if stride is None or (not isinstance(stride, numbers.Integral) and len(stride) == 0) \
        else _tuple(stride, nd, "stride", fn)
    p = _tuple(padding, nd, "padding", fn)
    d = _tuple(dilation, nd, "dilation", fn)
    if any(x <= 0 for x in k):
        raise RuntimeError("{}: kernel size should be greater than zero, but got {}".format(fn, k))
    if any(x <= 0 for x in s):
        raise RuntimeError("{}: stride should be greater than zero, but got {}".format(fn, s))
    if any(x <= 0 for x in d):
        raise RuntimeError("{}: dilation should be greater than zero, but got {}".format(fn, d))
    if any(pp < 0 or pp > kk // 2 for pp, kk in zip(p, k)):
        raise RuntimeError("{}: pad should be at most half of effective kernel size, but got "
                           "pad={}, kernel_size={}".format(fn, p, k))
    spatial = tuple(input.shape[-nd:])
    out = [_out_size(n, kk, pp, ss, dd, ceil_mode)
           for n, kk, pp, ss, dd in zip(spatial, k, p, s, d)]
    if any(o < 1 for o in out):
        raise RuntimeError("{}: Given input size: {}. Calculated output size: {}. Output size "
                           "is too small".format(fn, tuple(input.shape[-nd - 1:]),
                                                 (input.shape[-nd - 1],) + tuple(out)))
    return k, s, p, d, spatial, out


def _padded(x, spatial, k, s, p, d, out, value):
    """x padded by p on the left and as far as the last window reaches on the right."""
    flat = []
    for n, kk, ss, pp, dd, o in zip(spatial, k, s, p, d, out):
        right = max((o - 1) * ss + dd * (kk - 1) + 1 - n - pp, 0)
        flat.append((pp, right))
    pads = [a for lr in reversed(flat) for a in lr]
    return F.pad(x, pads, value=value) if any(pads) else x


def _max_pool(fn, nd, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices):
    k, s, p, d, spatial, out = _prepare(fn, nd, input, kernel_size, stride, padding, dilation,
                                        ceil_mode, True)
    batched = input.dim() == nd + 2
    x = input if batched else input.unsqueeze(0)
    w = windows(_padded(x, spatial, k, s, p, d, out, float("-inf")), k, s, d, out)
    arg = w.argmax(2, keepdim=True)  # the first largest of each window (nan first)
    values = w.gather(2, arg).squeeze(2)
    if not batched:
        values = values.squeeze(0)
    if not return_indices:
        return values
    arg = arg.squeeze(2)
    flat = None  # the input position of each window's pick, as a flat index into its plane
    for axis in range(nd):
        inner = math.prod(k[axis + 1:])
        offset = (arg // inner) % k[axis]
        shape = [1] * (2 + nd)
        shape[2 + axis] = out[axis]
        start = _C.arange(out[axis]).reshape(shape) * s[axis] - p[axis]
        pos = start + offset * d[axis]
        flat = pos if flat is None else flat * spatial[axis] + pos
    return values, (flat if batched else flat.squeeze(0))


def _avg_pool(fn, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    k, s, p, d, spatial, out = _prepare(fn, nd, input, kernel_size, stride, padding, 1,
                                        ceil_mode, False)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    batched = input.dim() == nd + 2
    x = input if batched else input.unsqueeze(0)
    total = None  # summed window by window: torch's order of additions, so its floats
    for view in window_views(_padded(x, spatial, k, s, p, d, out, 0.0), k, s, d, out):
        total = view if total is None else total + view
    if divisor_override is not None:
        y = total / float(divisor_override)
    else:
        counts = []  # per axis: the window's extent, as torch's kernel counts it
        for n, kk, ss, pp, o in zip(spatial, k, s, p, out):
            c = []
            for i in range(o):
                start = i * ss - pp
                end = min(start + kk, n + pp)
                size = end - start
                clipped = min(end, n) - max(start, 0)
                c.append(float(size if count_include_pad else clipped))
            counts.append(c)
        div = None
        for axis, c in enumerate(counts):
            shape = [1] * nd
            shape[axis] = len(c)
            t = _C.tensor(c).reshape(shape)
            div = t if div is None else div * t
        y = total / div.to(total.dtype)
    return y if batched else y.squeeze(0)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _adaptive_avg(fn, nd, input, output_size):
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError("{}: Expected {}D or {}D tensor, but got {}D".format(
            fn, nd + 1, nd + 2, input.dim()))
    spatial = tuple(input.shape[-nd:])
    if isinstance(output_size, numbers.Integral):
        output_size = (output_size,) * nd
    sizes = tuple(n if o is None else int(o) for o, n in zip(tuple(output_size), spatial))
    if len(sizes) != nd:
        raise RuntimeError("{}: output_size must be {}".format(fn, nd))
    if any(o < 0 for o in sizes):
        raise RuntimeError("{}: elements of output_size must be greater than or equal to 0 but "
                           "received {}".format(fn, sizes))
    ranges = [[(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]
              for n, o in zip(spatial, sizes)]
    dims = tuple(range(-nd, 0))

    def build(axis, x):
        if axis == nd:
            return x.mean(dims)
        parts = [build(axis + 1, x.narrow(x.dim() - nd + axis, a, b - a))
                 for a, b in ranges[axis]]
        return _C.stack(parts, -1)

    y = build(0, input)
    # stacked innermost-first: the last stack holds the first axis; reorder to (..., o0, o1)
    if nd == 2:
        y = y.transpose(-1, -2)
    return y


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.dilation,
                              self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return "kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}".format(
            self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


class MaxPool1d(_MaxPoolNd):
    _fn = staticmethod(max_pool1d)


class MaxPool2d(_MaxPoolNd):
    _fn = staticmethod(max_pool2d)


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size = _tuple(kernel_size, 1, "kernel_size", "AvgPool1d")
        self.stride = _tuple(stride if stride is not None else kernel_size, 1, "stride",
                             "AvgPool1d")
        self.padding = _tuple(padding, 1, "padding", "AvgPool1d")
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)

    def extra_repr(self):
        return "kernel_size={}, stride={}, padding={}".format(self.kernel_size, self.stride,
                                                             self.padding)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return "kernel_size={}, stride={}, padding={}".format(self.kernel_size, self.stride,
                                                             self.padding)


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self):
        return "output_size={}".format(self.output_size)


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    def forward(self, input):
        return adaptive_avg_pool2d(input, self.output_size)
