#!/usr/bin/env bash
# Regenerates the seed corpora in fuzz/corpus/<target>/ (small valid and near-valid inputs).
#   bash fuzz/make_corpus.sh [path/to/attn]     (default: build/attn)
# The checkpoints come from a tiny `attn train` run (1 layer, 8-wide embedding, 8-token context,
# 2 steps on a 9-character vocabulary); everything else is written byte by byte here.
set -euo pipefail
attn=$(realpath "${1:-$(dirname "$0")/../build/attn}")
cd "$(dirname "$0")"
[ -x "$attn" ] || { echo "make_corpus.sh: no attn binary at $attn (build it or pass its path)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- checkpoints -------------------------------------------------------------------------------
rm -rf corpus/checkpoint && mkdir -p corpus/checkpoint
for _ in $(seq 12); do printf 'the cat sat on a hat, the hat sat on the cat.\n'; done >"$tmp/text.txt"
common=(--data "$tmp/text.txt" --n-layer 1 --n-head 2 --n-embd 8 --block-size 8 --batch-size 2
        --max-iters 2 --eval-interval 1 --eval-iters 1 --warmup-iters 0 --lr-decay-iters 2
        --no-progress --threads 1)
"$attn" train "${common[@]}" --out "$tmp/nobias" >/dev/null
"$attn" train "${common[@]}" --out "$tmp/bias" --bias >/dev/null
cp "$tmp/nobias/model.safetensors" corpus/checkpoint/model_nobias.safetensors
cp "$tmp/nobias/ckpt.safetensors" corpus/checkpoint/ckpt_nobias.safetensors
cp "$tmp/bias/model.safetensors" corpus/checkpoint/model_bias.safetensors

# ---- the rest ----------------------------------------------------------------------------------
/usr/bin/python3 - "$tmp/nobias/model.safetensors" <<'PY'
import json, os, struct, sys

def put(target, name, data):
    os.makedirs(f"corpus/{target}", exist_ok=True)
    with open(f"corpus/{target}/{name}", "wb") as f:
        f.write(data)

def st(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data

import shutil
shutil.rmtree("corpus/safetensors", ignore_errors=True)
put("safetensors", "empty", st({}))
put("safetensors", "f32", st({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
                             struct.pack("<4f", 1, -2.5, 0, float("inf"))))
put("safetensors", "mixed", st({"__metadata__": {"format": "pt", "k": "v"},
                                 "a": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]},
                                 "b": {"dtype": "BOOL", "shape": [1, 3], "data_offsets": [24, 27]},
                                 "c": {"dtype": "F32", "shape": [], "data_offsets": [27, 31]},
                                 "z": {"dtype": "F32", "shape": [0, 5], "data_offsets": [31, 31]}},
                                struct.pack("<3q", 1, -1, 1 << 62) + b"\x01\x00\x01" +
                                struct.pack("<f", 3.5)))
# near-valid: overlapping offsets, an unsupported dtype, a header length past the end
put("safetensors", "overlap", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                   "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}},
                                  b"\0" * 8))
