"""attn.nn: modules with torch.nn's names (Module, Parameter, Linear, Embedding, Dropout,
MultiheadAttention, ...). Numeric work and initialisation happen in C++."""
from . import functional, init
from .modules import (Dropout, Embedding, Identity, Linear, Module, ModuleList,
                      MultiheadAttention, NonDynamicallyQuantizableLinear, Parameter, Sequential)

__all__ = ["Dropout", "Embedding", "Identity", "Linear", "Module", "ModuleList",
           "MultiheadAttention", "NonDynamicallyQuantizableLinear", "Parameter", "Sequential",
           "functional", "init"]
