"""The training pieces (LayerNorm, GELU, cross-entropy, linear, AdamW, clipping, the GPT model and
its cached generation) against PyTorch 1.13: values and gradients."""
import math

import numpy as np
import pytest
import torch

import attn


def A(t):  # torch -> attn (a copy)
    return attn.tensor(t.detach().numpy().copy())


def N(t):  # attn -> numpy
    return np.array(t.detach().tolist() if hasattr(t, "detach") else t.tolist(), dtype=np.float64)


def close(a, t, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(N(a), t.detach().double().numpy(), rtol=rtol, atol=atol)


def pair(shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(*shape, generator=g) * scale).requires_grad_(True)
    a = A(t).requires_grad_(True)
    return a, t


# ---- layer_norm ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(7, 3), (2, 5, 16), (3, 4, 128), (1, 1, 2)])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_forward_backward(shape, affine):
    C = shape[-1]
    a, t = pair(shape, 1, 3.0)
    wa = wt = ba = bt = None
    if affine in ("weight", "both"):
        wa, wt = pair((C,), 2)
    if affine == "both":
        ba, bt = pair((C,), 3)
    ya = attn.nn.functional.layer_norm(a, (C,), wa, ba, 1e-5)
    yt = torch.nn.functional.layer_norm(t, (C,), wt, bt, 1e-5)
    close(ya, yt, 1e-5, 1e-5)
    assert ya.grad_fn.name() == "NativeLayerNormBackward0"
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(4))
    ya.backward(A(g))
    yt.backward(g)
    close(a.grad, t.grad, 1e-4, 1e-5)
    if wa is not None:
        close(wa.grad, wt.grad, 1e-4, 1e-5)
    if ba is not None:
        close(ba.grad, bt.grad, 1e-4, 1e-5)


def test_layer_norm_module_matches_torch_and_bias_optional():
    torch.manual_seed(0)
    x = torch.randn(4, 8, 32)
    m = attn.nn.LayerNorm(32)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    close(m(A(x)), torch.nn.LayerNorm(32)(x), 1e-5, 1e-5)
    nb = attn.nn.LayerNorm(32, bias=False)
    assert [n for n, _ in nb.named_parameters()] == ["weight"]
    close(nb(A(x)), torch.nn.functional.layer_norm(x, (32,)), 1e-5, 1e-5)


def test_layer_norm_errors():
    x = attn.randn(2, 8)
    with pytest.raises(ValueError, match=r"\[layer_norm\].*does not end in normalized_shape"):
        attn.nn.functional.layer_norm(x, (4,))
    with pytest.raises(ValueError, match=r"\[layer_norm\] weight \(3,\) must have shape \(8\)"):
        attn.nn.functional.layer_norm(x, (8,), attn.ones(3))
    with pytest.raises(ValueError, match=r"LayerNorm.*positive"):
        attn.nn.LayerNorm(0)


def test_layer_norm_constant_rows_are_finite():
    x = attn.ones(3, 16) * 5.0
    y = attn.nn.functional.layer_norm(x, (16,))
    assert float(y.abs().max()) == 0.0


# ---- gelu ------------------------------------------------------------------------------------------

def gelu_exact(x, approximate):
    """GELU and its derivative in float64 without cancellation (erfc for the left tail)."""
    x = x.astype(np.float64)
    if approximate == "none":
        cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x])
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return x * cdf, cdf + x * pdf
    t = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.gelu(t, approximate="tanh")
    y.sum().backward()
    return y.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_forward_backward(approximate):
    """Within float rounding of the exact result (float64, no cancellation) over a wide range,
    both ways."""
    t = torch.cat([torch.linspace(-12, 12, 2001), torch.tensor([0.0, 1e-8, -1e-8, 1e-3, -1e-3,
                                                                30.0, -30.0])])
    a = A(t).requires_grad_(True)
    ya = attn.nn.functional.gelu(a, approximate=approximate)
    assert ya.grad_fn.name() == "GeluBackward0"
    ya.sum().backward()
    y_ref, d_ref = gelu_exact(t.numpy(), approximate)
    np.testing.assert_allclose(N(ya), y_ref, rtol=4e-7, atol=1e-7)
    # The tanh form's derivative is computed as torch computes it, from 1 + t and 1 - t^2, which
    # cancel in float32 where tanh is near -1 (errors to ~5e-7 absolute, torch's too).
    np.testing.assert_allclose(N(a.grad), d_ref, rtol=4e-7,
                               atol=1e-7 if approximate == "none" else 1e-6)
    # torch's float32 values carry cancellation errors up to ~|x| * 6e-8 in the left tail
    yt = torch.nn.functional.gelu(t, approximate=approximate).double().numpy()
    np.testing.assert_allclose(N(ya), yt, rtol=1e-6, atol=1e-6)
    assert attn.nn.GELU(approximate)(a).shape == a.shape


