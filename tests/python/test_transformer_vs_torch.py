"""attn.nn's Transformer modules (python/attn/nn/transformer.py) against torch 1.13's: the same
parameters for the same seed, the same repr and state_dict keys, and with torch's weights loaded
the same outputs and gradients (float32 rounding) for post- and pre-norm layers, batch_first or
not, relu / gelu, causal and padding masks. Also MultiheadAttention's deepcopy."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402


def to_attn(sd):
    return {k: attn.tensor(v.detach().numpy()) for k, v in sd.items()}


def params_equal(tm, am):
    return all(np.array_equal(p.detach().numpy(), q.detach().numpy())
               for p, q in zip(tm.parameters(), am.parameters()))


def test_same_seed_same_parameters_and_repr():
    for ctor in (lambda M: M.nn.TransformerEncoderLayer(16, 4, 32, 0.1),
                 lambda M: M.nn.TransformerDecoderLayer(16, 2, 24, 0.1, norm_first=True),
                 lambda M: M.nn.Transformer(16, 4, 2, 1, 32, batch_first=True)):
        torch.manual_seed(3)
        attn.manual_seed(3)
        tm, am = ctor(torch), ctor(attn)
        assert repr(am) == repr(tm)
        assert list(am.state_dict()) == list(tm.state_dict())
        assert params_equal(tm, am)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_outputs_and_gradients(batch_first, norm_first, activation):
    torch.manual_seed(0)
    kw = dict(d_model=16, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
              dim_feedforward=32, dropout=0.0, batch_first=batch_first, norm_first=norm_first,
              activation=activation)
    tm, am = torch.nn.Transformer(**kw), attn.nn.Transformer(**kw)
    am.load_state_dict(to_attn(tm.state_dict()))
    rs = np.random.RandomState(1)
    src, tgt = rs.randn(5, 3, 16).astype(np.float32), rs.randn(4, 3, 16).astype(np.float32)
    if batch_first:
        src, tgt = src.transpose(1, 0, 2).copy(), tgt.transpose(1, 0, 2).copy()
    pad = np.zeros((3, 5), bool)
    pad[1, 3:] = True
    ts, as_ = torch.tensor(src, requires_grad=True), attn.tensor(src, requires_grad=True)
    # train mode (dropout 0): torch's eval fast path zeroes padded positions, attn does not
    ot = tm(ts, torch.tensor(tgt), tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4),
            src_key_padding_mask=torch.tensor(pad), memory_key_padding_mask=torch.tensor(pad))
    oa = am(as_, attn.tensor(tgt),
            tgt_mask=attn.nn.Transformer.generate_square_subsequent_mask(4),
            src_key_padding_mask=attn.tensor(pad), memory_key_padding_mask=attn.tensor(pad))
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), rtol=1e-5, atol=1e-5)
    r = rs.randn(*ot.shape).astype(np.float32)
    ot.backward(torch.tensor(r))
    oa.backward(attn.tensor(r))
    np.testing.assert_allclose(as_.grad.numpy(), ts.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(tm.named_parameters(), am.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=2e-5,
                                   err_msg=name)


def test_encoder_in_eval_mode_with_a_causal_mask():
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    tm = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(8)).eval()
    am = attn.nn.TransformerEncoder(attn.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                                    3, norm=attn.nn.LayerNorm(8)).eval()
    am.load_state_dict(to_attn(tm.state_dict()))
    x = np.random.RandomState(2).randn(2, 6, 8).astype(np.float32)
    with torch.no_grad():
        ot = tm(torch.tensor(x), mask=torch.nn.Transformer.generate_square_subsequent_mask(6))
    with attn.no_grad():
        oa = am(attn.tensor(x), mask=attn.nn.Transformer.generate_square_subsequent_mask(6))
    np.testing.assert_allclose(oa.numpy(), ot.numpy(), rtol=1e-5, atol=1e-5)


def test_errors_as_torch():
    for M in (torch, attn):
        m = M.nn.Transformer(8, 2, 1, 1, 16)
        with pytest.raises(RuntimeError, match="batch number of src and tgt"):
            m(M.zeros(3, 2, 8), M.zeros(3, 4, 8))
        with pytest.raises(RuntimeError, match="feature number"):
            m(M.zeros(3, 2, 8), M.zeros(3, 2, 6))
        with pytest.raises(RuntimeError, match="relu/gelu"):
            M.nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_multihead_attention_deepcopy_draws_nothing_and_copies_parameters():
    m = attn.nn.MultiheadAttention(8, 2, batch_first=True)
    attn.manual_seed(5)
    want = attn.rand(3).tolist()
    attn.manual_seed(5)
    c = copy.deepcopy(m)
    assert attn.rand(3).tolist() == want
    x = attn.randn(2, 3, 8)
    assert np.array_equal(m(x, x, x)[0].detach().numpy(), c(x, x, x)[0].detach().numpy())
    with attn.no_grad():
        c.in_proj_weight.add_(1.0)
    assert not np.array_equal(m(x, x, x)[0].detach().numpy(), c(x, x, x)[0].detach().numpy())
    assert c.in_proj_weight is not m.in_proj_weight
