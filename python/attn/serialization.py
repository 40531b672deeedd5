"""attn.save / attn.load: PyTorch's own file format (torch.save since 1.6), without PyTorch.

A file written by attn.save loads in torch.load (weights_only=True included, for state dicts) and
a file written by torch.save loads here, as long as it holds what checkpoints hold: None, bool,
int, float, str, list, tuple, dict, OrderedDict, tensors and Parameters of dtype float32, int64,
bool, bfloat16 or float16. Tensors that share storage (tied weights, views) come back sharing it.

attn.load never runs pickled code, whatever weights_only says: it allows only the classes a state
dict needs, as torch.load(weights_only=True) does. Anything else raises pickle.UnpicklingError
naming it; a tensor of another dtype (float64, int32, ...) raises NotImplementedError naming the
entry; a corrupt archive raises RuntimeError. The C++ side is attn::io::save_torch / load_torch
(include/attn/torch_format.h).
"""
import os

from . import _C

__all__ = ["save", "load"]


def _version():
    import attn
    return attn.__version__


def _unsupported(msg):
    """NotImplementedError for a torch feature attn lacks, naming attn's version."""
    return NotImplementedError("{} [attn {}]".format(msg, _version()))


def _load_bytes(data, what):
    try:
        return _C.io.from_torch_bytes(data, what)
    except NotImplementedError as e:  # a dtype, legacy file, ... attn cannot hold
        raise _unsupported(str(e)) from None


def _load_path(path):
    # Read in C++ into one block that the tensors view: no second copy of the file in memory.
    try:
        return _C.io.load_torch(path)
    except NotImplementedError as e:
        raise _unsupported(str(e)) from None


def _is_path(f):
    return isinstance(f, (str, os.PathLike))


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """torch.save(obj, f): f is a path (str or os.PathLike; written atomically) or a binary file
    object with write() (io.BytesIO, open(..., 'wb'))."""
    if pickle_module is not None:
        raise _unsupported("attn.save: pickle_module is not supported (attn writes the pickle "
                           "itself, protocol 2 as torch.save)")
    if not isinstance(pickle_protocol, int) or not 2 <= pickle_protocol <= 5:
        raise ValueError("attn.save: pickle_protocol must be 2 to 5, got {!r}".format(
            pickle_protocol))
    if not _use_new_zipfile_serialization:
        raise _unsupported("attn.save: the legacy (pre-1.6) torch.save format "
                           "(_use_new_zipfile_serialization=False) is not supported")
    try:
        if _is_path(f):
            path = os.fspath(f)
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):  # torch.save's words and exception type
                raise RuntimeError("Parent directory {} does not exist.".format(parent))
            _C.io.save_torch(obj, path)
            return
        if hasattr(f, "write"):
            f.write(_C.io.to_torch_bytes(obj))
            return
    except NotImplementedError as e:  # an object attn cannot write
        raise _unsupported(str(e)) from None
    raise TypeError("attn.save: f must be a path or a binary file object with write(), got "
                    "{}".format(type(f).__name__))


def _check_map_location(map_location):
    if map_location is None:
        return
    if isinstance(map_location, (dict,)) or callable(map_location) and \
            not isinstance(map_location, str) and type(map_location).__name__ != "device":
        raise _unsupported("attn.load: map_location as a {} is not supported; attn loads to the "
                           "cpu (map_location=None or 'cpu')".format(type(map_location).__name__))
    where = str(map_location)
    if where not in ("cpu", "cpu:0"):
        raise RuntimeError("attn.load: map_location={!r}: attn computes on the cpu only, so "
                           "tensors load there (use map_location='cpu' or None)".format(where))


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """torch.load(f): f is a path (str or os.PathLike) or a binary file object with read().
    Tensors load to the cpu whatever device they were saved from. weights_only is accepted and
    changes nothing: attn always loads as torch's weights_only=True does. mmap is accepted and
    ignored: the file is read into memory once, and the tensors loaded from a path view that
    block (a tensor kept alive keeps the whole file's block alive, as with torch's mmap=True)."""
    if pickle_module is not None:
        raise _unsupported("attn.load: pickle_module is not supported (attn reads the pickle "
                           "itself and never runs pickled code)")
    unknown = set(pickle_load_args) - {"encoding"}
    if unknown:
        raise TypeError("attn.load: unexpected keyword argument(s) {}".format(
            ", ".join(sorted(unknown))))
    _check_map_location(map_location)
    if _is_path(f):
        # Opened here so that a missing file is FileNotFoundError, a directory IsADirectoryError,
        # as torch.load raises.
        with open(os.fspath(f), "rb"):
            pass
        return _load_path(os.fspath(f))
    if hasattr(f, "read"):
        data = f.read()
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise TypeError("attn.load: f.read() returned {}, not bytes (open the file in binary "
                            "mode)".format(type(data).__name__))
        return _load_bytes(data, str(getattr(f, "name", "<file object>")))
    raise TypeError("attn.load: f must be a path or a binary file object with read(), got "
                    "{}".format(type(f).__name__))
