"""Checks the GGUF files of bench/gguf_llama.py and bench/gguf_gptoss.py against llama.cpp's own
converter, convert_hf_to_gguf.py, on the same small random Llama and gpt-oss checkpoints: tensor
names, shapes, types and bytes, and every metadata key outside general.* and tokenizer.* (the
vocabulary is a placeholder by design).

    # llama.cpp's converter, as PyPI's llama-cpp-python source archive carries it:
    url=$(curl -s https://pypi.org/pypi/llama-cpp-python/json | python3 -c 'import json, sys;
        print([u["url"] for u in json.load(sys.stdin)["urls"] if u["packagetype"] == "sdist"][0])')
    curl -sL "$url" | tar xz
    .venv-bench/bin/python bench/gguf_converter_check.py \
        --llama-cpp llama_cpp_python-*/vendor/llama.cpp

Cases: Llama in bfloat16 and float32, tied and untied output, with and without llama3 RoPE scaling,
head_dim other than hidden / heads; gpt-oss with MXFP4 experts (bench/mxfp4_decode.py's checkpoint,
small, through bench/gguf_gptoss.py). Needs .venv-bench (torch, transformers, safetensors); the
converter's gguf-py is used for writing and reading both files.

It runs the converter in a child process with its own gguf-py first on sys.path, and with the
model's set_vocab replaced by gguf_llama.py's placeholder vocabulary (the checkpoints carry no
tokenizer). Prints one line per case and the differences; exits 1 when a case differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CONVERT = r"""
import sys
llama_cpp, bench = sys.argv[1], sys.argv[2]
sys.path[:0] = [llama_cpp + "/gguf-py", llama_cpp, bench]
import conversion.llama, conversion.gpt_oss
from gguf_llama import write_placeholder_vocab
for cls in (conversion.llama.LlamaModel, conversion.gpt_oss.GptOssModel):
    cls.set_vocab = lambda self: write_placeholder_vocab(self.gguf_writer,
                                                         self.hparams["vocab_size"])
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
convert_hf_to_gguf.main()
"""

CASES = [  # name, dtype, tied, llama3 rope scaling, head_dim (None: hidden / heads)
    ("bf16-tied-llama3", "bfloat16", True, True, None),
    ("bf16-untied", "bfloat16", False, False, None),
    ("bf16-head_dim-32", "bfloat16", True, True, 32),
    ("f32-tied-llama3", "float32", True, True, None),
    ("f32-untied-llama3", "float32", False, True, None),
]


def make_model(dtype, tied, llama3, head_dim, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    rope = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    cfg = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=tied,
                      rope_scaling=rope if llama3 else None, head_dim=head_dim or 16)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so that a dropped or misplaced one shows
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model.to(getattr(torch, dtype))


def gptoss_case(d):
    """bench/mxfp4_decode.py's random gpt-oss checkpoint (MXFP4 experts as released), small, and
    gguf_gptoss.py's GGUF of it as d/model.gguf."""
    from mxfp4_decode import write_checkpoint

    a = argparse.Namespace(hidden=64, intermediate=64, experts=4, layers=2, head_dim=16, heads=4,
                           kv_heads=2, vocab=320, top=2, llama_cpp=True)
    os.makedirs(d)
    write_checkpoint(d, a)
    return os.path.join(d, "model.gguf")


def read(path):
    from gguf import GGUFReader

    r = GGUFReader(path)
    meta = {}
    for name, f in r.fields.items():
        if name.startswith(("general.", "tokenizer.", "GGUF.")):
            continue
        v = f.contents() if hasattr(f, "contents") else [f.parts[i].tolist() for i in f.data]
        meta[name] = v
    tensors = {t.name: (tuple(int(d) for d in t.shape), t.tensor_type.name, t.data.tobytes())
               for t in r.tensors}
    return meta, tensors


def compare(ours, theirs):
    """The differences between two read() results, as lines."""
    out = []
    (m1, t1), (m2, t2) = ours, theirs
    for k in sorted(set(m1) | set(m2)):
        if k not in m1:
            out.append("metadata %s: only in the converter's (%r)" % (k, m2[k]))
        elif k not in m2:
            out.append("metadata %s: only in ours (%r)" % (k, m1[k]))
        elif m1[k] != m2[k]:
            out.append("metadata %s: ours %r, converter %r" % (k, m1[k], m2[k]))
    for k in sorted(set(t1) | set(t2)):
        if k not in t1 or k not in t2:
            out.append("tensor %s: only in %s" % (k, "the converter's" if k in t2 else "ours"))
            continue
        (s1, ty1, b1), (s2, ty2, b2) = t1[k], t2[k]
        if s1 != s2 or ty1 != ty2:
            out.append("tensor %s: ours %s %s, converter %s %s" % (k, ty1, s1, ty2, s2))
        elif b1 != b2:
            out.append("tensor %s: same %s %s, different bytes" % (k, ty1, s1))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-cpp", required=True,
                   help="llama.cpp's directory (convert_hf_to_gguf.py, conversion/, gguf-py/)")
    args = p.parse_args()
    lc = os.path.abspath(args.llama_cpp)
    sys.path[:0] = [lc + "/gguf-py", HERE]  # the converter's gguf, for writer and reader alike
    from gguf_llama import write_llama_gguf
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, dtype, tied, llama3, head_dim) in enumerate(CASES):
            model = make_model(dtype, tied, llama3, head_dim, seed=i)
            d = os.path.join(tmp, name)
            model.save_pretrained(d, safe_serialization=True)
            ours, theirs = os.path.join(tmp, name + ".ours.gguf"), os.path.join(tmp, name + ".gguf")
            write_llama_gguf(model, ours, dtype)
            outtype = {"bfloat16": "bf16", "float32": "f32"}[dtype]
            failed += check(name, d, ours, theirs, outtype, lc)
        d = os.path.join(tmp, "gptoss-mxfp4")
        failed += check("gptoss-mxfp4", d, gptoss_case(d), d + ".gguf", "bf16", lc)
    print(json.dumps({"cases": len(CASES) + 1, "differing": failed}))
    sys.exit(1 if failed else 0)


def check(name, d, ours, theirs, outtype, lc):
    """Converts checkpoint d with llama.cpp's converter to `theirs`, compares it with `ours` and
    prints the outcome; returns 1 when they differ."""
    r = subprocess.run([sys.executable, "-c", CONVERT, lc, HERE, d, "--outtype", outtype,
                        "--outfile", theirs], capture_output=True, text=True)
    if r.returncode != 0:
        print("%-18s converter failed:\n%s" % (name, r.stderr[-3000:]))
        return 1
    a, b = read(ours), read(theirs)
    diff = compare(a, b)
    print("%-18s %d tensors, %d metadata keys: %s" % (
        name, len(b[1]), len(b[0]), "identical" if not diff else "%d differences" % len(diff)))
    for line in diff:
        print("    " + line)
    return int(bool(diff))


if __name__ == "__main__":
    main()
