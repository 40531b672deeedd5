"""attn.nn.utils: torch.nn.utils.clip_grad_norm_."""
from .. import _C


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales the gradients so that their total 2-norm is at most max_norm; returns the norm
    before clipping (a 0-d tensor, as torch)."""
    if float(norm_type) != 2.0:
        raise ValueError("[clip_grad_norm_] only norm_type=2 is supported, got {}".format(
            norm_type))
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    norm = _C.optim.clip_grad_norm_(list(parameters), float(max_norm), bool(error_if_nonfinite))
    return _C.tensor(norm)
