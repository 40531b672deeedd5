"""attn.utils: torch.utils' data loading (attn.utils.data)."""
from . import data

__all__ = ["data"]
