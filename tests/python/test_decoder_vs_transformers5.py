"""attn.nn.Decoder.from_pretrained against transformers 5 (PyPI, over torch 2.x) in the same
process: the families the suite's transformers 4.44 lacks, Qwen3 (QK-norm, a head_dim of its own),
Qwen3-MoE, Mixtral and Qwen2-MoE (mixtures of SwiGLU experts, Qwen2-MoE's shared expert),
Gemma 3 (sliding and global layers with their own RoPE bases, QK-norm, sandwich norms,
query_pre_attn_scalar) and gpt-oss (attention sinks, alternating windows, q/k/v/o biases, yarn
RoPE, a mixture of experts with top-k routing and the clamped SwiGLU; transformers' eager experts
as the reference), and checkpoints as transformers 5 writes them (rope_parameters,
layer_types, _sliding_window_pattern) for Llama 3, Qwen2 and Gemma 2.

Run by scripts/test.sh with .venv-bench (scripts/bench_setup.sh); skipped under torch 1.13:

    PYTHONPATH=build/python .venv-bench/bin/python -m pytest -q \\
        tests/python/test_decoder_vs_transformers5.py

Bounds as test_decoder_vs_transformers.py's: float32 logits within 4x transformers' own float32
error against its float64 model; bfloat16 checkpoints loaded in bfloat16 within 2x transformers'
bfloat16 error; greedy continuations through attn's cache equal transformers' greedy choice."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
if int(T.__version__.split(".")[0]) < 5:
    pytest.skip("needs transformers 5 (Qwen3, Gemma 3), found {}".format(T.__version__),
                allow_module_level=True)

import attn  # noqa: E402

SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
             max_position_embeddings=256)
CONFIGS = {
    # Qwen3: head_dim 24 * 4 heads != hidden_size, QK-norm on each head.
    "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, dict(SMALL, head_dim=24, rope_theta=1e6)),
    "qwen3_tied": (T.Qwen3Config, T.Qwen3ForCausalLM,
                   dict(SMALL, head_dim=16, tie_word_embeddings=True, num_key_value_heads=1)),
    # Gemma 3: 7 layers, the 6th global (pattern 6); a window of 8 that a 25-token input exceeds.
    "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM,
               dict(SMALL, num_hidden_layers=7, head_dim=16, sliding_window=8,
                    query_pre_attn_scalar=20, rope_theta=1e6, rope_local_base_freq=1e4)),
    # Gemma 3 with explicit layer_types and softcaps as a Gemma 2-style config sets them:
    # transformers' Gemma 3 applies the final one and ignores attn_logit_softcapping; so does attn.
    "gemma3_types": (T.Gemma3TextConfig, T.Gemma3ForCausalLM,
                     dict(SMALL, num_hidden_layers=4, head_dim=16, sliding_window=6,
                          layer_types=["full_attention", "sliding_attention",
                                       "sliding_attention", "full_attention"],
                          attn_logit_softcapping=5.0, final_logit_softcapping=3.0)),
    "llama3": (T.LlamaConfig, T.LlamaForCausalLM,
               dict(SMALL, rope_theta=500000.0, rope_scaling=dict(
                   rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=16))),
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, dict(SMALL, rope_theta=1e6)),
    # Mistral: every layer slides, a window of 8 that the 25-token input exceeds; and without one.
    "mistral": (T.MistralConfig, T.MistralForCausalLM, dict(SMALL, head_dim=16, sliding_window=8)),
    "mistral_nowindow": (T.MistralConfig, T.MistralForCausalLM,
                         dict(SMALL, sliding_window=None, rope_theta=1e6)),
    # gpt-oss: 4 layers (sliding, full, ...), 6 experts, 2 per token, yarn over 32 positions.
    "gpt_oss": (T.GptOssConfig, T.GptOssForCausalLM,
                dict(SMALL, num_hidden_layers=4, head_dim=16, intermediate_size=40,
                     num_local_experts=6, num_experts_per_tok=2, sliding_window=8,
                     rope_parameters=dict(rope_type="yarn", factor=4.0, beta_fast=32.0,
                                          beta_slow=1.0, truncate=False, rope_theta=150000.0,
                                          original_max_position_embeddings=32))),
    # Qwen3-MoE: 6 experts of width 24, 2 per token, renormalised; QK-norm.
    "qwen3_moe": (T.Qwen3MoeConfig, T.Qwen3MoeForCausalLM,
                  dict(SMALL, head_dim=16, moe_intermediate_size=24, num_experts=6,
                       num_experts_per_tok=2, norm_topk_prob=True, rope_theta=1e6)),
    # Qwen3-MoE with dense layers: decoder_sparse_step 2 and mlp_only_layers leave layer 1 sparse.
    "qwen3_moe_dense": (T.Qwen3MoeConfig, T.Qwen3MoeForCausalLM,
                        dict(SMALL, num_hidden_layers=4, head_dim=16, moe_intermediate_size=24,
                             num_experts=4, num_experts_per_tok=2, decoder_sparse_step=2,
                             mlp_only_layers=[3])),
    # Mixtral: 5 experts of intermediate_size, 2 per token (always renormalised); every layer
    # slides with a window of 8; checkpoints name them block_sparse_moe.experts.E.w1/w2/w3.
    "mixtral": (T.MixtralConfig, T.MixtralForCausalLM,
                dict(SMALL, head_dim=16, intermediate_size=40, num_local_experts=5,
                     num_experts_per_tok=2, sliding_window=8)),
    # Qwen2-MoE: q/k/v biases, 6 routed experts of width 24 (top 3, not renormalised) and a
    # shared expert of width 40 behind its sigmoid gate; layer 1 dense (mlp_only_layers).
    "qwen2_moe": (T.Qwen2MoeConfig, T.Qwen2MoeForCausalLM,
                  dict(SMALL, moe_intermediate_size=24, shared_expert_intermediate_size=40,
                       num_experts=6, num_experts_per_tok=3, mlp_only_layers=[1])),
    "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM,
               dict(SMALL, head_dim=16, num_hidden_layers=4, sliding_window=8,
                    query_pre_attn_scalar=20, attn_logit_softcapping=5.0,
                    final_logit_softcapping=3.0)),
}
IDS = [[1, 5, 9, 33, 2, 7, 70, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
       [96, 0, 44, 44, 44, 12, 3, 3, 81, 60, 59, 58, 2, 1, 0, 9, 9, 9, 9, 9, 30, 31, 32, 33, 34]]


def save(name, d, seed=0, dtype=torch.float32):
    cfg_cls, model_cls, kw = CONFIGS[name]
    torch.manual_seed(seed)
    m = model_cls(cfg_cls(**kw)).eval()
    with torch.no_grad():  # norms, biases and sinks away from their initial ones / zeros
        for pname, p in m.named_parameters():
            if "norm" in pname or "bias" in pname or "sinks" in pname:
                p.add_(torch.randn_like(p) * 0.3)
    m.to(dtype).save_pretrained(str(d))
    return d


def load(d, dtype):
    # Experts: transformers' per-expert loop (its grouped_mm default has no float64 kernel).
    extra = dict(experts_implementation="eager") if any(
        k in str(d) for k in ("gpt_oss", "moe", "mixtral")) else {}
    return T.AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, attn_implementation="eager",
                                                  **extra).eval()


@torch.no_grad()
def reference(d, dtype, ids=IDS):
    return load(d, dtype)(torch.tensor(ids)).logits.to(torch.float64).numpy()


def assert_as_close_as_transformers(ours, ref32, ref64, what):
    """ours within 4x transformers' own float32 error against its float64 logits (plus a floor of
    8 float32 ulps of the largest logit)."""
    err, err_torch = np.abs(ours - ref64).max(), np.abs(ref32 - ref64).max()
    floor = 8 * np.finfo(np.float32).eps * max(1.0, np.abs(ref64).max())
    assert err <= 4 * err_torch + floor, "{}: attn error {:.3g}, transformers float32 {:.3g}" \
        .format(what, err, err_torch)


def float64_logits(m, ids=IDS):
    """The logits of a copy of transformers' model m in float64."""
    import copy
    with torch.no_grad():
        return copy.deepcopy(m).to(torch.float64)(torch.tensor(ids)).logits.numpy()


