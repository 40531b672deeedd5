"""torch.nn.functional names composed of attn's ops: the regression and classification losses
(mse, l1, smooth_l1, huber, nll, binary_cross_entropy[_with_logits], kl_div), the activations
beyond the fused ones (softplus, leaky_relu, elu, selu, celu, glu, logsigmoid, hardtanh, relu6,
softmin, mish, hardswish, hardsigmoid, softsign, threshold), p-norms (attn.norm, Tensor.norm),
normalize, cosine_similarity and pairwise_distance.

Gradients flow through the ops they are made of, written so that the branch a `where` discards
never overflows (its gradient would be 0 * inf = nan): softplus, elu and celu clamp the argument
of their exp first. The p-norms are an autograd.Function whose gradient at a zero vector is zero,
as torch's (a sqrt of a sum of squares would give nan there). Values agree with torch to float32
rounding (tests/python/test_nn_composite_vs_torch.py); the exception types and messages of bad
input are torch's.
"""
import math as _math

from .. import _C
from ..autograd import Function as _Function

Tensor = _C.Tensor


def _reduction(size_average, reduce, reduction):
    """torch's legacy size_average / reduce arguments as a reduction string."""
    if size_average is None and reduce is None:
        if reduction not in ("none", "mean", "sum"):
            raise ValueError("{} is not a valid value for reduction".format(reduction))
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else ("mean" if size_average else "sum")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _check_tensors(fn, *xs):
    for x in xs:
        if not isinstance(x, Tensor):
            raise TypeError("{}(): argument must be Tensor, not {}".format(fn, type(x).__name__))


# ---- regression losses ---------------------------------------------------------------------------

