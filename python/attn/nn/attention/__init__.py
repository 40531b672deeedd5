"""torch.nn.attention: the programmable attention of flex_attention (the submodule
attn.nn.attention.flex_attention, as torch.nn.attention.flex_attention)."""
from . import flex_attention  # noqa: F401
