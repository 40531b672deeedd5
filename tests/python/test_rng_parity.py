"""Bitwise parity of attn's random numbers with PyTorch 1.13's CPU generator.

For the same seed and the same sequence of calls, attn and torch must produce identical float32
bits (compared as uint32), identical int64 values and identical generator states (get_rng_state
bytes), including the cached second Box-Muller sample that torch keeps between calls.

Shapes cover the paths torch takes: fewer than 16 elements (serial double Box-Muller), exactly 16,
multiples and non-multiples of 16 (vectorised Box-Muller with the tail redrawn), multi-dim, and
non-contiguous views (serial path, in memory order).
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn.functional as AF  # noqa: E402
from conftest import assert_same_bits, to_attn  # noqa: E402

SEEDS = list(range(31)) + [123, 42, 2**32 + 7]
SHAPES = [(), (1,), (5,), (15,), (16,), (17,), (31,), (32,), (33,), (100,), (3, 2), (4, 4),
          (5, 7), (2, 8), (3, 3, 3), (2, 3, 5), (2, 8, 3), (1, 16, 1)]


def seed_both(s):
    torch.manual_seed(s)
    attn.manual_seed(s)


def assert_same_state(what=""):
    """The default generators of attn and torch are in the same state (byte for byte)."""
    ours = attn.get_rng_state()
    theirs = torch.get_rng_state().numpy()
    assert ours.dtype == np.uint8 and ours.shape == theirs.shape == (5056,)
    assert np.array_equal(ours, theirs), "{}: generator states differ".format(what)


# ---- factory functions --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fn", ["rand", "randn"])
def test_rand_randn(fn, seed):
    for shape in SHAPES:
        seed_both(seed)
        assert_same_bits(getattr(attn, fn)(shape), getattr(torch, fn)(shape),
                         "{}{} seed {}".format(fn, shape, seed))
        assert_same_state("after {}{}".format(fn, shape))


@pytest.mark.parametrize("seed", SEEDS)
def test_randint(seed):
    ranges = [(10,), (0, 10), (-5, 7), (3, 4), (0, 2**31), (0, 2**33), (-2**40, 2**40)]
    for shape in SHAPES:
        for r in ranges:
            seed_both(seed)
            assert_same_bits(attn.randint(*r, shape), torch.randint(*r, shape),
                             "randint{}{} seed {}".format(r, shape, seed))
    seed_both(seed)
    assert_same_bits(attn.randint(low=2, high=9, size=(4, 5)),
                     torch.randint(low=2, high=9, size=(4, 5)), "randint(low=, high=, size=)")
    assert_same_bits(attn.randint(9, size=(17,)), torch.randint(9, size=(17,)), "randint(size=)")
    assert_same_state("after randint")


def test_size_spellings():
    """rand(2, 3), rand((2, 3)), rand([2, 3]) and rand(size=(2, 3)) draw the same numbers."""
    for spelling in [lambda m: m.randn(2, 3), lambda m: m.randn((2, 3)),
                     lambda m: m.randn([2, 3]), lambda m: m.randn(size=(2, 3))]:
        seed_both(7)
        assert_same_bits(spelling(attn), spelling(torch))


def test_initial_seed():
    for s in [0, 123, 2**32 + 7, 2**63 + 5, -1]:
        assert attn.manual_seed(s) is attn.default_generator
        torch.manual_seed(s)
        assert attn.initial_seed() == torch.initial_seed()
        assert attn.default_generator.initial_seed() == torch.default_generator.initial_seed()
        assert_same_bits(attn.rand(5), torch.rand(5), "seed {}".format(s))


# ---- in-place fills ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_uniform_normal_contiguous(seed):
    for shape in SHAPES:
        for args in [(), (-2.0, 3.0), (0.5, 0.5), (-1e-3, 1e3)]:
            seed_both(seed)
            assert_same_bits(attn.empty(shape).uniform_(*args),
                             torch.empty(shape).uniform_(*args),
                             "uniform_{}{} seed {}".format(args, shape, seed))
        for args in [(), (1.0, 2.0), (-3.0, 0.0), (0.0, 1e-3)]:
            seed_both(seed)
            assert_same_bits(attn.empty(shape).normal_(*args), torch.empty(shape).normal_(*args),
                             "normal_{}{} seed {}".format(args, shape, seed))
        assert_same_state("after fills of {}".format(shape))


@pytest.mark.parametrize("seed", [0, 1, 42, 123])
@pytest.mark.parametrize("method", ["uniform_", "normal_"])
def test_fill_strided_views(method, seed):
    """Non-contiguous views whose memory order is their logical order (sliced rows, stepped
    columns, a column block): torch's serial kernel, written through the view into the base."""
    views = [lambda m: m.zeros(5, 14)[:, ::2],
             lambda m: m.zeros(6, 40)[1:5, 3:37],
             lambda m: m.zeros(4, 3, 10)[:, 1],
             lambda m: m.zeros(40)[::3],
             lambda m: m.zeros(2, 17, 3)[..., :2]]
    for i, view in enumerate(views):
        seed_both(seed)
        ours_base, theirs_base = view(attn), view(torch)
        getattr(ours_base, method)()
        getattr(theirs_base, method)()
        assert_same_bits(ours_base, theirs_base, "{} on view {}".format(method, i))
        assert_same_state("after {} on view {}".format(method, i))


