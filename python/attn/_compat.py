"""torch's top-level conveniences that small training programs call: compile,
set_float32_matmul_precision, get_default_dtype, and the dtype names attn does not hold."""
from . import _C

_matmul_precision = ["highest"]


def compile(model=None, *, fullgraph=False, dynamic=None,  # noqa: A001
            backend="inductor", mode=None, options=None, disable=False):
    """torch.compile: returns the model (or function) unchanged. attn's kernels are already
    compiled C++ with the attention fused, so there is no graph to capture; the result computes
    exactly what the uncompiled model does. Used as @attn.compile or @attn.compile(...), too."""
    if model is None:
        return lambda m: m
    if not callable(model):
        raise TypeError("[compile] expects a Module or a function, got {}".format(
            type(model).__name__))
    return model


def set_float32_matmul_precision(precision):
    """Accepted ("highest", "high", "medium") and remembered; attn's float32 matmul always runs at
    full float32 precision (there is no TF32 on the cpu)."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError("Invalid precision {!r}: expected one of 'highest', 'high', "
                           "'medium'".format(precision))
    _matmul_precision[0] = precision


def get_float32_matmul_precision():
    return _matmul_precision[0]


def get_default_dtype():
    return _C.dtype.float32


def set_default_dtype(d):
    if d != _C.dtype.float32:
        from ._unsupported import version
        raise NotImplementedError("[set_default_dtype] attn {} computes in float32 only, got "
                                  "{}".format(version(), d))


class _UnsupportedDtype:
    """A torch dtype attn does not hold (float64, ...). It exists so that programs can name it (a
    dict of dtypes, autocast(dtype=...)); making a tensor of it raises."""

    def __init__(self, name, is_floating_point=True, itemsize=None):
        self._name = name
        self.is_floating_point = is_floating_point
        self.itemsize = itemsize

    def __repr__(self):
        return "torch." + self._name

    __str__ = __repr__

    def __reduce__(self):
        return (_UnsupportedDtype, (self._name, self.is_floating_point, self.itemsize))


float64 = _UnsupportedDtype("float64", True, 8)