def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    _check_tensors("mse_loss", input, target)
    return _reduce((input - target).square(), _reduction(size_average, reduce, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    _check_tensors("l1_loss", input, target)
    return _reduce((input - target).abs(), _reduction(size_average, reduce, reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    _check_tensors("smooth_l1_loss", input, target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    if beta == 0:
        loss = d
    else:
        loss = _C.where(d < beta, d.square() * (0.5 / beta), d - 0.5 * beta)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def huber_loss(input, target, reduction="mean", delta=1.0):
    _check_tensors("huber_loss", input, target)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    d = (input - target).abs()
    loss = _C.where(d < delta, d.square() * 0.5, (d - 0.5 * delta) * delta)
    return _reduce(loss, _reduction(None, None, reduction))


# ---- classification losses -----------------------------------------------------------------------

def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """torch's nll_loss: input (N, C, d1, ...) or (C,) log-probabilities, target int64 classes
    (N, d1, ...) or (); weight per class; ignore_index excluded from the sum and the mean's
    weights."""
    _check_tensors("nll_loss", input, target)
    red = _reduction(size_average, reduce, reduction)
    if input.dim() < 1:
        raise ValueError("input tensor should be 1D or 2D, got 0D")
    from .. import int64
    if target.dtype != int64:
        raise RuntimeError("expected scalar type Long but found {}".format(
            str(target.dtype).replace("attn.", "")))
    unbatched = input.dim() == 1
    x = input.unsqueeze(0) if unbatched else input
    t = target.unsqueeze(0) if unbatched else target
    n_class = x.shape[1]
    if t.dim() >= 1 and t.shape[0] != x.shape[0]:
        raise ValueError("Expected input batch_size ({}) to match target batch_size ({}).".format(
            x.shape[0], t.shape[0]))
    if t.shape != x.shape[:1] + x.shape[2:]:
        raise ValueError("Expected target size {}, got {}".format(
            tuple(x.shape[:1] + x.shape[2:]), tuple(t.shape)))
    if weight is not None and (weight.dim() != 1 or weight.shape[0] != n_class):
        raise RuntimeError("weight tensor should be defined either for all {} classes or no "
                           "classes but got weight tensor of shape: {}".format(
                               n_class, list(weight.shape)))
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= n_class))
    if bool(bad.any()):
        raise IndexError("Target {} is out of bounds.".format(int(t[bad][0])))
    safe = _C.where(keep, t, _C.zeros((), dtype=int64))
    picked = -x.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = keep.to(x.dtype)
    if weight is not None:
        w = w * weight[safe]
        picked = picked * weight[safe]
    # where, not a product by 0: a mean over no class (0 / 0) must not send nan to the ignored
    loss = _C.where(keep, picked, _C.zeros((), dtype=x.dtype))
    if unbatched:
        loss, w = loss.squeeze(0), w.squeeze(0)
    if red == "none":
        return loss
    if red == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """torch's binary_cross_entropy: each log clamped at -100, input in [0, 1]."""
    _check_tensors("binary_cross_entropy", input, target)
    if target.shape != input.shape:
        raise ValueError("Using a target size ({}) that is different to the input size ({}) is "
                         "deprecated. Please ensure they have the same size.".format(
                             tuple(target.shape), tuple(input.shape)))
    if bool(((input < 0) | (input > 1)).any()):
        raise RuntimeError("all elements of input should be between 0 and 1")
    loss = -(target * input.log().clamp(min=-100.0)
             + (1 - target) * (1 - input).log().clamp(min=-100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """torch's binary_cross_entropy_with_logits, in its stable form: (1 - t) x + w (log(1 +
    exp(-|x|)) + max(-x, 0)), w = 1 + (pos_weight - 1) t."""
    _check_tensors("binary_cross_entropy_with_logits", input, target)
    if target.shape != input.shape:
        raise ValueError("Target size ({}) must be the same as input size ({})".format(
            tuple(target.shape), tuple(input.shape)))
    soft = (-input.abs()).exp().log1p() + (-input).clamp(min=0.0)
    if pos_weight is not None:
        soft = soft * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input + soft
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """torch's kl_div: input log-probabilities; target probabilities (log ones with log_target);
    reduction "batchmean" divides the sum by the batch size."""
    _check_tensors("kl_div", input, target)
    if reduction == "batchmean":
        red = "batchmean"
    else:
        red = _reduction(size_average, reduce, reduction)
    if red == "mean":
        import warnings
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        from .. import xlogy
        loss = xlogy(target, target) - target * input
    if red == "batchmean":
        return loss.sum() / (input.shape[0] if input.dim() else 1)
    return _reduce(loss, red)


# ---- activations ---------------------------------------------------------------------------------

def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    z = input * beta if beta != 1 else input
    soft = z.clamp(max=float(threshold)).exp().log1p()
    if beta != 1:
        soft = soft / beta
    return _C.where(z > threshold, input, soft)


def _inplace(input, out, inplace):
    if inplace:
        input.copy_(out)
        return input
    return out


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _inplace(input, _C.where(input > 0, input, input * negative_slope), inplace)


def elu(input, alpha=1.0, inplace=False):
    neg = input.clamp(max=0.0).expm1() * alpha
    return _inplace(input, _C.where(input > 0, input, neg), inplace)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    neg = input.clamp(max=0.0).expm1() * (_SELU_ALPHA * _SELU_SCALE)
    return _inplace(input, _C.where(input > 0, input * _SELU_SCALE, neg), inplace)


def celu(input, alpha=1.0, inplace=False):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    neg = (input.clamp(max=0.0) / alpha).expm1() * alpha
    return _inplace(input, _C.where(input > 0, input, neg), inplace)


def glu(input, dim=-1):
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = dim % input.dim()
    if input.shape[d] % 2:
        raise RuntimeError("Halving dimension must be even, but dimension {} is size {}".format(
            d, input.shape[d]))
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


def logsigmoid(input):
    return input.clamp(max=0.0) - (-input.abs()).exp().log1p()


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _inplace(input, input.clamp(min=float(min_val), max=float(max_val)), inplace)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    from .functional import softmax
    return softmax(-input, dim, dtype=dtype)


def mish(input, inplace=False):
    return _inplace(input, input * softplus(input).tanh(), inplace)


def hardswish(input, inplace=False):
    return _inplace(input, input * (input + 3).clamp(min=0.0, max=6.0) / 6, inplace)


def hardsigmoid(input, inplace=False):
    return _inplace(input, (input + 3).clamp(min=0.0, max=6.0) / 6, inplace)


def softsign(input):
    return input / (input.abs() + 1)


def threshold(input, threshold, value, inplace=False):  # noqa: A002 (torch's names)
    return _inplace(input, _C.where(input > threshold, input,
                                    _C.full((), value, dtype=input.dtype)), inplace)


# ---- norms and distances -------------------------------------------------------------------------

class _PNorm(_Function):
    """(sum |x|^p)^(1/p) over dims; its gradient is 0 where the norm is 0 (torch's too)."""

    @staticmethod
    def forward(ctx, x, p, dims, keepdim):
        a = x.abs()
        if p == 2:
            n = a.square().sum(dims, keepdim=True).sqrt()
        elif p == 1:
            n = a.sum(dims, keepdim=True)
        else:
            n = a.pow(p).sum(dims, keepdim=True).pow(1.0 / p)
        ctx.save_for_backward(x, n)
        ctx.p, ctx.keepdim = p, keepdim
        return n if keepdim else _squeeze(n, dims)

    @staticmethod
    def backward(ctx, g):
        x, n = ctx.saved_tensors
        p = ctx.p
        if not ctx.keepdim:
            g = g.reshape(n.shape)
        if p == 1:
            return g * x.sign(), None, None, None
        zero = _C.zeros((), dtype=n.dtype)
        safe = _C.where(n == 0, _C.ones((), dtype=n.dtype), n)
        if p == 2:
            scale = x / safe
        else:  # |x|^(p-1) is inf at x = 0 for p < 1: those elements get 0, as in torch
            scale = _C.where(x == 0, zero, x.sign() * x.abs().pow(p - 1)) / safe.pow(p - 1)
        return _C.where(n == 0, zero, g * scale), None, None, None


_PNorm._backward_name = "LinalgVectorNormBackward0"  # torch 2's node name for its p-norms


def _squeeze(t, dims):
    for d in reversed(dims):
        t = t.squeeze(d)
    return t


def _dims_of(x, dim):
    if dim is None:
        return list(range(x.dim()))
    if isinstance(dim, int):
        return [dim % x.dim()] if x.dim() else []
    return sorted(d % x.dim() for d in dim)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    """torch.linalg.vector_norm for ord 0, 1, 2, inf, -inf and any other positive number."""
    if not x.is_floating_point():
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           "input. Got {}".format(str(x.dtype).replace("attn.", "")))
    if dtype is not None:
        x = x.to(dtype)
    dims = _dims_of(x, dim)
    if ord == _math.inf or ord == -_math.inf:
        out = x.abs() if ord > 0 else -x.abs()
        for d in dims:
            out = out.amax(d, keepdim=True)
        if ord < 0:
            out = -out
        return out if keepdim else _squeeze(out, dims)
    if ord == 0:
        out = (x != 0).to(x.dtype)
        for d in dims:
            out = out.sum(d, keepdim=True)
        return out if keepdim else _squeeze(out, dims)
    if ord <= 0:
        raise RuntimeError("attn.norm: ord {} is not supported (0, positive, inf, -inf "
                           "are)".format(ord))
    if not dims:  # a 0-dim tensor: its absolute value
        return _PNorm.apply(x.reshape(1), float(ord), [0], False).reshape(())
    return _PNorm.apply(x, float(ord), dims, bool(keepdim))


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """torch.norm: the vector p-norm over dim (all elements by default); "fro" is 2."""
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str):
        raise RuntimeError("attn.norm: p={!r} is not supported (a number or 'fro')".format(p))
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    if out is not None:
        raise ValueError("normalize: out= is not supported by attn")
    n = vector_norm(input, p, dim, keepdim=True).clamp(min=eps)
    return input / n


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """x1 . x2 / (max(|x1|, eps) max(|x2|, eps)) along dim, broadcasting x1 and x2."""
    _check_tensors("cosine_similarity", x1, x2)
    from .. import broadcast_shapes
    shape = broadcast_shapes(x1.shape, x2.shape)
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = vector_norm(x1, 2, dim, keepdim=True).clamp(min=eps)
    n2 = vector_norm(x2, 2, dim, keepdim=True).clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    _check_tensors("pairwise_distance", x1, x2)
    return vector_norm(x1 - x2 + eps, p, -1, keepdim)
