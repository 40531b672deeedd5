"""attn.optim: torch.optim's Adam, AdamW, SGD, RMSprop and Adagrad with parameter groups,
torch's lr schedulers (attn.optim.lr_scheduler) and nanoGPT's cosine schedule, over attn's C++
optimizers."""
from .. import _C
from . import lr_scheduler
from .adaptive import Adagrad, RMSprop
from .optimizer import SGD, Adam, AdamW, Optimizer

__all__ = ["Optimizer", "Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "lr_scheduler",
           "cosine_lr"]

# torch.optim names attn does not implement: NotImplementedError naming them, not AttributeError.
_MISSING = {"Adadelta", "Adamax", "ASGD", "LBFGS", "NAdam", "RAdam", "Rprop", "SparseAdam",
            "swa_utils"}


def __getattr__(name):
    if name in _MISSING:
        from .optimizer import _unsupported
        raise _unsupported(name, "this optimizer")
    raise AttributeError("module 'attn.optim' has no attribute '{}'".format(name))


def cosine_lr(it, lr, min_lr, warmup_iters, lr_decay_iters):
    """nanoGPT's get_lr: linear warm-up, cosine decay to min_lr at lr_decay_iters."""
    return _C.optim.cosine_lr(int(it), float(lr), float(min_lr), int(warmup_iters),
                              int(lr_decay_iters))
