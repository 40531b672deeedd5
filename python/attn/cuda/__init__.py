"""attn.cuda: attn computes on the cpu, so CUDA is never available. The queries answer as torch
built without CUDA does; the seeding calls are no-ops; anything that would need a GPU raises
AssertionError("... Torch not compiled with CUDA enabled ..."), as torch does."""
from . import amp


def is_available():
    return False


def device_count():
    return 0


def is_bf16_supported():
    return False


def is_initialized():
    return False


def manual_seed(seed):
    """No-op: there is no CUDA generator (attn.manual_seed seeds the cpu one)."""


def manual_seed_all(seed):
    """No-op: there is no CUDA generator."""


def seed():
    pass


def seed_all():
    pass


def synchronize(device=None):
    """No-op: the cpu computes synchronously."""


def empty_cache():
    """No-op: there is no CUDA cache."""


def _no_cuda(fn):
    from .._unsupported import NoCudaError, version
    return NoCudaError("[{}] attn {} was built without CUDA (Torch not compiled with CUDA "
                          "enabled): only the cpu device is supported".format(fn, version()))


def current_device():
    raise _no_cuda("cuda.current_device")


def set_device(device):
    raise _no_cuda("cuda.set_device")


def get_device_name(device=None):
    raise _no_cuda("cuda.get_device_name")


def get_device_properties(device):
    raise _no_cuda("cuda.get_device_properties")


def memory_allocated(device=None):
    raise _no_cuda("cuda.memory_allocated")


def max_memory_allocated(device=None):
    raise _no_cuda("cuda.max_memory_allocated")