@torch.no_grad()
def greedy_continuation(m, ids, n):
    """generate(do_sample=False)'s rule by hand: n argmaxes of transformers' model m's full
    forward, appended to ids (a torch tensor); the rows as lists."""
    for _ in range(n):
        ids = torch.cat([ids, m(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    return ids.tolist()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders5")
    return {name: save(name, root / name) for name in CONFIGS}


def test_configs_are_written_as_transformers_5_writes_them(checkpoints):
    # What the loader must read: if transformers stops writing these, the tests below stop
    # covering them (and this says so).
    cfg = json.loads((checkpoints["gemma3"] / "config.json").read_text())
    assert set(cfg["rope_parameters"]) == {"full_attention", "sliding_attention"}
    assert cfg["layer_types"][5] == "full_attention" and "_sliding_window_pattern" in cfg
    cfg = json.loads((checkpoints["llama3"] / "config.json").read_text())
    assert cfg["rope_parameters"]["rope_type"] == "llama3" and "rope_scaling" not in cfg


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_transformers(checkpoints, name):
    ours = attn.nn.Decoder.from_pretrained(checkpoints[name])(attn.tensor(IDS)).numpy()
    ref32, ref64 = (reference(checkpoints[name], t) for t in (torch.float32, torch.float64))
    assert_as_close_as_transformers(ours, ref32, ref64, name)


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "gemma3_types", "gpt_oss", "qwen3_moe",
                                  "mistral", "mixtral", "qwen2_moe"])
def test_greedy_generation_matches_transformers(checkpoints, name):
    # generate(do_sample=False)'s rule by hand (argmax of the full forward at each step): attn
    # decodes through its key/value cache, past Gemma 3's window of 8.
    m = load(checkpoints[name], torch.float32)
    ids = torch.tensor([row[:7] for row in IDS])
    ours = attn.nn.Decoder.from_pretrained(checkpoints[name]).generate(
        attn.tensor(ids.tolist()), max_new_tokens=20).tolist()
    assert ours == greedy_continuation(m, ids, 20)


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "gpt_oss", "qwen3_moe", "mixtral",
                                  "qwen2_moe"])
