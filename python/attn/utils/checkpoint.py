"""attn.utils.checkpoint: torch.utils.checkpoint's activation checkpointing. checkpoint(fn,
*args) runs fn without recording its graph, keeping only its inputs; the backward pass runs fn
again with the graph recorded (with the random generator's state of the first run, so that
dropout draws the same masks) and backpropagates through it. Memory: the activations inside fn
are not kept between the forward and the backward pass; time: fn runs twice.

Both of torch's forms (use_reentrant True or False) run this way; attn accepts either and does
not warn when it is left out. fn may return a tensor or a tuple of tensors (several outputs share
one node, as autograd.Function's do).
"""
from .. import _C, enable_grad, get_rng_state, no_grad, set_rng_state
from ..autograd import Function, backward as _backward

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Checkpoint(Function):
    _backward_name = "CheckpointFunctionBackward"  # torch's reentrant checkpoint's node

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.rng_state = get_rng_state() if preserve_rng_state else None
        tensors = [a for a in args if isinstance(a, _C.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.layout = [isinstance(a, _C.Tensor) for a in args]
        ctx.others = [None if t else a for a, t in zip(args, ctx.layout)]
        with no_grad():
            out = run_function(*args)
        ctx.n_out = len(out) if isinstance(out, tuple) else 0
        return out

    @staticmethod
    def backward(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        inputs = []
        for is_tensor, other in zip(ctx.layout, ctx.others):
            if is_tensor:
                t = next(saved).detach()
                t.requires_grad_(t.is_floating_point())
                inputs.append(t)
            else:
                inputs.append(other)
        if ctx.rng_state is not None:
            now = get_rng_state()
            set_rng_state(ctx.rng_state)
        try:
            with enable_grad():
                out = ctx.run_function(*inputs)
        finally:
            if ctx.rng_state is not None:
                set_rng_state(now)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if isinstance(o, _C.Tensor) and o.requires_grad and g is not None]
        if pairs:
            _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(
            t.grad if isinstance(t, _C.Tensor) and t.requires_grad else None for t in inputs)


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, context_fn=None,
               determinism_check="default", debug=False, **kwargs):
    """function(*args, **kwargs) without keeping its activations for the backward pass."""
    if context_fn is not None:
        raise NotImplementedError("attn.utils.checkpoint: context_fn is not supported by attn")
    if kwargs:
        return checkpoint(lambda *a: function(*a, **kwargs), *args,
                          preserve_rng_state=preserve_rng_state)
    return _Checkpoint.apply(function, bool(preserve_rng_state), *args)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs the modules of a Sequential (or a list) in `segments` checkpointed chunks; the last
    chunk runs normally, as torch's."""
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    size = max(len(fns) // segments, 1)

    def run(start, end):
        def f(x):
            for fn in fns[start:end]:
                x = fn(x)
            return x
        return f

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end + 1), input, **kwargs)
    return run(end + 1, len(fns))(input)
