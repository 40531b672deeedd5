"""torch.optim's RMSprop and Adagrad (1.13) over attn's C++ optimizers (attn/optim.h).

param_groups and state_dict() have torch 1.13's keys and order: RMSprop's state is {'step': int,
'square_avg', 'momentum_buffer' (momentum > 0), 'grad_avg' (centered)}, made at a parameter's
first step; Adagrad's is {'step': a float tensor, 'sum'}, made for every parameter when the
optimizer is."""
from .. import _C
from .optimizer import Optimizer, _as_tensor, _flag, _is_tensor, _number

__all__ = ["RMSprop", "Adagrad"]


def _whole_step(name, v):
    step = float(v.item() if _is_tensor(v) or hasattr(v, "item") else v)
    if step != int(step) or step < 0:
        raise ValueError("{} must be a whole number >= 0, got {}".format(name, step))
    from .. import int64
    return _C.tensor(int(step), dtype=int64)


def _state_to_cpp(i, value):
    out = []
    for k, v in value.items():
        name = "state.{}.{}".format(i, k)
        out.append((name, _whole_step(name, v) if k == "step" else _as_tensor(v, name)))
    return out


class RMSprop(Optimizer):
    """torch.optim.RMSprop: L2 weight decay, momentum, centered, maximize."""

    _flags = ("differentiable",)

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, foreach=None, maximize=False, differentiable=False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= momentum:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        if not 0.0 <= alpha:
            raise ValueError("Invalid alpha value: {}".format(alpha))
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _more_options(self, group):
        return {"alpha": _number(group, "alpha"), "eps": _number(group, "eps"),
                "momentum": _number(group, "momentum"), "centered": _flag(group, "centered"),
                "maximize": _flag(group, "maximize")}

    def _make(self, groups):
        d = self.defaults
        return _C.optim.RMSprop(groups, float(d["lr"]), float(d["alpha"]), float(d["eps"]),
                                float(d["weight_decay"]), float(d["momentum"]),
                                bool(d["centered"]))

    def _state_from_cpp(self, i, s):
        out = {"step": int(s["step"].item()), "square_avg": s["square_avg"]}
        for k in ("momentum_buffer", "grad_avg"):
            if k in s:
                out[k] = s[k]
        return out

    def _state_to_cpp(self, i, value, extra):
        return _state_to_cpp(i, value)


class Adagrad(Optimizer):
    """torch.optim.Adagrad (dense gradients): lr_decay, L2 weight decay,
    initial_accumulator_value, maximize."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= lr_decay:
            raise ValueError("Invalid lr_decay value: {}".format(lr_decay))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        if not 0.0 <= initial_accumulator_value:
            raise ValueError("Invalid initial_accumulator_value value: {}".format(
                initial_accumulator_value))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _more_options(self, group):
        return {"lr_decay": _number(group, "lr_decay"), "eps": _number(group, "eps"),
                "initial_accumulator_value": _number(group, "initial_accumulator_value"),
                "maximize": _flag(group, "maximize")}

    def _make(self, groups):
        d = self.defaults
        return _C.optim.Adagrad(groups, float(d["lr"]), float(d["lr_decay"]),
                                float(d["weight_decay"]), float(d["initial_accumulator_value"]),
                                float(d["eps"]))

    def _state_from_cpp(self, i, s):
        return {"step": _C.tensor(float(int(s["step"].item()))), "sum": s["sum"]}

    def _state_to_cpp(self, i, value, extra):
        return _state_to_cpp(i, value)

    def share_memory(self):
        """torch moves the sums to shared memory for multiprocessing; attn's tensors are in
        this process only: nothing to do."""