def test_gelu_errors():
    with pytest.raises(ValueError, match=r"\[gelu\] approximate must be"):
        attn.nn.functional.gelu(attn.randn(3), approximate="fast")
    with pytest.raises(ValueError, match=r"\[GELU\]"):
        attn.nn.GELU("erf")


# ---- cross_entropy -----------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_forward_backward(reduction):
    a, t = pair((37, 65), 5, 4.0)
    target = torch.randint(0, 65, (37,), generator=torch.Generator().manual_seed(6))
    target[3] = -100
    la = attn.nn.functional.cross_entropy(a, attn.tensor(target.tolist()), reduction=reduction)
    lt = torch.nn.functional.cross_entropy(t, target, reduction=reduction)
    close(la, lt, 1e-5, 1e-6)
    assert la.grad_fn.name() == "NllLossBackward0"
    g = torch.rand(lt.shape, generator=torch.Generator().manual_seed(7))
    la.backward(A(g))
    lt.backward(g)
    close(a.grad, t.grad, 1e-5, 1e-7)


def test_cross_entropy_single_sample_and_large_logits():
    t = torch.tensor([1000.0, -1000.0, 999.0], requires_grad=True)
    a = A(t).requires_grad_(True)
    la = attn.nn.functional.cross_entropy(a, attn.tensor(2))
    lt = torch.nn.functional.cross_entropy(t, torch.tensor(2))
    close(la, lt)
    la.backward()
    lt.backward()
    close(a.grad, t.grad)


def test_cross_entropy_errors():
    x = attn.randn(4, 5)
    with pytest.raises(IndexError, match=r"\[cross_entropy\] target 5 at position 1 is out of "
                                         r"bounds for 5 classes"):
        attn.nn.functional.cross_entropy(x, attn.tensor([0, 5, 1, 2]))
    with pytest.raises(ValueError, match=r"\[cross_entropy\] target \(3,\) does not match"):
        attn.nn.functional.cross_entropy(x, attn.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"\[cross_entropy\] target must be int64"):
        attn.nn.functional.cross_entropy(x, attn.zeros(4))
    with pytest.raises(ValueError, match=r"label_smoothing"):
        attn.nn.functional.cross_entropy(x, attn.tensor([0, 1, 2, 3]), label_smoothing=0.1)


# ---- linear: one fused node, torch's names -----------------------------------------------------------

