"""attn.optim: torch.optim's AdamW over the fused C++ update, and nanoGPT's schedule."""
from . import _C

__all__ = ["AdamW", "cosine_lr"]


class AdamW:
    """torch.optim.AdamW (decoupled weight decay). params: an iterable of tensors, or of dicts
    {"params": [...], "weight_decay": wd} (param groups). Every group shares one learning rate:
    set it through param_groups[i]["lr"] (as nanoGPT does) or the lr argument. amsgrad, maximize,
    foreach and per-group betas are not supported."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        if amsgrad or maximize or capturable or differentiable or fused:
            raise ValueError("[AdamW] amsgrad, maximize, capturable, differentiable and fused are "
                             "not supported")
        params = list(params)
        if not params:
            raise ValueError("[AdamW] optimizer got an empty parameter list")
        if isinstance(params[0], dict):
            groups = []
            for g in params:
                extra = set(g) - {"params", "weight_decay", "lr"}
                if extra:
                    raise ValueError("[AdamW] unsupported param group options {}".format(
                        sorted(extra)))
                groups.append({"params": list(g["params"]),
                               "weight_decay": float(g.get("weight_decay", weight_decay)),
                               "lr": float(g.get("lr", lr))})
        else:
            groups = [{"params": params, "weight_decay": float(weight_decay), "lr": float(lr)}]
        self.param_groups = groups
        self.defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        self._impl = _C.optim.AdamW([(g["params"], g["weight_decay"]) for g in groups],
                                    float(groups[0]["lr"]), float(betas[0]), float(betas[1]),
                                    float(eps))

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("[AdamW] closures are not supported")
        lrs = {g["lr"] for g in self.param_groups}
        if len(lrs) != 1:
            raise ValueError("[AdamW] every param group must have the same lr, got {}".format(
                sorted(lrs)))
        self._impl.set_lr(float(lrs.pop()))
        self._impl.step()

    def zero_grad(self, set_to_none=True):
        self._impl.zero_grad(set_to_none)

    def state_dict(self):
        return dict(self._impl.state_dict())

    def load_state_dict(self, state):
        self._impl.load_state_dict(list(state.items()))


def cosine_lr(it, lr, min_lr, warmup_iters, lr_decay_iters):
    """nanoGPT's get_lr: linear warm-up, cosine decay to min_lr at lr_decay_iters."""
    return _C.optim.cosine_lr(int(it), float(lr), float(min_lr), int(warmup_iters),
                              int(lr_decay_iters))