def test_fill_writes_through_views():
    seed_both(3)
    base_a, base_t = attn.zeros(4, 6), torch.zeros(4, 6)
    base_a[:, 1:4].normal_()
    base_t[:, 1:4].normal_()
    assert_same_bits(base_a, base_t)
    assert (base_a[:, 0] == 0).all().item() and (base_a[:, 4:] == 0).all().item()


# torch's TensorIterator visits a non-contiguous tensor in memory order (dims sorted by stride),
# so filling a transposed tensor draws along its storage. attn's fill_float
# (src/tensor/random_tensors.cpp) fills a logical-order temporary and copies it in, so the numbers
# land transposed.


@pytest.mark.parametrize("method", ["uniform_", "normal_", "bernoulli_"])
def test_fill_transposed(method):
    failures = []
    for seed in [0, 1, 42]:
        for shape, make in [((7, 5), lambda m, s: m.zeros(*s).t()),
                            ((20, 3), lambda m, s: m.zeros(*s).t()),
                            ((2, 3, 4), lambda m, s: m.zeros(*s).permute(2, 0, 1))]:
            seed_both(seed)
            ours, theirs = make(attn, shape), make(torch, shape)
            args = (0.3,) if method == "bernoulli_" else ()
            getattr(ours, method)(*args)
            getattr(theirs, method)(*args)
            if not np.array_equal(np.asarray(ours.numpy()).view(np.uint32),
                                  theirs.numpy().view(np.uint32)):
                failures.append((seed, shape))
    assert not failures, "{} differs from torch for (seed, base shape) {}".format(method, failures)


def test_fill_errors():
    with pytest.raises(ValueError, match=r"^\[uniform_\]"):
        attn.empty(3).uniform_(2.0, 1.0)
    with pytest.raises(ValueError, match=r"^\[normal_\]"):
        attn.empty(3).normal_(0.0, -1.0)
    with pytest.raises(ValueError, match=r"^\[uniform_\]"):
        attn.zeros(3, dtype=attn.int64).uniform_()


# ---- nn.init and the default initialisation of modules ------------------------------------------

INIT_SHAPES = [(1, 1), (2, 3), (5, 7), (16, 16), (3, 65), (65, 3), (4, 3, 5)]


@pytest.mark.parametrize("seed", [0, 1, 2, 42, 123, 2**32 + 7])
def test_init_functions(seed):
    calls = [("kaiming_uniform_", {}), ("kaiming_uniform_", {"a": math.sqrt(5)}),
             ("xavier_uniform_", {}), ("xavier_uniform_", {"gain": 2.0}),
             ("normal_", {}), ("normal_", {"mean": 1.0, "std": 0.02}),
             ("uniform_", {}), ("uniform_", {"a": -0.1, "b": 0.3})]
    for shape in INIT_SHAPES:
        for name, kw in calls:
            seed_both(seed)
            ours = getattr(attn.nn.init, name)(attn.empty(*shape), **kw)
            theirs = getattr(torch.nn.init, name)(torch.empty(*shape), **kw)
            assert_same_bits(ours, theirs, "init.{}({}) on {}".format(name, kw, shape))
        assert_same_state("after init of {}".format(shape))


