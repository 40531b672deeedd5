#!/usr/bin/env python3
"""A Llama-3.2-1B-shaped decoder, attn against Hugging Face transformers on PyTorch 2.x and against
llama.cpp, float32, bfloat16 or float16 (--dtype), in one process (issue 32, section 5).

    scripts/bench_setup.sh --llama-cpp   # .venv-bench: torch 2.15, transformers, llama-cpp-python
    PYTHONPATH=build-nocuda/python .venv-bench/bin/python bench/decoder_compare.py --threads 2

transformers builds LlamaForCausalLM with random weights (16 layers, 2048 wide, 32 query and 8
key/value heads, SwiGLU 8192, vocabulary 128256, llama3 RoPE scaling, tied embeddings: the shape
of Llama 3.2 1B) and saves it in --dtype; both load the same directory in that dtype (attn's
2-byte weights memory-mapped from the file).
Logits are compared first. Timed, alternating, --reps times each after a warm-up:
  prefill  a --prompt-token prompt through one forward, to the logits of its last position (what
           generation needs: attn and transformers with logits_to_keep=1, llama.cpp computes
           only those)
  decode   --new greedy tokens after a --context-token prompt, through each library's key/value
           cache (generate), each token timed as it comes (attn's callback, a transformers
           streamer): tokens per second between the first new token and the last
transformers runs with attn_implementation "eager" and "sdpa". llama.cpp (PyPI's llama-cpp-python,
built for this CPU by bench_setup.sh; left out with --no-llama-cpp or when it is not installed)
runs the same weights written as GGUF (bench/gguf_llama.py; matrices in --dtype, the same bits)
with its default float16 key/value cache and flash attention, --threads threads, one 512-token
batch for prefill; it is fed token ids and decodes greedily (argmax of its logits) one
llama_decode per token. The memory-bandwidth bound of
decoding (every weight read once per token) uses the read bandwidth measured in the same run
(torch's sum of 1 GiB on the same threads). attn's resident memory after loading and one decode
(before transformers loads) is reported against the weights and the key/value cache.
Medians; the last line is `result: {JSON}`; --md writes the section of BENCHMARKS.md.
"""
import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

try:
    import torch
    import transformers
except ImportError:
    sys.exit("decoder_compare.py: error: no torch 2.x / transformers; run scripts/bench_setup.sh "
             "and use its python")
try:
    import attn
except ImportError as e:
    sys.exit("decoder_compare.py: error: cannot import attn (%s); set PYTHONPATH" % e)


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def bandwidth():
    """Read bandwidth (bytes per second): torch's sum of 1 GiB of float32 on the bench's threads,
    best of 5 (what decoding does: stream every weight once)."""
    a = torch.ones(1 << 28, dtype=torch.float32)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    return a.numel() * 4 / best


