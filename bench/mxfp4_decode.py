"""gpt-oss's experts kept in MXFP4 against the same experts dequantized to bfloat16, and against
llama.cpp's MXFP4 gpt-oss: decoding speed and resident memory of attn.nn.Decoder on a
gpt-oss-20b-shaped checkpoint with fewer layers (random weights: the experts as MXFP4 pairs, as
released; the rest float32, loaded in bfloat16; llama.cpp reads the same weights from a GGUF file
written by bench/gguf_gptoss.py, the experts in ggml's MXFP4, the other matrices in bfloat16).

    PYTHONPATH=build/python .venv-bench/bin/python bench/mxfp4_decode.py --threads 2 --reps 3

Each load runs in its own process (its peak resident size is its own), alternating; prefill tok/s
is P over the best of 3 passes over the prompt (attn: generate(P, 1); llama.cpp: eval(P));
decode tok/s is N over the time of N further tokens, greedy, batch 1 (attn: from the first
token of generate(P, 1 + N) to the last, by its callback; llama.cpp: N single-token evals after
the prompt), medians of the repetitions.
The experts' bytes are what each keeps: 17 bytes a 32-weight group in MXFP4, 64 in bfloat16.
"8-bit activations" is the MXFP4 load with mxfp4_int8_activations=True (llama.cpp's q8_0
rounding of a decoded token's activations; the default rounds them to 16-bit integers).
llama.cpp runs with flash attention and its default float16 cache; without llama-cpp-python
(scripts/bench_setup.sh --llama-cpp) or with --no-llama-cpp its row is left out."""
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
sys.path.insert(0, HERE)
from gguf_gptoss import bf16_values  # noqa: E402 (NumPy only; gguf is imported when writing)


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

    def normal(*shape, std=0.02):  # float32 holding bfloat16 values: the same numbers in each load
        return bf16_values(rng.standard_normal(shape, dtype=np.float32) * std)

    t["model.embed_tokens.weight"] = normal(a.vocab, H)
    t["lm_head.weight"] = normal(a.vocab, H)
    t["model.norm.weight"] = bf16_values(1 + normal(H, std=0.1))
    for l in range(L):
        p = "model.layers.{}.".format(l)
        # norms, biases and sinks not the trivial ones, so that the logits of attn and llama.cpp
        # check that every one is read
        t[p + "input_layernorm.weight"] = bf16_values(1 + normal(H, std=0.1))
        t[p + "post_attention_layernorm.weight"] = bf16_values(1 + normal(H, std=0.1))
        for name, rows in (("q_proj", NH * D), ("k_proj", KV * D), ("v_proj", KV * D)):
            t[p + "self_attn." + name + ".weight"] = normal(rows, H)
            t[p + "self_attn." + name + ".bias"] = normal(rows)
        t[p + "self_attn.o_proj.weight"] = normal(H, NH * D)
        t[p + "self_attn.o_proj.bias"] = normal(H)
        t[p + "self_attn.sinks"] = normal(NH, std=1.0)
        t[p + "mlp.router.weight"] = normal(E, H)
        t[p + "mlp.router.bias"] = normal(E)
        for name, R, C in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            t[p + "mlp.experts." + name + "_blocks"] = rng.integers(
                0, 256, (E, R, C // 32, 16), dtype=np.uint8)
            # scales 2^-7 .. 2^-5: weights up to 6 / 32, as trained experts' are
            t[p + "mlp.experts." + name + "_scales"] = rng.integers(
                120, 123, (E, R, C // 32), dtype=np.uint8)
            t[p + "mlp.experts." + name + "_bias"] = normal(E, R)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if a.llama_cpp:
        from gguf_gptoss import write_gptoss_gguf
        write_gptoss_gguf(t, cfg, os.path.join(d, "model.gguf"))
    return 3 * I * H * E * L  # expert weights


def rss():
    """This process's peak resident size (VmHWM: ru_maxrss would include the parent's at fork)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(d, mode, a):
    prompt = [(7 * i) % a.vocab for i in range(a.prompt)]
    if mode == "cpp":
        return child_llama_cpp(d, prompt, a)
    import attn
    attn.set_num_threads(a.threads)
    if mode == "ref":  # float32 compute of the same weights: the logits' reference, not timed
        model = attn.nn.Decoder.from_pretrained(d, dtype="float32")
        np.save(os.path.join(d, "logits_ref.npy"), model(attn.tensor([prompt]))[0, -1].numpy())
        out = model.generate(attn.tensor([prompt]), max_new_tokens=1 + a.new)
        np.save(os.path.join(d, "tokens_ref.npy"), np.array(out[0, a.prompt:].tolist()))
        return print("{}")
    model = attn.nn.Decoder.from_pretrained(d, dtype="bfloat16", dequantize_mxfp4=mode == "1",
                                            mxfp4_int8_activations=mode == "2")
    prompt = attn.tensor([prompt])
    model.generate(prompt, max_new_tokens=2)  # warm-up
    prefill = []
    for _ in range(3):  # the prompt's pass and the first token, best of 3
        t0 = time.perf_counter()
        model.generate(prompt, max_new_tokens=1)
        prefill.append(time.perf_counter() - t0)
    stamps = []  # the time of each new token: the first comes after the prompt's pass
    out = model.generate(prompt, max_new_tokens=1 + a.new,
                         callback=lambda _: stamps.append(time.perf_counter()))
    np.save(os.path.join(d, "tokens_{}.npy".format(mode)), np.array(out[0, a.prompt:].tolist()))
    decode = a.new / (stamps[-1] - stamps[0])
    np.save(os.path.join(d, "logits_{}.npy".format(mode)), model(prompt)[0, -1].float().numpy())
    print(json.dumps(dict(decode=decode, prefill=a.prompt / min(prefill), rss=rss())))


def child_llama_cpp(d, prompt, a):
    import llama_cpp
    llm = llama_cpp.Llama(os.path.join(d, "model.gguf"), n_ctx=a.prompt + a.new + 16,
                          n_batch=512, n_ubatch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, flash_attn=True, verbose=False)

    def logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(a.vocab,)).copy()

    def prompt_pass():
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        return time.perf_counter() - t0

    prompt_pass()  # warm-up
    prefill = [prompt_pass() for _ in range(3)]
    last = logits()
    tokens = [int(last.argmax())]
    t1 = time.perf_counter()
    for _ in range(a.new):
        llm.eval([tokens[-1]])
        tokens.append(int(logits().argmax()))
    decode = a.new / (time.perf_counter() - t1)
    np.save(os.path.join(d, "logits_cpp.npy"), last)
    np.save(os.path.join(d, "tokens_cpp.npy"), np.array(tokens))
    print(json.dumps(dict(decode=decode, prefill=a.prompt / min(prefill), rss=rss())))


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
    p.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], a)
    a.llama_cpp = False
    if not a.no_llama_cpp:
        try:
            import gguf  # noqa: F401
            import llama_cpp  # noqa: F401
            a.llama_cpp = True
        except ImportError as e:
            print("llama.cpp left out (%s): scripts/bench_setup.sh --llama-cpp installs it" % e)
    rows = [("0", "attn, MXFP4 (kept)", 17 / 32),
            ("2", "attn, MXFP4, 8-bit activations (llama.cpp's)", 17 / 32),
            ("1", "attn, bfloat16 (dequantized)", 2)]
    if a.llama_cpp:
        rows.append(("cpp", "llama.cpp, MXFP4", 17 / 32))
    with tempfile.TemporaryDirectory() as d:
        n = write_checkpoint(d, a)
        runs = {mode: [] for mode, _, _ in rows}

        def run(mode):
            r = subprocess.run([sys.executable, __file__, "--child", d, mode] +
                               [x for x in sys.argv[1:]], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(r.stderr)
            return json.loads(r.stdout.strip().splitlines()[-1])

        run("ref")
        for _ in range(a.reps):
            for mode in runs:
                runs[mode].append(run(mode))
        logits = {mode: np.load(os.path.join(d, "logits_{}.npy".format(mode)))
                  for mode in list(runs) + ["ref"]}
        tokens = {mode: np.load(os.path.join(d, "tokens_{}.npy".format(mode)))
                  for mode in list(runs) + ["ref"]}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print("{}; {} layers of gpt-oss-20b's shape ({} experts of {} x {}, top {}), {:.2f} B expert "
          "weights; {} threads, batch 1, {}-token prompt, {} new tokens; medians of {}".format(
              cpu, a.layers, a.experts, a.hidden, a.intermediate, a.top, n / 1e9, a.threads,
              a.prompt, a.new, a.reps))
    print("| run | bytes of experts | prefill tok/s | decode tok/s | peak RSS GB |")
    print("|---|---|---|---|---|")
    for mode, name, per in rows:
        print("| {} | {:.2f} GB | {:.1f} | {:.2f} | {:.2f} |".format(
            name, n * per / 1e9, statistics.median(r["prefill"] for r in runs[mode]),
            statistics.median(r["decode"] for r in runs[mode]),
            statistics.median(r["rss"] for r in runs[mode]) / 1e9))
    ref = logits["ref"]
    print("last-position logits against attn's float32 computation of the same weights "
          "(logits up to {:.3g}):".format(np.abs(ref).max()))
    for mode, name, _ in rows:
        print("  {}: max difference {:.3g}, the same argmax: {}".format(
            name, np.abs(logits[mode] - ref).max(), int(logits[mode].argmax()) == int(ref.argmax())))
    # the prompt's logits above come from its pass over 256 rows; the 8-bit path runs for up to 8
    # (decoding): the greedy tokens show it
    print("greedy tokens (the first after the prompt, then {} decoded) against the float32 "
          "computation's:".format(a.new))
    for mode, name, _ in rows:
        same = tokens[mode] == tokens["ref"][:len(tokens[mode])]
        first = int(np.argmin(same)) if not same.all() else None
        print("  {}: {} of {} the same{}".format(
            name, int(same.sum()), len(same),
            "" if first is None else ", the first difference at token {}".format(first)))


if __name__ == "__main__":
    main()
