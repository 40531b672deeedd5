"""A tiny Gemma-3-style decoder in the idioms of the from-scratch Gemma 3 tutorials: sliding-window
and global attention layers with their own RoPE bases, masks built from torch.triu, grouped-query
attention with QK-norm, Gemma's RMSNorm with a zero-initialised (1 + scale) in float32, pre and
post norms around attention and the feed-forward block, a GELU-tanh gated MLP, embeddings scaled
by sqrt(emb_dim), query_pre_attn_scalar; trained a few AdamW steps on characters.

Written for attn's test suite; runs unchanged on PyTorch. Usage: gemma3_tiny.py DATA [STEPS]."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {"vocab_size": None, "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_kv_groups": 2,
       "head_dim": 8, "hidden_dim": 48, "n_layers": 3, "sliding_window": 4,
       "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
       "rope_local_base": 10000.0, "rope_base": 1000000.0, "query_pre_attn_scalar": 8,
       "qk_norm": True, "dtype": torch.float32}
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20


class RMSNorm(nn.Module):
    def __init__(self, emb_dim, eps=1e-6, bias=False):
        super().__init__()
        self.eps = eps
        # Gemma3 stores zero-centred weights and uses (1 + weight) during the forward pass
        self.scale = nn.Parameter(torch.zeros(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

    def forward(self, x):
        input_dtype = x.dtype
        x_f = x.float()
        var = x_f.pow(2).mean(dim=-1, keepdim=True)
        x_norm = x_f * torch.rsqrt(var + self.eps)
        out = x_norm * (1.0 + self.scale.float())
        if self.shift is not None:
            out = out + self.shift.float()
        return out.to(input_dtype)


def compute_rope_params(head_dim, theta_base, context_length, dtype=torch.float32):
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2, dtype=dtype)[: (head_dim // 2)]
                                     .float() / head_dim))
    positions = torch.arange(context_length, dtype=dtype)
    angles = positions.unsqueeze(1) * inv_freq.unsqueeze(0)
    angles = torch.cat([angles, angles], dim=1)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    batch_size, num_heads, seq_len, head_dim = x.shape
    x1 = x[..., : head_dim // 2]
    x2 = x[..., head_dim // 2:]
    cos = cos[:seq_len, :].unsqueeze(0).unsqueeze(0)
    sin = sin[:seq_len, :].unsqueeze(0).unsqueeze(0)
    rotated = torch.cat((-x2, x1), dim=-1)
    x_rotated = (x * cos) + (rotated * sin)
    return x_rotated.to(dtype=x.dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, num_heads, num_kv_groups, head_dim, qk_norm, query_pre_attn_scalar,
                 dtype=None):
        super().__init__()
        self.num_heads, self.num_kv_groups = num_heads, num_kv_groups
        self.group_size = num_heads // num_kv_groups
        self.head_dim = head_dim
        self.d_out = num_heads * head_dim
        self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
        self.W_key = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, num_kv_groups * head_dim, bias=False, dtype=dtype)
        self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)
        self.q_norm = RMSNorm(head_dim, eps=1e-6) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, eps=1e-6) if qk_norm else None
        self.scaling = query_pre_attn_scalar ** -0.5

    def forward(self, x, mask, cos, sin):
        b, num_tokens, _ = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_groups,
                                      self.head_dim).transpose(1, 2)
        if self.q_norm:
            queries = self.q_norm(queries)
        if self.k_norm:
            keys = self.k_norm(keys)
        queries = apply_rope(queries, cos, sin)
        keys = apply_rope(keys, cos, sin)
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)
        queries = queries * self.scaling
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)
        attn_weights = torch.softmax(attn_scores, dim=-1)
        context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
        self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
        self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], dtype=cfg["dtype"], bias=False)

    def forward(self, x):
        x = F.gelu(self.fc1(x), approximate="tanh") * self.fc2(x)
        return self.fc3(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg, attn_type):
        super().__init__()
        self.attn_type = attn_type
        self.att = GroupedQueryAttention(cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"],
                                         cfg["head_dim"], cfg["qk_norm"],
                                         cfg["query_pre_attn_scalar"], dtype=cfg["dtype"])
        self.ff = FeedForward(cfg)
        self.input_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)
        self.post_attention_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)
        self.pre_feedforward_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)
        self.post_feedforward_layernorm = RMSNorm(cfg["emb_dim"], eps=1e-6)

    def forward(self, x, mask_global, mask_local, cos_global, sin_global, cos_local, sin_local):
        shortcut = x
        x = self.input_layernorm(x)
        if self.attn_type == "sliding_attention":
            attn_mask, cos, sin = mask_local, cos_local, sin_local
        else:
            attn_mask, cos, sin = mask_global, cos_global, sin_global
        x = self.post_attention_layernorm(self.att(x, attn_mask, cos, sin))
        x = shortcut + x
        shortcut = x
        x = self.post_feedforward_layernorm(self.ff(self.pre_feedforward_layernorm(x)))
        return shortcut + x


class Gemma3Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])
        self.blocks = nn.ModuleList([TransformerBlock(cfg, t) for t in cfg["layer_types"]])
        self.final_norm = RMSNorm(cfg["emb_dim"], eps=1e-6)
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False,
                                  dtype=cfg["dtype"])
        cos_local, sin_local = compute_rope_params(cfg["head_dim"], cfg["rope_local_base"],
                                                   cfg["context_length"])
        cos_global, sin_global = compute_rope_params(cfg["head_dim"], cfg["rope_base"],
                                                     cfg["context_length"])
        self.register_buffer("cos_local", cos_local, persistent=False)
        self.register_buffer("sin_local", sin_local, persistent=False)
        self.register_buffer("cos_global", cos_global, persistent=False)
        self.register_buffer("sin_global", sin_global, persistent=False)

    def _create_masks(self, seq_len, device):
        ones = torch.ones((seq_len, seq_len), dtype=torch.bool, device=device)
        mask_global = torch.triu(ones, diagonal=1)
        far_past = torch.triu(ones, diagonal=self.cfg["sliding_window"]).T
        mask_local = mask_global | far_past
        return mask_global, mask_local

    def forward(self, input_ids):
        b, seq_len = input_ids.shape
        x = self.tok_emb(input_ids) * (self.cfg["emb_dim"] ** 0.5)
        mask_global, mask_local = self._create_masks(seq_len, x.device)
        for block in self.blocks:
            x = block(x, mask_global, mask_local, self.cos_global, self.sin_global,
                      self.cos_local, self.sin_local)
        return self.out_head(self.final_norm(x))


torch.manual_seed(123)
with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()[:20000]
chars = sorted(set(text))
CFG["vocab_size"] = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

model = Gemma3Model(CFG)
print(f"parameters: {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
for step in range(steps + 1):
    ix = torch.randint(len(data) - CFG["context_length"] - 1, (8,))
    x = torch.stack([data[i:i + CFG["context_length"]] for i in ix])
    y = torch.stack([data[i + 1:i + CFG["context_length"] + 1] for i in ix])
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    if step % 5 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
