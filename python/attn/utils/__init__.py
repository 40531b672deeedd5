"""attn.utils: torch.utils' data loading (attn.utils.data) and activation checkpointing
(attn.utils.checkpoint)."""
from . import checkpoint, data

__all__ = ["checkpoint", "data"]
