"""attn.amp: torch.autocast on the CPU (the products in bfloat16 or float16; attn/autograd.h's
AutocastGuard does the work), accepted as a no-op for GPU device types."""
import contextlib
import warnings

from . import _C

_warned = set()
_LOWER = ("torch.bfloat16", "torch.float16")


class autocast(contextlib.ContextDecorator):
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None), as a context
    manager or decorator. device_type "cpu": inside, matmul / mm / bmm / @, F.linear and
    F.scaled_dot_product_attention convert their float32 operands to dtype (bfloat16 when None,
    as torch) and return that dtype, gradients flowing back to the float32 tensors;
    cross_entropy computes a bfloat16 / float16 input in float32; other ops run in their
    operands' dtype (torch's CPU autocast lists, for the ops attn has). Nesting and enabled=False
    work as in torch; the state is per thread. Other device types ("cuda", ...) change nothing
    on CPU tensors. An unknown device_type raises as in torch."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        device_type = str(device_type)
        if device_type not in ("cpu", "cuda", "xpu", "hpu", "mps"):
            raise RuntimeError("User specified an unsupported autocast device_type '{}'".format(
                device_type))
        self.device = device_type
        if dtype is None:
            dtype = _C.dtype.bfloat16 if device_type == "cpu" else _C.dtype.float16
        if device_type == "cpu" and enabled and str(dtype) not in _LOWER:
            # torch warns and disables autocast for a dtype it does not support on the CPU
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nCPU Autocast only supports dtype of torch.bfloat16, "
                          "torch.float16 currently.")
            enabled = False
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        self._prev = []

    def __enter__(self):
        if self.device == "cpu":
            self._prev.append(_C._autocast_dtype())
            _C._set_autocast_dtype(self.fast_dtype if self._enabled else None)
        return self

    def __exit__(self, *exc):
        if self.device == "cpu":
            _C._set_autocast_dtype(self._prev.pop())
        return False


def is_autocast_available(device_type):
    return str(device_type) == "cpu"


class GradScaler:
    """attn.amp.GradScaler: see attn.cuda.amp.GradScaler."""

    def __new__(cls, device="cuda", *args, **kwargs):
        from .cuda.amp import GradScaler as _G
        return _G(*args, **kwargs)
