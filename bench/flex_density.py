#!/usr/bin/env python3
"""flex_attention's cost against the density of its block mask: a document mask (8 equal
documents, causal inside each) at L = 8192 against the dense causal fused kernel, in one run.

    PYTHONPATH=build-nocuda/python /usr/bin/python3 bench/flex_density.py [--threads 2]

q, k, v (1, 4, 8192, 64) float32. Prints the block mask (its sparsity), the median forward time
of F.scaled_dot_product_attention(is_causal=True), of flex_attention with the document mask, with
a causal block mask, and with a causal block mask plus a tanh softcap score_mod, and the ratio
causal / document (issue 31 asks for at least 5x). The last line is `result: {JSON}`.
"""
import argparse
import json
import statistics
import time

import attn
import attn.nn.functional as F
from attn.nn.attention.flex_attention import create_block_mask, flex_attention


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    attn.set_num_threads(a.threads)
    B, H, L, D = 1, 4, 8192, 64
    attn.manual_seed(0)
    q, k, v = (attn.randn(B, H, L, D) for _ in range(3))
    doc = attn.tensor([i // (L // 8) for i in range(L)])

    def document(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def softcap(score, b, h, q_idx, kv_idx):
        return attn.tanh(score / 30) * 30

    t0 = time.perf_counter()
    doc_mask = create_block_mask(document, None, None, L, L)
    mask_ms = (time.perf_counter() - t0) * 1e3
    causal_mask = create_block_mask(causal, None, None, L, L)
    r = {
        "sdpa_causal_ms": median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                    a.reps),
        "flex_document_ms": median_ms(lambda: flex_attention(q, k, v, block_mask=doc_mask), a.reps),
        "flex_causal_ms": median_ms(lambda: flex_attention(q, k, v, block_mask=causal_mask),
                                    a.reps),
        "flex_softcap_causal_ms": median_ms(
            lambda: flex_attention(q, k, v, score_mod=softcap, block_mask=causal_mask), a.reps),
        "create_block_mask_ms": mask_ms, "sparsity": doc_mask.sparsity(), "threads": a.threads,
    }
    r["causal_over_document"] = r["sdpa_causal_ms"] / r["flex_document_ms"]
    print(doc_mask)
    for key, value in r.items():
        print("{:24s} {:.2f}".format(key, value))
    print("result: " + json.dumps(r))


if __name__ == "__main__":
    main()
