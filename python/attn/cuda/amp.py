"""attn.cuda.amp: GradScaler and autocast for programs written for mixed precision on a GPU."""
import warnings

from ..amp import autocast as _autocast


class autocast(_autocast):
    """torch.cuda.amp.autocast(...): attn.autocast("cuda", ...)."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler:
    """torch.cuda.amp.GradScaler without CUDA: as in torch built without CUDA, an enabled scaler
    warns and disables itself; a disabled one passes everything through (scale(loss) is loss,
    step(optimizer) calls optimizer.step(), update() does nothing)."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if enabled:
            warnings.warn("attn.cuda.amp.GradScaler is enabled, but CUDA is not available "
                          "(attn computes in float32 on the cpu).  Disabling.")
        self._enabled = False
        self._init_scale = init_scale

    def is_enabled(self):
        return self._enabled

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass

    def get_scale(self):
        return 1.0

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass
