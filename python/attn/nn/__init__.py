"""attn.nn: modules with torch.nn's names (Module, Parameter, Linear, Embedding, Dropout,
MultiheadAttention, activations, containers, ...). Numeric work and initialisation happen in
C++."""
from .. import _unsupported
from . import functional, init, parallel, utils
from .activation import GELU, Identity, ReLU, SiLU, Sigmoid, Tanh
from .container import ModuleDict, ModuleList, Sequential
from .decoder import Decoder
from .multihead import MultiheadAttention
from .modules import (GPT, CrossEntropyLoss, Dropout, Embedding, LayerNorm, Linear, Module,
                      NonDynamicallyQuantizableLinear, Parameter, RMSNorm)

__all__ = ["CrossEntropyLoss", "Decoder", "GELU", "GPT", "LayerNorm", "Dropout", "Embedding", "Identity", "Linear", "Module",
           "ModuleDict", "ModuleList", "MultiheadAttention", "NonDynamicallyQuantizableLinear",
           "Parameter", "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Tanh", "functional", "init",
           "parallel", "utils"]

__getattr__ = _unsupported.module_getattr("attn.nn")
