"""attn.nn.Decoder: the decoder of today's model families (Llama 3, Mistral, Mixtral, Qwen2/3,
Qwen2/3-MoE, Gemma 1/2/3, gpt-oss) over the C++ model (include/attn/decoder.h), loaded from a
Hugging Face directory with from_pretrained (include/attn/hf_decoder.h).

    model = attn.nn.Decoder.from_pretrained("path/to/dir")   # config.json + safetensors
    logits = model(input_ids)                                # (B, T, vocab), float32
    out = model.generate(input_ids, max_new_tokens=20)       # greedy; temperature > 0 samples
    model.save_pretrained("path/to/other")                   # what transformers reads back

Parameters share the C++ storage under transformers' names (model.layers.0.self_attn.q_proj.weight,
...). Nothing is downloaded: the path is a local directory."""
import os as _os

from .. import _C
from .modules import Module, _mirror_parameters

__all__ = ["Decoder"]

_CONFIG_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size",
                  "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_type",
                  "rope_factor", "qkv_bias", "o_bias", "mlp_bias", "qk_norm",
                  "tie_word_embeddings", "hidden_act", "norm_plus_one", "sandwich_norms",
                  "scale_embeddings", "query_pre_attn_scalar", "attn_logit_softcapping",
                  "final_logit_softcapping", "sliding_window", "sliding_layers",
                  "rope_local_base_freq", "rope_low_freq_factor", "rope_high_freq_factor",
                  "rope_original_max_position_embeddings", "rope_beta_fast", "rope_beta_slow",
                  "rope_attention_factor", "rope_truncate", "attention_sinks", "norm_in_float32",
                  "num_local_experts", "num_experts_per_tok", "swiglu_alpha", "swiglu_limit",
                  "moe_type", "moe_intermediate_size", "norm_topk_prob",
                  "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
                  "mxfp4_experts")


def _checkpoint_dtype(path):
    """config.json's torch_dtype (or transformers 5's dtype) as an attn dtype; float32 when it
    names none or another."""
    import json
    with open(_os.path.join(_os.fspath(path), "config.json")) as f:
        c = json.load(f)
    name = c.get("dtype") or c.get("torch_dtype") or "float32"
    return {"bfloat16": _C.dtype.bfloat16, "float16": _C.dtype.float16}.get(
        str(name).replace("torch.", ""), _C.dtype.float32)


_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
             "gemma2", "gemma3_text", "gpt_oss")


