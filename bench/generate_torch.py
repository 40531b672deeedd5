#!/usr/bin/env python3
"""PyTorch reference for attn's cached generation: attn's GPT (bench/train_torch.py's modules,
the same parameter names) with a key/value cache of its own, one timed generation per process.

    PY=.venv-bench/bin/python   # torch 2.15; /usr/bin/python3 (torch 1.13) works too
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \\
        $PY bench/generate_torch.py --ckpt out --batch 1 --max-new-tokens 200 --threads 1
    $PY bench/generate_torch.py --impl hf --ckpt out ...   # Hugging Face's generate (transformers)

The checkpoint is attn's (`attn train --out DIR`, or what generate_compare.py writes). Generation
follows attn's GPT::generate: the prompt (cropped to block_size) goes through the model once
(prefill, filling the cache), then every step feeds only the newest token, whose keys and values
are appended to per-layer buffers (B, H, block_size, head_dim) and whose query attends to every
cached position (F.scaled_dot_product_attention where torch has it, else written out). When the
sequence outgrows block_size the context is cropped to the last block_size tokens and the cache
is rebuilt from it (every position changes), as attn does. Only the last position's logits go
through the output layer. Sampling as nanoGPT: logits / temperature, those below the top_k-th
largest set to -inf, softmax, torch.multinomial with a torch.Generator seeded --seed. Everything
runs under torch.inference_mode() in evaluation mode, with torch.set_num_threads(--threads).

--impl hf runs transformers' GPT2LMHeadModel.generate(do_sample=True, top_k, temperature,
use_cache=True) on the same weights (attn's fused q/k/v and Linear weights transposed into
GPT-2's Conv1D layout, zero biases where attn's model has none, exact GELU); it exits with status
3 and a message if transformers does not import.

After --warmup-tokens untimed tokens, one generation of --max-new-tokens is timed; the last line
is `result: {JSON}` with the figures of bench/gen_checkpoint.py's timing_figures (prefill,
decode and total tokens/s, first- and second-half decode rates), the torch version and, with
--tokens, the generated ids.
"""
import math
import sys
import time
import types

import torch
import torch.nn.functional as F

import gen_checkpoint as gc
import train_torch

PROG = "generate_torch.py"
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