def test_init_returns_its_argument_and_rejects_1d():
    t = attn.empty(3, 4)
    assert attn.nn.init.xavier_uniform_(t) is t
    assert attn.nn.init.zeros_(t) is t and (t == 0).all().item()
    assert attn.nn.init.ones_(t) is t and (t == 1).all().item()
    for name in ["kaiming_uniform_", "xavier_uniform_"]:
        with pytest.raises(ValueError):
            getattr(attn.nn.init, name)(attn.empty(5))


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 123])
def test_linear_default_init(seed):
    for i, o in [(1, 1), (3, 2), (16, 16), (7, 65), (65, 7)]:
        for bias in [True, False]:
            seed_both(seed)
            ours = attn.nn.Linear(i, o, bias=bias)
            theirs = torch.nn.Linear(i, o, bias=bias)
            assert_same_bits(ours.weight, theirs.weight, "Linear({}, {}) weight".format(i, o))
            if bias:
                assert_same_bits(ours.bias, theirs.bias, "Linear({}, {}) bias".format(i, o))
            else:
                assert ours.bias is None
            assert_same_state("after Linear({}, {}, bias={})".format(i, o, bias))


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 123])
def test_embedding_default_init(seed):
    for n, d in [(1, 1), (10, 3), (50, 16), (7, 17), (6, 2)]:
        seed_both(seed)
        assert_same_bits(attn.nn.Embedding(n, d).weight, torch.nn.Embedding(n, d).weight,
                         "Embedding({}, {})".format(n, d))
        assert_same_state("after Embedding({}, {})".format(n, d))


@pytest.mark.parametrize("seed", [0, 1, 42, 123])
@pytest.mark.parametrize("embed_dim,num_heads,kw", [
    (8, 2, {}), (16, 4, {"bias": False}), (8, 2, {"kdim": 5, "vdim": 7}),
    (12, 3, {"batch_first": True, "dropout": 0.1}), (6, 1, {"kdim": 6, "vdim": 3, "bias": False})])
def test_multihead_attention_default_init(embed_dim, num_heads, kw, seed):
    """torch 1.13 builds out_proj (a Linear: kaiming weight, uniform bias) before
    _reset_parameters (xavier on the input projections, zeros on both biases)."""
    seed_both(seed)
    ours = attn.nn.MultiheadAttention(embed_dim, num_heads, **kw)
    theirs = torch.nn.MultiheadAttention(embed_dim, num_heads, **kw)
    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    assert list(sd_ours) == list(sd_theirs)
    for k in sd_theirs:
        assert_same_bits(sd_ours[k], sd_theirs[k], k)
    assert_same_state("after MultiheadAttention")


# ---- sequences of calls sharing the generator ---------------------------------------------------

def _sequence(m):
    """A call sequence mixing every consumer; the normal cache matters for the small randn
    calls (torch's serial path keeps the second Box-Muller sample between calls)."""
    out = [m.randn(3, 2), m.randn(3, 2), m.randn(3, 2), m.rand(5), m.randn(1), m.randn(20),
           m.randint(0, 7, (4,)), m.randn(7), m.empty(2, 3).normal_(0.5, 2.0),
           m.empty(33).normal_(), m.randn(15), m.empty(4).uniform_(-1, 1), m.randn(16),
           m.nn.functional.dropout(m.ones(3, 5), 0.4), m.randn(2, 2), m.rand(17)]
    lin = m.nn.Linear(3, 4)
    out += [lin.weight, lin.bias, m.randn(1), m.nn.Embedding(4, 3).weight, m.randn(5)]
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_interleaved_sequence(seed):
    seed_both(seed)
    for i, (ours, theirs) in enumerate(zip(_sequence(attn), _sequence(torch))):
        assert_same_bits(ours, theirs, "call {} of the sequence, seed {}".format(i, seed))
    assert_same_state("after the sequence")


def test_cached_normal_sample():
    """randn(3, 2) three times: 18 serial samples, the cache filled and emptied alternately."""
    seed_both(123)
    for k in range(3):
        assert_same_bits(attn.randn(3, 2), torch.randn(3, 2), "randn(3, 2) #{}".format(k))
        assert_same_state("after randn(3, 2) #{}".format(k))
    # an odd count leaves a cached sample, which the next small randn uses first
    seed_both(5)
    assert_same_bits(attn.randn(3), torch.randn(3))
    assert_same_state("with a cached sample")
    assert_same_bits(attn.randn(1), torch.randn(1))
    # manual_seed clears the cache
    attn.randn(1)
    torch.randn(1)
    seed_both(5)
    assert_same_bits(attn.randn(3), torch.randn(3))


