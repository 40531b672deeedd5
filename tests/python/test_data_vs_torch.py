"""attn.utils.data, attn.randperm and Tensor.random_ against torch 1.13: the same samples in the
same order for the same seed (torch's DataLoader draws a base seed per iterator, its RandomSampler
seeds a private generator with one 64-bit draw and then uses randperm / randint), torch's default
collate, and torch's errors."""
import collections

import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as TD  # noqa: E402

import attn  # noqa: E402
import attn.utils.data as AD  # noqa: E402

LIBS = [(torch, TD), (attn, AD)]


def both(fn):
    """fn(lib, data_module) run on torch and on attn: the two results."""
    return [fn(lib, d) for lib, d in LIBS]


# ---- randperm and random_ ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 1000, 70000])
@pytest.mark.parametrize("seed", [0, 1337])
def test_randperm_matches_torch(n, seed):
    t, a = both(lambda lib, d: (lib.manual_seed(seed), lib.randperm(n).tolist(),
                                lib.randperm(n, generator=lib.Generator().manual_seed(seed + 1))
                                .tolist(), lib.rand(2).tolist())[1:])
    assert a == t


def test_randperm_dtype_and_errors():
    torch.manual_seed(4)
    attn.manual_seed(4)
    t = torch.randperm(9, dtype=torch.float32)
    a = attn.randperm(9, dtype=attn.float32)
    assert a.dtype == attn.float32 and a.tolist() == t.tolist()
    with pytest.raises(ValueError, match=r"^\[randperm\] n must be non-negative, got -1"):
        attn.randperm(-1)
    with pytest.raises(ValueError, match=r"\[randperm\].*float32"):
        attn.randperm(2**24 + 1, dtype=attn.float32)


@pytest.mark.parametrize("dtype", ["int64", "float32", "bool"])
@pytest.mark.parametrize("args", [(), (7,), (-5, 9), (3, 2**40)])
def test_random_matches_torch(dtype, args):
    if dtype == "bool" and args not in [(), (2,)]:
        args = (2,) if args else ()
    if dtype == "float32" and args == (3, 2**40):
        args = (3, 2**24)

    def draw(lib, d):
        lib.manual_seed(11)
        x = lib.empty(40, dtype=getattr(lib, dtype)).random_(*args)
        return x.tolist(), lib.rand(3).tolist()  # and the generator is where torch's is

    t, a = both(draw)
    assert a == t


def test_random_with_generator_and_errors():
    t = torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(5))
    a = attn.empty((), dtype=attn.int64).random_(generator=attn.Generator().manual_seed(5))
    assert a.item() == t.item()
    with pytest.raises(ValueError, match=r"^\[random_\] expects 'from' to be less than 'to'"):
        attn.empty(3, dtype=attn.int64).random_(5, 5)
    with pytest.raises(ValueError, match=r"^\[random_\].*float32"):
        attn.empty(3).random_(0, 2**30)


# ---- samplers and the DataLoader -----------------------------------------------------------------

def tensor_dataset(lib, d, n=10):
    return d.TensorDataset(lib.arange(2 * n).reshape(n, 2), lib.arange(n) * 10)


@pytest.mark.parametrize("kw", [dict(batch_size=3, shuffle=True),
                                dict(batch_size=4, shuffle=True, drop_last=True),
                                dict(batch_size=3), dict(batch_size=1, shuffle=True),
                                dict(batch_size=3, shuffle=True, num_workers=2),
                                dict(batch_size=None, shuffle=True)])
def test_dataloader_batches_match_torch(kw):
    def epochs(lib, d):
        lib.manual_seed(7)
        dl = d.DataLoader(tensor_dataset(lib, d), **kw)
        out = [[[t.tolist() for t in b] for b in dl] for _ in range(3)]
        return out, len(dl), lib.rand(2).tolist()

    t, a = both(epochs)
    assert a == t


def test_dataloader_with_its_own_generator():
    def run(lib, d):
        lib.manual_seed(1)
        g = lib.Generator().manual_seed(3)
        dl = d.DataLoader(tensor_dataset(lib, d, 13), batch_size=5, shuffle=True, generator=g)
        return [[y.tolist() for _, y in dl] for _ in range(2)], lib.rand(2).tolist()

    t, a = both(run)
    assert a == t


@pytest.mark.parametrize("num_samples", [1, 31, 32, 70])
def test_random_sampler_with_replacement_like_mingpt(num_samples):
    """minGPT's Trainer: RandomSampler(replacement=True, num_samples=...) under a DataLoader."""
    def run(lib, d):
        lib.manual_seed(42)
        ds = tensor_dataset(lib, d, 9)
        s = d.RandomSampler(ds, replacement=True, num_samples=num_samples)
        dl = d.DataLoader(ds, sampler=s, shuffle=False, pin_memory=True, batch_size=4,
                          num_workers=2)
        return list(s), [y.tolist() for _, y in dl], len(s)

    t, a = both(run)
    assert a == t


