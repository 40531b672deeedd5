"""attn.nn: modules with torch.nn's names (Module, Parameter, Linear, Embedding, Dropout,
MultiheadAttention, Conv1d / Conv2d, activations, containers, ...). Numeric work and initialisation happen in
C++."""
from .. import _unsupported
from . import functional, init, parallel, utils
from .activation import (CELU, ELU, GELU, GLU, SELU, CosineSimilarity, Flatten, Hardsigmoid,
                         Hardswish, Hardtanh, Identity, LeakyReLU, LogSigmoid, LogSoftmax, Mish,
                         PairwiseDistance, ReLU, ReLU6, SiLU, Sigmoid, Softmax, Softmin, Softplus,
                         Softsign, Tanh, Threshold, Unflatten)
from .loss import (BCELoss, BCEWithLogitsLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss,
                   SmoothL1Loss)
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from . import conv, pooling, upsample
from .conv import Conv1d, Conv2d
from . import batchnorm
from .batchnorm import BatchNorm1d, BatchNorm2d
from . import groupnorm
from .groupnorm import GroupNorm
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, MaxPool1d,
                      MaxPool2d)
from .upsample import Upsample
from .decoder import Decoder
from .multihead import MultiheadAttention
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)
from .modules import (GPT, CrossEntropyLoss, Dropout, Embedding, LayerNorm, Linear, Module,
                      NonDynamicallyQuantizableLinear, Parameter, RMSNorm)

functional.conv1d, functional.conv2d = conv.conv1d, conv.conv2d  # conv.py uses F.pad
functional.batch_norm = batchnorm.batch_norm
functional.group_norm = groupnorm.group_norm
for _name in ("max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
              "adaptive_avg_pool2d"):
    setattr(functional, _name, getattr(pooling, _name))
functional.interpolate = upsample.interpolate

__all__ = sorted(n for n, v in list(globals().items()) if not n.startswith("_") and (
    not isinstance(v, type(_unsupported)) or n in ("functional", "init", "parallel", "utils")))

__getattr__ = _unsupported.module_getattr("attn.nn")