@pytest.mark.parametrize("shape", [(5, 16), (3, 7, 16), (2, 2, 3, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradients_and_names(shape, bias):
    x_a, x_t = pair(shape, 8)
    w_a, w_t = pair((24, 16), 9, 0.2)
    b_a, b_t = pair((24,), 10) if bias else (None, None)
    ya = attn.nn.functional.linear(x_a, w_a, b_a)
    yt = torch.nn.functional.linear(x_t, w_t, b_t)
    close(ya, yt, 1e-5, 1e-5)
    assert ya.grad_fn.name() == type(yt.grad_fn).__name__
    g = torch.randn(yt.shape, generator=torch.Generator().manual_seed(11))
    ya.backward(A(g))
    yt.backward(g)
    close(x_a.grad, x_t.grad, 1e-4, 1e-5)
    close(w_a.grad, w_t.grad, 1e-4, 1e-5)
    if bias:
        close(b_a.grad, b_t.grad, 1e-4, 1e-5)


# ---- AdamW, clipping, schedule --------------------------------------------------------------------------

def test_adamw_matches_torch_over_steps():
    shapes = [(8, 4), (4,), (3, 5, 2)]
    tp = [torch.randn(*s, generator=torch.Generator().manual_seed(20 + i)).requires_grad_(True)
          for i, s in enumerate(shapes)]
    ap = [A(p).requires_grad_(True) for p in tp]
    topt = torch.optim.AdamW([{"params": [tp[0], tp[2]], "weight_decay": 0.1},
                              {"params": [tp[1]], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    aopt = attn.optim.AdamW([{"params": [ap[0], ap[2]], "weight_decay": 0.1},
                             {"params": [ap[1]], "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    for step in range(25):
        lr = 1e-2 * (0.5 + 0.5 * math.cos(step / 25 * math.pi))
        for g in topt.param_groups:
            g["lr"] = lr
        for g in aopt.param_groups:
            g["lr"] = lr
        for i, (a, t) in enumerate(zip(ap, tp)):
            grad = torch.randn(t.shape, generator=torch.Generator().manual_seed(100 * step + i))
            if step == 3 and i == 1:  # a parameter without a gradient is skipped
                t.grad = None
                a.grad = None
                continue
            t.grad = grad
            a.grad = A(grad)
        topt.step()
        aopt.step()
    for a, t in zip(ap, tp):
        close(a, t, 1e-5, 1e-6)
    st = aopt.state_dict()["state"]
    # State indices follow group order: group 0 holds ap[0], ap[2]; group 1 holds ap[1].
    assert int(st[2]["step"]) == 24 and int(st[0]["step"]) == 25
    close(st[1]["exp_avg_sq"], topt.state[tp[2]]["exp_avg_sq"], 1e-5, 1e-9)


def test_adamw_state_round_trip_and_errors():
    p = attn.randn(3, 3).requires_grad_(True)
    opt = attn.optim.AdamW([p], lr=0.1)
    p.grad = attn.ones(3, 3)
    opt.step()
    st = opt.state_dict()
    q = attn.randn(3, 3).requires_grad_(True)
    opt2 = attn.optim.AdamW([q], lr=0.1)
    opt2.load_state_dict(st)
    assert int(opt2.state_dict()["state"][0]["step"]) == 1
    bad = {"state": {0: {"exp_avg": attn.zeros(2), "exp_avg_sq": attn.zeros(2),
                         "step": attn.tensor(1.0)}}, "param_groups": st["param_groups"]}
    with pytest.raises(ValueError, match=r"AdamW.load_state_dict.*does not match parameter 0"):
        opt2.load_state_dict(bad)
    bad["state"][0] = {"bogus": attn.zeros(1)}
    with pytest.raises(ValueError, match=r"unexpected key 'state.0.bogus'"):
        opt2.load_state_dict(bad)
    with pytest.raises(ValueError, match=r"Invalid beta parameter at index 1: 1.0"):
        attn.optim.AdamW([q], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"duplicate parameters"):
        attn.optim.AdamW([q, q])


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(max_norm):
    tp = [torch.randn(5, 3, requires_grad=True), torch.randn(7, requires_grad=True)]
    ap = [A(p).requires_grad_(True) for p in tp]
    for i, (a, t) in enumerate(zip(ap, tp)):
        g = torch.randn(t.shape, generator=torch.Generator().manual_seed(30 + i))
        t.grad = g
        a.grad = A(g)
    nt = torch.nn.utils.clip_grad_norm_(tp, max_norm)
    na = attn.nn.utils.clip_grad_norm_(ap, max_norm)
    assert float(na) == pytest.approx(float(nt), rel=1e-6)
    for a, t in zip(ap, tp):
        close(a.grad, t.grad, 1e-6, 1e-7)


def test_cosine_lr_is_nanogpts_schedule():
    def ref(it, lr=1e-3, min_lr=1e-4, warmup=100, decay=2000):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay:
            return min_lr
        ratio = (it - warmup) / (decay - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)
    for it in [0, 1, 50, 99, 100, 101, 1000, 1999, 2000, 2001, 5000]:
        assert attn.optim.cosine_lr(it, 1e-3, 1e-4, 100, 2000) == pytest.approx(ref(it), rel=1e-12)


# ---- GPT against a PyTorch model of the same shape ---------------------------------------------------------

class TorchGPT(torch.nn.Module):
    """The reference: nanoGPT's forward written with torch ops, weights copied from attn's GPT."""

    def __init__(self, sd, n_layer, n_head, bias):
        super().__init__()
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(
            torch.tensor(np.array(v.tolist(), dtype=np.float32))) for k, v in sd.items()})
        self.n_layer, self.n_head, self.bias = n_layer, n_head, bias

    def w(self, name):
        return self.p[name.replace(".", "__")] if name.replace(".", "__") in self.p else None

    def forward(self, idx, targets, position_ids=None):
        """position_ids: packed sequences, each attending only inside itself (a block-diagonal
        causal mask, the dense way)."""
        F = torch.nn.functional
        B, T = idx.shape
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        if position_ids is None:
            x = self.w("wte.weight")[idx] + self.w("wpe.weight")[:T]
        else:
            x = self.w("wte.weight")[idx] + self.w("wpe.weight")[position_ids]
            seq = (position_ids == 0).cumsum(1)  # (B, T) sequence number in the row
            future = future | (seq[:, None, :, None] != seq[:, None, None, :])
        self.maps = []  # each layer's attention weights (B, H, T, T), for attention_maps
        C = x.shape[-1]
        H = self.n_head
        for i in range(self.n_layer):
            p = "h.{}.".format(i)
            h = F.layer_norm(x, (C,), self.w(p + "ln_1.weight"), self.w(p + "ln_1.bias"))
            qkv = F.linear(h, self.w(p + "attn.in_proj_weight"), self.w(p + "attn.in_proj_bias"))
            q, k, v = qkv.split(C, dim=2)
            q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            att = att.masked_fill(future, float("-inf"))
            self.maps.append(att.softmax(-1))
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, self.w(p + "attn.out_proj.weight"),
                             self.w(p + "attn.out_proj.bias"))
            h = F.layer_norm(x, (C,), self.w(p + "ln_2.weight"), self.w(p + "ln_2.bias"))
            h = F.gelu(F.linear(h, self.w(p + "mlp.c_fc.weight"), self.w(p + "mlp.c_fc.bias")))
            x = x + F.linear(h, self.w(p + "mlp.c_proj.weight"), self.w(p + "mlp.c_proj.bias"))
        x = F.layer_norm(x, (C,), self.w("ln_f.weight"), self.w("ln_f.bias"))
        logits = x @ self.w("wte.weight").T
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def packed_positions(lengths_per_row):
    """position_ids (B, T) of rows holding sequences of the given lengths, one after the other."""
    return torch.tensor([[p for n in row for p in range(n)] for row in lengths_per_row])


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gpt_forward_packed_matches_torch_with_a_block_diagonal_mask(dropout):
    """attn train --pack's model: rows of several sequences, positions restarting at each, no
    attention across a boundary (varlen attention), ignored targets at the boundaries: the logits,
    loss and gradients of torch's dense block-diagonal masking (eval mode; dropout changes
    nothing there)."""
    cfg = dict(vocab_size=19, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=dropout)
    model = attn.nn.GPT(**cfg, generator=attn.Generator().manual_seed(5))
    model.eval()
    ref = TorchGPT(model.state_dict(), 2, 2, True)
    lengths = [[5, 1, 10], [16], [3, 3, 3, 7]]
    pos = packed_positions(lengths)
    g = torch.Generator().manual_seed(6)
    idx = torch.randint(0, 19, (3, 16), generator=g)
    tgt = torch.randint(0, 19, (3, 16), generator=g)
    tgt[pos.roll(-1, 1) == 0] = -100  # a sequence's last token predicts nothing
    la, lossa = model(attn.tensor(idx.tolist()), attn.tensor(tgt.tolist()),
                      position_ids=attn.tensor(pos.tolist()))
    lt, losst = ref(idx, tgt, pos)
    close(la, lt, 1e-4, 1e-5)
    close(lossa, losst, 1e-5, 1e-6)
    lossa.backward()
    losst.backward()
    for name, p in model.named_parameters():
        close(p.grad, ref.w(name).grad, 1e-3, 2e-6)
    # A row that is one sequence is forward()'s row; each packed sequence is its own forward().
    plain, _ = model(attn.tensor(idx[1:2].tolist()))
    np.testing.assert_allclose(N(la[1:2]), N(plain), rtol=1e-5, atol=1e-6)
    alone, _ = model(attn.tensor(idx[0:1, 5:6].tolist()))
    np.testing.assert_allclose(N(la[0:1, 5:6]), N(alone), rtol=1e-5, atol=1e-6)
    logits_only, none = model(attn.tensor(idx.tolist()), position_ids=attn.tensor(pos.tolist()))
    assert none is None
    close(logits_only, lt, 1e-4, 1e-5)


def test_gpt_forward_packed_in_training_mode_drops_out_and_learns():
    """With dropout in training mode the packed forward draws its masks: two calls differ, and the
    loss goes down when trained (the kernel's dropout has its own tests)."""
    model = attn.nn.GPT(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.2,
                        generator=attn.Generator().manual_seed(1))
    idx = attn.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])
    tgt = attn.tensor([[2, 3, -100, 2, 3, -100, 2, -100]])
    pos = attn.tensor([[0, 1, 2, 0, 1, 2, 0, 1]])
    a = model(idx, tgt, position_ids=pos)[0]
    b = model(idx, tgt, position_ids=pos)[0]
    assert not np.allclose(N(a), N(b))
    opt = attn.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(30):
        _, loss = model(idx, tgt, position_ids=pos)
        first = first if first is not None else float(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < 0.5 * first


def test_gpt_forward_packed_errors():
    model = attn.nn.GPT(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8)
    idx = attn.tensor([[1, 2, 3, 4]])
    tgt = attn.tensor([[2, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"\[GPT.forward_packed\] positions\[0, 0\] is 1: every "
                                         r"row must begin a sequence"):
        model(idx, tgt, position_ids=attn.tensor([[1, 2, 3, 4]]))
    with pytest.raises(ValueError, match=r"positions\[0, 2\] is 3 after 1: each position must be "
                                         r"0 \(a new sequence\) or the previous one plus 1"):
        model(idx, tgt, position_ids=attn.tensor([[0, 1, 3, 4]]))
    with pytest.raises(ValueError, match=r"positions must be int64 with idx's shape \(1, 4\)"):
        model(idx, tgt, position_ids=attn.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match=r"cannot process a sequence of length 9"):
        model(attn.zeros(1, 9, dtype=attn.int64), attn.zeros(1, 9, dtype=attn.int64),
              position_ids=attn.zeros(1, 9, dtype=attn.int64))


@pytest.mark.parametrize("bias", [True, False])
def test_gpt_matches_torch_forward_and_gradients(bias):
    cfg = dict(vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, bias=bias)
    model = attn.nn.GPT(**cfg, generator=attn.Generator().manual_seed(1))
    sd = model.state_dict()
    names = list(sd)
    assert names[:2] == ["wte.weight", "wpe.weight"] and names[-1].startswith("ln_f.")
    assert ("h.1.attn.in_proj_bias" in sd) == bias
    assert model.get_num_params() == sum(v.numel() for v in sd.values())
    # nanoGPT's init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)), LN ones.
    assert float(sd["h.0.ln_1.weight"].min()) == 1.0
    std_res = float(N(sd["h.0.mlp.c_proj.weight"]).std())
    assert 0.6 * 0.02 / 2 < std_res < 1.4 * 0.02 / 2
    ref = TorchGPT(sd, 2, 4, bias)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, 23, (3, 16), generator=g)
    tgt = torch.randint(0, 23, (3, 16), generator=g)
    logits_a, loss_a = model(attn.tensor(idx.tolist()), attn.tensor(tgt.tolist()))
    logits_t, loss_t = ref(idx, tgt)
    close(logits_a, logits_t, 1e-4, 1e-5)
    close(loss_a, loss_t, 1e-5, 1e-6)
    loss_a.backward()
    loss_t.backward()
    for name, p in model.named_parameters():
        close(p.grad, ref.w(name).grad, 1e-3, 2e-6)
    # The attention weights `attn heatmap --ckpt` draws: every layer and head, as torch computes.
    maps = model.attention_maps(attn.tensor(idx.tolist()))
    assert tuple(maps.shape) == (2, 3, 4, 16, 16) and not maps.requires_grad
    close(maps, torch.stack(ref.maps).detach(), 1e-4, 1e-6)
    with pytest.raises(ValueError, match=r"\[GPT.attention_maps\] cannot process a sequence"):
        model.attention_maps(attn.zeros((1, 17), dtype=attn.long))


def test_gpt_errors():
    model = attn.nn.GPT(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8)
    with pytest.raises(ValueError, match=r"\[GPT\] cannot process a sequence of length 9: "
                                         r"block_size is only 8"):
        model(attn.zeros(1, 9, dtype=attn.int64))
    with pytest.raises(IndexError, match=r"\[GPT\] token id 10 .* outside the vocabulary"):
        model(attn.tensor([[1, 10]]))
    with pytest.raises(ValueError, match=r"\[GPT\] n_embd 10 must be divisible by n_head 4"):
        attn.nn.GPT(n_embd=10, n_head=4)
    with pytest.raises(ValueError, match=r"temperature must be positive"):
        model.generate(attn.tensor([[1]]), 3, temperature=0.0)


def test_generate_cache_equals_recompute_and_greedy_matches_torch():
    cfg = dict(vocab_size=17, block_size=12, n_layer=2, n_head=2, n_embd=16)
    model = attn.nn.GPT(**cfg, generator=attn.Generator().manual_seed(3))
    model.eval()
    idx = attn.tensor([[1, 2, 3], [4, 5, 6]])
    # Past block_size too: the cache is rebuilt from the cropped context.
    for top_k in (None, 5, 1):
        a = model.generate(idx, 20, temperature=0.9, top_k=top_k, use_cache=True,
                           generator=attn.Generator().manual_seed(9))
        b = model.generate(idx, 20, temperature=0.9, top_k=top_k, use_cache=False,
                           generator=attn.Generator().manual_seed(9))
        assert a.tolist() == b.tolist()
        assert a.shape == (2, 23)
    # Greedy decoding (top_k=1) equals argmax of the torch reference, step by step.
    ref = TorchGPT(model.state_dict(), 2, 2, True)
    seq = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with torch.no_grad():
        for _ in range(20):
            cond = seq[:, -12:]
            logits, _ = ref(cond, cond)
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    greedy = model.generate(idx, 20, top_k=1)
    assert greedy.tolist() == seq.tolist()
    streamed = []
    model.generate(idx, 4, callback=lambda t: streamed.append(t.tolist()))
    assert len(streamed) == 4 and all(len(s) == 2 for s in streamed)


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "float16", "int8"])
def test_generate_paged_prompts_of_different_lengths_match_torch_greedy(kv_dtype):
    """Several prompts of different lengths decoded together through a paged cache: greedy
    decoding is torch's argmax, prompt by prompt (float32 cache); the narrower caches keep most of
    the tokens of this untrained model and all of its lengths."""
    cfg = dict(vocab_size=17, block_size=24, n_layer=2, n_head=2, n_embd=16)
    model = attn.nn.GPT(**cfg, generator=attn.Generator().manual_seed(4))
    model.eval()
    ref = TorchGPT(model.state_dict(), 2, 2, True)
    prompts = [[1, 2, 3], [9], [4, 5, 6, 7, 8, 1, 2], [9]]
    got = model.generate_paged(prompts, 10, top_k=1, kv_dtype=kv_dtype, page_size=4)
    agree = total = 0
    for p, g in zip(prompts, got):
        seq = torch.tensor([p])
        with torch.no_grad():
            for _ in range(10):
                logits, _ = ref(seq, seq)
                seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
        assert len(g) == len(p) + 10 and g[:len(p)] == p
        agree += sum(a == b for a, b in zip(g[len(p):], seq[0, len(p):].tolist()))
        total += 10
        if kv_dtype == "float32":
            assert g == seq[0].tolist()
    assert got[1] == got[3]  # a repeated prompt shares its pages and decodes alike
    assert agree >= 0.7 * total, (kv_dtype, agree, total)
    # Sampling: prompts of one length draw as generate() does, row by row.
    a = model.generate(attn.tensor([[1, 2], [3, 4]]), 8, temperature=0.8,
                       generator=attn.Generator().manual_seed(5))
    b = model.generate_paged([[1, 2], [3, 4]], 8, temperature=0.8,
                             generator=attn.Generator().manual_seed(5))
    assert a.tolist() == b
    with pytest.raises(ValueError, match="kv_dtype must be 'float32', 'bfloat16', 'float16' or 'int8'"):
        model.generate_paged([[1]], 2, kv_dtype="fp8")
    with pytest.raises(ValueError, match=r"prompt 0 has 20 tokens: with max_new_tokens 5"):
        model.generate_paged([[1] * 20], 5)


def test_training_loop_learns_a_pattern():
    """Torch-style loop in Python: the loss on a periodic sequence falls well below log(V)."""
    attn.manual_seed(0)
    model = attn.nn.GPT(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=16)
    opt = model.configure_optimizers(0.0, 1e-2, (0.9, 0.99))
    data = [i % 5 for i in range(200)]
    losses = []
    for it in range(60):
        ix = [(7 * it + 3 * b) % 150 for b in range(8)]
        x = attn.tensor([data[i:i + 8] for i in ix])
        y = attn.tensor([data[i + 1:i + 9] for i in ix])
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        attn.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
    assert losses[0] > 1.2 and losses[-1] < 0.2, losses[::10]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_propagates_nan(approximate):
    a = attn.tensor([float("nan"), 1.0, float("nan")]).requires_grad_(True)
    y = attn.nn.functional.gelu(a, approximate=approximate)
    y.sum().backward()
    assert [math.isnan(v) for v in y.tolist()] == [True, False, True]
    assert [math.isnan(v) for v in a.grad.tolist()] == [True, False, True]


def test_paged_cache_from_python_forks_evicts_and_counts_pages():
    """GPT.make_paged_cache's cache: forward_paged appends, fork shares pages, evict keeps the
    sinks and the window (positions go on counting), and errors are ValueError."""
    model = attn.nn.GPT(vocab_size=11, block_size=64, n_layer=1, n_head=2, n_embd=8,
                        generator=attn.Generator().manual_seed(2))
    model.eval()
    cache = model.make_paged_cache(12, page_size=4, kv_dtype="int8")
    a = cache.add_sequence()
    logits = model.forward_paged(attn.tensor([list(range(10)) * 2]), cache, [a])
    assert tuple(logits.shape) == (1, 20, 11)
    assert cache.length(a) == 20 and cache.free_pages() == 7
    f = cache.fork(a)
    assert cache.free_pages() == 7
    assert cache.evict(a, 4, 6) == 8  # pages 1, 2 go; the sinks (page 0) and 12.. stay
    assert cache.length(a) == 12 and cache.position(a) == 20
    assert cache.free_pages() == 7  # the fork still holds the evicted pages
    cache.remove(f)
    assert cache.free_pages() == 9
    with pytest.raises(ValueError, match=r"\[PagedKVCache.length\] no sequence 99"):
        cache.length(99)