def test_bf16_checkpoints_are_as_close_as_transformers_bf16(name, tmp_path):
    d = save(name, tmp_path / ("bf16_" + name), seed=3, dtype=torch.bfloat16)
    model = attn.nn.Decoder.from_pretrained(d, torch_dtype="auto")
    assert all(p.dtype is attn.bfloat16 for p in model.parameters())
    ours = model(attn.tensor(IDS))
    assert ours.dtype is attn.float32
    ref16, ref64 = reference(d, torch.bfloat16), reference(d, torch.float64)
    err, err_torch = np.abs(ours.numpy() - ref64).max(), np.abs(ref16 - ref64).max()
    assert err <= 2 * err_torch + 1e-3, "{}: attn bf16 error {:.3g}, transformers bf16 {:.3g}" \
        .format(name, err, err_torch)
    prompt = attn.tensor([row[:5] for row in IDS])
    out, ids = model.generate(prompt, max_new_tokens=6), prompt
    for _ in range(6):
        ids = attn.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == ids.tolist()


def refusal(src, tmp_path, edit):
    """What from_pretrained says (ValueError) of the checkpoint src once edit(config) changed its
    config.json (the weights copied as they are)."""
    cfg = json.loads((src / "config.json").read_text())
    edit(cfg)
    d = tmp_path / "bad"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    with pytest.raises(ValueError) as e:
        attn.nn.Decoder.from_pretrained(d)
    return str(e.value)


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(use_bidirectional_attention=True), ["use_bidirectional_attention"]),
    (lambda c: c["rope_parameters"]["sliding_attention"].update(rope_type="yarn"),
     ["rope_parameters.sliding_attention"]),
    (lambda c: c.update(layer_types=c["layer_types"][:3]), ["layer_types must list 7"]),
    (lambda c: c.update(_sliding_window_pattern=0, layer_types=None),
     ["sliding_window_pattern must be >= 1"]),
])
def test_bad_gemma3_configs_are_refused(checkpoints, tmp_path, edit, words):
    message = refusal(checkpoints["gemma3"], tmp_path, edit)
    for w in words:
        assert w in message


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(output_router_logits=True), ["output_router_logits"]),
    (lambda c: c.update(num_experts_per_tok=7), ["num_experts_per_tok must be in [1,"]),
    (lambda c: c["rope_parameters"].update(mscale=1.0), ["mscale"]),
    (lambda c: c["rope_parameters"].pop("original_max_position_embeddings"),
     ["original_max_position_embeddings"]),
    (lambda c: c.update(quantization_config=dict(quant_method="awq")), ["quant_method 'awq'"]),
])
def test_bad_gpt_oss_configs_are_refused(checkpoints, tmp_path, edit, words):
    message = refusal(checkpoints["gpt_oss"], tmp_path, edit)
    for w in words:
        assert w in message


def test_gpt_oss_parameters_carry_transformers_names(checkpoints):
    model = attn.nn.Decoder.from_pretrained(checkpoints["gpt_oss"])
    names = dict(model.named_parameters())
    ref = load(checkpoints["gpt_oss"], torch.float32).state_dict()
    assert set(names) == set(ref)
    for k in ("model.layers.1.mlp.experts.gate_up_proj", "model.layers.0.self_attn.sinks",
              "model.layers.3.mlp.router.bias"):
        assert np.array_equal(names[k].numpy(), ref[k].numpy())


# ---- gpt-oss's released format: the experts in MXFP4 ---------------------------------------------
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def mxfp4(w):
    """w (E, R, C) float32 -> transformers' MXFP4 pair: blocks uint8 (E, R, C / 32, 16), two codes
    a byte, the low nibble first; scales uint8 (E, R, C / 32), E8M0 with a bias of 127."""
    E, R, C = w.shape
    g = w.reshape(E, R, C // 32, 32)
    amax = np.abs(g).max(-1)
    e = np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)).astype(np.int32)
    x = g / np.exp2(e)[..., None]
    code = np.abs(np.abs(x)[..., None] - FP4).argmin(-1) + np.where(x < 0, 8, 0)
    code = code.astype(np.uint8)
    return (code[..., 0::2] | (code[..., 1::2] << 4)).astype(np.uint8), (e + 127).astype(np.uint8)


