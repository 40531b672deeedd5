"""torch.return_types: the (values, indices) pairs that max(dim), min(dim), topk and sort return,
tuples with torch's attribute names and repr."""


class _ValuesIndices(tuple):
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


class max(_ValuesIndices):  # noqa: A001  (torch.return_types.max)
    _name = "max"


class min(_ValuesIndices):  # noqa: A001
    _name = "min"


class topk(_ValuesIndices):
    _name = "topk"


class sort(_ValuesIndices):
    _name = "sort"


class median(_ValuesIndices):
    _name = "median"


class kthvalue(_ValuesIndices):
    _name = "kthvalue"


class aminmax(tuple):  # noqa: N801 (torch.return_types.aminmax: min, max)
    def __new__(cls, min, max):  # noqa: A002
        return tuple.__new__(cls, (min, max))

    @property
    def min(self):  # noqa: A003
        return self[0]

    @property
    def max(self):  # noqa: A003
        return self[1]

    def __repr__(self):
        return "torch.return_types.aminmax(\nmin=%r,\nmax=%r)" % (self[0], self[1])