# ---- Generator objects ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 42, 123, 2**32 + 7])
def test_generator_objects(seed):
    seed_both(99)
    g_ours = attn.Generator().manual_seed(seed)
    g_theirs = torch.Generator().manual_seed(seed)
    assert isinstance(g_ours, attn.Generator)
    assert g_ours.initial_seed() == g_theirs.initial_seed()
    calls = [lambda m, g: m.rand(17, generator=g), lambda m, g: m.randn(3, 2, generator=g),
             lambda m, g: m.randn(3, 2, generator=g), lambda m, g: m.randn(40, generator=g),
             lambda m, g: m.randint(0, 100, (9,), generator=g),
             lambda m, g: m.empty(5, 3).uniform_(-2, 2, generator=g),
             lambda m, g: m.empty(21).normal_(1, 3, generator=g),
             lambda m, g: m.empty(3).normal_(generator=g)]
    for i, call in enumerate(calls):
        assert_same_bits(call(attn, g_ours), call(torch, g_theirs), "generator call {}".format(i))
    assert np.array_equal(g_ours.get_state(), g_theirs.get_state().numpy())
    # the default generators were not touched
    assert_same_state("default generator after private draws")
    assert_same_bits(attn.rand(3), torch.rand(3))


def test_generator_is_independent_and_rejects_foreign_objects():
    g1 = attn.Generator().manual_seed(1)
    g2 = attn.Generator().manual_seed(1)
    a = attn.randn(5, generator=g1)
    attn.randn(100)  # the default generator
    b = attn.randn(5, generator=g2)
    assert_same_bits(a, b)
    with pytest.raises(ValueError, match=r"^\[generator\]"):
        attn.rand(3, generator=torch.Generator())
    assert attn.Generator().initial_seed() == torch.Generator().initial_seed()


# ---- state save / restore and exchange with torch -----------------------------------------------

def test_state_round_trip():
    attn.manual_seed(11)
    attn.randn(3)  # leaves a cached normal sample in the state
    state = attn.get_rng_state()
    first = [attn.randn(3), attn.rand(20), attn.randn(40)]
    attn.set_rng_state(state)
    second = [attn.randn(3), attn.rand(20), attn.randn(40)]
    for a, b in zip(first, second):
        assert_same_bits(a, b)
    # a Generator's state, through bytes as well
    g = attn.Generator().manual_seed(4)
    attn.randn(5, generator=g)
    st = g.get_state()
    x = attn.randn(7, generator=g)
    g.set_state(st.tobytes())
    assert_same_bits(attn.randn(7, generator=g), x)


@pytest.mark.parametrize("seed", [0, 3, 42, 123])
def test_state_bytes_equal_torch(seed):
    seed_both(seed)
    assert_same_state("after manual_seed")
    for call in [lambda m: m.randn(3), lambda m: m.rand(100), lambda m: m.randn(1),
                 lambda m: m.randint(0, 2**40, (3,)), lambda m: m.randn(5, 5)]:
        call(attn)
        call(torch)
        assert_same_state("after a call")


@pytest.mark.parametrize("seed", [0, 3, 42])
def test_state_exchange_with_torch(seed):
    # torch -> attn: attn continues exactly where torch stands (cached normal included)
    torch.manual_seed(seed)
    torch.randn(5)
    torch.rand(7)
    attn.manual_seed(seed + 1000)
    attn.set_rng_state(torch.get_rng_state())
    assert_same_state("after set_rng_state(torch.get_rng_state())")
    for call in [lambda m: m.randn(3), lambda m: m.randn(20), lambda m: m.rand(3, 3)]:
        assert_same_bits(call(attn), call(torch))
    # attn -> torch
    attn.manual_seed(seed)
    attn.randn(1)
    attn.randint(0, 5, (3,))
    torch.manual_seed(seed + 1000)
    torch.set_rng_state(torch.from_numpy(attn.get_rng_state()))
    for call in [lambda m: m.randn(1), lambda m: m.randn(33), lambda m: m.randint(0, 9, (5,))]:
        assert_same_bits(call(attn), call(torch))
    # Generator objects, both ways
    gt = torch.Generator().manual_seed(seed)
    torch.randn(3, generator=gt)
    ga = attn.Generator().set_state(gt.get_state())
    assert_same_bits(attn.randn(9, generator=ga), torch.randn(9, generator=gt))
    gt.set_state(torch.tensor(ga.get_state()))
    assert_same_bits(attn.rand(4, generator=ga), torch.rand(4, generator=gt))


