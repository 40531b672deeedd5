"""Containers (torch.nn.modules.container): Sequential, ModuleList, ModuleDict, ParameterList and
ParameterDict. Children and parameters are registered under torch's names ("0", "1", ... or the
dict's keys), so state_dict keys match."""
import operator
from collections import OrderedDict, abc

from .modules import Module


def _index(idx, n, what):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError("index {} is out of range".format(idx))
    return idx % n


class Sequential(Module):
    """Calls its children in order, each on the previous one's output. Sequential(m0, m1, ...) or
    Sequential(OrderedDict(name=module, ...))."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self.__class__(OrderedDict(list(self._modules.items())[idx]))
        keys = list(self._modules)
        return self._modules[keys[_index(idx, len(keys), "Sequential")]]

    def __setitem__(self, idx, module):
        keys = list(self._modules)
        setattr(self, keys[_index(idx, len(keys), "Sequential")], module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        if isinstance(idx, slice):
            for key in keys[idx]:
                del self._modules[key]
        else:
            del self._modules[keys[_index(idx, len(keys), "Sequential")]]
        # torch renumbers the remaining children
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, sequential):
        for m in sequential:
            self.append(m)
        return self

    def insert(self, index, module):
        if not isinstance(module, Module):
            raise AssertionError("module should be of type: {}".format(Module))
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError("Index out of range: {}".format(index))
        if index < 0:
            index += n
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m
        return self

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but {} is "
                             "given.".format(str(type(other))))
        out = Sequential()
        for m in list(self) + list(other):
            out.append(m)
        return out


class ModuleList(Module):
    """A list of modules whose parameters the parent sees (torch.nn.ModuleList)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self.__class__(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self), "ModuleList"))]

    def __setitem__(self, idx, module):
        setattr(self, str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx):
        if isinstance(idx, slice):
            for k in range(len(self._modules))[idx]:
                del self._modules[str(k)]
        else:
            del self._modules[str(_index(idx, len(self), "ModuleList"))]
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        out = ModuleList()
        for m in list(self) + list(other):
            out.append(m)
        return out

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        if not isinstance(modules, abc.Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " +
                            type(modules).__name__)
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)


class ModuleDict(Module):
    """A dict of modules, in insertion order, whose parameters the parent sees (state_dict keys
    are "<key>.<param>")."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        if not isinstance(modules, abc.Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value "
                            "pairs, but got " + type(modules).__name__)
        if isinstance(modules, (OrderedDict, ModuleDict, abc.Mapping)):
            for key, module in modules.items():
                self[key] = module
        else:
            for j, m in enumerate(modules):
                if not isinstance(m, abc.Iterable):
                    raise TypeError("ModuleDict update sequence element #" + str(j) +
                                    " should be Iterable; is" + type(m).__name__)
                if not len(m) == 2:
                    raise ValueError("ModuleDict update sequence element #" + str(j) +
                                     " has length " + str(len(m)) + "; 2 is required")
                self[m[0]] = m[1]


def _as_parameter(value):
    from .modules import Parameter
    from .. import Tensor
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


_TYPENAMES = {"float32": "FloatTensor", "bfloat16": "BFloat16Tensor", "float16": "HalfTensor",
              "int64": "LongTensor", "bool": "BoolTensor", "complex64": "ComplexFloatTensor"}


def _param_repr(p, typename=False):
    from .. import Tensor
    if not isinstance(p, Tensor):
        return "Object of type: {}".format(type(p).__name__)
    kind = "Parameter" if p.requires_grad or type(p).__name__ == "Parameter" else "Tensor"
    dtype = str(p.dtype).split(".")[-1]
    name = "torch." + (_TYPENAMES.get(dtype, dtype) if typename else dtype)
    return "{} containing: [{} of size {}]".format(kind, name, "x".join(str(s) for s in p.shape))


class ParameterList(Module):
    """Parameters in a list, registered as "0", "1", ...; tensors appended become Parameters."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_index(idx, len(self), "ParameterList")))

    def __setitem__(self, idx, param):
        setattr(self, str(_index(idx, len(self), "ParameterList")), _as_parameter(param))

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def append(self, value):
        i = self._size
        self._size += 1
        setattr(self, str(i), _as_parameter(value))
        return self

    def extend(self, values):
        if not isinstance(values, abc.Iterable) or isinstance(values, str):
            raise TypeError("ParameterList.extend should be called with an iterable, but got " +
                            type(values).__name__)
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return "\n".join("  ({}): {}".format(i, _param_repr(p)) for i, p in enumerate(self))


class ParameterDict(Module):
    """Parameters by string key, registered under the keys; tensors become Parameters."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = []
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key, value):
        if not isinstance(key, str):
            raise TypeError("ParameterDict keys must be strings, got " + type(key).__name__)
        if key not in self._keys:
            self._keys.append(key)
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key):
        self._keys.remove(key)
        self._parameters.pop(key, None)
        self.__dict__.pop(key, None)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(list(self._keys))

    def __contains__(self, key):
        return key in self._keys

    def keys(self):
        return list(self._keys)

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def values(self):
        return [self[k] for k in self._keys]

    def get(self, key, default=None):
        return self[key] if key in self._keys else default

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def clear(self):
        for k in list(self._keys):
            del self[k]

    def update(self, parameters):
        items = parameters.items() if isinstance(parameters, (abc.Mapping, ParameterDict)) \
            else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self):  # torch names the tensor type here (torch.FloatTensor), not the dtype
        return "\n".join("  ({}): {}".format(k, _param_repr(v, typename=True))
                         for k, v in self.items())
