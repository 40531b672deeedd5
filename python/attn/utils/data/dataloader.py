"""torch.utils.data.DataLoader over attn tensors, with torch's default collate.

The loader draws from the generators exactly as torch 1.13's single-process loader does: each
new iterator first draws a 64-bit base seed (torch's worker seed) from `generator` (the default
generator when None), then the sampler draws its own. num_workers > 0 is accepted and runs in
this process: the batches and their order are what torch's workers would give; worker_init_fn is
called once with worker id 0."""
import collections.abc
import numbers

from ... import _C
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


def _is_numpy(obj):
    return type(obj).__module__ == "numpy"


def default_convert(data):
    """What a DataLoader with batch_size=None yields: NumPy arrays and scalars become tensors,
    containers are converted element by element, anything else is passed through."""
    if isinstance(data, _C.Tensor):
        return data
    if _is_numpy(data) and type(data).__name__ not in ("str_", "string_", "bytes_"):
        if type(data).__name__ == "ndarray" and data.dtype.kind in "SaUO":
            return data
        return _C.tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            return type(data)({k: default_convert(data[k]) for k in data})
        except TypeError:
            return {k: default_convert(data[k]) for k in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


_COLLATE_ERR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                "lists; found {}")


def default_collate(batch):
    """torch's default_collate: tensors are stacked along a new first dim, NumPy arrays likewise,
    Python ints become an int64 tensor, floats a float32 one (torch: float64, which attn lacks),
    bools a bool one, strings stay a list; dicts, namedtuples, tuples and lists are collated
    field by field (tuples come back as lists, as in torch)."""
    elem = batch[0]
    elem_type = type(elem)
    if isinstance(elem, _C.Tensor):
        return _C.stack(list(batch), 0)
    if _is_numpy(elem) and elem_type.__name__ not in ("str_", "string_", "bytes_"):
        if elem_type.__name__ == "ndarray":
            if elem.dtype.kind in "SaUO":
                raise TypeError(_COLLATE_ERR.format(elem.dtype))
            return default_collate([_C.tensor(b) for b in batch])
        return _C.tensor([b.item() for b in batch])
    if isinstance(elem, bool):
        return _C.tensor(list(batch))
    if isinstance(elem, float):
        return _C.tensor(list(batch), dtype=_C.dtype.float32)
    if isinstance(elem, int):
        return _C.tensor(list(batch))
    if isinstance(elem, numbers.Number):
        return _C.tensor([float(b) for b in batch])
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            return elem_type({k: default_collate([d[k] for d in batch]) for k in elem})
        except TypeError:
            return {k: default_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return elem_type(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if not all(len(e) == size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = [list(s) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return [default_collate(s) for s in transposed]
        try:
            return elem_type([default_collate(s) for s in transposed])
        except TypeError:
            return [default_collate(s) for s in transposed]
    raise TypeError(_COLLATE_ERR.format(elem_type))


def get_worker_info():
    """None: attn's loader always runs in the calling process."""
    return None


class _InfiniteConstantSampler(Sampler):
    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """torch.utils.data.DataLoader: batches of a dataset, in the order of a sampler."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=2, persistent_workers=False, pin_memory_device=""):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                                 "option, but got shuffle={}".format(shuffle))
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                                 "option, but got sampler={}".format(sampler))
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "batch_sampler option, but got batch_sampler={}".format(
                                     batch_sampler))
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self):
        # torch creates the sampler's iterator (lazily: it draws nothing yet), then draws the base
        # seed of its workers from the loader's generator.
        indices = iter(self._index_sampler)
        _C.empty((), dtype=_C.dtype.int64).random_(generator=self.generator)
        if self.num_workers > 0 and self.worker_init_fn is not None:
            self.worker_init_fn(0)
        if self._iterable:
            return self._iter_iterable()
        return self._iter_map(indices)

    def _iter_map(self, indices):
        for idx in indices:
            if self._auto_collation:
                yield self.collate_fn([self.dataset[i] for i in idx])
            else:
                yield self.collate_fn(self.dataset[idx])

    def _iter_iterable(self):
        it = iter(self.dataset)
        if not self._auto_collation:
            for sample in it:
                yield self.collate_fn(sample)
            return
        while True:
            batch = []
            for sample in it:
                batch.append(sample)
                if len(batch) == self.batch_size:
                    break
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield self.collate_fn(batch)
            if len(batch) < self.batch_size:
                return

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)
