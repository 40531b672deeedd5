"""A tiny gpt-oss-style decoder in the idioms of the reference PyTorch implementation: attention
with a learnable sink logit per head (concatenated to the scores, dropped after the softmax),
alternating banded (sliding-window) and dense layers built from triu/tril masks, grouped queries as
an extra einsum axis, and a mixture-of-experts MLP: top-k routing with a softmax over the chosen
experts, expert weights gathered by index, einsum products and a clamped SwiGLU.

Written for attn's test suite; runs unchanged on PyTorch. Usage: gptoss_tiny.py DATA [STEPS]."""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {"vocab_size": None, "hidden_size": 32, "num_attention_heads": 4,
       "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 2, "sliding_window": 4,
       "num_experts": 4, "experts_per_token": 2, "intermediate_size": 16, "swiglu_limit": 7.0,
       "rope_theta": 150000.0, "context_length": 16}
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 15


class RMSNorm(torch.nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-05):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.scale = torch.nn.Parameter(torch.ones(num_features, dtype=torch.float32))

    def forward(self, x):
        assert x.shape[-1] == self.num_features
        t, dtype = x.float(), x.dtype
        t = t * torch.rsqrt(torch.mean(t**2, dim=-1, keepdim=True) + self.eps)
        return (t * self.scale).to(dtype)


def rotary(x, cos, sin):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    return torch.cat((o1, o2), dim=-1)


def sdpa(Q, K, V, S, sm_scale, sliding_window=0):
    # Q: (n_tokens, n_heads, q_mult, d_head), K and V: (n_tokens, n_heads, d_head)
    n_tokens, n_heads, q_mult, d_head = Q.shape
    K = K[:, :, None, :].expand(-1, -1, q_mult, -1)
    V = V[:, :, None, :].expand(-1, -1, q_mult, -1)
    S = S.reshape(n_heads, q_mult, 1, 1).expand(-1, -1, n_tokens, -1)
    mask = torch.triu(Q.new_full((n_tokens, n_tokens), -float("inf")), diagonal=1)
    if sliding_window > 0:
        mask += torch.tril(mask.new_full((n_tokens, n_tokens), -float("inf")),
                           diagonal=-sliding_window)
    QK = torch.einsum("qhmd,khmd->hmqk", Q, K)
    QK *= sm_scale
    QK += mask[None, None, :, :]
    QK = torch.cat([QK, S], dim=-1)
    W = torch.softmax(QK, dim=-1)
    W = W[..., :-1]
    attn = torch.einsum("hmqk,khmd->qhmd", W, V)
    return attn.reshape(n_tokens, -1)


class AttentionBlock(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.head_dim = cfg["head_dim"]
        self.num_attention_heads = cfg["num_attention_heads"]
        self.num_key_value_heads = cfg["num_key_value_heads"]
        self.sliding_window = cfg["sliding_window"] if layer_idx % 2 == 0 else 0
        self.sinks = nn.Parameter(torch.zeros(cfg["num_attention_heads"]))
        self.norm = RMSNorm(cfg["hidden_size"])
        qkv_dim = cfg["head_dim"] * (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"])
        self.qkv = nn.Linear(cfg["hidden_size"], qkv_dim)
        self.out = nn.Linear(cfg["head_dim"] * cfg["num_attention_heads"], cfg["hidden_size"])
        self.sm_scale = 1 / math.sqrt(cfg["head_dim"])

    def forward(self, x, cos, sin):
        t = self.norm(x)
        qkv = self.qkv(t)
        q_end = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        q, k, v = qkv[:, :q_end], qkv[:, q_end:q_end + kv], qkv[:, q_end + kv:q_end + 2 * kv]
        q = q.view(-1, self.num_key_value_heads,
                   self.num_attention_heads // self.num_key_value_heads, self.head_dim)
        k = k.view(-1, self.num_key_value_heads, self.head_dim)
        v = v.view(-1, self.num_key_value_heads, self.head_dim)
        n = q.shape[0]
        q = rotary(q, cos[:n, None, None, :], sin[:n, None, None, :])
        k = rotary(k, cos[:n, None, :], sin[:n, None, :])
        t = sdpa(q, k, v, self.sinks, self.sm_scale, self.sliding_window)
        return x + self.out(t)


def swiglu(x, alpha: float = 1.702, limit: float = 7.0):
    x_glu, x_linear = x[..., ::2], x[..., 1::2]
    x_glu = x_glu.clamp(min=None, max=limit)
    x_linear = x_linear.clamp(min=-limit, max=limit)
    out_glu = x_glu * torch.sigmoid(alpha * x_glu)
    return out_glu * (x_linear + 1)


class MLPBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, H, I = cfg["num_experts"], cfg["hidden_size"], cfg["intermediate_size"]
        self.experts_per_token = cfg["experts_per_token"]
        self.swiglu_limit = cfg["swiglu_limit"]
        self.norm = RMSNorm(H)
        self.gate = nn.Linear(H, E)
        self.mlp1_weight = nn.Parameter(torch.randn(E, 2 * I, H) * 0.1)
        self.mlp1_bias = nn.Parameter(torch.zeros(E, 2 * I))
        self.mlp2_weight = nn.Parameter(torch.randn(E, H, I) * 0.1)
        self.mlp2_bias = nn.Parameter(torch.zeros(E, H))

    def forward(self, x):
        t = self.norm(x)
        g = self.gate(t)
        experts = torch.topk(g, k=self.experts_per_token, dim=-1, sorted=True)
        expert_weights = torch.nn.functional.softmax(experts.values, dim=1)
        expert_indices = experts.indices
        mlp1_weight = self.mlp1_weight[expert_indices, ...]
        mlp1_bias = self.mlp1_bias[expert_indices, ...]
        t = torch.einsum("beck,bk->bec", mlp1_weight, t) + mlp1_bias
        t = swiglu(t, limit=self.swiglu_limit)
        mlp2_weight = self.mlp2_weight[expert_indices, ...]
        mlp2_bias = self.mlp2_bias[expert_indices, ...]
        t = torch.einsum("beck,bek->bec", mlp2_weight, t)
        t += mlp2_bias
        t = torch.einsum("bec,be->bc", t, expert_weights)
        return x + t


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.attn = nn.ModuleList([AttentionBlock(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.mlp = nn.ModuleList([MLPBlock(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.unembedding = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        d = cfg["head_dim"] // 2
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(d, dtype=torch.float32) / d))
        angles = torch.einsum("i,j->ij", torch.arange(cfg["context_length"],
                                                      dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):  # one sequence of tokens, as the reference runs them
        x = self.embedding(x)
        for a, m in zip(self.attn, self.mlp):
            x = m(a(x, self.cos, self.sin))
        return self.unembedding(x)


torch.manual_seed(123)
with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()[:20000]
chars = sorted(set(text))
CFG["vocab_size"] = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

model = Transformer(CFG)
print(f"parameters: {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(steps + 1):
    i = int(torch.randint(len(data) - CFG["context_length"] - 1, (1,)).item())
    x, y = data[i:i + CFG["context_length"]], data[i + 1:i + CFG["context_length"] + 1]
    loss = F.cross_entropy(model(x), y)
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"sinks of layer 0: {[round(v, 4) for v in model.attn[0].sinks.tolist()]}")
