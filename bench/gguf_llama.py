"""Writes a transformers Llama model as a GGUF file that llama.cpp loads, so that
bench/decoder_compare.py runs the same weights on attn, PyTorch and llama.cpp.

    write_llama_gguf(model, path, dtype)   # model: a LlamaForCausalLM; "float32", "bfloat16",
                                           # "float16"

What llama.cpp's "llama" architecture expects and transformers' layout differs in:
- tensor names (token_embd, blk.N.attn_q, ffn_gate, output_norm, ...), with the output matrix left
  out when the embedding is tied (llama.cpp then uses token_embd);
- q and k rows: transformers rotates the two halves of each head (rotate_half), llama.cpp adjacent
  pairs, so the rows of each head are reordered [0, h, 1, h+1, ...] (h = head_dim / 2);
- llama3 RoPE scaling: llama.cpp takes the per-frequency divisors as a tensor, rope_freqs.weight,
  computed here from the config's factor, low/high frequency factors and original context;
- head_dim: written as the key and value lengths, which llama.cpp otherwise takes to be
  hidden_size / heads (Qwen3-style configs differ);
- a vocabulary: llama.cpp needs one, so the file carries a placeholder SentencePiece-style list
  (<unk>, <s>, </s>, the 256 byte tokens, then t<i>) of the model's size; the benchmark feeds
  token ids, never text.
Matrices are stored in dtype (bfloat16, float16: the same bits as the model's), vectors in float32 as
llama.cpp's own converter stores them. Requires PyPI's gguf (scripts/bench_setup.sh --llama-cpp).
"""
import math

import numpy as np


def llama3_rope_divisors(head_dim, theta, scaling):
    """llama3 scaling as a divisor of each of the head_dim/2 RoPE frequencies: 1 for short
    wavelengths, factor for long ones, interpolated between (transformers' _compute_llama3)."""
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def pair_rows(w, heads):
    """Rows of each head from rotate_half's order (first half, second half) to adjacent pairs."""
    rows = w.shape[0]
    d = rows // heads
    return w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_config(cfg):
    rp = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    return theta, rp if rp.get("rope_type", rp.get("type")) == "llama3" else None


def write_placeholder_vocab(w, n):
    """llama.cpp needs a vocabulary: a SentencePiece-style list of n tokens (<unk>, <s>, </s>,
    the 256 byte tokens, then t<i>). The benchmarks feed token ids, never text."""
    import gguf

    tokens = [b"<unk>", b"<s>", b"</s>"] + [("<0x%02X>" % i).encode() for i in range(256)]
    tokens += [("t%d" % i).encode() for i in range(len(tokens), n)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (n - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens[:n])
    w.add_token_scores([0.0] * n)
    w.add_token_types(types[:n])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)


def write_llama_gguf(model, path, dtype):
    import gguf
    import torch

    cfg = model.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    theta, llama3 = rope_config(cfg)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("attn decoder_compare")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)  # llama.cpp's default is hidden_size / heads
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type({"bfloat16": gguf.LlamaFileType.MOSTLY_BF16,
                     "float16": gguf.LlamaFileType.MOSTLY_F16}.get(dtype, gguf.LlamaFileType.ALL_F32))
    write_placeholder_vocab(w, cfg.vocab_size)

    def put(name, t):
        a = t.detach().to(torch.float32).numpy()
        if a.ndim == 1 or dtype == "float32":
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
        elif dtype == "float16":  # the model's float16 values: exact in float32 and back
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float16))
        else:  # the model's bfloat16 values, rounded again: the same bits
            bits = gguf.quants.quantize(np.ascontiguousarray(a), gguf.GGMLQuantizationType.BF16)
            w.add_tensor(name, bits, raw_dtype=gguf.GGMLQuantizationType.BF16)

    sd = model.state_dict()
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"])
    if llama3 is not None:
        w.add_tensor("rope_freqs.weight", llama3_rope_divisors(head_dim, theta, llama3))
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf_name, g_name in names.items():
            t = sd["model.layers.%d.%s.weight" % (i, hf_name)]
            if hf_name == "self_attn.q_proj":
                t = pair_rows(t, heads)
            elif hf_name == "self_attn.k_proj":
                t = pair_rows(t, kv_heads)
            put("blk.%d.%s.weight" % (i, g_name), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
