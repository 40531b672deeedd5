"""A tiny Llama-3-style decoder in the idioms of the from-scratch Llama tutorials: RoPE tables from
torch.outer / torch.cos / torch.sin, rotate-half RoPE, grouped-query attention whose key/value heads
are repeated with repeat_interleave, a causal mask from torch.triu, SwiGLU feed-forward blocks with
F.silu, RMSNorm (nn.RMSNorm where torch has it, the tutorials' own module before torch 2.4), no
biases, untied output head; trained a few AdamW steps on characters. With "bf16": the forward
passes under torch.autocast("cpu", dtype=torch.bfloat16) (float32 weights and optimizer), then the
trained model converted with .to(torch.bfloat16) for its last prediction, as the tutorials run
their bfloat16 Llamas.

Written for attn's test suite; runs unchanged on PyTorch. Usage: llama_tiny.py DATA [STEPS] [bf16]."""
import contextlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {"vocab_size": None, "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2,
       "n_layers": 2, "hidden_dim": 64, "rope_base": 500000.0, "dtype": torch.float32}
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
bf16 = "bf16" in sys.argv[3:]

if hasattr(nn, "RMSNorm"):
    RMSNorm = nn.RMSNorm
else:  # torch < 2.4: the tutorials' own RMSNorm
    class RMSNorm(nn.Module):
        def __init__(self, emb_dim, eps=1e-5, dtype=None):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(emb_dim, dtype=dtype))

        def forward(self, x):
            means = x.pow(2).mean(dim=-1, keepdim=True)
            return x * torch.rsqrt(means + self.eps) * self.weight


def compute_rope_params(head_dim, theta_base, context_length):
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() /
                                     head_dim))
    positions = torch.arange(context_length).float()
    angles = torch.outer(positions, inv_freq)
    angles = torch.cat([angles, angles], dim=1)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    batch_size, num_heads, seq_len, head_dim = x.shape
    x1 = x[..., : head_dim // 2]
    x2 = x[..., head_dim // 2:]
    cos = cos[:seq_len, :].unsqueeze(0).unsqueeze(0)
    sin = sin[:seq_len, :].unsqueeze(0).unsqueeze(0)
    rotated = torch.cat((-x2, x1), dim=-1)
    return ((x * cos) + (rotated * sin)).to(dtype=x.dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, num_kv_groups, dtype=None):
        super().__init__()
        self.num_heads, self.num_kv_groups = num_heads, num_kv_groups
        self.group_size = num_heads // num_kv_groups
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)

    def forward(self, x, mask, cos, sin):
        b, num_tokens, d_in = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_groups, self.head_dim)
        queries, keys, values = queries.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        queries = apply_rope(queries, cos, sin)
        keys = apply_rope(keys, cos, sin)
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores = attn_scores.masked_fill(mask[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.head_dim ** 0.5, dim=-1)
        context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, -1)
        return self.out_proj(context)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], bias=False, dtype=cfg["dtype"])
        self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], bias=False, dtype=cfg["dtype"])
        self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], bias=False, dtype=cfg["dtype"])

    def forward(self, x):
        return self.fc3(F.silu(self.fc1(x)) * self.fc2(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = GroupedQueryAttention(cfg["emb_dim"], cfg["emb_dim"], cfg["n_heads"],
                                         cfg["n_kv_groups"], dtype=cfg["dtype"])
        self.ff = FeedForward(cfg)
        self.norm1 = RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])
        self.norm2 = RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])

    def forward(self, x, mask, cos, sin):
        x = x + self.att(self.norm1(x), mask, cos, sin)
        return x + self.ff(self.norm2(x))


class Llama3Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = RMSNorm(cfg["emb_dim"], eps=1e-5, dtype=cfg["dtype"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False,
                                  dtype=cfg["dtype"])
        cos, sin = compute_rope_params(cfg["emb_dim"] // cfg["n_heads"], cfg["rope_base"],
                                       cfg["context_length"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, in_idx):
        x = self.tok_emb(in_idx)
        num_tokens = x.shape[1]
        mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
        for block in self.trf_blocks:
            x = block(x, mask, self.cos, self.sin)
        return self.out_head(self.final_norm(x))


torch.manual_seed(123)
with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()[:20000]
chars = sorted(set(text))
CFG["vocab_size"] = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

model = Llama3Model(CFG)
total = sum(p.numel() for p in model.parameters())
print(f"parameters: {total}")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
for step in range(steps + 1):
    ix = torch.randint(len(data) - CFG["context_length"] - 1, (8,))
    x = torch.stack([data[i:i + CFG["context_length"]] for i in ix])
    y = torch.stack([data[i + 1:i + CFG["context_length"] + 1] for i in ix])
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
if bf16:
    model.to(torch.bfloat16)
    print(f"parameters in {next(model.parameters()).dtype}")
with torch.no_grad():
    logits = model(data[:CFG["context_length"]].unsqueeze(0))[0, -1]
    probs = torch.softmax(logits.float(), dim=-1)
print(f"last-token top probability {probs.max().item():.4f}")
