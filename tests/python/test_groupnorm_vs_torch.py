"""nn.GroupNorm and F.group_norm (python/attn/nn/groupnorm.py) against torch 1.13: outputs and
the gradients of input, weight and bias to float32 rounding over group counts, input ranks and
affine; repr, parameters and state_dict; bad input raises torch's exception types."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402

CASES = [((2, 6), (4, 6, 5, 3), {}), ((3, 6), (2, 6, 7), dict(eps=1e-3)), ((1, 4), (3, 4), {}),
         ((4, 4), (2, 4, 3, 3), dict(affine=False)), ((2, 8), (1, 8, 2, 2, 3), {})]


def run(M, args, shape, kw):
    rs = np.random.RandomState(6)
    m = M.nn.GroupNorm(*args, **kw)
    if m.weight is not None:  # non-trivial affine parameters, the same on both sides
        with M.no_grad():
            m.weight.copy_(M.tensor(rs.standard_normal(args[1]).astype(np.float32)))
            m.bias.copy_(M.tensor(rs.standard_normal(args[1]).astype(np.float32)))
    x = M.tensor((rs.standard_normal(shape) * 3 + 1).astype(np.float32)).requires_grad_()
    y = m(x)
    (y * M.tensor(rs.standard_normal(shape).astype(np.float32))).sum().backward()
    grads = [p.grad.numpy() for p in m.parameters()]
    return repr(m), list(m.state_dict()), y.detach().numpy(), x.grad.numpy(), grads


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}{}{}".format(*c))
def test_group_norm_as_torch(case):
    ra, ka, ya, gxa, gpa = run(attn, *case)
    rt, kt, yt, gxt, gpt = run(torch, *case)
    assert ra == rt and ka == kt and len(gpa) == len(gpt)
    np.testing.assert_allclose(ya, yt, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gxa, gxt, rtol=1e-4, atol=1e-5)
    for a, t in zip(gpa, gpt):
        np.testing.assert_allclose(a, t, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad", [
    lambda M: M.nn.GroupNorm(4, 6),
    lambda M: M.nn.functional.group_norm(M.zeros(2, 6, 3), 4),
    lambda M: M.nn.functional.group_norm(M.zeros(2, 6, 3), 2, weight=M.ones(4)),
    lambda M: M.nn.functional.group_norm(M.zeros(6), 2),
])
def test_errors_as_torch(bad):
    with pytest.raises(Exception) as te:
        bad(torch)
    with pytest.raises(type(te.value)):
        bad(attn)
