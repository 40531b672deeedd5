"""torch.optim.lr_scheduler's PolynomialLR, MultiplicativeLR, CosineAnnealingWarmRestarts,
CyclicLR and ChainedScheduler in Python (attn's other schedulers run in C++, lr_scheduler.py). They follow
torch 1.13's LRScheduler: initial_lr is set in each group (or required when resuming), the
constructor makes the first step, step() applies torch's recursive formula to the groups' current
lrs and step(epoch) its closed form. They write param_groups' lr, which the optimizer sends to
C++ at its next step, so they chain with the C++ schedulers."""
import math
import warnings

from .optimizer import Optimizer


class _Scheduler:
    def __init__(self, optimizer, last_epoch=-1, verbose=False):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("{} is not an Optimizer".format(type(optimizer).__name__))
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError("param 'initial_lr' is not specified in param_groups[{}] when "
                               "resuming an optimizer".format(i))
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.verbose = verbose
        self._step_count = 0
        self.step()

    def get_last_lr(self):
        return list(self._last_lr)

    def step(self, epoch=None):
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            warnings.warn("The epoch parameter in `scheduler.step()` was not necessary and is "
                          "being deprecated where possible.", UserWarning)
            self.last_epoch = epoch
            values = self._closed_form() if hasattr(self, "_closed_form") else self.get_lr()
        self._apply(values)

    def _apply(self, values):
        for i, (group, lr) in enumerate(zip(self.optimizer.param_groups, values)):
            group["lr"] = lr
            if self.verbose:
                print("Adjusting learning rate of group {} to {:.4e}.".format(i, lr))
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


class PolynomialLR(_Scheduler):
    """Decays each lr to 0 over total_iters steps as (1 - t / total_iters) ** power."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1, verbose=False):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch > self.total_iters:
            return [g["lr"] for g in groups]
        factor = ((1.0 - self.last_epoch / self.total_iters) /
                  (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [g["lr"] * factor for g in groups]

    def _closed_form(self):
        t = min(self.total_iters, self.last_epoch)
        return [b * (1.0 - t / self.total_iters) ** self.power for b in self.base_lrs]


class MultiplicativeLR(_Scheduler):
    """Multiplies each lr by lr_lambda(epoch) at every step after the first."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose=False):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError("Expected {} lr_lambdas, but got {}".format(n, len(lr_lambda)))
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch > 0:
            return [g["lr"] * f(self.last_epoch) for g, f in zip(groups, self.lr_lambdas)]
        return [g["lr"] for g in groups]

    def state_dict(self):
        out = super().state_dict()
        out["lr_lambdas"] = [None] * len(self.lr_lambdas)  # as torch: functions are not saved
        return out

    def load_state_dict(self, state_dict):
        state = {k: v for k, v in state_dict.items() if k != "lr_lambdas"}
        super().load_state_dict(state)


class CosineAnnealingWarmRestarts(_Scheduler):
    """Cosine annealing from each initial lr to eta_min over T_i steps, restarting with
    T_i *= T_mult (SGDR). step(epoch) takes fractional epochs, as torch's."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0, last_epoch=-1, verbose=False):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError("Expected positive integer T_0, but got {}".format(T_0))
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError("Expected integer T_mult >= 1, but got {}".format(T_mult))
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i))
                / 2 for b in self.base_lrs]

    def step(self, epoch=None):
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError("Expected non-negative epoch, but got {}".format(epoch))
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        self._apply(self.get_lr())


class CyclicLR(_Scheduler):
    """torch 1.13's CyclicLR: the lr cycles between base_lr and max_lr (triangular, triangular2,
    exp_range or a scale_fn of the cycle or the iteration), stepped once per batch; with
    cycle_momentum the groups' momentum cycles the other way (SGD and RMSprop have one; Adam's
    betas are not cycled, as in 1.13, which raises ValueError)."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle",
                 cycle_momentum=True, base_momentum=0.8, max_momentum=0.9, last_epoch=-1,
                 verbose=False):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("{} is not an Optimizer".format(type(optimizer).__name__))
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        step_size_up = float(step_size_up)
        step_size_down = float(step_size_down) if step_size_down is not None else step_size_up
        self.total_size = step_size_up + step_size_down
        self.step_ratio = step_size_up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = (scale_mode if scale_fn is not None
                           else "iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum with `cycle_momentum` option "
                                 "enabled")
            base_momentums = _per_group("base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for momentum, group in zip(base_momentums, optimizer.param_groups):
                    group["momentum"] = momentum
            self.base_momentums = [g["momentum"] for g in optimizer.param_groups]
            self.max_momentums = _per_group("max_momentum", optimizer, max_momentum)
        super().__init__(optimizer, last_epoch, verbose)
        self.base_lrs = base_lrs

    def scale_fn(self, x):
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        at = cycle if self.scale_mode == "cycle" else self.last_epoch
        lrs = [base_lr + (max_lr - base_lr) * scale_factor * self.scale_fn(at)
               for base_lr, max_lr in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, base_m, max_m in zip(self.optimizer.param_groups, self.base_momentums,
                                            self.max_momentums):
                group["momentum"] = max_m - (max_m - base_m) * scale_factor * self.scale_fn(at)
        return lrs


def _per_group(name, optimizer, param):
    """torch's _format_param: one value per group (a list of them, or one for all)."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError("expected {} values for {}, got {}".format(
                len(optimizer.param_groups), name, len(param)))
        return list(param)
    return [param] * len(optimizer.param_groups)


class _SchedulerList:
    """What ChainedScheduler and SequentialLR share: their state is theirs plus each of their
    schedulers' (torch's layout)."""

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        out = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        inner = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, st in zip(self._schedulers, inner):
            s.load_state_dict(st)


class ChainedScheduler(_SchedulerList):
    """Steps every scheduler in turn, each on the lrs the one before wrote."""

    def __init__(self, schedulers):
        self._schedulers = list(schedulers)
        self.optimizer = self._schedulers[0].optimizer
        self._last_lr = [g["lr"] for g in self._schedulers[-1].optimizer.param_groups]

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = [g["lr"] for g in self._schedulers[-1].optimizer.param_groups]