def test_samplers_match_torch():
    def run(lib, d):
        lib.manual_seed(9)
        ds = list(range(11))
        out = [list(d.RandomSampler(ds)), list(d.RandomSampler(ds, num_samples=25)),
               list(d.SequentialSampler(ds)),
               list(d.SubsetRandomSampler([5, 6, 7, 8])),
               list(d.BatchSampler(d.SequentialSampler(ds), 4, False)),
               list(d.BatchSampler(range(10), 3, True)),
               len(d.BatchSampler(range(10), 3, False))]
        return out

    t, a = both(run)
    assert a == t


def test_random_split_matches_torch():
    def run(lib, d):
        lib.manual_seed(0)
        out = [list(s) for s in d.random_split(range(10), [0.3, 0.7])]
        out += [list(s) for s in d.random_split(range(7), [0.5, 0.5])]
        g = lib.Generator().manual_seed(42)
        out += [list(s) for s in d.random_split(range(10), [3, 3, 4], generator=g)]
        sub = d.random_split(tensor_dataset(lib, d), [4, 6])[0]
        out.append((len(sub), sub[0][1].tolist()))
        return out

    t, a = both(run)
    assert a == t
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        AD.random_split(range(10), [3, 3])


def test_default_collate_matches_torch():
    Point = collections.namedtuple("Point", "x y")
    samples = [[{"a": 1, "b": (True, [2, 3]), "s": "x", "p": Point(1, 2)},
                {"a": 2, "b": (False, [4, 5]), "s": "y", "p": Point(3, 4)}]]

    def norm(v):
        if hasattr(v, "tolist"):
            return ("tensor", str(v.dtype), v.tolist())
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return (type(v).__name__,) + tuple(norm(x) for x in v)
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, [norm(x) for x in v])
        return v

    for batch in samples:
        t = norm(TD.default_collate(batch))
        a = norm(AD.default_collate(batch))
        assert a == t
    t = TD.default_collate([torch.ones(2), torch.zeros(2)])
    a = AD.default_collate([attn.ones(2), attn.zeros(2)])
    assert a.tolist() == t.tolist() and tuple(a.shape) == (2, 2)
    # floats: torch makes float64, attn float32 (its only float dtype)
    assert AD.default_collate([1.5, 2.5]).tolist() == [1.5, 2.5]
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal "
                                           "size"):
        AD.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        AD.default_collate([object(), object()])


def test_user_dataset_and_iterable_dataset():
    def run(lib, d):
        class Sq(d.Dataset):
            def __len__(self):
                return 7

            def __getitem__(self, i):
                return lib.tensor([i, i * i]), i

        class Count(d.IterableDataset):
            def __iter__(self):
                return iter(range(7))

        lib.manual_seed(3)
        out = [[(x.tolist(), y.tolist()) for x, y in d.DataLoader(Sq(), batch_size=3,
                                                                   shuffle=True)]]
        out.append([b.tolist() for b in d.DataLoader(Count(), batch_size=3)])
        out.append([b.tolist() for b in d.DataLoader(Count(), batch_size=3, drop_last=True)])
        out.append(len(d.DataLoader(Sq(), batch_size=3, drop_last=True)))
        out.append(len(d.ConcatDataset([Sq(), Sq()])))
        return out

    t, a = both(run)
    assert a == t


def test_dataloader_errors_match_torch():
    ds = list(range(5))
    for kw, exc, msg in [(dict(sampler=[0, 1], shuffle=True), ValueError, "mutually exclusive"),
                         (dict(batch_sampler=[[0]], batch_size=2), ValueError,
                          "batch_sampler option is mutually exclusive"),
                         (dict(batch_size=0), ValueError, "batch_size should be a positive"),
                         (dict(num_workers=-1), ValueError, "num_workers option should be "
                                                            "non-negative"),
                         (dict(batch_size=None, drop_last=True), ValueError, "batch_size=None")]:
        with pytest.raises(exc, match=msg):
            TD.DataLoader(ds, **kw)
        with pytest.raises(exc, match=msg):
            AD.DataLoader(ds, **kw)
    with pytest.raises(ValueError, match="num_samples should be a positive integer"):
        AD.RandomSampler(ds, num_samples=0)


def test_module_paths_used_by_programs():
    from attn.utils.data import dataloader
    from attn.utils.data.dataloader import DataLoader
    assert DataLoader is attn.utils.data.DataLoader is dataloader.DataLoader
    assert attn.utils.data.RandomSampler is AD.RandomSampler
    assert AD.get_worker_info() is None
