#!/usr/bin/env python3
"""What a bfloat16, float16 or int8 key/value cache does to a trained model: logits and greedy text.

    build/attn train --data ../shared/data/tinyshakespeare.txt --out /tmp/kvq --max-iters 2000 \\
        --block-size 128
    PYTHONPATH=build/python /usr/bin/python3 bench/kv_cache_quality.py --ckpt /tmp/kvq \\
        --data ../shared/data/tinyshakespeare.txt

The model reads windows of --windows x block_size characters from the last 10% of --data (the
validation text) through a paged cache (GPT.forward_paged: the keys and values of the window are
written to the cache, then every position attends to the cache's copies) holding float32,
bfloat16, float16 or int8 (one scale per 32 values, ggml's q8_0). Against the float32 cache it reports the
largest and mean absolute difference of the logits, the mean KL divergence of the next-character
distributions, how often the most likely character agrees, and each cache's loss on the text.
Then --prompts prompts of 32 characters each are continued greedily (top_k=1) for the rest of the
block, all at once (GPT.generate_paged), and the continuations are compared with float32's: the
tokens that agree, the prompts whose continuation is identical, and where they first differ.
The last line is `result: {JSON}`.
"""
import argparse
import json
import math
import sys

import numpy as np

try:
    import attn
except ImportError as e:
    sys.exit("kv_cache_quality.py: error: cannot import attn (%s); set PYTHONPATH=build/python" % e)

from generate_attn import load_model  # noqa: E402  (an attn checkpoint, weights read in place)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", required=True, help="an `attn train` output directory or file")
    p.add_argument("--data", required=True, help="the text the model was trained on")
    p.add_argument("--windows", type=int, default=16)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    attn.set_num_threads(a.threads)
    model, chars = load_model(a.ckpt)
    config = model.config
    T = config["block_size"]
    with open(a.data, encoding="utf-8") as f:
        text = f.read()
    val = text[int(len(text) * 0.9):]
    index = {c: i for i, c in enumerate(chars)}
    ids = [index[c] for c in val if c in index]
    step = max(1, (len(ids) - T - 1) // a.windows)
    starts = [i * step for i in range(a.windows)]
    dtypes = ["float32", "bfloat16", "float16", "int8"]

    logits = {}
    for d in dtypes:
        out = []
        for s in starts:
            cache = model.make_paged_cache((T + 15) // 16, 16, d)
            seq = cache.add_sequence()
            x = attn.tensor([ids[s:s + T]])
            out.append(np.array(model.forward_paged(x, cache, [seq]).tolist(), dtype=np.float64)[0])
        logits[d] = np.stack(out)  # (windows, T, V)
    targets = np.array([ids[s + 1:s + T + 1] for s in starts])
    ref = logits["float32"]
    ref_lp = log_softmax(ref)
    result = {"model": {k: config[k] for k in ("n_layer", "n_head", "n_embd", "block_size")},
              "windows": a.windows, "positions": int(targets.size), "logits": {}, "greedy": {}}
    for d in dtypes:
        lp = log_softmax(logits[d])
        diff = np.abs(logits[d] - ref)
        kl = (np.exp(ref_lp) * (ref_lp - lp)).sum(-1)
        loss = -np.take_along_axis(lp, targets[..., None], -1).mean()
        result["logits"][d] = {
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
            "top1_agree": float((lp.argmax(-1) == ref_lp.argmax(-1)).mean()),
            "loss": float(loss)}

    prompt_len = 32
    pstep = max(1, (len(ids) - prompt_len) // a.prompts)
    prompts = [ids[i * pstep:i * pstep + prompt_len] for i in range(a.prompts)]
    new = T - prompt_len
    gen = {d: model.generate_paged(prompts, new, top_k=1, kv_dtype=d) for d in dtypes}
    for d in dtypes:
        same_tokens = total = identical = 0
        first_diff = []
        for g, r in zip(gen[d], gen["float32"]):
            g, r = g[prompt_len:], r[prompt_len:]
            same_tokens += sum(x == y for x, y in zip(g, r))
            total += len(r)
            diverge = next((i for i, (x, y) in enumerate(zip(g, r)) if x != y), None)
            identical += diverge is None
            first_diff.append(new if diverge is None else diverge)
        result["greedy"][d] = {"prompts": a.prompts, "new_tokens": new,
                               "token_agreement": same_tokens / total,
                               "identical_continuations": identical,
                               "median_first_difference": float(np.median(first_diff))}
    sample = "".join(chars[i] for i in gen["int8"][0][prompt_len:prompt_len + 60])
    print("int8 continuation of prompt 0: %r" % sample)
    print("result: " + json.dumps(result))


if __name__ == "__main__":
    main()
