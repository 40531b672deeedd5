"""torch's names for the sampling, sorting, scan, clamp, gather/scatter and split ops of
attn/ops.h (the numbers are computed in attn._C); topk and sort return torch.return_types."""
from . import _C
from ._C import (argmin, argsort, bmm, chunk, clamp, clip, cumprod, cumsum, gather,  # noqa: F401
                 index_select, multinomial, neg, negative, relu, rsqrt, scatter, scatter_add,
                 sigmoid, split, square, unbind)

from .return_types import sort as sort_result, topk as topk_result

Tensor = _C.Tensor


def _topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 (torch's argument name)
    return topk_result(*self._topk(k, dim, largest, sorted))


def _sort(self, dim=-1, descending=False, stable=False):
    return sort_result(*self._sort(dim, descending, stable))


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    return _topk(input, k, dim, largest, sorted)


def sort(input, dim=-1, descending=False, stable=False):
    return _sort(input, dim, descending, stable)


Tensor.topk = _topk
Tensor.sort = _sort