@pytest.fixture(scope="module")
def mxfp4_checkpoint(tmp_path_factory):
    """gpt-oss as released: experts as MXFP4 pairs, all else bfloat16, a quantization_config.
    Intermediate 64: both products' inputs come in whole groups of 32."""
    from safetensors.torch import load_file, save_file
    root = tmp_path_factory.mktemp("mxfp4")
    cfg_cls, model_cls, kw = CONFIGS["gpt_oss"]
    CONFIGS["gpt_oss_mx"] = (cfg_cls, model_cls, dict(kw, intermediate_size=64))
    try:
        src = save("gpt_oss_mx", root / "gpt_oss_f32", seed=5)
    finally:
        del CONFIGS["gpt_oss_mx"]
    out = {}
    for k, v in load_file(str(src / "model.safetensors")).items():
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[k + "_blocks"], out[k + "_scales"] = (
                torch.from_numpy(a) for a in mxfp4(np.ascontiguousarray(
                    v.numpy().transpose(0, 2, 1))))
        else:
            out[k] = v.to(torch.bfloat16)
    d = root / "gpt_oss_mxfp4"
    d.mkdir()
    save_file(out, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = dict(quant_method="mxfp4", modules_to_not_convert=[
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"])
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def load_mxfp4(d, dtype):
    # transformers dequantizes MXFP4 on the CPU (Mxfp4Config(dequantize=True)), the reference.
    return T.AutoModelForCausalLM.from_pretrained(
        str(d), dtype=dtype, attn_implementation="eager", experts_implementation="eager",
        quantization_config=T.Mxfp4Config(dequantize=True)).eval()


def test_gpt_oss_mxfp4_experts_are_dequantized_as_transformers_does(mxfp4_checkpoint):
    d = mxfp4_checkpoint
    ref = load_mxfp4(d, torch.float32)
    refs = ref.state_dict()
    for dtype in (attn.float32, attn.bfloat16):
        model = attn.nn.Decoder.from_pretrained(d, torch_dtype=dtype, dequantize_mxfp4=True)
        assert not model.config["mxfp4_experts"]
        ours = dict(model.named_parameters())
        assert set(ours) == set(refs)
        for k in ("model.layers.0.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj"):
            # a code times a power of two: exact in float32 and in bfloat16
            assert ours[k].dtype is dtype
            assert np.array_equal(ours[k].float().numpy(), refs[k].numpy()), (k, dtype)
    # The logits of the float32 model, against transformers' on the same dequantized weights:
    # dequantized, and kept in MXFP4 (the default: prompts multiply decoded experts, decoding
    # steps stream the codes).
    ref32 = ref(torch.tensor(IDS)).logits.detach().to(torch.float64).numpy()
    ref64 = float64_logits(ref)
    ids = torch.tensor([row[:7] for row in IDS])
    want = greedy_continuation(ref, ids, 12)
    for dequantize in (True, False):
        model = attn.nn.Decoder.from_pretrained(d, dequantize_mxfp4=dequantize)
        ours = model(attn.tensor(IDS)).numpy()
        assert_as_close_as_transformers(ours, ref32, ref64, "gpt_oss mxfp4 {}".format(dequantize))
        # Greedy decoding through attn's cache picks what transformers' full forward picks.
        got = model.generate(attn.tensor(ids.tolist()), max_new_tokens=12).tolist()
        assert got == want, dequantize


def test_gpt_oss_experts_kept_in_mxfp4(mxfp4_checkpoint, tmp_path):
    """The default load keeps the experts' codes: not parameters, a quarter of bfloat16's bytes;
    bfloat16 logits as close to transformers' float64 ones as transformers' bfloat16 model's;
    save_pretrained writes them decoded, which transformers reads as its dequantized model."""
    d = mxfp4_checkpoint
    model = attn.nn.Decoder.from_pretrained(d, dtype="auto")
    assert model.config["mxfp4_experts"]
    names = {k for k, _ in model.named_parameters()}
    assert "model.layers.0.mlp.experts.gate_up_proj" not in names
    assert "model.layers.0.mlp.experts.gate_up_proj_bias" in names
    ref16 = load_mxfp4(d, torch.bfloat16)
    with torch.no_grad():
        want16 = ref16(torch.tensor(IDS)).logits.to(torch.float64).numpy()
    ref64 = float64_logits(load_mxfp4(d, torch.float32))
    ours = model(attn.tensor(IDS)).numpy()
    err, err_torch = np.abs(ours - ref64).max(), np.abs(want16 - ref64).max()
    assert err <= 2 * err_torch + 1e-3, (err, err_torch)
    # One row at a time through the cache (the streaming product) against the full forward.
    prompt = attn.tensor([row[:5] for row in IDS])
    out, seq = model.generate(prompt, max_new_tokens=6), prompt
    for _ in range(6):
        seq = attn.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == seq.tolist()
    # Written as released: the same MXFP4 bytes and quantization_config, which transformers reads
    # as the same model; and decoded (dequantize_mxfp4=True): transformers' dequantized model,
    # bit for bit.
    from safetensors.torch import load_file, save_file
    sd = load_file(str(d / "model.safetensors"))
    model.save_pretrained(tmp_path / "gpt_oss_kept")
    kept = load_file(str(tmp_path / "gpt_oss_kept" / "model.safetensors"))
    assert set(kept) == set(sd)
    for k, v in sd.items():  # the MXFP4 pairs as they were; the rest in the model's dtype
        assert (kept[k].dtype == torch.uint8) == (v.dtype == torch.uint8), k
        assert torch.equal(kept[k].to(v.dtype), v), k
    cfg = json.loads((tmp_path / "gpt_oss_kept" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "mxfp4"
    ref_kept = load_mxfp4(tmp_path / "gpt_oss_kept", torch.float32).state_dict()
    model32 = attn.nn.Decoder.from_pretrained(d)
    model32.save_pretrained(tmp_path / "gpt_oss_saved", dequantize_mxfp4=True)
    assert "quantization_config" not in json.loads(
        (tmp_path / "gpt_oss_saved" / "config.json").read_text())
    got = load(tmp_path / "gpt_oss_saved", torch.float32).state_dict()
    for k, v in load_mxfp4(d, torch.float32).state_dict().items():
        assert torch.equal(got[k], v), k
        assert torch.equal(ref_kept[k], v), k
    again = attn.nn.Decoder.from_pretrained(tmp_path / "gpt_oss_kept", dtype="auto")
    assert again.config["mxfp4_experts"]
    assert np.array_equal(again(attn.tensor(IDS)).numpy(), ours)
    # A checkpoint with some experts in MXFP4 and others not: kept all or none.
    ref32 = load_mxfp4(d, torch.float32).state_dict()
    for k in ("model.layers.1.mlp.experts.down_proj_blocks",
              "model.layers.1.mlp.experts.down_proj_scales"):
        del sd[k]
    sd["model.layers.1.mlp.experts.down_proj"] = ref32["model.layers.1.mlp.experts.down_proj"]
    mixed = tmp_path / "gpt_oss_mixed"
    mixed.mkdir()
    save_file(sd, str(mixed / "model.safetensors"), metadata={"format": "pt"})
    (mixed / "config.json").write_text((d / "config.json").read_text())
    with pytest.raises(ValueError, match="has 7 of the 8 experts' matrices in MXFP4"):
        attn.nn.Decoder.from_pretrained(mixed)
    again = attn.nn.Decoder.from_pretrained(mixed, dequantize_mxfp4=True)
    assert np.array_equal(again(attn.tensor(IDS)).numpy(),
                          attn.nn.Decoder.from_pretrained(d, dequantize_mxfp4=True)(
                              attn.tensor(IDS)).numpy())


def test_gpt_oss_mxfp4_int8_activations(mxfp4_checkpoint):
    """mxfp4_int8_activations=True: the expert products of up to 8 tokens (decoding) round their
    activations to 8-bit integers per group of 32, as llama.cpp does: a bfloat16 model's logits
    of a 5-token row within a few times the default's distance from transformers' float64 ones
    (here 1.96 against 0.37: the step of 8 bits is a group's largest |x| / 127 for each of its
    values, where bfloat16 rounds each to 8 significant bits of its own; the kernel's rounding
    is checked exactly in tests/cpp/test_mxfp4.cpp); off again, the default's bits; a model
    without experts in MXFP4 refuses it."""
    d = mxfp4_checkpoint
    ids = [IDS[0][:5]]  # 5 rows: the streaming product
    ref64 = float64_logits(load_mxfp4(d, torch.float32), ids)
    default = attn.nn.Decoder.from_pretrained(d, dtype="bfloat16")
    model = attn.nn.Decoder.from_pretrained(d, dtype="bfloat16", mxfp4_int8_activations=True)
    with attn.no_grad():  # with a gradient to record the matrices are decoded instead
        want = default(attn.tensor(ids)).float().numpy()
        got = model(attn.tensor(ids)).float().numpy()
    err, err16 = np.abs(got - ref64).max(), np.abs(want - ref64).max()
    assert not np.array_equal(got, want)
    assert err <= 8 * err16 + 1e-3, (err, err16)
    model.set_mxfp4_int8_activations(False)
    with attn.no_grad():
        assert np.array_equal(model(attn.tensor(ids)).float().numpy(), want)
    decoded = attn.nn.Decoder.from_pretrained(d, dtype="auto", dequantize_mxfp4=True)
    with pytest.raises(ValueError, match="keeps no experts in MXFP4"):
        decoded.set_mxfp4_int8_activations(True)


@pytest.mark.parametrize("edit, words", [
    (lambda sd, cfg: cfg["quantization_config"].update(quant_method="gptq"),
     ["quant_method 'gptq' is not supported"]),
    (lambda sd, cfg: cfg["quantization_config"].update(bits=4),
     ["quantization_config has 'bits'"]),
    (lambda sd, cfg: sd.pop("model.layers.1.mlp.experts.down_proj_scales"),
     ["has 'model.layers.1.mlp.experts.down_proj_blocks' but not "
      "'model.layers.1.mlp.experts.down_proj_scales'"]),
    (lambda sd, cfg: sd.update({"model.layers.0.mlp.experts.gate_up_proj_blocks":
                                sd["model.layers.0.mlp.experts.gate_up_proj_blocks"][:, :, :1].contiguous()}),
     ["'model.layers.0.mlp.experts.gate_up_proj_blocks' (6, 128, 1, 16)",
      "expected (6, 128, 2, 16) and (6, 128, 2)"]),
    (lambda sd, cfg: sd.update({"model.layers.0.mlp.experts.gate_up_proj_scales":
                                sd["model.layers.0.mlp.experts.gate_up_proj_scales"].float()}),
     ["'model.layers.0.mlp.experts.gate_up_proj_scales' must be U8 (MXFP4), got F32"]),
])
def test_bad_mxfp4_checkpoints_are_refused(mxfp4_checkpoint, tmp_path, edit, words):
    from safetensors.torch import load_file, save_file
    sd = load_file(str(mxfp4_checkpoint / "model.safetensors"))
    cfg = json.loads((mxfp4_checkpoint / "config.json").read_text())
    edit(sd, cfg)
    d = tmp_path / "bad"
    d.mkdir()
    save_file(sd, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as e:
        attn.nn.Decoder.from_pretrained(d)
    for w in words:
        assert w in str(e.value)


# ---- save_pretrained: attn's models back to transformers -----------------------------------------
@pytest.mark.parametrize("name", list(CONFIGS))
def test_save_pretrained_writes_what_transformers_reads_as_the_same_model(checkpoints, name,
                                                                          tmp_path):
    # transformers' model from attn's directory is the model it read from its own, bit for bit.
    model = attn.nn.Decoder.from_pretrained(checkpoints[name])
    out = tmp_path / name  # load() picks transformers' eager experts by the path's name
    model.save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == json.loads((checkpoints[name] / "config.json").read_text())[
        "model_type"]
    ref = load(checkpoints[name], torch.float32)
    got = load(out, torch.float32)
    assert set(got.state_dict()) == set(ref.state_dict())
    for k, v in ref.state_dict().items():
        assert torch.equal(got.state_dict()[k], v), k
    ids = torch.tensor(IDS)
    with torch.no_grad():
        assert torch.equal(got(ids).logits, ref(ids).logits)
    # and attn reads its own directory as the model it wrote
    again = attn.nn.Decoder.from_pretrained(out)
    assert np.array_equal(again(attn.tensor(IDS)).numpy(), model(attn.tensor(IDS)).numpy())


def test_save_pretrained_of_models_built_and_converted_in_attn(tmp_path):
    # A Qwen3-style model built in attn (its own initialisation) and its bfloat16 conversion:
    # transformers reads both, with attn's logits.
    model = attn.nn.Decoder(model_type="qwen3", vocab_size=97, hidden_size=64, intermediate_size=96,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=24, qk_norm=True, rope_theta=1e6,
                            generator=attn.Generator().manual_seed(3))
    model.eval()
    model.save_pretrained(tmp_path / "f32")
    ref = load(tmp_path / "f32", torch.float32)
    with torch.no_grad():
        want = ref(torch.tensor(IDS)).logits.numpy()
    got = model(attn.tensor(IDS)).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * max(1.0, np.abs(want).max()))
    model.bfloat16().save_pretrained(tmp_path / "bf16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    ref16 = load(tmp_path / "bf16", torch.bfloat16)
    for k, v in ref16.state_dict().items():
        assert v.dtype == torch.bfloat16
        assert torch.equal(v.float(), torch.from_numpy(
            dict(model.named_parameters())[k].float().numpy())), k


@pytest.mark.parametrize("family, extra", [
    ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("qwen2_moe", dict(num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                       shared_expert_intermediate_size=24)),
    ("gemma2", dict(head_dim=16, sliding_window=4, sliding_layers=[True, False])),
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=4,
                     sliding_layers=[True, False])),
])
def test_models_built_by_family_name_take_the_familys_behaviour(family, extra, tmp_path):
    # Decoder(model_type=...) with sizes only: the family's biases, norms, activation, RoPE,
    # softcaps, sinks and mixture kind, as transformers' config class defaults them, so that the
    # model saves as that family and transformers computes the same logits.
    model = attn.nn.Decoder(model_type=family, vocab_size=97, hidden_size=64, intermediate_size=32,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            generator=attn.Generator().manual_seed(4), **extra)
    model.eval()
    out = tmp_path / family  # load() picks transformers' eager experts by the path's name
    model.save_pretrained(out)
    ref = load(out, torch.float32)
    with torch.no_grad():
        want = ref(torch.tensor(IDS)).logits.numpy()
    got = model(attn.tensor(IDS)).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * max(1.0, np.abs(want).max()))
    family_config = {"mixtral": dict(moe_type="qwen3_moe", norm_topk_prob=True),
                     "qwen2_moe": dict(moe_type="qwen3_moe", qkv_bias=True),
                     "gemma2": dict(norm_plus_one=True, sandwich_norms=True,
                                    hidden_act="gelu_tanh", final_logit_softcapping=30.0),
                     "gpt_oss": dict(attention_sinks=True, o_bias=True, rope_type="yarn")}[family]
    for k, v in family_config.items():
        assert model.config[k] == v, (k, model.config[k])


def test_save_pretrained_refuses_what_the_family_cannot_say(tmp_path):
    cases = [(dict(model_type="llama", qk_norm=True), "qk_norm true (written as false)"),
             (dict(model_type="qwen2", qkv_bias=False), "qkv_bias false (written as true)"),
             (dict(model_type="llama", qkv_bias=True), "o_bias false (written as true)"),
             (dict(model_type="phi3"), "model_type 'phi3' has no Hugging Face class"),
             (dict(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2,
                   norm_topk_prob=False), "norm_topk_prob false (written as true)"),
             (dict(model_type="qwen3_moe", num_local_experts=4, num_experts_per_tok=2,
                   moe_type="qwen3_moe", shared_expert_intermediate_size=8),
              "shared_expert_intermediate_size 8 (written as 0)")]
    for config, words in cases:
        model = attn.nn.Decoder(vocab_size=16, hidden_size=16, intermediate_size=16,
                                num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=2, **config)
        with pytest.raises(ValueError) as e:
            model.save_pretrained(tmp_path / "x")
        assert "[save_hf_decoder]" in str(e.value) and words in str(e.value), str(e.value)
        assert not (tmp_path / "x").exists()  # nothing written


# ---- Gemma 3 with images (Gemma3ForConditionalGeneration): its language model, text only ----------
@pytest.fixture(scope="module")
def gemma3_multimodal(tmp_path_factory):
    """A tiny image-and-text Gemma 3 as transformers 5 saves it: model_type gemma3, the language
    model under text_config and language_model.model.*, a vision tower and a projector beside."""
    torch.manual_seed(7)
    text = dict(SMALL, num_hidden_layers=7, head_dim=16, sliding_window=8,
                query_pre_attn_scalar=20, rope_theta=1e6)
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    m = T.Gemma3ForConditionalGeneration(T.Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=90,
        boi_token_index=91, eoi_token_index=92)).eval()
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if "norm" in pname:
                p.add_(torch.randn_like(p) * 0.3)
    d = tmp_path_factory.mktemp("gemma3mm") / "gemma3_mm"
    m.save_pretrained(str(d))
    return d, m


def test_gemma3_with_images_loads_its_language_model(gemma3_multimodal, tmp_path):
    d, ref = gemma3_multimodal
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "gemma3" and "vision_config" in cfg  # what the loader must read
    model = attn.nn.Decoder.from_pretrained(d)
    assert model.config["model_type"] == "gemma3_text"
    assert not any("vision" in k for k, _ in model.named_parameters())
    with torch.no_grad():
        ref32 = ref(torch.tensor(IDS)).logits.to(torch.float64).numpy()
    ours = model(attn.tensor(IDS)).numpy()
    assert_as_close_as_transformers(ours, ref32, float64_logits(ref), "gemma3 with images")
    # Greedy decoding through the cache, past the window of 8, as transformers' full forward.
    ids = torch.tensor([row[:7] for row in IDS])
    got = model.generate(attn.tensor(ids.tolist()), max_new_tokens=12).tolist()
    assert got == greedy_continuation(ref, ids, 12)
    # bfloat16: the language model's weights, read into bfloat16
    m16 = attn.nn.Decoder.from_pretrained(d, torch_dtype=attn.bfloat16)
    assert all(p.dtype is attn.bfloat16 for p in m16.parameters())


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.pop("text_config"), ["needs a text_config object"]),
    (lambda c: c.update(audio_config={}), ["gemma3 model does not have", "audio_config"]),
    (lambda c: c["text_config"].update(model_type="llama"),
     ["text_config.model_type must be gemma3_text"]),
    (lambda c: c["text_config"].update(num_hidden_layers=3), ["(text_config)"]),
])
def test_bad_gemma3_multimodal_configs_are_refused(gemma3_multimodal, tmp_path, edit, words):
    message = refusal(gemma3_multimodal[0], tmp_path, edit)
    for w in words:
        assert w in message, message


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(decoder_sparse_step=0), ["decoder_sparse_step must be >= 1, got 0"]),
    (lambda c: c.update(mlp_only_layers=[5]), ["mlp_only_layers must name layers in [0, 3)"]),
    (lambda c: c.update(mlp_only_layers=1), ["mlp_only_layers must be a list of layers"]),
    (lambda c: c.update(output_router_logits=True), ["output_router_logits"]),
    (lambda c: c.update(num_experts_per_tok=9), ["num_experts_per_tok must be in [1,"]),
    (lambda c: c.update(shared_expert_intermediate_size=8), ["shared_expert_intermediate_size"]),
])
def test_bad_qwen3_moe_configs_are_refused(checkpoints, tmp_path, edit, words):
    message = refusal(checkpoints["qwen3_moe"], tmp_path, edit)
    for w in words:
        assert w in message, message


