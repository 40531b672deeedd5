"""torch.optim's Optimizer, Adam, AdamW and SGD (1.13) over attn's C++ optimizers.

param_groups are plain dicts with torch's keys; what a program writes into them (an lr, betas,
weight decay, ...) reaches the C++ optimizer at the next step(). state_dict() has torch's
structure: {'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}, with attn
tensors where torch has tensors."""
import copy
import itertools
from collections import defaultdict

from .. import _C

__all__ = ["Optimizer", "Adam", "AdamW", "SGD", "required"]


class _RequiredParameter:
    """Singleton class representing a required parameter for an Optimizer."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _version():
    from .. import __version__
    return __version__


def _unsupported(cls, feature):
    return NotImplementedError("attn.optim.{}: {} is not supported in attn {}".format(
        cls, feature, _version()))


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


class Optimizer:
    """torch.optim.Optimizer: parameter groups over a C++ optimizer (self._impl)."""

    # torch's flags that attn accepts only at their default (a set one is NotImplementedError).
    _flags = ()

    def __init__(self, params, defaults):
        if not hasattr(self, "_make"):
            raise _unsupported(type(self).__name__, "an optimizer written in Python on "
                               "attn.optim.Optimizer (only Adam, AdamW, SGD, RMSprop and "
                               "Adagrad are)")
        self.defaults = defaults
        if _is_tensor(params):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + _typename(params))
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        self.param_groups = []
        for g in param_groups:
            self.param_groups.append(self._prepare_group(g))
        self._pushed = [self._cpp_options(g) for g in self.param_groups]
        self._sizes = [len(g["params"]) for g in self.param_groups]
        self._impl = self._make([(g["params"], o)
                                 for g, o in zip(self.param_groups, self._pushed)])

    # ---- groups ----------------------------------------------------------------------------------

    def _prepare_group(self, param_group):
        """torch's add_param_group checks and defaults, without touching the C++ optimizer."""
        if not isinstance(param_group, dict):
            raise TypeError("param group must be a dict, got " + _typename(param_group))
        param_group = dict(param_group)
        params = param_group["params"]
        if _is_tensor(params):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            param_group["params"] = list(params)
        for param in param_group["params"]:
            if not _is_tensor(param):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(param))
            if not param.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 "optimization parameter " + name)
            param_group.setdefault(name, default)
        seen = set()
        for p in param_group["params"]:
            if id(p) in seen:
                raise ValueError("optimizer contains a parameter group with duplicate "
                                 "parameters (attn refuses them: they would be updated twice)")
            seen.add(id(p))
        for group in getattr(self, "param_groups", []):
            if any(id(p) in seen for p in group["params"]):
                raise ValueError("some parameters appear in more than one parameter group")
        self._cpp_options(param_group)  # unsupported flags and malformed values fail here
        return param_group

    def add_param_group(self, param_group):
        """torch's add_param_group: defaults fill the options the group does not set."""
        g = self._prepare_group(param_group)
        self._sync()
        options = self._cpp_options(g)
        self._impl.add_param_group(g["params"], options)
        self.param_groups.append(g)
        self._pushed.append(options)
        self._sizes.append(len(g["params"]))

    def _cpp_options(self, group):
        """The group's options as the C++ optimizer's fields (checked for unsupported flags)."""
        for flag in self._flags:
            if group.get(flag):
                raise _unsupported(type(self).__name__, "{}=True".format(flag))
        out = {"lr": _number(group, "lr"), "weight_decay": _number(group, "weight_decay")}
        if "initial_lr" in group:
            out["initial_lr"] = _number(group, "initial_lr")
        out.update(self._more_options(group))
        return out

    def _sync(self):
        """Sends the hyper-parameters that changed in param_groups to the C++ optimizer."""
        if len(self.param_groups) != len(self._pushed):
            raise RuntimeError("param_groups has {} groups but the optimizer was given {}: add "
                               "groups with add_param_group".format(len(self.param_groups),
                                                                   len(self._pushed)))
        for i, g in enumerate(self.param_groups):
            if len(g["params"]) != self._sizes[i]:
                raise RuntimeError("param_groups[{}]['params'] has {} tensors but the optimizer "
                                   "was given {}: a group's parameters cannot change (add a "
                                   "group with add_param_group)".format(i, len(g["params"]),
                                                                        self._sizes[i]))
            options = self._cpp_options(g)
            if options != self._pushed[i]:
                self._impl.set_group_options(i, options)
                self._pushed[i] = options

    def _pull_lrs(self):
        """Copies the C++ groups' lr and initial_lr into param_groups (after a scheduler)."""
        for i, g in enumerate(self.param_groups):
            d = self._impl.group(i)
            g["lr"] = d["lr"]
            if "initial_lr" in d:
                g["initial_lr"] = d["initial_lr"]
            # OneCycleLR cycles beta1 (Adam) or momentum (SGD)
            if "beta1" in d and d["beta1"] != float(g["betas"][0]):
                g["betas"] = (d["beta1"], *g["betas"][1:])
            if "momentum" in d and d["momentum"] != float(g["momentum"]):
                g["momentum"] = d["momentum"]
            self._pushed[i] = self._cpp_options(g)

    # ---- stepping --------------------------------------------------------------------------------

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns closure()'s loss."""
        loss = None
        if closure is not None:
            from .. import enable_grad
            with enable_grad():
                loss = closure()
        self._sync()
        self._before_step()
        self._impl.step()
        return loss

    def _before_step(self):
        pass

    def zero_grad(self, set_to_none=False):
        """Sets the gradients to zeros, or to None with set_to_none=True (torch 1.13's default is
        False)."""
        self._impl.zero_grad(bool(set_to_none))

    # ---- state -----------------------------------------------------------------------------------

    def _params(self):
        return list(itertools.chain.from_iterable(g["params"] for g in self.param_groups))

    def state_dict(self):
        """torch's structure: {'state': {i: {...}}, 'param_groups': [{..., 'params': [i...]}]}."""
        state = {}
        for name, t in self._impl.state_dict():
            _, index, field = name.split(".", 2)
            state.setdefault(int(index), {})[field] = t
        state = {i: self._state_from_cpp(i, state.get(i, {}))
                 for i in sorted(set(state) | self._extra_state_indices())}
        param_groups = []
        start = 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(start, start + len(g["params"])))
            start += len(g["params"])
            param_groups.append(packed)
        return {"state": state, "param_groups": param_groups}

    def load_state_dict(self, state_dict):
        """Loads a state_dict of this optimizer's structure (from attn or from torch, its tensors
        converted to attn tensors)."""
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = {old: new for new, old in enumerate(
            itertools.chain.from_iterable(g["params"] for g in saved_groups))}
        flat = []
        extra = set()
        for key, value in state_dict["state"].items():
            if key not in id_map:
                raise ValueError("loaded state dict has state for parameter {!r}, which no "
                                 "parameter group lists".format(key))
            if not isinstance(value, dict):
                raise TypeError("the state of parameter {!r} must be a dict, got {}".format(
                    key, _typename(value)))
            flat += self._state_to_cpp(id_map[key], value, extra)
        new_groups = []
        for g, saved in zip(groups, saved_groups):
            ng = copy.deepcopy({k: v for k, v in saved.items() if k != "params"})
            ng["params"] = g["params"]
            for k, v in self.defaults.items():  # a state from an older torch lacks new flags
                if v is not required:
                    ng.setdefault(k, v)
            self._cpp_options(ng)
            new_groups.append(ng)
        self._impl.load_state_dict(flat)
        self._set_extra_state(extra)
        self.param_groups = new_groups
        self._sync()

    def _extra_state_indices(self):
        return set()

    def _set_extra_state(self, indices):
        pass

    @property
    def state(self):
        """A snapshot of the per-parameter state, keyed by parameter (torch's optimizer.state;
        writes to it do not reach the optimizer)."""
        params = self._params()
        out = defaultdict(dict)
        for i, s in self.state_dict()["state"].items():
            out[params[i]] = s
        return out

    def __repr__(self):
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += "\nParameter Group {}\n".format(i)
            for key in sorted(group.keys()):
                if key != "params":
                    s += "    {}: {}\n".format(key, group[key])
        return s + ")"


