"""A tiny Mixtral / Qwen3-MoE-style decoder in the idioms of the reference PyTorch code of those
models: QK-norm on each head, complex RoPE (torch.polar, view_as_complex, view_as_real), grouped
queries by repeat_interleave, and two mixture-of-experts MLPs routed two ways:
- Mistral's reference: topk of the router logits, their softmax in float32, and for each expert
  torch.where(selected == e) picking its tokens, results[rows] += weight * expert(x[rows]);
- transformers' Qwen3-MoE: softmax over every expert, topk renormalised, F.one_hot expert masks,
  torch.where(mask[e]) for the tokens and slots, index_add_ into the output; bincount counts the
  tokens per expert for the load-balancing loss (Switch Transformer's), added to the loss.

Written for attn's test suite; runs unchanged on PyTorch. Usage: moe_tiny.py DATA [STEPS]."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {"vocab_size": None, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2, "head_dim": 8,
       "n_layers": 2, "num_experts": 4, "num_experts_per_tok": 2, "moe_hidden_dim": 24,
       "context_length": 16, "rope_base": 10000.0, "aux_loss_coef": 0.01}
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 15


def precompute_freqs_cis(dim, end, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def apply_rotary_emb(xq, xk, freqs_cis):
    # xq, xk: (b, seq, heads, head_dim); pairs of features rotate as complex numbers
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x_f = x.float()
        norm = x_f * torch.rsqrt(x_f.pow(2).mean(-1, keepdim=True) + self.eps)
        return (norm * self.weight).to(x.dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg["n_heads"], cfg["n_kv_groups"], cfg["head_dim"]
        d = cfg["emb_dim"]
        self.W_query = nn.Linear(d, self.n_heads * self.head_dim, bias=False)
        self.W_key = nn.Linear(d, self.n_kv * self.head_dim, bias=False)
        self.W_value = nn.Linear(d, self.n_kv * self.head_dim, bias=False)
        self.out_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)
        self.q_norm = RMSNorm(self.head_dim)
        self.k_norm = RMSNorm(self.head_dim)

    def forward(self, x, mask, freqs_cis):
        b, n, _ = x.shape
        q = self.q_norm(self.W_query(x).view(b, n, self.n_heads, self.head_dim))
        k = self.k_norm(self.W_key(x).view(b, n, self.n_kv, self.head_dim))
        v = self.W_value(x).view(b, n, self.n_kv, self.head_dim)
        q, k = apply_rotary_emb(q, k, freqs_cis)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        k = k.repeat_interleave(self.n_heads // self.n_kv, dim=1)
        v = v.repeat_interleave(self.n_heads // self.n_kv, dim=1)
        scores = q @ k.transpose(2, 3) / self.head_dim ** 0.5
        scores = scores.masked_fill(mask, -torch.inf)
        w = torch.softmax(scores, dim=-1)
        return self.out_proj((w @ v).transpose(1, 2).reshape(b, n, -1))


class Expert(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MistralMoE(nn.Module):
    """Mistral's reference MoeLayer: the softmax over the chosen experts' logits."""

    def __init__(self, cfg):
        super().__init__()
        self.experts = nn.ModuleList([Expert(cfg["emb_dim"], cfg["moe_hidden_dim"])
                                      for _ in range(cfg["num_experts"])])
        self.gate = nn.Linear(cfg["emb_dim"], cfg["num_experts"], bias=False)
        self.k = cfg["num_experts_per_tok"]

    def forward(self, inputs):
        shape = inputs.shape
        inputs = inputs.view(-1, shape[-1])
        gate_logits = self.gate(inputs)
        weights, selected_experts = torch.topk(gate_logits, self.k)
        weights = F.softmax(weights, dim=1, dtype=torch.float).to(inputs.dtype)
        results = torch.zeros_like(inputs)
        for i, expert in enumerate(self.experts):
            batch_idx, nth_expert = torch.where(selected_experts == i)
            results[batch_idx] += weights[batch_idx, nth_expert, None] * expert(inputs[batch_idx])
        return results.view(shape), gate_logits


class Qwen3MoE(nn.Module):
    """transformers' Qwen3MoeSparseMoeBlock: the softmax over every expert, renormalised top-k."""

    def __init__(self, cfg):
        super().__init__()
        self.num_experts, self.top_k = cfg["num_experts"], cfg["num_experts_per_tok"]
        self.gate = nn.Linear(cfg["emb_dim"], self.num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(cfg["emb_dim"], cfg["moe_hidden_dim"])
                                      for _ in range(self.num_experts)])

    def forward(self, hidden_states):
        b, n, d = hidden_states.shape
        hidden_states = hidden_states.view(-1, d)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final = torch.zeros((b * n, d), dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.numel() == 0:
                continue
            current = hidden_states[None, top_x].reshape(-1, d)
            current = self.experts[expert_idx](current) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current.to(hidden_states.dtype))
        return final.reshape(b, n, d), router_logits


def load_balancing_loss(router_logits, num_experts, top_k):
    """Switch Transformer's auxiliary loss: num_experts * sum(tokens share * probability share)."""
    probs = torch.softmax(router_logits, dim=-1)
    _, selected = torch.topk(probs, top_k, dim=-1)
    counts = torch.bincount(selected.flatten(), minlength=num_experts).float()
    tokens_per_expert = counts / selected.numel()
    return num_experts * torch.sum(tokens_per_expert * probs.mean(dim=0))


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.att = GroupedQueryAttention(cfg)
        self.ff = MistralMoE(cfg) if layer % 2 == 0 else Qwen3MoE(cfg)
        self.norm1, self.norm2 = RMSNorm(cfg["emb_dim"]), RMSNorm(cfg["emb_dim"])

    def forward(self, x, mask, freqs_cis):
        x = x + self.att(self.norm1(x), mask, freqs_cis)
        y, logits = self.ff(self.norm2(x))
        return x + y, logits


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg["n_layers"])])
        self.final_norm = RMSNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
        self.freqs_cis = precompute_freqs_cis(cfg["head_dim"], cfg["context_length"],
                                              cfg["rope_base"])
        self.cfg = cfg

    def forward(self, idx):
        n = idx.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        x = self.tok_emb(idx)
        aux = 0.0
        for block in self.blocks:
            x, logits = block(x, mask, self.freqs_cis)
            aux = aux + load_balancing_loss(logits, self.cfg["num_experts"],
                                            self.cfg["num_experts_per_tok"])
        return self.out_head(self.final_norm(x)), aux


torch.manual_seed(123)
with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()[:20000]
chars = sorted(set(text))
CFG["vocab_size"] = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

model = Model(CFG)
print(f"parameters: {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
B, T = 4, CFG["context_length"]
for step in range(steps + 1):
    ix = torch.randint(len(data) - T - 1, (B,))
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + T + 1] for i in ix])
    logits, aux = model(x)
    ce = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss = ce + CFG["aux_loss_coef"] * aux
    if step % 5 == 0:
        print(f"step {step}: loss {ce.item():.4f} aux {aux.item():.4f}")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
with torch.no_grad():
    _, selected = torch.topk(model.blocks[1].ff.gate(model.tok_emb(data[:64])), 2, dim=-1)
print(f"tokens per expert: {torch.bincount(selected.flatten(), minlength=4).tolist()}")