# ---- the model with a key/value cache ----------------------------------------------------------
class KVCache:
    """Keys and values of every layer: (B, H, block_size, head_dim) buffers, `length` rows valid."""

    def __init__(self, model, batch):
        blk = model.h[0].attn
        H, C = blk.n_head, model.wte.weight.shape[1]
        shape = (batch, H, model.block_size, C // H)
        self.k = [torch.empty(shape) for _ in model.h]
        self.v = [torch.empty(shape) for _ in model.h]
        self.length = 0


def attend_cached(attn, x, kc, vc, start):
    """train_torch.CausalSelfAttention on the T newest tokens x (B, T, C) at positions
    start..start+T-1: their keys/values go into the cache, their queries attend to all of it."""
    B, T, C = x.shape
    H = attn.n_head
    hd = C // H
    q, k, v = F.linear(x, attn.in_proj_weight, attn.in_proj_bias).split(C, dim=2)
    q = q.view(B, T, H, hd).transpose(1, 2)
    end = start + T
    kc[:, :, start:end] = k.view(B, T, H, hd).transpose(1, 2)
    vc[:, :, start:end] = v.view(B, T, H, hd).transpose(1, 2)
    K, V = kc[:, :, :end], vc[:, :, :end]
    # Query i (position start+i) sees keys 0..start+i: no mask for one token.
    mask = None
    if T > 1:
        mask = torch.ones(T, end, dtype=torch.bool).tril(start)  # True = attend
    if HAVE_SDPA:
        y = F.scaled_dot_product_attention(q, K, V, attn_mask=mask)
    else:
        scores = (q @ K.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ V
    return attn.out_proj(y.transpose(1, 2).reshape(B, T, C))


def forward_cached(model, idx, cache):
    """Logits (B, V) of the last of the tokens idx (B, T) that follow the cache's tokens."""
    B, T = idx.shape
    start = cache.length
    if start + T > model.block_size:
        raise ValueError("cache of %d + %d tokens exceeds block_size %d" %
                         (start, T, model.block_size))
    x = model.wte(idx) + model.wpe(torch.arange(start, start + T))
    for i, block in enumerate(model.h):
        x = x + attend_cached(block.attn, block.ln_1(x), cache.k[i], cache.v[i], start)
        x = x + block.mlp(block.ln_2(x))
    cache.length = start + T
    return F.linear(model.ln_f(x[:, -1, :]), model.wte.weight)


def sample(logits, temperature, top_k, gen):
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)


@torch.inference_mode()
def generate(model, idx, max_new_tokens, temperature, top_k, gen, on_token=None):
    """attn's GPT::generate with this cache: returns (B, T + max_new_tokens)."""
    cache = None
    for _ in range(max_new_tokens):
        if cache is not None and idx.shape[1] <= model.block_size:
            logits = forward_cached(model, idx[:, -1:], cache)
        else:  # first step, or the context outgrew the block: rebuild from the cropped context
            cache = KVCache(model, idx.shape[0])
            logits = forward_cached(model, idx[:, -model.block_size:], cache)
        nxt = sample(logits, temperature, top_k, gen)
        idx = torch.cat((idx, nxt), dim=1)
        if on_token is not None:
            on_token(nxt)
    return idx


# ---- loading -----------------------------------------------------------------------------------
def load_model(ckpt, keep_mask=False):
    """(model in eval mode, chars) from an attn checkpoint; weights read straight into it."""
    path, config, chars = gc.load_meta(ckpt)
    cfg = types.SimpleNamespace(**config)
    cfg.dropout = 0.0
    cfg.sdpa = HAVE_SDPA  # train_torch's full forward (the cached path below is ours)
    model = train_torch.GPT(cfg, config["vocab_size"])
    if not keep_mask:  # the (block, block) mask only train_torch's full forward uses
        for block in model.h:
            del block.attn.future
    model.eval()
    gc.read_into(path, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    return model, chars


def hf_model(ckpt):
    """transformers' GPT2LMHeadModel holding the checkpoint's weights, and chars."""
    from transformers import GPT2Config, GPT2LMHeadModel  # ImportError: exit status 3
    path, c, chars = gc.load_meta(ckpt)
    conf = GPT2Config(vocab_size=c["vocab_size"], n_positions=c["block_size"],
                      n_embd=c["n_embd"], n_layer=c["n_layer"], n_head=c["n_head"],
                      activation_function="gelu", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
                      tie_word_embeddings=True)
    model = GPT2LMHeadModel(conf).eval()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if name.endswith(".bias"):
                p.zero_()  # attn's model may have none
        for name, a in gc.read_arrays(path):
            parts = name.split(".")
            if parts[0] == "h":
                sub = {"attn.in_proj_weight": "attn.c_attn.weight",
                       "attn.in_proj_bias": "attn.c_attn.bias",
                       "attn.out_proj.weight": "attn.c_proj.weight",
                       "attn.out_proj.bias": "attn.c_proj.bias"}
                rest = ".".join(parts[2:])
                target = "transformer.h.%s.%s" % (parts[1], sub.get(rest, rest))
            else:
                target = "transformer." + name
            t = torch.from_numpy(a)
            if target.endswith(".weight") and t.dim() == 2 and "wte" not in target \
                    and "wpe" not in target:
                t = t.t()  # Linear (out, in) -> Conv1D (in, out)
            params[target].copy_(t)
    return model, chars


def hf_generate(model, idx, max_new_tokens, temperature, top_k, gen_seed, on_token):
    class Streamer:  # transformers calls put() with the prompt, then with each new column
        def __init__(self):
            self.calls = 0

        def put(self, value):
            self.calls += 1
            if self.calls > 1:
                on_token(value)

        def end(self):
            pass

    torch.manual_seed(gen_seed)
    with torch.inference_mode():
        return model.generate(idx, attention_mask=torch.ones_like(idx), do_sample=True,
                              temperature=temperature, top_k=top_k, top_p=1.0,  # top_k 0: off
                              max_new_tokens=max_new_tokens, min_new_tokens=0, use_cache=True,
                              streamer=Streamer() if on_token else None)


# ---- main --------------------------------------------------------------------------------------
def set_threads(n):
    torch.set_num_threads(n)
    if "openblas" in torch.__config__.show().lower():  # Debian's 1.13: a second pool
        train_torch.set_blas_threads(n)


def main(argv=None):
    p = gc.child_parser(__doc__)
    p.add_argument("--impl", choices=("torch", "hf"), default="torch")
    a = gc.check_child_args(p, p.parse_args(argv))
    set_threads(a.threads)
    t_load = time.perf_counter()
    try:
        if a.impl == "hf":
            try:
                model, chars = hf_model(a.ckpt)
            except ImportError as e:
                print("%s: transformers does not import: %s" % (PROG, e), file=sys.stderr)
                return 3
        else:
            model, chars = load_model(a.ckpt)
        ids = gc.encode(a.prompt, chars)
    except gc.CheckpointError as e:
        gc.fail(PROG, e)
    load_s = time.perf_counter() - t_load
    idx = torch.tensor([ids] * a.batch, dtype=torch.long)
    gen = torch.Generator().manual_seed(a.seed)

    def run(n, on_token=None):
        if a.impl == "hf":
            return hf_generate(model, idx, n, a.temperature, a.top_k, a.seed, on_token)
        return generate(model, idx, n, a.temperature, a.top_k, gen, on_token)

    if a.warmup_tokens:
        run(a.warmup_tokens)
    stamps = []
    t0 = time.perf_counter()
    out = run(a.max_new_tokens, lambda _: stamps.append(time.perf_counter()))
    if len(stamps) != a.max_new_tokens:
        gc.fail(PROG, "%d tokens streamed, expected %d" % (len(stamps), a.max_new_tokens))
    result = {"impl": a.impl, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_s": load_s, "sdpa": HAVE_SDPA}
    result.update(gc.timing_figures(t0, stamps, a.batch))
    if a.tokens:
        result["tokens"] = out[:, len(ids):].tolist()
    gc.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
