"""attn.optim.lr_scheduler: torch.optim.lr_scheduler's LambdaLR, StepLR, MultiStepLR,
CosineAnnealingLR and LinearLR (1.13), over attn's C++ schedulers (attn/lr_scheduler.h), which
compute torch's recursive formulas in the same double arithmetic; SequentialLR over them,
ReduceLROnPlateau (plateau.py), PolynomialLR, MultiplicativeLR, CosineAnnealingWarmRestarts,
CyclicLR and ChainedScheduler (py_schedulers.py) in Python."""
from collections import Counter

from .. import _C
from .optimizer import Optimizer, _unsupported
from .plateau import ReduceLROnPlateau  # noqa: F401 (torch keeps it in this module)
from .py_schedulers import (ChainedScheduler, CosineAnnealingWarmRestarts,  # noqa: F401
                            CyclicLR, MultiplicativeLR, PolynomialLR, _SchedulerList)

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "ConstantLR",
           "CosineAnnealingLR", "LinearLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR",
           "PolynomialLR", "MultiplicativeLR", "CosineAnnealingWarmRestarts", "ChainedScheduler",
           "CyclicLR"]


def __getattr__(name):
    raise AttributeError("module 'attn.optim.lr_scheduler' has no attribute '{}'".format(name))


class LRScheduler:
    """torch's _LRScheduler. Subclasses list their hyper-parameters in _hyper (the attributes
    state_dict saves before the common ones) and build the C++ scheduler in _make."""

    _hyper = ()

    def __init__(self, optimizer, last_epoch=-1, verbose=False):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("{} is not an Optimizer".format(type(optimizer).__name__))
        self.optimizer = optimizer
        if last_epoch != -1:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError("param 'initial_lr' is not specified in param_groups[{}] when "
                                   "resuming an optimizer".format(i))
        self.verbose = verbose
        optimizer._sync()
        self._impl = self._make(int(last_epoch))
        optimizer._pull_lrs()
        self._print()

    def step(self, epoch=None):
        """Advances last_epoch and sets the groups' lrs for it."""
        if epoch is not None:
            raise _unsupported(type(self).__name__, "step(epoch) (deprecated in torch)")
        self.optimizer._sync()
        self._impl.step()
        self.optimizer._pull_lrs()
        self._print()

    def _print(self):
        if self.verbose:
            for i, lr in enumerate(self.get_last_lr()):
                print("Adjusting learning rate of group {} to {:.4e}.".format(i, lr))

    def get_last_lr(self):
        return list(self._impl.get_last_lr())

    @property
    def last_epoch(self):
        return self._impl.last_epoch

    @property
    def base_lrs(self):
        return list(self._impl.base_lrs)

    @property
    def _step_count(self):
        return self._impl.step_count

    def state_dict(self):
        out = {k: getattr(self, k) for k in self._hyper}
        out.update(base_lrs=self.base_lrs, last_epoch=self.last_epoch, verbose=self.verbose,
                   _step_count=self._step_count, _get_lr_called_within_step=False,
                   _last_lr=self.get_last_lr())
        return out

    def load_state_dict(self, state_dict):
        """Takes torch's state_dict of this scheduler; the optimizer's lrs are left as they are
        (they come with the optimizer's state)."""
        state = dict(state_dict)
        for k in self._hyper:
            if k in state:
                setattr(self, k, state[k])
        self._load_extra(state)
        self.verbose = state.get("verbose", self.verbose)
        opt = self.optimizer
        opt._sync()
        lrs = [g["lr"] for g in opt.param_groups]
        saved = [opt._impl.group(i) for i in range(len(lrs))]
        self._impl = self._make(-1)  # with the loaded hyper-parameters; what its first step
        for i, options in enumerate(saved):  # wrote into the groups is undone
            opt._impl.set_group_options(i, options)
        opt._pull_lrs()
        self._impl.load_state([float(x) for x in state["base_lrs"]], int(state["last_epoch"]),
                              int(state.get("_step_count", 1)),
                              [float(x) for x in state.get("_last_lr", lrs)])

    def _load_extra(self, state):
        pass


_LRScheduler = LRScheduler


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch); one function, or one per parameter group."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose=False):
        n = len(optimizer.param_groups)
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise ValueError("Expected {} lr_lambdas, but got {}".format(n, len(lr_lambda)))
            self.lr_lambdas = list(lr_lambda)
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError("lr_lambda must be callable, got " + type(f).__name__)
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.LambdaLR(self.optimizer._impl, [_float_fn(f) for f in self.lr_lambdas],
                                 last_epoch)

    def state_dict(self):
        out = super().state_dict()
        # As torch: the state of callable objects (not of functions or lambdas).
        out["lr_lambdas"] = [None if isinstance(f, type(_float_fn)) else dict(f.__dict__)
                             for f in self.lr_lambdas]
        return out

    def _load_extra(self, state):
        for f, s in zip(self.lr_lambdas, state.get("lr_lambdas", [])):
            if s is not None:
                f.__dict__.update(s)


