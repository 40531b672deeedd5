"""attn.cuda: torch.cuda's queries over attn's CUDA backend.

attn built without CUDA (no nvcc at build time) answers as torch built without CUDA does: nothing
is available, the seeding calls are no-ops, and anything that needs a GPU raises AssertionError
("... Torch not compiled with CUDA enabled ..."). Built with CUDA but run where there is no GPU or
no driver, is_available() is False and using a GPU raises RuntimeError, as torch does.

attn's random numbers come from one generator: tensors made with device="cuda" are drawn on the cpu
and copied, so manual_seed (attn.manual_seed) seeds them too, and the fused attention kernel's
counter-based dropout gives the same mask on the cpu and the GPU for the same seed.
"""
from . import amp
from .. import _C


def _built():
    return _C._cuda_is_built()


def is_available():
    return _C._cuda_is_available()


def device_count():
    return _C._cuda_device_count()


def is_bf16_supported():
    return is_available()


def is_initialized():
    return is_available()


def manual_seed(seed):
    """attn.manual_seed seeds the one generator the cpu and the GPU draw from."""


def manual_seed_all(seed):
    """attn.manual_seed seeds the one generator the cpu and the GPU draw from."""


def seed():
    pass


def seed_all():
    pass


def _index(device, fn):
    if device is None:
        return -1
    if isinstance(device, int):
        return device
    from .. import device as _device
    d = device if isinstance(device, _device) else _device(device)
    if d.type != "cuda":
        raise ValueError("[%s] expected a cuda device, got %s" % (fn, d))
    return -1 if d.index is None else d.index


def synchronize(device=None):
    """Waits for the GPU's queued kernels; a no-op without CUDA (the cpu computes synchronously)."""
    if _built() and is_available():
        _C._cuda_synchronize(_index(device, "cuda.synchronize"))


def empty_cache():
    """Gives the GPU memory that freed tensors left in attn's cache back to CUDA (a no-op without
    CUDA)."""
    _C._cuda_empty_cache()


def _no_cuda(fn):
    from .._unsupported import NoCudaError, version
    return NoCudaError("[{}] attn {} was built without CUDA (Torch not compiled with CUDA "
                       "enabled): only the cpu device is supported".format(fn, version()))


def current_device():
    if not _built():
        raise _no_cuda("cuda.current_device")
    return _C._cuda_current_device()


def set_device(device):
    if not _built():
        raise _no_cuda("cuda.set_device")
    _C._cuda_set_device(_index(device, "cuda.set_device"))


def get_device_name(device=None):
    if not _built():
        raise _no_cuda("cuda.get_device_name")
    return _C._cuda_get_device_name(_index(device, "cuda.get_device_name"))


def get_device_properties(device):
    raise _no_cuda("cuda.get_device_properties") if not _built() else NotImplementedError(
        "[cuda.get_device_properties] not provided by attn; use get_device_name")


def memory_allocated(device=None):
    raise _no_cuda("cuda.memory_allocated") if not _built() else NotImplementedError(
        "[cuda.memory_allocated] attn does not track GPU memory yet")


def max_memory_allocated(device=None):
    raise _no_cuda("cuda.max_memory_allocated") if not _built() else NotImplementedError(
        "[cuda.max_memory_allocated] attn does not track GPU memory yet")