def _typename(x):
    return type(x).__name__


def _number(group, key):
    v = group[key]
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError("param group option '{}' must be a number, got {}".format(
            key, _typename(v))) from None


def _flag(group, key):
    return bool(group[key])


def _as_tensor(value, where):
    if _is_tensor(value):
        return value
    try:
        return _C.tensor(value)
    except Exception:
        raise TypeError("{} must be a tensor, got {}".format(where, _typename(value))) from None


class _AdamBase(Optimizer):
    _flags = ("capturable", "differentiable", "fused")

    def _check(self, lr, betas, eps, weight_decay):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))

    def _more_options(self, group):
        betas = group["betas"]
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise TypeError("betas must be a pair of numbers, got {!r}".format(betas)) from None
        return {"beta1": float(beta1), "beta2": float(beta2), "eps": _number(group, "eps"),
                "amsgrad": _flag(group, "amsgrad"), "maximize": _flag(group, "maximize")}

    def _make(self, groups):
        d = self.defaults
        return self._cpp(groups, float(d["lr"]), float(d["betas"][0]), float(d["betas"][1]),
                         float(d["eps"]), float(d["weight_decay"]), bool(d["amsgrad"]))

    def _state_from_cpp(self, i, s):
        out = {"step": _C.tensor(float(int(s["step"].item())))}
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            if k in s:
                out[k] = s[k]
        return out

    def _state_to_cpp(self, i, value, extra):
        out = []
        for k, v in value.items():
            name = "state.{}.{}".format(i, k)
            if k == "step":
                step = float(v.item() if _is_tensor(v) or hasattr(v, "item") else v)
                if step != int(step) or step < 1:
                    raise ValueError("{} must be a whole number >= 1, got {}".format(name, step))
                from .. import int64
                out.append((name, _C.tensor(int(step), dtype=int64)))
            else:
                out.append((name, _as_tensor(v, name)))
        return out


