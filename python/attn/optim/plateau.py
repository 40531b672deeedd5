"""attn.optim.lr_scheduler.ReduceLROnPlateau: multiplies the groups' lr by `factor` once a
metric has stopped improving for more than `patience` steps (torch's semantics: relative or
absolute thresholds, min or max mode, a cooldown after each reduction, per-group floors, and
reductions smaller than eps skipped). Pure Python: it writes param_groups' lr, which the
optimizer sends to C++ at its next step."""
import math

from .optimizer import Optimizer


class ReduceLROnPlateau:
    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8, verbose=False):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if not isinstance(optimizer, Optimizer):
            raise TypeError("{} is not an Optimizer".format(type(optimizer).__name__))
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError("expected {} min_lrs, got {}".format(n, len(min_lr)))
            self.min_lrs = list(min_lr)
        else:
            self.min_lrs = [min_lr] * n
        self.optimizer = optimizer
        self.factor, self.patience, self.cooldown = factor, patience, cooldown
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.eps, self.verbose = eps, verbose
        self.last_epoch = 0
        self._check_modes()
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _check_modes(self):
        if self.mode not in ("min", "max"):
            raise ValueError("mode " + str(self.mode) + " is unknown!")
        if self.threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + str(self.threshold_mode) + " is unknown!")
        self.mode_worse = math.inf if self.mode == "min" else -math.inf

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def is_better(self, a, best):
        """Whether metric a improves on best by more than the threshold."""
        if self.threshold_mode == "rel":
            margin = 1.0 - self.threshold if self.mode == "min" else 1.0 + self.threshold
            return a < best * margin if self.mode == "min" else a > best * margin
        return a < best - self.threshold if self.mode == "min" else a > best + self.threshold

    def step(self, metrics, epoch=None):
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:  # bad epochs during a cooldown do not count
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _reduce_lr(self):
        for i, group in enumerate(self.optimizer.param_groups):
            old = float(group["lr"])
            new = max(old * self.factor, self.min_lrs[i])
            if old - new > self.eps:
                group["lr"] = new
                if self.verbose:
                    print("Epoch {}: reducing learning rate of group {} to {:.4e}.".format(
                        self.last_epoch, i, new))

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._check_modes()