def _float_fn(f):
    return lambda epoch: float(f(epoch))


class StepLR(LRScheduler):
    """lr *= gamma every step_size epochs."""

    _hyper = ("step_size", "gamma")

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.StepLR(self.optimizer._impl, int(self.step_size), float(self.gamma),
                               last_epoch)


class MultiStepLR(LRScheduler):
    """lr *= gamma at each milestone epoch."""

    _hyper = ("milestones", "gamma")

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.MultiStepLR(self.optimizer._impl,
                                    [int(m) for m in self.milestones.elements()],
                                    float(self.gamma), last_epoch)


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch."""

    _hyper = ("gamma",)

    def __init__(self, optimizer, gamma, last_epoch=-1, verbose=False):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.ExponentialLR(self.optimizer._impl, float(self.gamma), last_epoch)


class ConstantLR(LRScheduler):
    """lr * factor until epoch total_iters, then the lr again."""

    _hyper = ("factor", "total_iters")

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1, verbose=False):
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.ConstantLR(self.optimizer._impl, float(self.factor),
                                   int(self.total_iters), last_epoch)


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the initial lr to eta_min over T_max epochs (torch's recursive
    form)."""

    _hyper = ("T_max", "eta_min")

    def __init__(self, optimizer, T_max, eta_min=0, last_epoch=-1, verbose=False):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.CosineAnnealingLR(self.optimizer._impl, int(self.T_max),
                                          float(self.eta_min), last_epoch)


