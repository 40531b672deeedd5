"""attn's tensor repr against PyTorch 1.13's, character for character.

The cases come from print_parity.cases(): hand-picked edge cases (scalars, NaN / inf, -0.0,
subnormals, integer-valued floats, scientific notation, empty tensors, summarisation, line
wrapping, every print option and profile, requires_grad suffixes) followed by 300 random tensors
with random print options. Each torch tensor is copied into attn through NumPy, the same
torch.set_printoptions keywords are applied to attn.set_printoptions, and the reprs must be equal.
Where torch itself raises (edgeitems=0 on a summarised 2-D tensor), attn must raise ValueError.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import print_parity  # noqa: E402

CASES = print_parity.cases()


def to_attn(t):
    a = attn.from_numpy(np.array(t.detach().numpy(), copy=True))
    if t.requires_grad:
        a.requires_grad_()
    return a


@pytest.fixture(autouse=True)
def default_options():
    """Both libraries print with the default options outside a case (the conftest fixture resets
    them too; this keeps the file self-contained)."""
    attn.set_printoptions(profile="default")
    yield
    attn.set_printoptions(profile="default")
    torch.set_printoptions(profile="default")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_repr_matches_torch(case):
    try:
        expected = print_parity.torch_repr(case)  # resets torch's options afterwards
    except RuntimeError:
        expected = None
    a = to_attn(case.tensor)
    attn.set_printoptions(profile="default")
    if case.options:
        attn.set_printoptions(**case.options)
    if expected is None:
        with pytest.raises(ValueError, match=r"^\["):
            repr(a)
        return
    assert repr(a) == expected, "options {}:\nattn:\n{}\ntorch:\n{}".format(
        case.options, repr(a), expected)
    assert str(a) == expected  # print() shows the same text


def test_options_persist_until_reset():
    torch.set_printoptions(precision=2)
    attn.set_printoptions(precision=2)
    x = np.array([1.23456, 2.5], np.float32)
    assert repr(attn.tensor(x.copy())) == repr(torch.tensor(x)) == "tensor([1.23, 2.50])"
    # sci_mode is reset to automatic whenever set_printoptions is called without it, as in torch
    torch.set_printoptions(sci_mode=True)
    attn.set_printoptions(sci_mode=True)
    torch.set_printoptions(linewidth=100)
    attn.set_printoptions(linewidth=100)
    y = np.array([1e-5, 1.0], np.float32)
    assert repr(attn.tensor(y.copy())) == repr(torch.tensor(y))
    attn.set_printoptions(profile="default")
    torch.set_printoptions(profile="default")
    assert repr(attn.tensor(x.copy())) == repr(torch.tensor(x))


def test_views_print_like_their_values():
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 7
    a = attn.arange(24).reshape(2, 3, 4) / 7
    for f in [lambda x: x.transpose(0, 2), lambda x: x[:, 1:, ::2], lambda x: x[1, None],
              lambda x: x.permute(1, 2, 0)[0], lambda x: x[..., 1:2].expand(2, 3, 5)]:
        assert repr(f(a)) == repr(f(t))


def test_bad_options():
    with pytest.raises(ValueError, match=r"^\[set_printoptions\]"):
        attn.set_printoptions(precision=-1)
    with pytest.raises(ValueError, match=r"^\[set_printoptions\]"):
        attn.set_printoptions(edgeitems=-2)
    assert repr(attn.tensor([0.5])) == "tensor([0.5000])"