class Adam(_AdamBase):
    """torch.optim.Adam: L2 weight decay (added to the gradient); amsgrad supported."""

    _cpp = _C.optim.Adam

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=False):
        self._check(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)


class AdamW(_AdamBase):
    """torch.optim.AdamW: decoupled weight decay (p *= 1 - lr * weight_decay); amsgrad
    supported."""

    _cpp = _C.optim.AdamW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        self._check(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        foreach=foreach, maximize=maximize, capturable=capturable)
        if differentiable:
            raise _unsupported("AdamW", "differentiable=True")
        if fused:
            raise _unsupported("AdamW", "fused=True")
        super().__init__(params, defaults)


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov momentum, L2 weight decay."""

    _flags = ("differentiable",)

    def __init__(self, params, lr=required, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False):
        if lr is not required and lr < 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if momentum < 0.0:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if weight_decay < 0.0:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach,
                        differentiable=differentiable)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        self._stepped = set()
        super().__init__(params, defaults)

    def _more_options(self, group):
        return {"momentum": _number(group, "momentum"), "dampening": _number(group, "dampening"),
                "nesterov": _flag(group, "nesterov"), "maximize": _flag(group, "maximize")}

    def _make(self, groups):
        d = self.defaults
        lr = 1e-3 if d["lr"] is required else float(d["lr"])  # every group has its own lr
        return _C.optim.SGD(groups, lr, float(d["momentum"]), float(d["dampening"]),
                            float(d["weight_decay"]), bool(d["nesterov"]))

    def _before_step(self):
        # torch keeps {'momentum_buffer': None} for every parameter stepped without momentum.
        for i, p in enumerate(self._params()):
            if p.grad is not None:
                self._stepped.add(i)

    def _extra_state_indices(self):
        return self._stepped

    def _set_extra_state(self, indices):
        self._stepped = set(indices)

    def _state_from_cpp(self, i, s):
        return {"momentum_buffer": s.get("momentum_buffer")}

    def _state_to_cpp(self, i, value, extra):
        extra.add(i)
        out = []
        for k, v in value.items():
            name = "state.{}.{}".format(i, k)
            if k == "momentum_buffer" and v is None:
                continue
            out.append((name, _as_tensor(v, name)))
        return out
