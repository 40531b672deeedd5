"""torch.nn's BatchNorm1d and BatchNorm2d and F.batch_norm (torch 1.13), composed of attn's ops.

Training (or no running statistics): the input is normalized per channel (dim 1) with the
batch's mean and biased variance over every other dim, x_hat = (x - mean) / sqrt(var + eps),
then scaled by weight and shifted by bias; autograd comes from the ops. The running statistics
are updated in place, outside the autograd graph, with the unbiased variance:
running = (1 - momentum) * running + momentum * batch_stat. Evaluation with running statistics
normalizes with them. The module's momentum=None is torch's cumulative moving average (the
factor 1 / num_batches_tracked). Results are torch's to float32 rounding (torch's CPU kernel
accumulates in double and applies x * alpha + beta)."""
import collections
import collections.abc

from .. import _C
from . import init
from .modules import Module, Parameter, _C_no_grad, _factory_dtype


def _check_features(name, num_features, tensor):
    if tensor is not None and tensor.numel() != num_features:
        raise RuntimeError("{} should contain {} elements not {}".format(
            name, num_features, tensor.numel()))


def _verify_batch_size(size):
    n = size[0]
    for s in size[2:]:
        n *= s
    if n == 1:
        raise ValueError("Expected more than 1 value per channel when training, got input size "
                         "{}".format(size))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """torch.nn.functional.batch_norm: input (N, C, *), statistics per channel C. training uses
    the batch's statistics and updates running_mean / running_var (when given) in place; else
    running_mean and running_var normalize."""
    if input.dim() < 2:
        raise RuntimeError("batch_norm: expected an input of at least 2 dims (N, C, ...), got "
                           "size {}".format(list(input.shape)))
    if momentum is None or isinstance(momentum, bool):
        raise TypeError("batch_norm(): argument 'momentum' (position 7) must be float, not "
                        "{}".format(type(momentum).__name__))
    momentum, eps = float(momentum), float(eps)
    if training:
        _verify_batch_size(input.shape)
    channels = input.shape[1]
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        _check_features(name, channels, t)
    nd = input.dim()
    shape = (1, channels) + (1,) * (nd - 2)
    if training:
        dims = (0,) + tuple(range(2, nd))
        n = input.numel() // channels if channels else 0
        mean = input.mean(dims, keepdim=True)
        centered = input - mean
        var_sum = (centered * centered).sum(dims, keepdim=True)
        out = centered * (var_sum / n + eps).rsqrt()
        with _C_no_grad():
            if running_mean is not None:
                _update(running_mean, mean.detach(), momentum)
            if running_var is not None:
                _update(running_var, var_sum.detach() / max(n - 1, 1), momentum)
    else:
        if running_mean is None:
            raise RuntimeError("running_mean must be defined in evaluation mode")
        if running_var is None:
            raise RuntimeError("running_var must be defined in evaluation mode")
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
        if mean.dtype != input.dtype:
            mean, var = mean.to(input.dtype), var.to(input.dtype)
        out = (input - mean) * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _update(running, stat, momentum):
    """running <- momentum * stat + (1 - momentum) * running, in place (no graph)."""
    stat = stat.reshape(running.shape)
    if stat.dtype != running.dtype:
        stat = stat.to(running.dtype)
    running.copy_(stat * momentum + running * (1.0 - momentum))


class _BatchNorm(Module):
    _fn = "BatchNorm"

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        if device is not None and str(device) not in ("cpu", "cpu:0"):
            raise NotImplementedError("attn.nn.{}: device={!r} (attn's batch norm runs on the "
                                      "cpu)".format(self._fn, device))
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(_C.empty((num_features,)))
            self.bias = Parameter(_C.empty((num_features,)))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features))
            self.register_buffer("running_var", _C.ones(num_features))
            self.register_buffer("num_batches_tracked", _C.tensor(0, dtype=_C.dtype.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()
        _factory_dtype(self, dtype, self._fn)

    def reset_running_stats(self):
        if self.track_running_stats:
            with _C_no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, input):
        raise NotImplementedError

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with _C_no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if self.training:
            bn_training = True
        else:
            bn_training = self.running_mean is None and self.running_var is None
        keep = not self.training or self.track_running_stats
        return batch_norm(input, self.running_mean if keep else None,
                          self.running_var if keep else None, self.weight, self.bias,
                          bn_training, factor, self.eps)

    def extra_repr(self):
        return ("{}, eps={}, momentum={}, affine={}, track_running_stats={}".format(
            self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats))

    def _check_state_dict(self, state_dict, prefix, missing, unexpected, errors, copies):
        # torch's _NormBase: a state dict without version metadata (written before
        # num_batches_tracked existed, or a plain dict) loads with num_batches_tracked = 0
        key = prefix + "num_batches_tracked"
        meta = getattr(state_dict, "_metadata", None)
        version = None
        if isinstance(meta, collections.abc.Mapping):
            version = (meta.get(prefix[:-1]) or {}).get("version")
        if (version is None or version < 2) and self.track_running_stats and \
                key not in state_dict:
            state_dict = collections.ChainMap(
                state_dict, {key: _C.tensor(0, dtype=_C.dtype.int64)})
        super()._check_state_dict(state_dict, prefix, missing, unexpected, errors, copies)


class BatchNorm1d(_BatchNorm):
    """torch.nn.BatchNorm1d over (N, C) or (N, C, L)."""
    _fn = "BatchNorm1d"

    def _check_input_dim(self, input):
        if input.dim() != 2 and input.dim() != 3:
            raise ValueError("expected 2D or 3D input (got {}D input)".format(input.dim()))


class BatchNorm2d(_BatchNorm):
    """torch.nn.BatchNorm2d over (N, C, H, W)."""
    _fn = "BatchNorm2d"

    def _check_input_dim(self, input):
        if input.dim() != 4:
            raise ValueError("expected 4D input (got {}D input)".format(input.dim()))
