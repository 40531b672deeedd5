"""attn.utils.checkpoint against torch.utils.checkpoint (1.13) and against the same model run
without checkpointing: outputs and gradients (of inputs and parameters) equal, dropout's masks
drawn again the same in the recomputation, several outputs, non-tensor arguments and
checkpoint_sequential."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.utils.checkpoint  # noqa: E402,F401
import torch.utils.checkpoint  # noqa: E402,F401


def model(M, p):
    M.manual_seed(0)
    return M.nn.Sequential(M.nn.Linear(8, 16), M.nn.GELU(), M.nn.Dropout(p), M.nn.Linear(16, 8),
                           M.nn.Tanh(), M.nn.Linear(8, 8))


def run(M, p, how):
    m = model(M, p)
    x = M.tensor(np.random.RandomState(1).standard_normal((4, 8)).astype(np.float32),
                 requires_grad=True)
    M.manual_seed(7)
    if how == "plain":
        y = m(x)
    elif how == "checkpoint":
        y = M.utils.checkpoint.checkpoint(m, x, use_reentrant=True)
    else:
        y = M.utils.checkpoint.checkpoint_sequential(m, 3, x)  # 1.13: no use_reentrant here
    (y * y).sum().backward()
    return [y.detach().numpy(), x.grad.numpy()] + [q.grad.numpy() for q in m.parameters()]


@pytest.mark.parametrize("how", ["checkpoint", "sequential"])
def test_same_as_without_checkpointing_with_dropout(how):
    for a, b in zip(run(attn, 0.3, how), run(attn, 0.3, "plain")):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("how", ["checkpoint", "sequential"])
def test_same_as_torch(how):
    for a, b in zip(run(attn, 0.0, how), run(torch, 0.0, how)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def two_outputs(M):
    w = M.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    x = M.tensor(np.arange(6, dtype=np.float32).reshape(3, 2) / 5, requires_grad=True)

    def f(a, scale, b):
        h = (a @ b).tanh()
        return h * scale, h.sum(0)

    y, s = M.utils.checkpoint.checkpoint(f, w, 2.5, x, use_reentrant=True)
    (y.sum() + (s * s).sum()).backward()
    return [y.tolist(), s.tolist(), w.grad.tolist(), x.grad.tolist(),
            type(y.grad_fn).__name__ if M is torch else y.grad_fn.name()]


def test_several_outputs_and_non_tensor_arguments():
    a, t = two_outputs(attn), two_outputs(torch)
    assert a[-1] == t[-1]
    for x, y in zip(a[:-1], t[:-1]):
        np.testing.assert_allclose(np.array(x), np.array(y), rtol=1e-6, atol=1e-7)
