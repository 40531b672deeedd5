"""The transformers (PyPI, in .venv-test over Debian's torch) side of test_decoder_vs_transformers.py.

  model KIND CONFIG_JSON OUT_DIR SEED [--shard] [--bf16]
        a random model of KIND (llama, qwen2, gemma, gemma2) saved with save_pretrained
        (safetensors; sharded into small files with --shard; weights stored bf16 with --bf16)
  logits DIR IDS_JSON OUT_NPZ [--bf16]
                                  logits in float32 and float64 (the model in double); with
                                  --bf16 also the model in bfloat16 (left out where torch 1.13
                                  cannot multiply bfloat16: its oneDNN wants AVX-512)
  generate DIR IDS_JSON N OUT_JSON  greedy continuation of N tokens (argmax of the full forward
                                    at each step, as generate(do_sample=False); no stop token)
  processors CASES_JSON OUT_JSON  the distributions transformers' logits processors leave:
                                  repetition penalty, temperature, top_k, top_p, min_p
"""
import json
import sys

import numpy as np
import torch
import transformers as T

CLASSES = {"llama": (T.LlamaConfig, T.LlamaForCausalLM), "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM),
           "gemma": (T.GemmaConfig, T.GemmaForCausalLM),
           "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM),
           "mixtral": (T.MixtralConfig, T.MixtralForCausalLM),
           "qwen2_moe": (T.Qwen2MoeConfig, T.Qwen2MoeForCausalLM)}


def model(kind, config_json, out_dir, seed, *flags):
    torch.manual_seed(int(seed))
    cfg_cls, model_cls = CLASSES[kind]
    cfg = cfg_cls(**json.loads(config_json))
    if kind.startswith("gemma"):
        cfg._attn_implementation = "eager"
    m = model_cls(cfg).eval()
    with torch.no_grad():  # norms away from their initial ones / zeros, so that they matter
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    dtype = torch.bfloat16 if "--bf16" in flags else torch.float32
    m.to(dtype).save_pretrained(out_dir, safe_serialization=True,
                                max_shard_size="200KB" if "--shard" in flags else "10GB")


def load(d, dtype):
    m = T.AutoModelForCausalLM.from_pretrained(d, torch_dtype=dtype, attn_implementation="eager")
    return m.eval()


def logits(d, ids_json, out, *flags):
    ids = torch.tensor(json.loads(ids_json))
    res = {}
    for name, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        with torch.no_grad():
            res[name] = load(d, dtype)(ids).logits.to(torch.float64).numpy()
    if "--bf16" in flags:
        try:
            with torch.no_grad():
                res["bf16"] = load(d, torch.bfloat16)(ids).logits.to(torch.float64).numpy()
        except RuntimeError as e:  # "could not create a primitive descriptor iterator"
            print("no bfloat16 reference here: {}".format(e), file=sys.stderr)
    np.savez(out, **res)


def generate(d, ids_json, n, out):
    # generate(do_sample=False)'s rule, by hand: Gemma 2's HybridCache needs torch 2's dynamo.
    ids = torch.tensor(json.loads(ids_json))
    m = load(d, torch.float32)
    with torch.no_grad():
        for _ in range(int(n)):
            nxt = m(ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
    with open(out, "w") as f:
        json.dump(ids.tolist(), f)


def processors(cases_json, out):
    from transformers.generation import logits_process as lp
    res = []
    for case in json.loads(cases_json):
        scores = torch.tensor([case["logits"]], dtype=torch.float64)
        ids = torch.tensor([case["history"]])
        o = case["options"]
        chain = []
        if o["repetition_penalty"] != 1.0:
            chain.append(lp.RepetitionPenaltyLogitsProcessor(o["repetition_penalty"]))
        chain.append(lp.TemperatureLogitsWarper(o["temperature"]))
        if o["top_k"] > 0:
            chain.append(lp.TopKLogitsWarper(o["top_k"]))
        if o["top_p"] < 1.0:
            chain.append(lp.TopPLogitsWarper(o["top_p"]))
        if o["min_p"] > 0:
            chain.append(lp.MinPLogitsWarper(o["min_p"]))
        for p in chain:
            scores = p(ids, scores)
        res.append(torch.softmax(scores, -1)[0].tolist())
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"model": model, "logits": logits, "generate": generate, "processors": processors}[cmd](*args)