class LinearLR(LRScheduler):
    """The lr factor goes linearly from start_factor to end_factor over total_iters epochs."""

    _hyper = ("start_factor", "end_factor", "total_iters")

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1, verbose=False):
        if start_factor > 1.0 or start_factor < 0:
            raise ValueError("Starting multiplicative factor expected to be between 0 and 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.LinearLR(self.optimizer._impl, float(self.start_factor),
                                 float(self.end_factor), int(self.total_iters), last_epoch)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the lr rises from max_lr / div_factor to max_lr over pct_start of the
    steps, then anneals to initial_lr / final_div_factor; momentum (beta1 for Adam) cycles the
    other way. Stepping past total_steps is a ValueError, as in torch."""

    _hyper = ("total_steps", "_schedule_phases", "anneal_func", "cycle_momentum", "use_beta1")

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1, verbose=False):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("{} is not an Optimizer".format(type(optimizer).__name__))
        if total_steps is None and epochs is None and steps_per_epoch is None:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        elif total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise ValueError("Expected positive integer total_steps, but got {}".format(
                    total_steps))
            self.total_steps = total_steps
        else:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError("Expected positive integer epochs, but got {}".format(epochs))
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError("Expected positive integer steps_per_epoch, but got {}".format(
                    steps_per_epoch))
            self.total_steps = epochs * steps_per_epoch
        if not isinstance(pct_start, float) or pct_start < 0 or pct_start > 1:
            raise ValueError("Expected float between 0 and 1 pct_start, but got {}".format(
                pct_start))
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must by one of 'cos' or 'linear', instead got "
                             "{}".format(anneal_strategy))
        n = len(optimizer.param_groups)
        max_lrs = _per_group("max_lr", max_lr, n)
        self.cycle_momentum = cycle_momentum
        self.use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum and "momentum" not in optimizer.defaults and not self.use_beta1:
            raise ValueError("optimizer must support momentum with `cycle_momentum` option "
                             "enabled")
        max_ms = _per_group("max_momentum", max_momentum, n)
        base_ms = _per_group("base_momentum", base_momentum, n)
        # What torch keeps in the groups (the C++ scheduler keeps its own copies).
        if last_epoch == -1:
            for i, group in enumerate(optimizer.param_groups):
                group["initial_lr"] = max_lrs[i] / div_factor
                group["max_lr"] = max_lrs[i]
                group["min_lr"] = group["initial_lr"] / final_div_factor
                if cycle_momentum:
                    group["max_momentum"] = max_ms[i]
                    group["base_momentum"] = base_ms[i]
        self._pct_start, self._div, self._final_div = pct_start, div_factor, final_div_factor
        self._three_phase, self._max_lrs = three_phase, [float(x) for x in max_lrs]
        self._max_ms, self._base_ms = [float(x) for x in max_ms], [float(x) for x in base_ms]
        self.anneal_func = anneal_strategy
        T = self.total_steps
        if three_phase:
            ends = [float(pct_start * T) - 1, float(2 * pct_start * T) - 2, T - 1]
            names = [("initial_lr", "max_lr", "max_momentum", "base_momentum"),
                     ("max_lr", "initial_lr", "base_momentum", "max_momentum"),
                     ("initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            ends = [float(pct_start * T) - 1, T - 1]
            names = [("initial_lr", "max_lr", "max_momentum", "base_momentum"),
                     ("max_lr", "min_lr", "base_momentum", "max_momentum")]
        self._schedule_phases = [
            {"end_step": e, "start_lr": a, "end_lr": b, "start_momentum": c, "end_momentum": d}
            for e, (a, b, c, d) in zip(ends, names)]
        super().__init__(optimizer, last_epoch, verbose)

    def _make(self, last_epoch):
        return _C.optim.OneCycleLR(
            self.optimizer._impl, self._max_lrs, int(self.total_steps), float(self._pct_start),
            _anneal_name(self.anneal_func) == "linear", bool(self.cycle_momentum), self._base_ms,
            self._max_ms, float(self._div), float(self._final_div), bool(self._three_phase),
            last_epoch)

    def step(self, epoch=None):
        try:
            super().step(epoch)
        except ValueError as e:
            if "Tried to step" in str(e):
                raise ValueError(str(e).split("] ", 1)[-1]) from None
            raise


def _anneal_name(f):
    """'cos' or 'linear', from attn's string or torch's bound method (_annealing_cos)."""
    name = f if isinstance(f, str) else getattr(f, "__name__", "")
    return "linear" if "linear" in name else "cos"


def _per_group(name, value, n):
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError("expected {} values for {}, got {}".format(n, name, len(value)))
        return list(value)
    return [value] * n


def _lrs_at_zero(s):
    """What s's lrs are at epoch 0 (torch's closed forms, or get_lr where it has none): where
    SequentialLR restarts s at a milestone."""
    base = s.base_lrs
    if isinstance(s, OneCycleLR):
        raise _unsupported("SequentialLR", "a OneCycleLR among its schedulers")
    if isinstance(s, LambdaLR):
        return [b * float(f(0)) for b, f in zip(base, s.lr_lambdas)]
    if isinstance(s, MultiStepLR):
        return [b * s.gamma ** sum(c for m, c in s.milestones.items() if m <= 0) for b in base]
    if isinstance(s, ConstantLR):
        return [b * s.factor if s.total_iters > 0 else b for b in base]
    if isinstance(s, LinearLR):
        return [b * s.start_factor for b in base]
    return list(base)  # StepLR, ExponentialLR, CosineAnnealingLR


class SequentialLR(_SchedulerList):
    """torch.optim.lr_scheduler.SequentialLR: schedulers[i] drives the lr from milestone i - 1
    on; at each milestone the next one starts again from its epoch 0."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1, verbose=False):
        schedulers, milestones = list(schedulers), list(milestones)
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise ValueError("Sequential Schedulers expects all schedulers to belong to the "
                                 "same optimizer, but got schedulers at index {} to be different "
                                 "than the optimizer passed in.".format(i))
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be "
                             "one more than the number of milestone points, but got number of "
                             "schedulers {} and the number of milestones to be equal to {}"
                             .format(len(schedulers), len(milestones)))
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        # As torch: the lrs back to their initial values, every scheduler's first step undone,
        # then the first scheduler's first step made again.
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for s in schedulers:
            if hasattr(s, "_impl"):
                s._impl.load_state(s.base_lrs, s.last_epoch - 1, s._step_count, s.get_last_lr())
            else:  # the Python schedulers (py_schedulers.py)
                s.last_epoch -= 1
        schedulers[0].step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self):
        self.last_epoch += 1
        idx = sum(1 for m in self._milestones if m <= self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch and not hasattr(s, "_impl"):
            import warnings
            with warnings.catch_warnings():  # step(epoch)'s deprecation is torch's own doing here
                warnings.simplefilter("ignore")
                s.step(0)
        elif idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            lrs = _lrs_at_zero(s)
            for g, lr in zip(self.optimizer.param_groups, lrs):
                g["lr"] = lr
            self.optimizer._sync()
            s._impl.load_state(s.base_lrs, 0, s._step_count + 1, lrs)
        else:
            s.step()
        self._last_lr = s.get_last_lr()