def test_qwen3_moe_reads_the_released_field_names(checkpoints):
    # transformers 5 writes num_local_experts; the released Qwen3-MoE configs say num_experts.
    cfg = json.loads((checkpoints["qwen3_moe"] / "config.json").read_text())
    cfg["num_experts"] = cfg.pop("num_local_experts", 6)
    c = attn._C.decoder.config_from_hf_json(json.dumps(cfg))
    assert (c.num_local_experts, c.moe_type, c.moe_intermediate_size, c.norm_topk_prob) == \
        (6, "qwen3_moe", 24, True)
    defaults = attn._C.decoder.config_from_hf_json('{"model_type": "qwen3_moe"}')
    ref = T.Qwen3MoeConfig()
    assert (defaults.num_local_experts, defaults.num_experts_per_tok,
            defaults.moe_intermediate_size, defaults.hidden_size, defaults.head_dim,
            defaults.num_key_value_heads, defaults.norm_topk_prob) == \
        (ref.num_experts, ref.num_experts_per_tok, ref.moe_intermediate_size, ref.hidden_size,
         getattr(ref, "head_dim", None) or 0, ref.num_key_value_heads, ref.norm_topk_prob)


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(router_jitter_noise=0.1), ["router_jitter_noise 0.1 is not supported"]),
    (lambda c: c.update(num_experts=4), ["would be ignored): num_experts"]),
    (lambda c: c.update(attention_bias=True), ["would be ignored): attention_bias"]),
])
def test_bad_mixtral_configs_are_refused(checkpoints, tmp_path, edit, words):
    message = refusal(checkpoints["mixtral"], tmp_path, edit)
    for w in words:
        assert w in message, message


