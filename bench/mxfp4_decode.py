"""gpt-oss's experts kept in MXFP4 against the same experts dequantized to bfloat16: decoding speed
and resident memory of attn.nn.Decoder on a gpt-oss-20b-shaped checkpoint with fewer layers
(random weights: the experts as MXFP4 pairs, as released; the rest float32, loaded in bfloat16).

    PYTHONPATH=build/python .venv-bench/bin/python bench/mxfp4_decode.py --threads 2 --reps 3

Each load runs in its own process (its peak resident size is its own), the two alternating;
prefill tok/s is P over the best of 3 generate(P, 1); decode tok/s is N over generate(P, 1 + N)'s time less the best of 3 generate(P, 1), batch 1,
medians of the repetitions. The experts' bytes are what each keeps: 17 bytes a 32-weight group in MXFP4, 64 in
bfloat16."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write_checkpoint(d, a):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    H, I, E, L = a.hidden, a.intermediate, a.experts, a.layers
    D, NH, KV = a.head_dim, a.heads, a.kv_heads
    cfg = dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], vocab_size=a.vocab,
               hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
               num_key_value_heads=KV, head_dim=D, num_local_experts=E,
               num_experts_per_tok=a.top, sliding_window=128, max_position_embeddings=4096,
               torch_dtype="bfloat16", quantization_config=dict(quant_method="mxfp4"))
    t = {}

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    t["model.embed_tokens.weight"] = normal(a.vocab, H)
    t["lm_head.weight"] = normal(a.vocab, H)
    t["model.norm.weight"] = np.ones(H, np.float32)
    for l in range(L):
        p = "model.layers.{}.".format(l)
        t[p + "input_layernorm.weight"] = np.ones(H, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(H, np.float32)
        for name, rows in (("q_proj", NH * D), ("k_proj", KV * D), ("v_proj", KV * D)):
            t[p + "self_attn." + name + ".weight"] = normal(rows, H)
            t[p + "self_attn." + name + ".bias"] = np.zeros(rows, np.float32)
        t[p + "self_attn.o_proj.weight"] = normal(H, NH * D)
        t[p + "self_attn.o_proj.bias"] = np.zeros(H, np.float32)
        t[p + "self_attn.sinks"] = np.zeros(NH, np.float32)
        t[p + "mlp.router.weight"] = normal(E, H)
        t[p + "mlp.router.bias"] = np.zeros(E, np.float32)
        for name, R, C in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            t[p + "mlp.experts." + name + "_blocks"] = rng.integers(
                0, 256, (E, R, C // 32, 16), dtype=np.uint8)
            # scales 2^-7 .. 2^-5: weights up to 6 / 32, as trained experts' are
            t[p + "mlp.experts." + name + "_scales"] = rng.integers(
                120, 123, (E, R, C // 32), dtype=np.uint8)
            t[p + "mlp.experts." + name + "_bias"] = np.zeros((E, R), np.float32)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return 3 * I * H * E * L  # expert weights


def child(d, dequantize, a):
    import attn
    attn.set_num_threads(a.threads)
    model = attn.nn.Decoder.from_pretrained(d, dtype="bfloat16", dequantize_mxfp4=dequantize)
    prompt = attn.tensor([[(7 * i) % a.vocab for i in range(a.prompt)]])
    model.generate(prompt, max_new_tokens=2)  # warm-up
    prefill = []
    for _ in range(3):  # the prompt's pass and the first token, best of 3
        t0 = time.perf_counter()
        model.generate(prompt, max_new_tokens=1)
        prefill.append(time.perf_counter() - t0)
    t1 = time.perf_counter()
    model.generate(prompt, max_new_tokens=1 + a.new)
    decode = a.new / (time.perf_counter() - t1 - min(prefill))
    np.save(os.path.join(d, "logits_{}.npy".format(int(dequantize))),
            model(prompt)[0, -1].float().numpy())
    print(json.dumps(dict(decode=decode, prefill=a.prompt / min(prefill), rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                          * 1024)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=2880)
    p.add_argument("--intermediate", type=int, default=2880)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--top", type=int, default=4)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.child[0], a.child[1] == "1", a)
    with tempfile.TemporaryDirectory() as d:
        n = write_checkpoint(d, a)
        runs = {False: [], True: []}
        for _ in range(a.reps):
            for dq in (False, True):
                r = subprocess.run([sys.executable, __file__, "--child", d, str(int(dq))] +
                                   [x for x in sys.argv[1:]], capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(r.stderr)
                runs[dq].append(json.loads(r.stdout.strip().splitlines()[-1]))
        kept, deq = (np.load(os.path.join(d, "logits_{}.npy".format(i))) for i in (0, 1))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print("{}; {} layers of gpt-oss-20b's shape ({} experts of {} x {}, top {}), {:.2f} B expert "
          "weights; {} threads, batch 1, {}-token prompt, {} new tokens; medians of {}".format(
              cpu, a.layers, a.experts, a.hidden, a.intermediate, a.top, n / 1e9, a.threads,
              a.prompt, a.new, a.reps))
    print("| experts | bytes of experts | prefill tok/s | decode tok/s | peak RSS GB |")
    print("|---|---|---|---|---|")
    for dq, name, per in ((False, "MXFP4 (kept)", 17 / 32), (True, "bfloat16 (dequantized)", 2)):
        print("| {} | {:.2f} GB | {:.1f} | {:.2f} | {:.2f} |".format(
            name, n * per / 1e9, statistics.median(r["prefill"] for r in runs[dq]),
            statistics.median(r["decode"] for r in runs[dq]),
            statistics.median(r["rss"] for r in runs[dq]) / 1e9))
    print("last-position logits of the two loads: max difference {:.3g} for logits up to "
          "{:.3g}".format(np.abs(kept - deq).max(), np.abs(deq).max()))


if __name__ == "__main__":
    main()
