"""attn.nn.parallel: DistributedDataParallel over attn::distributed::GradReducer."""
import contextlib as _contextlib

from .. import _C
from .. import distributed as _dist
from .modules import Module

__all__ = ["DistributedDataParallel"]


def _tensors_in(obj):
    """The tensors in a forward's result (a tensor, or tuples/lists/dicts of them)."""
    if isinstance(obj, _C.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors_in(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors_in(o)]
    return []


class DistributedDataParallel(Module):
    """torch.nn.parallel.DistributedDataParallel for CPU modules.

    At construction, rank 0's parameters and buffers are broadcast to every rank and the ranks
    check that their parameter shapes agree. During backward, gradients are averaged over the
    ranks in buckets of ``bucket_cap_mb`` (default 25) that start while backward goes on; when
    backward returns, every parameter's .grad holds the average. ``no_sync()`` (or
    ``require_backward_grad_sync = False``) accumulates local gradients instead.
    ``find_unused_parameters=True`` walks the graph after each forward and counts the parameters
    it does not reach as zero gradients. ``state_dict()`` keys carry the ``module.`` prefix, as in
    torch."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False, static_graph=False,
                 **kwargs):
        super().__init__()
        if not _dist.is_initialized():
            raise RuntimeError("Default process group has not been initialized, please make sure "
                               "to call init_process_group.")
        if device_ids not in (None, [], ["cpu"]) or output_device not in (None, "cpu"):
            raise ValueError("DistributedDataParallel: device_ids and output_device must be None "
                             f"for CPU modules (got {device_ids!r}, {output_device!r})")
        if process_group is not None and process_group is not _dist.group.WORLD:
            raise NotImplementedError("DistributedDataParallel: only the default process group "
                                      "is supported in attn")
        if dim != 0:
            raise NotImplementedError("DistributedDataParallel: dim != 0 is not supported")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self._names = [n for n, p in module.named_parameters() if p.requires_grad]
        params = [p for _, p in module.named_parameters() if p.requires_grad]
        cap = 25.0 if bucket_cap_mb is None else float(bucket_cap_mb)
        if cap <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
        object.__setattr__(self, "_reducer",
                           _C.distributed.GradReducer(params, int(cap * 2**20), True))
        if broadcast_buffers:
            for b in module.buffers():
                _dist.broadcast(b, 0)

    def forward(self, *inputs, **kwargs):
        r = self._reducer
        if r.pending:
            missing = [self._names[i] for i in r.unready()]
            raise RuntimeError(
                "Expected to have finished reduction in the prior iteration before starting a new "
                "one. This error indicates that your module has parameters that were not used in "
                "producing loss. You can enable unused parameter detection by passing the keyword "
                "argument `find_unused_parameters=True` to DistributedDataParallel. Parameters "
                "that did not receive a gradient on this rank: " + ", ".join(missing))
        r.enabled = bool(self.require_backward_grad_sync) and _C.is_grad_enabled()
        out = self.module(*inputs, **kwargs)
        if self.find_unused_parameters and r.enabled:
            r.prepare_for_backward(_tensors_in(out))
        return out

    @_contextlib.contextmanager
    def no_sync(self):
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old