def test_mixtral_and_qwen2_moe_checkpoints_keep_their_names_and_layers(checkpoints, tmp_path):
    # attn's parameters are mlp.gate / mlp.experts.E.gate_proj ...; Mixtral's files say
    # block_sparse_moe.gate / .experts.E.w1 (gate), w3 (up), w2 (down): each read from its name.
    from safetensors.numpy import load_file
    model = attn.nn.Decoder.from_pretrained(checkpoints["mixtral"])
    params = dict(model.named_parameters())
    stored = load_file(str(checkpoints["mixtral"] / "model.safetensors"))
    for ours, theirs in [("mlp.gate.weight", "block_sparse_moe.gate.weight"),
                         ("mlp.experts.3.gate_proj.weight", "block_sparse_moe.experts.3.w1.weight"),
                         ("mlp.experts.3.up_proj.weight", "block_sparse_moe.experts.3.w3.weight"),
                         ("mlp.experts.3.down_proj.weight", "block_sparse_moe.experts.3.w2.weight")]:
        assert np.array_equal(params["model.layers.2." + ours].numpy(),
                              stored["model.layers.2." + theirs]), ours
    assert model.config["norm_topk_prob"] and all(model.config["sliding_layers"])
    # a Mixtral file missing an expert's tensor: refused, naming it
    bad = tmp_path / "mixtral_missing"
    bad.mkdir()
    (bad / "config.json").write_text((checkpoints["mixtral"] / "config.json").read_text())
    from safetensors.numpy import save_file
    save_file({k: v for k, v in stored.items() if "layers.1.block_sparse_moe.experts.4.w3" not in k},
              str(bad / "model.safetensors"))
    with pytest.raises(ValueError) as e:
        attn.nn.Decoder.from_pretrained(bad)
    assert "model.layers.1.mlp.experts.4.up_proj.weight" in str(e.value), str(e.value)
    # Qwen2-MoE: layer 1 is a dense MLP of intermediate_size, the others mixtures with a shared
    # expert and its gate.
    q = dict(attn.nn.Decoder.from_pretrained(checkpoints["qwen2_moe"]).named_parameters())
    assert tuple(q["model.layers.1.mlp.gate_proj.weight"].shape) == (96, 64)
    assert tuple(q["model.layers.0.mlp.shared_expert.up_proj.weight"].shape) == (40, 64)
    assert tuple(q["model.layers.2.mlp.shared_expert_gate.weight"].shape) == (1, 64)
    assert "model.layers.1.mlp.gate.weight" not in q


