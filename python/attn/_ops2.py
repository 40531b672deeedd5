"""torch's names for the ops of attn/ops2.h: the (values, indices) pairs of topk and sort as
torch.return_types, and the module-level functions. The numbers are computed in attn._C."""
from . import _C
from ._C import (argmin, argsort, bmm, chunk, clamp, clip, cumprod, cumsum, gather,  # noqa: F401
                 index_select, multinomial, neg, negative, relu, rsqrt, scatter, scatter_add,
                 sigmoid, split, square, unbind)

Tensor = _C.Tensor


class _ValuesIndices(tuple):
    """A (values, indices) pair with torch.return_types' attribute names and repr."""

    _name = ""

    def __new__(cls, values, indices):
        return tuple.__new__(cls, (values, indices))

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]

    def __repr__(self):
        return "torch.return_types.%s(\nvalues=%r,\nindices=%r)" % (self._name, self[0], self[1])


class topk_result(_ValuesIndices):
    _name = "topk"


class sort_result(_ValuesIndices):
    _name = "sort"


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