def cpu_model():
    """The model name with its family and model numbers and widest vector extension (a VM's name
    is often just "AMD EPYC", which does not say which generation)."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    if "model name" not in info:
        return "unknown CPU"
    flags = info.get("flags", "").split()
    isa = ("AVX-512 with BF16" if "avx512_bf16" in flags else "AVX-512" if "avx512f" in flags
           else "AVX2" if "avx2" in flags else "no AVX2")
    return "%s, family %s model %s, %s" % (info["model name"], info.get("cpu family", "?"),
                                           info.get("model", "?"), isa)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--md", default="")
    p.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out")
    p.add_argument("--no-torch", action="store_true",
                   help="time attn and llama.cpp only (transformers still checks the logits): "
                        "its long prompts take many minutes where its bfloat16 products are slow")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    attn.set_num_threads(a.threads)
    torch.manual_seed(0)

    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=8192),
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    d = tempfile.mkdtemp(prefix="decoder_compare_")
    try:
        run(a, cfg, d)
    finally:  # the checkpoint and the GGUF file: 5-10 GB
        shutil.rmtree(d, ignore_errors=True)


def run(a, cfg, d):
    with torch.device("cpu"):
        hf = transformers.LlamaForCausalLM(cfg).eval()
    tdt = getattr(torch, a.dtype)
    hf.to(tdt).save_pretrained(d)
    llama_cpp = None
    if not a.no_llama_cpp:
        try:
            import llama_cpp
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from gguf_llama import write_llama_gguf
            write_llama_gguf(hf, os.path.join(d, "model.gguf"), a.dtype)
        except ImportError as e:
            llama_cpp = None
            print("llama.cpp left out (%s): scripts/bench_setup.sh --llama-cpp installs it" % e)
    unique = {t.data_ptr(): t.numel() for t in hf.state_dict().values()}  # tied: counted once
    item = 4 if a.dtype == "float32" else 2
    weights = item * sum(unique.values())
    params = sum(unique.values())
    del hf
    gc.collect()

    before = rss_bytes()
    model = attn.nn.Decoder.from_pretrained(d, torch_dtype=getattr(attn, a.dtype))
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, a.vocab, size=(1, a.prompt)).tolist()
    context = rng.integers(0, a.vocab, size=(1, a.context)).tolist()
    # Resident memory once attn has run (mapped weights are read when first used): a decode of
    # --new tokens after the context, before transformers loads anything.
    model.generate(attn.tensor(context), max_new_tokens=a.new)
    attn_rss = rss_bytes() - before
    # attn's cache holds the model's dtype.
    cache_bytes = 2 * a.layers * a.kv_heads * (a.hidden // a.heads) * (a.context + a.new) * item
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=tdt).eval()
    check = prompt[0][:32]
    with torch.no_grad():
        ref = hf(torch.tensor([check])).logits.float().numpy()
    ours = model(attn.tensor([check])).numpy()
    diff = float(np.abs(ours - ref).max())
    print("logits: max |attn - transformers| = %.3g (scale %.3g)" % (diff, np.abs(ref).max()))

    def hf_set(impl):
        if hasattr(hf, "set_attn_implementation"):
            hf.set_attn_implementation(impl)
        else:
            hf.config._attn_implementation = impl

    def hf_prefill(ids):
        with torch.no_grad():
            hf(torch.tensor(ids), use_cache=False, logits_to_keep=1)

    class Stamps(transformers.generation.streamers.BaseStreamer):
        """Times each new token (the first put is the prompt)."""
        def __init__(self):
            self.t = []

        def put(self, value):
            self.t.append(time.perf_counter())

        def end(self):
            pass

    def hf_generate(ids):
        st = Stamps()
        with torch.no_grad():
            hf.generate(torch.tensor(ids), max_new_tokens=a.new, min_new_tokens=a.new,
                        do_sample=False, pad_token_id=0, streamer=st)
        return st.t[-a.new:]

    if llama_cpp is not None:
        llm = llama_cpp.Llama(os.path.join(d, "model.gguf"), n_ctx=max(a.prompt, a.context + a.new),
                              n_batch=512, n_ubatch=512, n_threads=a.threads,
                              n_threads_batch=a.threads, flash_attn=True, verbose=False)

        def llm_logits():
            return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(a.vocab,))

        llm.reset()
        llm.eval(check)
        cpp_diff = float(np.abs(llm_logits() - ref[0, -1]).max())
        print("logits: max |llama.cpp - transformers| = %.3g (last position)" % cpp_diff)

        def cpp_prefill(ids):
            llm.reset()
            llm.eval(ids[0])

        def cpp_generate(ids):
            llm.reset()
            llm.eval(ids[0])
            t = [time.perf_counter()]
            for _ in range(a.new - 1):
                llm.eval([int(llm_logits().argmax())])
                t.append(time.perf_counter())
            return t

    def attn_prefill(ids):  # as transformers' side runs: no autograd graph
        with attn.no_grad():
            model(attn.tensor(ids), logits_to_keep=1)

    def attn_generate(ids):
        t = []
        model.generate(attn.tensor(ids), max_new_tokens=a.new,
                       callback=lambda _: t.append(time.perf_counter()))
        return t

    contenders = {"attn": (attn_prefill, attn_generate)}
    if not a.no_torch:
        contenders["torch eager"] = (hf_prefill, hf_generate)
        contenders["torch sdpa"] = (hf_prefill, hf_generate)
    if llama_cpp is not None:
        contenders["llama.cpp"] = (cpp_prefill, cpp_generate)
    impl = {"torch eager": "eager", "torch sdpa": "sdpa"}
    times = {k: {"prefill": [], "decode": []} for k in contenders}
    for rep in range(a.reps + 1):  # the first round warms up
        for name, (prefill, generate) in contenders.items():
            if name in impl:
                hf_set(impl[name])
            tp = timed(lambda: prefill(prompt))
            stamps = generate(context)  # the time of each new token
            td = (stamps[-1] - stamps[0]) / (len(stamps) - 1)  # per token, after the first
            if rep == 0:
                continue
            times[name]["prefill"].append(tp)
            times[name]["decode"].append(td)
            print("rep %d %-12s prefill %.3f s, %.3f s per decoded token" % (rep, name, tp, td),
                  flush=True)
    bw = bandwidth()
    res = {"threads": a.threads, "dtype": a.dtype, "params": params, "weights_bytes": weights,
           "attn_rss_bytes": attn_rss, "bandwidth_bytes_per_s": bw, "logits_max_diff": diff,
           "cpu": cpu_model(),
           "torch": torch.__version__, "transformers": transformers.__version__, "rows": {}}
    if llama_cpp is not None:
        res["llama_cpp_python"] = llama_cpp.__version__
        res["llama_cpp_logits_max_diff"] = cpp_diff
    for name, t in times.items():
        pre = statistics.median(t["prefill"])
        dec = statistics.median(t["decode"])
        res["rows"][name] = {"prefill_tok_s": a.prompt / pre, "decode_tok_s": 1.0 / dec}
    bound = bw / weights  # tokens/s if every weight byte is read once per token
    print("read bandwidth %.1f GB/s, weights %.2f GB: decode bound %.2f tok/s" %
          (bw / 1e9, weights / 1e9, bound))
    for name, r in res["rows"].items():
        print("%-12s prefill %7.1f tok/s   decode %6.2f tok/s (%.0f%% of the bound)" %
              (name, r["prefill_tok_s"], r["decode_tok_s"], 100 * r["decode_tok_s"] / bound))
    print("attn resident after a decode: %.2f GB for %.2f GB of weights and a %.3f GB cache" %
          (attn_rss / 1e9, weights / 1e9, cache_bytes / 1e9))
    print("result: " + json.dumps(res))
    if a.md:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import md_section
        rows = res["rows"]
        lines = [
            "## A Llama-3.2-1B-shaped decoder against transformers%s (issue 32, section 5, %s, %d "
            "thread%s, %d-token context)" % (" and llama.cpp" if "llama.cpp" in rows else "",
                                             a.dtype, a.threads, "" if a.threads == 1 else "s",
                                             a.context),
            "",
            "`PYTHONPATH=build-nocuda/python .venv-bench/bin/python bench/decoder_compare.py "
            "--threads %d --reps %d --new %d%s%s --md BENCHMARKS.md` (%s; torch %s, transformers %s; "
            "%d parameters, "
            "random weights, %d-token prompt for prefill, %d new tokens after %d for decode; "
            "medians of %d alternating runs)." % (a.threads, a.reps, a.new,
                                                  "" if a.dtype == "float32" else
                                                  " --dtype " + a.dtype,
                                                  "" if a.context == 512 else
                                                  " --context %d" % a.context,
                                                  res["cpu"], res["torch"],
                                                  res["transformers"], params, a.prompt, a.new,
                                                  a.context, a.reps),
            "",
            "| | prefill tok/s | decode tok/s | decode / bandwidth bound |",
            "|---|---|---|---|"]
        for name, r in rows.items():
            lines.append("| %s | %.1f | %.2f | %.0f%% |" % (
                name, r["prefill_tok_s"], r["decode_tok_s"], 100 * r["decode_tok_s"] / bound))
        ratios = ""
        if "torch sdpa" in rows:
            ratios = ("attn / torch sdpa: prefill %.2fx, decode %.2fx; attn / torch eager: "
                      "prefill %.2fx, decode %.2fx. " % (
                          rows["attn"]["prefill_tok_s"] / rows["torch sdpa"]["prefill_tok_s"],
                          rows["attn"]["decode_tok_s"] / rows["torch sdpa"]["decode_tok_s"],
                          rows["attn"]["prefill_tok_s"] / rows["torch eager"]["prefill_tok_s"],
                          rows["attn"]["decode_tok_s"] / rows["torch eager"]["decode_tok_s"]))
        lines += ["", ratios + "Read bandwidth (same run) %.1f GB/s; the "
                  "bound reads %.2f GB of weights per token. Logits agree to %.2g. attn's resident "
                  "memory after a decode: %.2f GB for %.2f GB of weights and a %.3f GB key/value "
                  "cache (%s)." % (bw / 1e9, weights / 1e9, diff, attn_rss / 1e9, weights / 1e9,
                                   cache_bytes / 1e9, a.dtype)]
        if "llama.cpp" in rows:
            lines[-1] += (" attn / llama.cpp (llama-cpp-python %s, same GGUF weights, float16 "
                          "key/value cache, logits within %.2g of transformers' at the last "
                          "position): prefill %.2fx, decode %.2fx." % (
                              res["llama_cpp_python"], res["llama_cpp_logits_max_diff"],
                              rows["attn"]["prefill_tok_s"] / rows["llama.cpp"]["prefill_tok_s"],
                              rows["attn"]["decode_tok_s"] / rows["llama.cpp"]["decode_tok_s"]))
        # One section per dtype, thread count and context (the default ones keep the plain key).
        key = "decoder_compare.py"
        if a.dtype != "float32":
            key += " --dtype " + a.dtype
        if a.threads != 2:
            key += " --threads %d" % a.threads
        if a.context != 512:
            key += " --context %d" % a.context
        md_section.replace_section(a.md, key, "\n".join(lines))


if __name__ == "__main__":
    main()