put("safetensors", "f16", st({"h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4))
put("safetensors", "short", struct.pack("<Q", 1000) + b'{"a":')
with open(sys.argv[1], "rb") as f:
    put("safetensors", "model", f.read())
put("safetensors", "u8", st({"b": {"dtype": "U8", "shape": [2, 3], "data_offsets": [0, 6]}}, bytes(range(6))))

shutil.rmtree("corpus/tokenizer", ignore_errors=True)
put("tokenizer", "json", b"\x00" + b'{"type":"char","chars":["\\n"," ","a","\xc3\xa9","\xe2\x82\xac"]}')
put("tokenizer", "json_bad", b"\x00" + b'{"type":"char","chars":["b","a","a"],"type":"x"}')
put("tokenizer", "text", b"\x01" + "hello, wörld € 😀\n".encode())
put("tokenizer", "text_bad", b"\x01" + b"ab\xc0\x80cd\xed\xa0\x80")
put("tokenizer", "encode", b"\x02" + b"the cat sat\xffthe hat\x03\x7f")
put("tokenizer", "vocab", b"\x03" + b"Life is short, eat dessert first\tLife,\x1c x")

# fuzz_tensor's grammar (see fuzz/fuzz_tensor.cpp): 0/1 open, 2 close, 3 int8, 4 int64,
# 5 double, 6 small float, 7 bool
shutil.rmtree("corpus/tensor", ignore_errors=True)
put("tensor", "matrix_int", bytes([0, 0, 0, 3, 1, 3, 2, 2, 0, 3, 3, 3, 4, 2]))
put("tensor", "matrix_float", bytes([1, 0, 0, 6, 9, 6, 200, 2, 0, 3, 7, 5]) +
    struct.pack("<d", float("nan")) + bytes([2]))
put("tensor", "int64_overflow", bytes([2, 0, 5]) + struct.pack("<d", 1e30) + bytes([4]) +
    struct.pack("<q", -(1 << 63)))
put("tensor", "bool", bytes([0, 7, 1, 7, 0, 7, 1]))
put("tensor", "ragged", bytes([0, 0, 3, 1, 2, 0, 3, 1, 3, 2, 2]))
put("tensor", "empty", bytes([0, 0, 2, 0, 2]))
put("tensor", "scalar", bytes([4, 6, 77]))

shutil.rmtree("corpus/cli", ignore_errors=True)
def cli(name, *args):
    put("cli", name, b"\0".join(a.encode() for a in args))
cli("train", "train", "--n-layer", "1", "--n-head=2", "--n-embd", "8", "--lr", "3e-4", "--bias",
    "--no-bias", "--resume", "--out", "o", "--threads", "1")
cli("train_bad", "train", "--n-embd", "10", "--n-head", "3", "--warmup-iters", "5000")
cli("train_faults", "train", "--on-nonfinite", "skip", "--out", "o")
cli("generate", "generate", "--ckpt", "out", "--prompt", "hi", "--temperature=0.5", "--top-k",
    "0", "--no-cache", "--seed", "18446744073709551615")
cli("heatmap", "heatmap", "--mechanism", "multihead", "--heads", "2", "--d-out", "4", "--out",
    "x.png", "--sentence", "Life is short, eat dessert first")
cli("walkthrough", "walkthrough", "003", "--plots", "dir")
cli("plot", "plot", "spec.json", "--out", "x.png")
cli("help", "help", "train")
cli("version", "--version")
cli("command_help", "generate", "--ckpt", "x", "-h")

# fuzz_files: byte 0 picks the reader (0 text file, 1 lock record, 2 PNG); see fuzz/fuzz_files.cpp
shutil.rmtree("corpus/files", ignore_errors=True)
put("files", "text", b"\x00" + "First Citizen:\nBefore we proceed any further, hear me speak. é€😀\n".encode())
put("files", "text_nul", b"\x00" + b"abc\x00def")
put("files", "text_latin1", b"\x00" + b"caf\xe9 au lait")
put("files", "empty", b"\x00")
put("files", "lock", b"\x01" + b'{"command":"attn train","host":"box","pid":4242,"started":1700000000}\n')
put("files", "lock_bad", b"\x01" + b'{"pid":-1,"host":7,"started":1.5}')
import zlib
def png(width, height, color_type, bit_depth, rows, palette=None, interlace=0):
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    raw = b"".join(b"\x00" + r for r in rows)  # filter 0 on every row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
            (chunk(b"PLTE", palette) if palette else b"") +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
put("files", "png_rgb", b"\x02" + png(3, 2, 2, 8, [bytes(range(9)), bytes(range(9, 18))]))
put("files", "png_palette", b"\x02" + png(2, 2, 3, 8, [b"\x00\x01", b"\x01\x00"],
                                        palette=b"\xff\x00\x00\x00\x00\xff"))
put("files", "png_gray1", b"\x02" + png(8, 1, 0, 1, [b"\xa5"]))
put("files", "png_huge", b"\x02" + png(16384, 16384, 2, 8, [b""])[:60])  # truncated after IHDR
PY
# fuzz_torch_archive: torch.save files written by PyTorch (python3-torch), and the same content in
# the target's packed form (data.pkl, then each storage record after "\n#rec#\n").
/usr/bin/python3 - <<'PY'
import collections, io, os, pickle, shutil, zipfile
import torch

shutil.rmtree("corpus/torch_archive", ignore_errors=True)
os.makedirs("corpus/torch_archive")

def save(name, obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    with open(f"corpus/torch_archive/{name}", "wb") as f:
        f.write(data)
    z = zipfile.ZipFile(io.BytesIO(data))
    keys = sorted((n for n in z.namelist() if "/data/" in n), key=lambda n: int(n.rsplit("/", 1)[1]))
    assert [n.rsplit("/", 1)[1] for n in keys] == [str(i) for i in range(len(keys))]
    packed = z.read("archive/data.pkl") + b"".join(b"\n#rec#\n" + z.read(n) for n in keys)
    with open(f"corpus/torch_archive/{name}.packed", "wb") as f:
        f.write(packed)

torch.manual_seed(0)
lin = torch.nn.Linear(3, 2)
save("state_dict", lin.state_dict())
emb = torch.nn.Embedding(5, 2)
head = torch.nn.Linear(2, 5, bias=False)
head.weight = emb.weight
opt = torch.optim.AdamW(list(emb.parameters()) + list(lin.parameters()), betas=(0.9, 0.95))
(emb(torch.tensor([1, 2])).sum() + lin(torch.ones(3)).sum()).backward()
opt.step()
save("checkpoint", {"model": collections.OrderedDict(wte=emb.weight.detach(), head=head.weight.detach()),
                    "optimizer": opt.state_dict(), "model_args": dict(n_layer=1, bias=False, dropout=0.0),
                    "iter_num": 5, "best_val_loss": torch.tensor(2.5), "config": {"out": "o", "x": None}})
base = torch.arange(12.0).reshape(3, 4)
save("views", {"t": base.t(), "row": base[1], "cols": base[:, 1:3], "expanded": torch.ones(2).expand(3, 2),
               "empty": base[3:], "ids": torch.arange(4), "mask": torch.tensor([True, False])})
save("parameter", {"p": torch.nn.Parameter(torch.ones(2)), "frozen": torch.nn.Parameter(torch.zeros(1), False)})
save("float16", {"h": torch.ones(2, dtype=torch.float16)})
save("values", [None, True, 1, -2**40, 2.5, "s", (1, 2), {0: "int key", (1, "a"): 1}])
PY
# ---- hf_tokenizer: tokenizer.json of every kind tokenizers (PyPI, in .venv-test) trains on a few
# lines, each followed by 0xFF and a text --------------------------------------------------------
venv_py=../.venv-test/bin/python
if [ -x "$venv_py" ]; then
  rm -rf corpus/hf_tokenizer && mkdir -p corpus/hf_tokenizer
  printf "First Citizen:\nBefore we proceed any further, hear me speak.\ncafé 1234 語 😀\n" >"$tmp/tok.txt"
  for kind in llama3 qwen2 llama2 gemma metaspace splits; do
    "$venv_py" ../tests/python/tokenizer_reference.py build "$kind" "$tmp/tok.txt" "$tmp/$kind.json"
    /usr/bin/python3 - "$tmp/$kind.json" "corpus/hf_tokenizer/$kind" <<'PY'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
text = "<|begin_of_text|>Hi  there, 語é 123!<mask> <start_of_turn>\n"
with open(sys.argv[2], "wb") as f:
    f.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")).encode() + b"\xff" + text.encode())
PY
  done
else
  echo "make_corpus.sh: $venv_py is missing (scripts/setup.sh --test); corpus/hf_tokenizer kept" >&2
fi

# ---- chat_template: the templates of tests/python/test_chat_template_vs_jinja2.py --------------
rm -rf corpus/chat_template && mkdir -p corpus/chat_template
/usr/bin/python3 - <<'PY'
import importlib.util, sys
sys.modules["pytest"] = type(sys)("pytest")  # the module only needs pytest to skip without jinja2
sys.modules["pytest"].importorskip = lambda name: __import__(name)
spec = importlib.util.spec_from_file_location("t", "../tests/python/test_chat_template_vs_jinja2.py")
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)
for name, src in t.TEMPLATES.items():
    with open(f"corpus/chat_template/{name}", "w", encoding="utf-8") as f:
        f.write(src)
PY

du -sh corpus
