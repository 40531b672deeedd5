"""torch functions that today's model programs (Llama, Qwen, Gemma, Mixtral style) use, composed of
attn's ops: torch.finfo, torch.repeat_interleave, torch.linspace."""
import builtins

import numpy as np

from . import _C


class finfo:
    """torch.finfo(dtype): the machine limits of a floating dtype (float32 by default)."""

    # bits, eps, max, smallest normal (tiny), resolution (10^-digits)
    _LIMITS = {
        "float32": (32, 1.1920928955078125e-07, 3.4028234663852886e+38, 1.1754943508222875e-38,
                    1e-06),
        "bfloat16": (16, 0.0078125, 3.3895313892515355e+38, 1.1754943508222875e-38, 0.01),
        "float16": (16, 0.0009765625, 65504.0, 6.103515625e-05, 0.001),
        "float64": (64, 2.220446049250313e-16, 1.7976931348623157e+308, 2.2250738585072014e-308,
                    1e-15),
    }

    def __init__(self, type=None):  # noqa: A002  (torch's argument name)
        name = "float32" if type is None else str(type).replace("torch.", "")
        if name not in self._LIMITS:
            raise TypeError("finfo(): the dtype must be a floating point dtype, got {}".format(
                type))
        self.dtype = name
        self.bits, self.eps, self.max, self.tiny, self.resolution = self._LIMITS[name]
        self.min = -self.max
        self.smallest_normal = self.tiny

    def __repr__(self):
        return ("finfo(resolution={:g}, min={:g}, max={:g}, eps={:g}, smallest_normal={:g}, "
                "tiny={:g}, dtype={})".format(self.resolution, self.min, self.max, self.eps,
                                              self.smallest_normal, self.tiny, self.dtype))


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """torch.repeat_interleave: each element (or slice along dim) repeated; repeats an int or a
    1-D int64 tensor of one count per element; dim None flattens first. With input alone (an int64
    tensor of counts), the indices repeated by those counts. Differentiable (index_select)."""
    if repeats is None:  # torch.repeat_interleave(repeats)
        counts = input
        return repeat_interleave(_C.arange(counts.numel()), counts, 0)
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else dim
    if x.dim() == 0:
        x, d = x.reshape(1), 0
    d = d + x.dim() if d < 0 else d
    if not 0 <= d < x.dim():
        raise IndexError("Dimension out of range (expected to be in range of [{}, {}], but got "
                         "{})".format(-x.dim(), x.dim() - 1, dim))
    n = x.shape[d]
    if isinstance(repeats, _C.Tensor):
        if repeats.dtype != _C.dtype.int64:
            raise RuntimeError("repeat_interleave: repeats must be an int64 tensor, got {}".format(
                repeats.dtype))
        counts = repeats.reshape(-1).tolist()
        if len(counts) == 1:
            counts = counts * n
        elif len(counts) != n:
            raise RuntimeError("repeats must have the same size as input along dim, but got "
                               "repeats.size(0) = {} and input.size({}) = {}".format(
                                   len(counts), d, n))
    else:
        counts = [int(repeats)] * n
    if builtins.any(c < 0 for c in counts):
        raise RuntimeError("repeats can not be negative")
    index = np.repeat(np.arange(n, dtype=np.int64), counts)
    if output_size is not None and int(output_size) != len(index):
        raise RuntimeError("repeat_interleave: output_size {} does not match the {} repeated "
                           "elements".format(output_size, len(index)))
    return x.index_select(d, _C.tensor(index.tolist(), dtype=_C.dtype.int64))


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    """torch.linspace: steps values from start to end, in float32 as PyTorch's CPU kernel's scalar
    path computes them: step = (end - start) / (steps - 1) in float32, the first half
    start + i step, the second end - (steps - 1 - i) step. PyTorch's vectorised path restarts
    that sum every vector of elements, so its values differ from these in the last bit, by its
    vector width (a float32 ulp of the result's scale). Integer dtypes are refused: PyTorch's
    truncated values depend on that width."""
    if out is not None:
        raise ValueError("[linspace] out= is not supported")
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("linspace: number of steps must be non-negative")
    dt = _C.dtype.float32 if dtype is None else dtype
    if dt not in (_C.dtype.float32, _C.dtype.bfloat16, _C.dtype.float16):
        raise TypeError("linspace: dtype {} is not supported (float32, bfloat16, float16; an "
                        "integer linspace: compute in float32, then .long())".format(dt))
    ftype = np.float32
    s, e = ftype(start), ftype(end)
    i = np.arange(steps)
    if steps == 1:
        values = np.array([s], dtype=ftype)
    else:
        step = (e - s) / ftype(steps - 1)
        half = steps // 2
        values = np.where(i < half, s + step * i.astype(ftype),
                          e - step * (steps - 1 - i).astype(ftype)).astype(ftype)
    t = _C.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).clone()
    if dt != _C.dtype.float32:
        t = t.to(dt)
    if device is not None and str(device) != "cpu":
        t = t.to(device)
    return t.requires_grad_() if requires_grad else t
