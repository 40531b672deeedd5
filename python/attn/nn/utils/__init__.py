"""attn.nn.utils: torch.nn.utils.clip_grad_norm_ and clip_grad_value_ over the C++ ones,
skip_init, parameters_to_vector / vector_to_parameters and rnn.pad_sequence / unpad_sequence."""
from ... import _C


def _params(parameters):
    if isinstance(parameters, _C.Tensor):
        return [parameters]
    return list(parameters)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scales the gradients so that their total norm_type-norm (inf: the largest |g|) is at most
    max_norm; returns the norm before clipping (a 0-d tensor, as torch: of the gradients' dtype,
    float32 where they mix dtypes)."""
    params = _params(parameters)
    try:
        norm = _C.optim.clip_grad_norm_(params, float(max_norm), float(norm_type),
                                        bool(error_if_nonfinite))
    except ValueError as e:
        if "is non-finite, so it cannot be clipped" in str(e):
            raise RuntimeError(str(e)) from None  # torch raises RuntimeError here
        raise
    dtypes = {p.grad.dtype for p in params if p.grad is not None}
    return _C.tensor(norm).to(dtypes.pop() if len(dtypes) == 1 else _C.dtype.float32)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient to [-clip_value, clip_value] in place."""
    _C.optim.clip_grad_value_(_params(parameters), float(clip_value))


def skip_init(module_cls, *args, **kwargs):
    """torch.nn.utils.skip_init: module_cls(*args, **kwargs) with its parameters left
    uninitialised, for a model whose weights are loaded next. Every initialiser (attn.nn.init and
    the modules' own) checks its arguments and draws nothing, so the generator is not advanced.
    Where torch leaves the memory uninitialised, attn's parameters keep what they are allocated
    with (zeros; LayerNorm's weight ones). torch requires module_cls to take a `device` argument
    (it builds on the meta device); attn does not."""
    from ..modules import Module
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError("Expected a Module; got {}".format(module_cls))
    with _C.init.SkipInit():
        return module_cls(*args, **kwargs)


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one vector (in the graph)."""
    return _C.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of vec into the parameters' data (no graph)."""
    if not isinstance(vec, _C.Tensor):
        raise TypeError("expected torch.Tensor, but got: {}".format(type(vec).__name__))
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.dim() != 1 or vec.numel() != total:
        raise RuntimeError("vector_to_parameters: vec has shape {} but the parameters have {} "
                           "elements".format(tuple(vec.shape), total))
    i = 0
    for p in params:
        n = p.numel()
        p.data = vec[i:i + n].reshape(tuple(p.shape)).detach()
        i += n


from . import rnn  # noqa: E402,F401 (torch.nn.utils.rnn)
