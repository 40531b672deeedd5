"""attn.autograd: torch.autograd's names over attn's engine (attn/autograd.h).

- backward(tensors, grad_tensors=None, retain_graph=None): one pass from several tensors.
- grad(outputs, inputs, grad_outputs=None, retain_graph=None, allow_unused=False): gradients
  returned, not accumulated into .grad.
- Function: custom forward and backward (ctx.save_for_backward, ctx.saved_tensors,
  ctx.needs_input_grad, ctx.mark_non_differentiable, ctx.set_materialize_grads; forward with ctx,
  or torch 2's forward without it plus setup_context). Its results print as
  grad_fn=<NameBackward>.
- Tensor.register_hook, retain_grad / retains_grad, register_post_accumulate_grad_hook.

Where attn differs: create_graph=True (higher-order gradients) raises, as Tensor.backward does;
a Function with several results gets zeros (never None) for those no gradient reached, and its
recorded results must share one dtype; mark_dirty (in-place forwards) raises.
"""
import itertools as _itertools

from . import _C
from ._C import Tensor

__all__ = ["Function", "Variable", "backward", "grad", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode"]


def __getattr__(name):  # the grad-mode managers live in attn (imported after this module)
    if name in ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode"):
        import attn
        return getattr(attn, name)
    raise AttributeError("module 'attn.autograd' has no attribute %r" % name)


def Variable(data, requires_grad=False, volatile=False):  # noqa: N802 (torch's legacy name)
    """torch's legacy Variable(data): a new leaf on data's elements (detached from any graph),
    requiring grad if asked."""
    if not isinstance(data, Tensor):
        raise TypeError("Variable data has to be a tensor, but got {}".format(
            type(data).__name__))
    return data.detach().requires_grad_(bool(requires_grad))


def _as_tuple(x, what):
    if x is None:
        return ()
    if isinstance(x, Tensor):
        return (x,)
    if isinstance(x, (tuple, list)):
        return tuple(x)
    raise TypeError("%s: expected a Tensor or a sequence of Tensors, got %s"
                    % (what, type(x).__name__))


def _no_create_graph(create_graph, fn):
    if create_graph:
        raise RuntimeError("%s: create_graph=True (higher-order gradients) is not supported by "
                           "attn" % fn)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: accumulates into the .grad of the leaves the tensors depend on."""
    _no_create_graph(create_graph, "backward")
    if inputs is not None:
        raise RuntimeError("backward: inputs= is not supported by attn; use attn.autograd.grad")
    roots = _as_tuple(tensors, "backward")
    grads = _as_tuple(grad_tensors, "backward")
    if grads and len(grads) != len(roots):
        raise RuntimeError("backward: got %d tensors and %d gradients" % (len(roots), len(grads)))
    _C.autograd.backward(roots, grads or [None] * len(roots), retain_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """torch.autograd.grad: a tuple of the gradients of outputs with respect to inputs (None for an
    unused input with allow_unused=True, zeros with materialize_grads=True)."""
    _no_create_graph(create_graph, "grad")
    if is_grads_batched:
        raise RuntimeError("grad: is_grads_batched=True is not supported by attn")
    outs = _as_tuple(outputs, "grad")
    ins = _as_tuple(inputs, "grad")
    grads = _as_tuple(grad_outputs, "grad")
    if grads and len(grads) != len(outs):
        raise RuntimeError("grad_outputs: got %d gradients for %d outputs"
                           % (len(grads), len(outs)))
    if allow_unused is None:
        allow_unused = materialize_grads
    for t in ins:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    result = _C.autograd.grad(outs, ins, grads or [None] * len(outs), retain_graph, True)
    if not allow_unused and any(g is None for g in result):
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in "
                           "the graph. Set allow_unused=True if this is the desired behavior.")
    if materialize_grads:
        import attn
        result = tuple(attn.zeros_like(i) if g is None else g for g, i in zip(result, ins))
    return result


class RemovableHandle:
    """What register_hook returns: .remove() takes the hook off (also as a context manager)."""

    _ids = _itertools.count()

    def __init__(self, remove):
        self._remove = remove
        self.id = next(RemovableHandle._ids)

    def remove(self):
        if self._remove is not None:
            self._remove()
            self._remove = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _register_hook(self, hook):
    """Tensor.register_hook(hook): hook(grad) -> Tensor or None, called with this tensor's
    gradient as each backward pass computes it; a returned tensor replaces the gradient."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    handle = _C.autograd.register_hook(self, hook)
    return RemovableHandle(lambda: _C.autograd.remove_hook(self, handle))


def _register_post_accumulate_grad_hook(self, hook):
    """Tensor.register_post_accumulate_grad_hook(hook): hook(tensor) after a pass has added this
    leaf's gradient into its .grad."""
    handle = _C.autograd.register_post_accumulate_grad_hook(self, hook)
    return RemovableHandle(
        lambda: _C.autograd.remove_post_accumulate_grad_hook(self, handle))


def _retain_grad(self):
    """Tensor.retain_grad(): a non-leaf keeps its gradient in .grad after backward."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    _C.autograd.retain_grad(self)


Tensor.register_hook = _register_hook
Tensor.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook
Tensor.retain_grad = _retain_grad
Tensor.retains_grad = property(lambda self: _C.autograd.retains_grad(self))


class FunctionCtx:
    """The ctx of a Function: tensors saved for backward and anything else set on it."""

    def __init__(self):
        self._to_save = ()
        self._non_differentiable = ()
        self.materialize_grads = True
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument is of "
                                "type %s" % type(t).__name__)
        self._to_save = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        raise RuntimeError("mark_dirty: in-place custom Functions are not supported by attn")

    @property
    def saved_tensors(self):
        if not hasattr(self, "_saved"):
            raise RuntimeError("saved_tensors can be read in backward only (attn keeps them in "
                               "the graph)")
        return self._saved


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        if "_backward_name" not in attrs:  # a class may name its node as torch names it
            cls._backward_name = name + "Backward"


class Function(metaclass=_FunctionMeta):
    """torch.autograd.Function: subclass it with static forward(ctx, *args) and
    backward(ctx, grad) methods (or forward(*args) and setup_context(ctx, inputs, output), as
    torch 2 allows), then call Cls.apply(*args)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Function is not instantiated: call %s.apply(...)"
                           % type(self).__name__)

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode AD.")

    vjp = backward

    @classmethod
    def apply(cls, *args, **kwargs):
        import attn

        if kwargs:
            raise TypeError("%s.apply takes positional arguments only" % cls.__name__)
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        separate = cls.setup_context is not Function.setup_context
        with attn.no_grad():
            out = cls.forward(*args) if separate else cls.forward(ctx, *args)
        if separate:
            cls.setup_context(ctx, args, out)
        several = isinstance(out, (tuple, list))
        outs = list(out) if several else [out]
        if not any(ctx.needs_input_grad) or not attn.is_grad_enabled():
            return out
        # The outputs the graph records: floating-point tensors not marked non-differentiable.
        # One that is an input (or an earlier output) becomes a new tensor on its elements.
        recorded = []
        for k, o in enumerate(outs):
            if (not isinstance(o, Tensor) or not o.is_floating_point()
                    or any(o is t for t in ctx._non_differentiable)):
                recorded.append(None)
                continue
            if any(o is a for a in args) or any(o is r for r in recorded):
                with attn.no_grad():
                    o = o.view_as(o)
                outs[k] = o
            recorded.append(o)
        if all(r is None for r in recorded):
            return out
        inputs = [a if isinstance(a, Tensor) else None for a in args]
        is_tensor = [a is not None for a in inputs]
        saved, ctx._to_save = list(ctx._to_save), ()

        # Outputs not recorded still get a gradient: zeros of their shape, as torch gives them.
        unrecorded = {k: (o.shape, o.dtype) for k, (o, r) in enumerate(zip(outs, recorded))
                      if r is None and isinstance(o, Tensor)}

        def backward(grads_out, saved_now):
            ctx._saved = saved_now
            if several:
                grads_out = [attn.zeros(unrecorded[k][0], dtype=unrecorded[k][1])
                             if g is None and k in unrecorded else g
                             for k, g in enumerate(grads_out)]
            try:
                grads = (cls.backward(ctx, *grads_out) if several
                         else cls.backward(ctx, grads_out))
            finally:
                del ctx._saved
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            if len(grads) > len(is_tensor) and all(x is None for x in grads[len(is_tensor):]):
                grads = grads[:len(is_tensor)]  # trailing Nones beyond the inputs, as torch allows
            if len(grads) != len(is_tensor):
                raise RuntimeError("function %s returned an incorrect number of gradients "
                                   "(expected %d, got %d)"
                                   % (cls._backward_name, len(is_tensor), len(grads)))
            # gradients for non-tensor arguments must be None
            for i, (t, g) in enumerate(zip(is_tensor, grads)):
                if not t and g is not None:
                    raise RuntimeError("function %s returned a gradient different than None at "
                                       "position %d, but the corresponding forward input was "
                                       "not a Variable" % (cls._backward_name, i + 1))
            return grads

        # The closures hold ctx and flags, no input: the nodes keep the saved tensors.
        if not several:
            return _C.autograd.record_function(outs[0], cls._backward_name, inputs, saved,
                                               backward)
        done = _C.autograd.record_function_multi(recorded, cls._backward_name, inputs, saved,
                                                 backward)
        result = [d if d is not None else o for d, o in zip(done, outs)]
        return type(out)(result) if isinstance(out, tuple) else result


class _FunctionModule:
    """attn.autograd.function: where torch keeps Function and FunctionCtx."""

    Function = Function
    FunctionCtx = FunctionCtx

    @staticmethod
    def once_differentiable(fn):
        return fn  # attn has no double backward: every backward is differentiated once


function = _FunctionModule()