def test_bad_states_raise():
    before = attn.get_rng_state()
    for bad in [b"\x00" * 10, np.zeros(5056, dtype=np.float32), np.zeros((2, 2528), np.uint8),
                attn.zeros(5056), np.full(5056, 300)]:
        with pytest.raises(ValueError, match=r"^\["):
            attn.set_rng_state(bad)
    assert np.array_equal(attn.get_rng_state(), before)


# ---- dropout masks -------------------------------------------------------------------------------

DROPOUT_SHAPES = [(1,), (5,), (16,), (17,), (3, 5), (4, 16), (2, 3, 7), (2, 4, 8, 9)]


def _input(shape, seed=0):
    return np.random.RandomState(seed).uniform(0.5, 2.0, size=shape).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2, 42, 123])
@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_dropout_train(p, seed):
    for shape in DROPOUT_SHAPES:
        x = _input(shape)
        seed_both(seed)
        assert_same_bits(AF.dropout(attn.tensor(x.copy()), p),
                         torch.nn.functional.dropout(torch.from_numpy(x), p),
                         "F.dropout(p={}) on {}".format(p, shape))
        ours, theirs = attn.nn.Dropout(p), torch.nn.Dropout(p)
        assert ours.training
        assert_same_bits(ours(attn.tensor(x.copy())), theirs(torch.from_numpy(x)),
                         "nn.Dropout({}) on {}".format(p, shape))
        assert_same_state("after dropout on {}".format(shape))


def test_dropout_non_contiguous_inputs():
    x = _input((6, 20))
    for view in [lambda t: t.t(), lambda t: t[:, ::3], lambda t: t[None].expand(2, 6, 20)]:
        seed_both(8)
        assert_same_bits(AF.dropout(view(attn.tensor(x.copy())), 0.3),
                         torch.nn.functional.dropout(view(torch.from_numpy(x)), 0.3))
        assert_same_state("after dropout on a view")


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_eval_is_identity(p):
    x = _input((3, 17))
    seed_both(4)
    ours = attn.nn.Dropout(p).eval()
    assert not ours.training
    assert_same_bits(ours(attn.tensor(x.copy())), torch.from_numpy(x))
    assert_same_bits(AF.dropout(attn.tensor(x.copy()), p, training=False), torch.from_numpy(x))
    assert_same_state("eval dropout draws nothing")
    # and back to training
    ours.train()
    theirs = torch.nn.Dropout(p)
    assert_same_bits(ours(attn.tensor(x.copy())), theirs(torch.from_numpy(x)))


def test_dropout_p0_and_p1_draw_nothing():
    x = _input((4, 9))
    seed_both(6)
    assert_same_bits(AF.dropout(attn.tensor(x.copy()), 0.0),
                     torch.nn.functional.dropout(torch.from_numpy(x), 0.0))
    assert_same_state("after p=0")
    one_a = AF.dropout(attn.tensor(x.copy()), 1.0)
    assert_same_bits(one_a, torch.nn.functional.dropout(torch.from_numpy(x), 1.0))
    assert (one_a == 0).all().item()
    assert_same_state("after p=1")
    assert_same_bits(attn.rand(3), torch.rand(3))


def test_dropout_inplace():
    x = _input((3, 18))
    seed_both(2)
    a = attn.tensor(x.copy())
    out = AF.dropout(a, 0.5, inplace=True)
    t = torch.from_numpy(x.copy())
    torch.nn.functional.dropout(t, 0.5, inplace=True)
    assert out is a
    assert_same_bits(a, t)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_bad_p(p):
    with pytest.raises(ValueError, match=r"^\[dropout\]"):
        AF.dropout(attn.ones(3), p)
    with pytest.raises(ValueError, match=r"^\[(Dropout|dropout)\]"):
        attn.nn.Dropout(p)


def test_dropout_on_converted_torch_values():
    """to_attn copies values; the mask depends only on the generator, not on the storage."""
    t = torch.rand(5, 16)
    seed_both(1)
    assert_same_bits(AF.dropout(to_attn(t), 0.25), torch.nn.functional.dropout(t, 0.25))
