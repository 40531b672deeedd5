"""Writes a gpt-oss checkpoint in transformers' layout (its tensors as NumPy arrays, the experts as
MXFP4 `_blocks` / `_scales` pairs, as released) as a GGUF file that llama.cpp's "gpt-oss"
architecture loads, so that bench/mxfp4_decode.py runs the same weights on attn and llama.cpp.

    write_gptoss_gguf(tensors, config, path)   # tensors: name -> np.ndarray; config: config.json

What llama.cpp expects and transformers' layout differs in:
- tensor names (token_embd, blk.N.attn_q, attn_sinks, ffn_gate_inp, ffn_{gate,up,down}_exps,
  post_attention_norm as the norm before the experts, output_norm, output);
- the experts' gate and up rows: transformers interleaves them in one gate_up_proj (gate rows
  0, 2, 4, ..., up rows 1, 3, 5, ...), llama.cpp keeps two tensors; their biases split alike;
- the MXFP4 block: both store 32 four-bit codes and one E8M0 exponent, but transformers packs
  codes 2i and 2i+1 in byte i (low nibble first) with the exponents in a separate tensor, and
  ggml stores 17-byte blocks (the exponent, then byte j holding codes j and j + 16);
- head_dim is not hidden_size / heads (2880 / 64), so the key and value lengths are written;
- RoPE: llama.cpp rotates the two halves of each head (NEOX) as transformers does, so q and k
  rows stay as they are; YaRN's factor and original context go in as rope.scaling.*. llama.cpp
  rounds YaRN's correction range to whole dimensions (floor / ceil), transformers' gpt-oss
  config does not (truncate: false), so the two differ slightly in the ramp's frequencies;
- a vocabulary: the placeholder of bench/gguf_llama.py (ids are fed, never text).
Matrices other than the experts are stored in bfloat16 (the bits attn's bfloat16 load holds),
vectors (norms, biases, sinks) and the router in float32, holding their bfloat16 values: the
same numbers as attn's and transformers' bfloat16 models. Requires PyPI's gguf (scripts/bench_setup.sh
--llama-cpp)."""
import numpy as np

FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def hf_mxfp4_dequantize(blocks, scales):
    """transformers' reading of an MXFP4 pair: (..., G, 16) codes, (..., G) exponents ->
    (..., G * 32) float32."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    vals = FP4[codes] * np.ldexp(np.float32(1), scales.astype(np.int32) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


def ggml_mxfp4_blocks(blocks, scales):
    """transformers' (..., G, 16) codes and (..., G) exponents as ggml's MXFP4 rows:
    (..., G * 17) bytes."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
    out = np.concatenate([scales[..., None].astype(np.uint8), qs], axis=-1)
    return np.ascontiguousarray(out.reshape(*blocks.shape[:-2], blocks.shape[-2] * 17))


def bf16_values(a):
    """a rounded to bfloat16 (to nearest, ties to even), kept in float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    u = (u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return u.view(np.float32)


def check_repack(gguf):
    """The repacking against gguf's own MXFP4 reader, on random codes: the same values."""
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (3, 4, 16), dtype=np.uint8)
    scales = rng.integers(118, 130, (3, 4), dtype=np.uint8)
    ours = gguf.quants.dequantize(ggml_mxfp4_blocks(blocks, scales),
                                  gguf.GGMLQuantizationType.MXFP4)
    ref = hf_mxfp4_dequantize(blocks, scales)
    if not np.array_equal(ours.reshape(ref.shape), ref):
        raise RuntimeError("gguf_gptoss: the MXFP4 repacking does not reproduce the codes")


def write_gptoss_gguf(t, cfg, path):
    import gguf

    check_repack(gguf)
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or H // heads
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta", 150000.0))
    w = gguf.GGUFWriter(path, "gpt-oss")
    w.add_name("attn mxfp4_decode")
    w.add_context_length(cfg.get("max_position_embeddings", 131072))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(theta)  # rope dimensions: llama.cpp takes head_dim, as the converter
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope.get("factor", 32.0))
    w.add_rope_scaling_orig_ctx_len(rope.get("original_max_position_embeddings", 4096))
    if hasattr(w, "add_rope_scaling_yarn_beta_fast"):  # llama.cpp's defaults are gpt-oss's too
        w.add_rope_scaling_yarn_beta_fast(rope.get("beta_fast", 32.0))
        w.add_rope_scaling_yarn_beta_slow(rope.get("beta_slow", 1.0))
    w.add_sliding_window(cfg.get("sliding_window", 128))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)  # vocabulary size: the token list's
    from gguf_llama import write_placeholder_vocab
    write_placeholder_vocab(w, cfg["vocab_size"])

    def matrix(name, a):
        bits = gguf.quants.quantize(np.ascontiguousarray(a, dtype=np.float32),
                                    gguf.GGMLQuantizationType.BF16)
        w.add_tensor(name, bits, raw_dtype=gguf.GGMLQuantizationType.BF16)

    def vector(name, a):
        w.add_tensor(name, bf16_values(a))

    matrix("token_embd.weight", t["model.embed_tokens.weight"])
    vector("output_norm.weight", t["model.norm.weight"])
    if "lm_head.weight" in t:
        matrix("output.weight", t["lm_head.weight"])
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        vector(b + "attn_norm.weight", t[p + "input_layernorm.weight"])
        vector(b + "post_attention_norm.weight", t[p + "post_attention_layernorm.weight"])
        for hf, g in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                      ("o_proj", "attn_output")):
            matrix(b + g + ".weight", t[p + "self_attn." + hf + ".weight"])
            vector(b + g + ".bias", t[p + "self_attn." + hf + ".bias"])
        vector(b + "attn_sinks.weight", t[p + "self_attn.sinks"])
        # llama.cpp's converter keeps the router in float32: here holding the bfloat16 values of
        # attn's bfloat16 load, so that both pick the same experts.
        vector(b + "ffn_gate_inp.weight", t[p + "mlp.router.weight"])
        vector(b + "ffn_gate_inp.bias", t[p + "mlp.router.bias"])
        e = p + "mlp.experts."
        gate_up = ggml_mxfp4_blocks(t[e + "gate_up_proj_blocks"], t[e + "gate_up_proj_scales"])
        mx = gguf.GGMLQuantizationType.MXFP4
        w.add_tensor(b + "ffn_gate_exps.weight", np.ascontiguousarray(gate_up[:, 0::2]), raw_dtype=mx)
        w.add_tensor(b + "ffn_up_exps.weight", np.ascontiguousarray(gate_up[:, 1::2]), raw_dtype=mx)
        w.add_tensor(b + "ffn_down_exps.weight",
                     ggml_mxfp4_blocks(t[e + "down_proj_blocks"], t[e + "down_proj_scales"]),
                     raw_dtype=mx)
        vector(b + "ffn_gate_exps.bias", t[e + "gate_up_proj_bias"][:, 0::2])
        vector(b + "ffn_up_exps.bias", t[e + "gate_up_proj_bias"][:, 1::2])
        vector(b + "ffn_down_exps.bias", t[e + "down_proj_bias"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
