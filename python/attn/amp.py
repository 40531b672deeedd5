"""attn.amp: autocast, accepted and documented as a no-op (attn computes in float32)."""
import contextlib
import warnings

_warned = set()


class autocast(contextlib.ContextDecorator):
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None), as a context
    manager or decorator. attn computes in float32 only, so the region runs exactly as without
    autocast; asking for a lower precision (bfloat16 / float16) warns once that it runs in float32.
    An unknown device_type raises as in torch."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        device_type = str(device_type)
        if device_type not in ("cpu", "cuda", "xpu", "hpu", "mps"):
            raise RuntimeError("User specified an unsupported autocast device_type '{}'".format(
                device_type))
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        name = str(dtype)
        if self._enabled and dtype is not None and name != "torch.float32" and name not in _warned:
            _warned.add(name)
            warnings.warn("attn.autocast(dtype={}): attn computes in float32, so the region runs "
                          "in float32".format(name))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class GradScaler:
    """attn.amp.GradScaler: see attn.cuda.amp.GradScaler."""

    def __new__(cls, device="cuda", *args, **kwargs):
        from .cuda.amp import GradScaler as _G
        return _G(*args, **kwargs)
