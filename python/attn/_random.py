"""torch's sampling functions composed of attn's in-place samplers, which draw torch's numbers:
torch.normal (its four forms), torch.bernoulli and Tensor.bernoulli (probabilities in a tensor or
one float), Tensor.bernoulli_ with a tensor of probabilities, and randint_like.

Each draws what torch 1.13's CPU kernels draw, in the same order, so that the same seed gives the
same numbers: normal(mean, std) is normal_(0, 1) then * std + mean (two roundings, as torch's
mul_ then add_); normal(mean, float std) is normal_(0, std) + mean; bernoulli with a tensor p
is one float uniform per element (24 random bits, torch's uniform_real_distribution) compared
with p, which is uniform_(0, 1) < p. Elements are drawn in row-major order of the result (torch
follows the memory order of a non-contiguous input's empty_like). The results do not require
grad (torch's normal has a grad_fn that gives the mean zeros). Bad input raises torch's
RuntimeError before anything is drawn, so the generator's state is left as it was (torch draws
the elements before a bad probability)."""
import numbers as _numbers

from . import _C

Tensor = _C.Tensor
_bernoulli_scalar_ = Tensor.bernoulli_  # the C++ in-place sampler for one float p


def _no_grad():
    from . import no_grad
    return no_grad()


def _check_probs(fn, p):
    if not p.is_floating_point():
        raise RuntimeError("{}: expected a floating point tensor of probabilities, got {}".format(
            fn, p.dtype))
    if p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false. [{}]"
                           .format(fn))


def _draw_bernoulli(shape, dtype, p, generator):
    """0 / 1 of `dtype` in `shape`: one uniform per element (row-major) below p (broadcast)."""
    from . import empty, float32
    with _no_grad():
        u = empty(tuple(shape), dtype=float32).uniform_(0.0, 1.0, generator=generator)
        return (u < p.detach().float().expand(*shape)).to(dtype)


def bernoulli(input, p=None, *, generator=None, out=None):
    """torch.bernoulli(input): 1 with probability input[i] (in [0, 1]), of input's dtype; with a
    float p, every element 1 with probability p (torch 2's bernoulli(input, p))."""
    if out is not None:
        raise NotImplementedError("attn.bernoulli: out= is not supported by attn")
    if p is not None:
        if not isinstance(p, _numbers.Real) or isinstance(p, bool):
            raise TypeError("bernoulli(): argument 'p' must be float, not {}".format(
                type(p).__name__))
        from . import empty_like
        with _no_grad():
            return _bernoulli_scalar_(empty_like(input), float(p), generator=generator)
    _check_probs("bernoulli", input)
    return _draw_bernoulli(input.shape, input.dtype, input, generator)


def _bernoulli_method(self, p=None, *, generator=None):
    return bernoulli(self, p, generator=generator)


def _bernoulli_(self, p=0.5, *, generator=None):
    """Tensor.bernoulli_(p): p one float (attn's C++ sampler) or a tensor broadcastable to self."""
    if not isinstance(p, Tensor):
        return _bernoulli_scalar_(self, p, generator=generator)
    _check_probs("bernoulli_", p)
    from . import broadcast_shapes
    if tuple(broadcast_shapes(tuple(p.shape), tuple(self.shape))) != tuple(self.shape):
        raise RuntimeError("bernoulli_: the probabilities' shape {} cannot be broadcast to the "
                           "tensor's {}".format(tuple(p.shape), tuple(self.shape)))
    drawn = _draw_bernoulli(self.shape, self.dtype, p, generator)
    with _no_grad():
        self.copy_(drawn)
    return self


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None,
           device=None, pin_memory=False, requires_grad=False):
    """torch.normal: normal(Tensor mean, Tensor std), normal(Tensor mean, float std=1),
    normal(float mean, Tensor std), normal(float mean, float std, size)."""
    from . import empty, empty_like
    if out is not None:
        raise NotImplementedError("attn.normal: out= is not supported by attn")
    mt, st = isinstance(mean, Tensor), isinstance(std, Tensor)
    with _no_grad():
        if mt and st:
            if std.numel() and not bool((std >= 0).all()):
                raise RuntimeError("normal expects all elements of std >= 0.0")
            from . import broadcast_shapes
            shape = tuple(broadcast_shapes(tuple(mean.shape), tuple(std.shape)))
            r = empty(shape, dtype=mean.dtype).normal_(0.0, 1.0, generator=generator)
            return r.mul_(std.detach()).add_(mean.detach())
        if mt:
            if std < 0:
                raise RuntimeError("normal expects std >= 0.0, but found std {}".format(std))
            r = empty_like(mean).normal_(0.0, float(std), generator=generator)
            return r.add_(mean.detach())
        if st:
            if std.numel() and not bool((std >= 0).all()):
                raise RuntimeError("normal expects all elements of std >= 0.0")
            r = empty_like(std).normal_(0.0, 1.0, generator=generator)
            return r.mul_(std.detach()).add_(float(mean))
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments - got "
                            "(float, float): a size is needed when mean and std are numbers")
        if std < 0:
            raise RuntimeError("normal expects std >= 0.0, but found std {}".format(std))
        shape = tuple(size) if not isinstance(size, _numbers.Integral) else (size,)
        r = empty(shape, dtype=dtype).normal_(float(mean), float(std), generator=generator)
    return r.requires_grad_(True) if requires_grad else r


def randint_like(input, low=0, high=None, *, dtype=None, layout=None, device=None,
                 requires_grad=False, memory_format=None, generator=None):
    """torch.randint_like(input, high) or (input, low, high): randint of input's shape and
    dtype (or dtype)."""
    from . import randint
    if high is None:
        low, high = 0, low
    kw = {} if generator is None else {"generator": generator}
    r = randint(int(low), int(high), tuple(input.shape), dtype=dtype or input.dtype, **kw)
    return r.requires_grad_(True) if requires_grad else r


def install(module):
    """Puts the functions above into `module` (attn) and the methods onto Tensor."""
    for name in ("normal", "bernoulli", "randint_like"):
        if name not in vars(module):
            setattr(module, name, globals()[name])
    if not any("bernoulli" in vars(k) for k in Tensor.__mro__ if k is not object):
        Tensor.bernoulli = _bernoulli_method
    Tensor.bernoulli_ = _bernoulli_  # the C++ method, widened to a tensor of probabilities
