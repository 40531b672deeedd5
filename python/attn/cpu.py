"""attn.cpu: torch.cpu's queries, and attn's cache of freed host memory.

Freed tensors of 128 KiB and more leave their memory in attn's cache, where the next tensors of
about the same size take it again: a training step or a prompt allocates the same large results
over and over, and fresh memory costs a page fault (and the kernel's zeroing) for every 4 KiB
touched. The cache holds at most ATTN_CPU_CACHE_BYTES (default 1G; 0 turns it off), as
torch.cuda's caching allocator holds GPU memory.
"""
from . import _C


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return "cpu"


def synchronize(device=None):
    """Nothing to wait for: attn's CPU ops return when done."""


def empty_cache():
    """Gives the freed host memory in attn's cache back to the C library (as
    torch.cuda.empty_cache() does for GPU memory)."""
    _C._cpu_empty_cache()


def memory_cached():
    """Bytes of freed host memory that attn's cache holds now."""
    return _C._cpu_cached_bytes()
