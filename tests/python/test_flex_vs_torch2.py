"""attn's flex_attention against PyTorch 2.x's own torch.nn.attention.flex_attention (forward:
PyTorch 2.x has no CPU backward for it), on attention-gym's modifiers and the learnable biases of
test_flex_attention_vs_torch.py, the same Python source on both sides.

Skipped where torch has no flex_attention (the suite's oracle, python3-torch 1.13). Run it with a
torch 2.x environment, e.g. the benchmarks' one:

    PYTHONPATH=build-nocuda/python .venv-bench/bin/python -m pytest -q \
        tests/python/test_flex_vs_torch2.py
"""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tfa = pytest.importorskip("torch.nn.attention.flex_attention")

import attn  # noqa: E402
from attn.nn.attention import flex_attention as afa  # noqa: E402

from test_flex_attention_vs_torch import (B, D, H, L, attn_side, captured_values,  # noqa: E402
                                          gym_mods)

NAMES = ["causal", "sliding_window", "prefix_lm", "document_causal", "alibi_causal",
         "tanh_softcap", "relative_positional", "full_bias", "rel_table_window", "where"]


def torch_mods(values):
    cap = {k: torch.tensor(v) if v.dtype == np.int64 else torch.tensor(v, dtype=torch.float32)
           for k, v in values.items()}
    return gym_mods(torch, cap)


def both_libraries(name, seed, torch_kwargs, attn_kwargs):
    """attention-gym's modifier `name` on random inputs (seed) through torch 2.x's flex_attention
    and attn's, each with its own extra keyword arguments: (torch's result, attn's)."""
    rng = np.random.default_rng(seed)
    qn, kn, vn = (rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3))
    values = captured_values(seed + 6)
    tsm, tmm = torch_mods(values)[name]
    asm, amm = gym_mods(attn, attn_side(values))[name]
    tbm = tfa.create_block_mask(tmm, B, None, L, L, device="cpu") if tmm else None
    abm = afa.create_block_mask(amm, B, None, L, L, device="cpu") if amm else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "called without torch.compile()"
        want = tfa.flex_attention(*(torch.from_numpy(x) for x in (qn, kn, vn)), score_mod=tsm,
                                  block_mask=tbm, **torch_kwargs)
    got = afa.flex_attention(*(attn.from_numpy(x) for x in (qn, kn, vn)), score_mod=asm,
                             block_mask=abm, **attn_kwargs)
    return want, got


def assert_lse_close(want, got, name):
    """Equal infinities (fully masked rows) and finite values within 2e-5."""
    w, g = want.numpy(), got.numpy()
    finite = np.isfinite(w)
    assert (np.isfinite(g) == finite).all(), name
    assert (g[~finite] == w[~finite]).all(), name
    assert np.abs(np.where(finite, g - w, 0.0)).max() < 2e-5, name


@pytest.mark.parametrize("name", NAMES)
def test_forward_equals_torch2_flex_attention(name):
    (want, want_lse), (got, got_lse) = both_libraries(name, 5, dict(return_lse=True),
                                                      dict(return_lse=True))
    assert np.abs(got.numpy() - want.numpy()).max() < 2e-5, name
    assert_lse_close(want_lse, got_lse, name)


@pytest.mark.parametrize("name", NAMES)
def test_return_aux_equals_torch2(name):
    """return_aux=AuxRequest(lse=True): torch 2.x's AuxOutput. torch refuses max_scores on the
    CPU ("Returning max scores is not supported on CPU"), so attn's is checked against the dense
    scores in test_flex_attention_vs_torch.py; here it only must not change the rest."""
    (want_out, want), (got_out, got) = both_libraries(
        name, 6, dict(return_aux=tfa.AuxRequest(lse=True)),
        dict(return_aux=afa.AuxRequest(lse=True, max_scores=True)))
    assert np.abs(got_out.numpy() - want_out.numpy()).max() < 2e-5, name
    assert want.max_scores is None and got.max_scores is not None
    assert_lse_close(want.lse, got.lse, name)
