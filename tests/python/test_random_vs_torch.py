"""torch.normal (four forms), torch.bernoulli / Tensor.bernoulli / bernoulli_ with a tensor of
probabilities, and randint_like (python/attn/_random.py) against torch 1.13: the same program with
the same seeds draws the same numbers, compared exactly; bad input raises torch's errors and
leaves the generator as it was."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402


def program(M):
    out = []
    rs = np.random.RandomState(0)
    mean = M.tensor(rs.standard_normal((3, 7)).astype(np.float32))
    std = M.tensor(rs.uniform(0.1, 2.0, (3, 7)).astype(np.float32))
    probs = M.tensor(rs.uniform(0, 1, (5, 9)).astype(np.float32))
    M.manual_seed(11)
    out += [M.normal(mean, std).tolist(),                      # both tensors (21: vectorised)
            M.normal(mean[:1, :3], std[:2, :1]).tolist(),      # broadcast, 6 elements
            M.normal(mean, 0.5).tolist(), M.normal(mean).tolist(),
            M.normal(2.0, std).tolist(),
            M.normal(-1.0, 3.0, size=(4, 5)).tolist(), M.normal(0.0, 1.0, (3,)).tolist()]
    g = M.Generator().manual_seed(5)
    out += [M.normal(mean, std, generator=g).tolist(), M.normal(1.0, 2.0, (20,), generator=g)
            .tolist()]
    out += [M.bernoulli(probs).tolist(), probs.bernoulli().tolist(),
            M.bernoulli(M.tensor([0.0, 1.0, 1.0, 0.0, 0.5])).tolist(),
            M.bernoulli(probs, generator=g).tolist()]
    t = M.zeros(5, 9)
    t.bernoulli_(probs[0])  # one row of probabilities broadcast over the rows
    u = M.zeros(4, 3)
    u.bernoulli_(0.25)
    out += [t.tolist(), u.tolist(), M.zeros(6).bernoulli_(M.full((6,), 0.7)).tolist()]
    x = M.zeros(2, 8, dtype=M.int64)
    out += [M.randint_like(x, 10).tolist(), M.randint_like(x, -3, 3).tolist(),
            str(M.randint_like(mean, 4).dtype).split(".")[-1], M.randint_like(mean, 4).tolist()]
    out.append(M.rand(3).tolist())  # the generator's state after all of it
    return out


def test_the_same_draws_as_torch():
    a, t = program(attn), program(torch)
    assert len(a) == len(t)
    for i, (x, y) in enumerate(zip(a, t)):
        assert x == y, i


def test_results_are_fresh_and_not_in_the_graph():
    m = attn.zeros(3).requires_grad_()
    r = attn.normal(m, 1.0)
    assert not r.requires_grad and r.dtype == attn.float32
    p = attn.full((4,), 0.5).requires_grad_()
    b = attn.bernoulli(p)
    assert not b.requires_grad and set(b.tolist()) <= {0.0, 1.0}
    assert attn.normal(0.0, 1.0, (2,), requires_grad=True).requires_grad


@pytest.mark.parametrize("bad", [
    lambda M: M.bernoulli(M.tensor([0.5, 1.5])),
    lambda M: M.bernoulli(M.tensor([0.5, float("nan")])),
    lambda M: M.bernoulli(M.tensor([-0.1])),
    lambda M: M.zeros(3).bernoulli_(M.tensor([0.2, 2.0, 0.1])),
    lambda M: M.normal(M.zeros(2), M.tensor([1.0, -1.0])),
    lambda M: M.normal(0.0, M.tensor([-1.0])),
    lambda M: M.normal(M.zeros(2), -1.0),
    lambda M: M.normal(0.0, -1.0, size=(2,)),
    lambda M: M.normal(M.zeros(2), M.ones(3)),
    lambda M: M.normal(0.0, 1.0),
])
def test_errors_as_torch_and_the_generator_untouched(bad):
    with pytest.raises(Exception) as te:
        bad(torch)
    attn.manual_seed(3)
    with pytest.raises(type(te.value)):
        bad(attn)
    after = attn.rand(4).tolist()
    attn.manual_seed(3)
    assert attn.rand(4).tolist() == after  # nothing was drawn before the error