@pytest.mark.parametrize("model_type, cls", [
    ("llama", "LlamaConfig"), ("mistral", "MistralConfig"), ("qwen2", "Qwen2Config"),
    ("qwen3", "Qwen3Config"), ("mixtral", "MixtralConfig"), ("qwen2_moe", "Qwen2MoeConfig"),
    ("qwen3_moe", "Qwen3MoeConfig"), ("gemma", "GemmaConfig"), ("gemma3_text", "Gemma3TextConfig"),
    ("gpt_oss", "GptOssConfig")])
def test_fields_a_config_leaves_out_take_transformers_defaults(model_type, cls):
    # Released configs leave fields out (Gemma 3's text_config gives 6); each takes transformers'
    # default for the family. (Gemma 2's follow transformers 4.44, whose defaults 5 changed.)
    ours = attn._C.decoder.config_from_hf_json(json.dumps({"model_type": model_type}))
    ref = getattr(T, cls)()
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
              "rms_norm_eps", "tie_word_embeddings"):
        assert getattr(ours, k) == getattr(ref, k), (model_type, k)
    head_dim = getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads
    assert (ours.head_dim or ours.hidden_size // ours.num_attention_heads) == head_dim
    rp = ref.rope_parameters
    theta = rp["full_attention"]["rope_theta"] if "full_attention" in rp else rp["rope_theta"]
    assert ours.rope_theta == theta
