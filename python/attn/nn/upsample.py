"""torch.nn.functional.interpolate and nn.Upsample (1-d and 2-d: 'nearest', 'nearest-exact',
'linear', 'bilinear', 'area'), composed of attn's ops.

Source indices and weights are computed as torch 1.13's CPU kernels compute them, in float32:
the scale is 1 / scale_factor when a scale factor is given (and not recomputed), else in / out
(align_corners: (in - 1) / (out - 1)); nearest takes floor(dst * scale), nearest-exact
floor((dst + 0.5) * scale), linear the two neighbours of max(scale (dst + 0.5) - 0.5, 0) (or
scale dst with align_corners) with weights 1 - lambda and lambda. The input is gathered with
index_select along each dim (the last dim first, as torch's separable kernel nests them), so the
gradient comes from the ops. 'area' is adaptive average pooling. Results agree with torch's to
float32 rounding (nearest exactly)."""
import math
import numbers

import numpy as np

from .. import _C
from .modules import Module
from .pooling import adaptive_avg_pool1d, adaptive_avg_pool2d

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "area")


def _scale(in_size, out_size, align_corners, scale_factor):
    """torch's area_pixel_compute_scale, in float32."""
    f = np.float32
    if align_corners:
        return f(in_size - 1) / f(out_size - 1) if out_size > 1 else f(0)
    if scale_factor is not None and scale_factor > 0:
        return f(1.0 / scale_factor)  # in double, then float: torch's static_cast
    return f(in_size) / f(out_size)


def _nearest(x, dim, out_size, scale_factor, exact):
    in_size = x.shape[dim]
    scale = _scale(in_size, out_size, False, scale_factor)
    dst = np.arange(out_size, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * scale if exact else dst * scale)
    idx = np.minimum(src.astype(np.int64), in_size - 1)
    return x.index_select(dim, _C.tensor(idx.tolist()))


def _linear(x, dim, out_size, scale_factor, align_corners):
    in_size = x.shape[dim]
    scale = _scale(in_size, out_size, align_corners, scale_factor)
    dst = np.arange(out_size, dtype=np.float32)
    if align_corners:
        real = scale * dst
    else:
        real = np.maximum(scale * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = real.astype(np.int64)
    lam = np.clip(real - i0.astype(np.float32), 0, 1).astype(np.float32)
    i1 = i0 + (i0 < in_size - 1)
    shape = [1] * x.dim()
    shape[dim] = out_size
    w0 = _C.tensor((np.float32(1) - lam).tolist()).reshape(shape).to(x.dtype)
    w1 = _C.tensor(lam.tolist()).reshape(shape).to(x.dtype)
    a = x.index_select(dim, _C.tensor(i0.tolist()))
    b = x.index_select(dim, _C.tensor(i1.tolist()))
    return a * w0 + b * w1


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate for 3-d (N, C, L) and 4-d (N, C, H, W) input."""
    if mode not in _MODES:
        if mode in ("bicubic", "trilinear"):
            raise NotImplementedError("attn.nn.functional.interpolate: mode={!r} is not "
                                      "supported by attn".format(mode))
        raise NotImplementedError("Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  "{}D) for the modes: nearest | linear | bilinear | bicubic | "
                                  "trilinear | area | nearest-exact (got {})".format(
                                      input.dim(), mode))
    if antialias:
        raise NotImplementedError("attn.nn.functional.interpolate: antialias=True is not "
                                  "supported by attn")
    if mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    nd = input.dim() - 2
    if nd not in (1, 2):
        raise NotImplementedError("attn.nn.functional.interpolate: {}-D input is not supported "
                                  "(3-D and 4-D are)".format(input.dim()))
    if mode == "linear" and nd != 1 or mode == "bilinear" and nd != 2:
        raise NotImplementedError("Got {}D input, but {} mode needs {}D input".format(
            input.dim(), mode, 3 if mode == "linear" else 4))
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    spatial = tuple(input.shape[2:])
    if size is not None:
        sizes = [int(size)] * nd if isinstance(size, numbers.Integral) else [int(s) for s in size]
        if len(sizes) != nd:
            raise ValueError("Input and output must have the same number of spatial dimensions, "
                             "but got input with spatial dimensions of {} and output size of {}. "
                             "Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                             "output size in (o1, o2, ...,oK) format.".format(list(spatial),
                                                                              sizes))
        scales = [None] * nd
    else:
        factors = ([float(scale_factor)] * nd if isinstance(scale_factor, numbers.Real)
                   else [float(f) for f in scale_factor])
        if len(factors) != nd:
            raise ValueError("Input and scale_factor must have the same number of spatial "
                             "dimensions, but got input with spatial dimensions of {} and "
                             "scale_factor of shape {}.".format(list(spatial), factors))
        sizes = [math.floor(float(n) * f) for n, f in zip(spatial, factors)]
        scales = [None] * nd if recompute_scale_factor else factors
    if any(s <= 0 for s in sizes):
        raise RuntimeError("Input and output sizes should be greater than 0, but got input ({}) "
                           "and output ({})".format(", ".join(map(str, spatial)),
                                                    ", ".join(map(str, sizes))))
    if mode == "area":
        return (adaptive_avg_pool1d if nd == 1 else adaptive_avg_pool2d)(input, sizes)
    x = input
    for axis in reversed(range(nd)):  # the last dim first: torch nests the first dim outermost
        dim = 2 + axis
        if mode in ("nearest", "nearest-exact"):
            x = _nearest(x, dim, sizes[axis], scales[axis], mode == "nearest-exact")
        else:
            x = _linear(x, dim, sizes[axis], scales[axis], align_corners)
    return x


class Upsample(Module):
    """torch.nn.Upsample over interpolate."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        if self.scale_factor is not None:
            info = "scale_factor=" + repr(self.scale_factor)
        else:
            info = "size=" + repr(self.size)
        return info + ", mode=" + self.mode  # torch 1.13's (2.x quotes the mode)
