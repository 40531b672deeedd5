"""attn.optim.lr_scheduler: torch.optim.lr_scheduler's LambdaLR, StepLR, MultiStepLR,
CosineAnnealingLR and LinearLR (1.13), over attn's C++ schedulers (attn/lr_scheduler.h), which
compute torch's recursive formulas in the same double arithmetic."""
from collections import Counter

from .. import _C
from .optimizer import Optimizer, _unsupported

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "CosineAnnealingLR", "LinearLR"]

_MISSING = {"ChainedScheduler", "ConstantLR", "CosineAnnealingWarmRestarts", "CyclicLR",
            "ExponentialLR", "MultiplicativeLR", "OneCycleLR", "PolynomialLR",
            "ReduceLROnPlateau", "SequentialLR"}


def __getattr__(name):
    if name in _MISSING:
        raise _unsupported("lr_scheduler." + name, "this scheduler")
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
        self._impl = self._make(-1)  # with the loaded hyper-parameters; its first step's lrs
        for i, lr in enumerate(lrs):  # are undone
            opt._impl.set_group_options(i, {"lr": float(lr)})
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