class Decoder(Module):
    """A decoder configured by keyword arguments of DecoderConfig's fields (see _CONFIG_FIELDS),
    initialised as transformers does, or loaded with from_pretrained. forward(input_ids) gives the
    logits; generate() continues input_ids through a key/value cache.

    A model_type of _FAMILIES starts from that family's behaviour as transformers' config class
    has it by default (biases, QK-norm, norms, activation, RoPE, softcaps, sinks, the mixture's
    kind: C++ decoder_config_for_family); the sizes, experts and sliding layers are attn's small
    defaults until given. Any field given overrides."""

    def __init__(self, generator=None, **config):
        super().__init__()
        family = config.get("model_type")
        c = (_C.decoder.config_for_family(family) if family in _FAMILIES
             else _C.decoder.DecoderConfig())
        for k, v in config.items():
            if k not in _CONFIG_FIELDS:
                raise TypeError("Decoder: unknown config field '{}'".format(k))
            setattr(c, k, v)
        self._attach(_C.decoder.Decoder(c, generator))

    def _attach(self, impl):
        object.__setattr__(self, "_impl", impl)
        c = impl.config
        object.__setattr__(self, "config", {k: getattr(c, k) for k in _CONFIG_FIELDS})
        _mirror_parameters(self, impl)

    @classmethod
    def from_pretrained(cls, path, torch_dtype=None, dtype=None, dequantize_mxfp4=False,
                        mxfp4_int8_activations=False):
        """A Hugging Face checkpoint directory of a llama, mistral, mixtral, qwen2, qwen2_moe,
        qwen3, qwen3_moe, gemma, gemma2, gemma3_text (or gemma3: its language model) or gpt_oss
        model (config.json with model.safetensors or a sharded model.safetensors.index.json), in
        evaluation mode. torch_dtype (transformers 4's name) or dtype (transformers 5's):
        float32 (the default), bfloat16 or float16 - the model keeps its weights and computes in
        it, weights stored in it memory-mapped from the file - or "auto", the checkpoint's own
        (config.json's torch_dtype / dtype); the names "float32", "bfloat16", "float16" too.
        gpt-oss's experts stored in MXFP4 stay in MXFP4 (config["mxfp4_experts"]; not
        parameters) unless dequantize_mxfp4, which decodes them into the parameters as
        transformers' Mxfp4Config(dequantize=True). mxfp4_int8_activations (attn's, no
        transformers argument): the MXFP4 experts' products for a few tokens (decoding) round
        their activations to 8-bit integers per group of 32, as llama.cpp does, instead of
        16-bit ones, to match llama.cpp's numbers (not faster end to end on the CPU measured in
        BENCHMARKS.md; see set_mxfp4_int8_activations)."""
        want = dtype if dtype is not None else torch_dtype
        if isinstance(want, str) and want == "auto":
            want = _checkpoint_dtype(path)
        elif isinstance(want, str):  # transformers takes the names too: "bfloat16", ...
            want = {"float32": _C.dtype.float32, "bfloat16": _C.dtype.bfloat16,
                    "float16": _C.dtype.float16}.get(want.replace("torch.", ""), want)
        if want is None:
            want = _C.dtype.float32
        if str(want) not in ("torch.float32", "torch.bfloat16", "torch.float16"):
            raise ValueError("Decoder.from_pretrained: dtype must be float32, bfloat16, float16 "
                             "or 'auto', got {!r}".format(want))
        self = cls.__new__(cls)
        Module.__init__(self)
        self._attach(_C.decoder.load_hf(_os.fspath(path), want, bool(dequantize_mxfp4)))
        self.eval()
        if mxfp4_int8_activations:
            self.set_mxfp4_int8_activations(True)
        return self

    def set_mxfp4_int8_activations(self, on=True):
        """gpt-oss's experts kept in MXFP4: their products for up to 8 tokens with the
        activations rounded to 8-bit integers per group of 32 (step: the group's largest |x| /
        127, llama.cpp's q8_0) when on, to 16-bit integers (finer than bfloat16) when off, the
        default. ValueError when the model keeps no experts in MXFP4."""
        self._impl.set_mxfp4_int8_activations(bool(on))

    def save_pretrained(self, save_directory, dequantize_mxfp4=False):
        """Writes config.json and model.safetensors (transformers' names, the parameters' dtype)
        to the directory save_directory (created if missing), as transformers' save_pretrained
        does: transformers' from_pretrained and Decoder.from_pretrained read it back. ValueError
        when the model's family (config model_type) cannot describe it in config.json.
        gpt-oss experts kept in MXFP4 are written as released (NAME_blocks, NAME_scales and a
        quantization_config); with dequantize_mxfp4=True, decoded in the parameters' dtype."""
        _C.decoder.save_hf(self._impl, _os.fspath(save_directory), bool(dequantize_mxfp4))

    def _impl_to(self, dtype):
        """Module.to(dtype) / bfloat16() / half() / float(): the C++ model converts its own
        tensors, which the parameters here share."""
        self._impl.to_dtype(dtype)

    def train(self, mode=True):
        super().train(mode)
        self._impl.train(bool(mode))
        return self

    def forward(self, input_ids, logits_to_keep=0):
        """Logits (B, T, vocab_size) of input_ids (B, T) int64; with logits_to_keep n > 0 those
        of the last n positions only (transformers' logits_to_keep: what a prompt needs before
        generating is logits_to_keep=1)."""
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int):
            raise TypeError("forward(): logits_to_keep must be an int, got %s"
                            % type(logits_to_keep).__name__)
        return self._impl.forward(input_ids, logits_to_keep)

    def generate(self, input_ids, max_new_tokens=32, temperature=0.0, top_k=None, top_p=1.0,
                 min_p=0.0, repetition_penalty=1.0, eos_token_id=None, generator=None,
                 callback=None, window_length=None, sink_tokens=4):
        """input_ids (B, T) followed by up to max_new_tokens tokens: greedy (the first of equal
        logits) when temperature is 0, else sampled as transformers' processors filter
        (repetition_penalty, temperature, top_k, top_p, min_p). A row that produces eos_token_id
        (an id or a list) stops and is padded with it; callback(tokens (B,)) gets each step's
        tokens. window_length (StreamingLLM, with llama.cpp's context shift): the key/value cache
        holds at most that many tokens; when full, the first sink_tokens stay and the oldest half
        of the others go, their keys rotated to their new positions, so generation can run past
        max_position_embeddings in bounded memory (None: the cache keeps every token)."""
        stop = [] if eos_token_id is None else (
            [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(t) for t in eos_token_id])
        return self._impl.generate(input_ids, int(max_new_tokens), float(temperature),
                                   int(top_k or 0), float(top_p), float(min_p),
                                   float(repetition_penalty), stop, generator, callback,
                                   int(window_length or 0), int(sink_tokens))

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters())
