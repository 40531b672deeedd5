"""attn.nn: modules with torch.nn's names (Module, Parameter, Linear, Embedding, Dropout,
MultiheadAttention, ...). Numeric work and initialisation happen in C++."""
from . import functional, init, parallel, utils
from .modules import (GELU, GPT, Dropout, Embedding, Identity, LayerNorm, Linear, Module,
                      ModuleList, MultiheadAttention, NonDynamicallyQuantizableLinear, Parameter,
                      Sequential)

__all__ = ["GELU", "GPT", "LayerNorm", "Dropout", "Embedding", "Identity", "Linear", "Module",
           "ModuleList", "MultiheadAttention", "NonDynamicallyQuantizableLinear", "Parameter", "Sequential",
           "functional", "init", "parallel", "utils"]
