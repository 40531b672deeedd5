"""What the generation benchmark's children share, numpy only (no attn, no torch): attn's
checkpoint format, the prompt's encoding, and the figures of one timed generation.

An attn checkpoint (`attn train --out DIR`) is DIR/model.safetensors: the safetensors layout
(8-byte little-endian header length, a JSON header of dtype / shape / data_offsets per tensor,
then the raw little-endian data) whose `__metadata__` holds format "attn-gpt" (or "attn-train"),
config (GPTConfig as JSON: vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias) and
tokenizer ({"type": "char", "chars": [...]}, one character per token id, code points
increasing). Tensors named optim.* (an optimizer's state) are not the model's.

Both sides load the weights one tensor at a time straight into their own parameters
(read_into), so neither holds a second copy of the model and peak RSS compares the libraries.

Each child prints, as its last line, `result: {JSON}` (see timing_figures for the fields).
"""
import argparse
import json
import os
import statistics
import struct
import sys

import numpy as np

MODEL_FILE = "model.safetensors"
_DTYPES = {"F32": np.float32, "I64": np.int64}
_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
RESULT_PREFIX = "result: "
ASCII_VOCAB = 96  # newline and the 95 printable ASCII characters


class CheckpointError(Exception):
    pass


def model_path(ckpt):
    """DIR/model.safetensors for a directory, the path itself for a file."""
    return os.path.join(ckpt, MODEL_FILE) if os.path.isdir(ckpt) else ckpt


def read_header(path):
    """(tensors {name: (dtype, shape, absolute offset, nbytes)}, metadata) of an attn checkpoint."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError("%s: not a safetensors file (%d bytes)" % (path, len(head)))
            (n,) = struct.unpack("<Q", head)
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        raise CheckpointError("%s: cannot read a safetensors header: %s" % (path, e))
    meta = header.pop("__metadata__", {}) or {}
    if meta.get("format") not in ("attn-gpt", "attn-train"):
        raise CheckpointError("%s: format %r is not an attn checkpoint ('attn-gpt')" %
                              (path, meta.get("format")))
    tensors = {}
    for name, e in header.items():
        if name.startswith("optim."):
            continue
        if e["dtype"] not in _DTYPES:
            raise CheckpointError("%s: tensor %s has dtype %s" % (path, name, e["dtype"]))
        b, end = e["data_offsets"]
        tensors[name] = (_DTYPES[e["dtype"]], tuple(e["shape"]), 8 + n + b, end - b)
    return tensors, meta


def load_meta(ckpt):
    """(path, config dict, chars list) of the checkpoint DIR or FILE."""
    path = model_path(ckpt)
    if not os.path.isfile(path):
        raise CheckpointError("no checkpoint %s (train one with `attn train --out DIR`)" % path)
    _, meta = read_header(path)
    try:
        config = json.loads(meta["config"])
        chars = json.loads(meta["tokenizer"])["chars"]
    except (KeyError, ValueError, TypeError) as e:
        raise CheckpointError("%s: metadata without a usable config/tokenizer: %s" % (path, e))
    return path, config, chars


def read_into(path, params):
    """Fills params {name: writable numpy view of a parameter} from the file, tensor by tensor,
    and checks that names, shapes and dtypes match exactly (a strict load_state_dict)."""
    tensors, _ = read_header(path)
    if set(tensors) != set(params):
        raise CheckpointError("%s: names differ from the model's: missing %s, unexpected %s" %
                              (path, sorted(set(params) - set(tensors))[:5],
                               sorted(set(tensors) - set(params))[:5]))
    with open(path, "rb") as f:
        for name, (dtype, shape, offset, nbytes) in tensors.items():
            dst = params[name]
            if dst.shape != shape or dst.dtype != dtype or not dst.flags.c_contiguous:
                raise CheckpointError("%s: %s is %s %s, the model's %s %s" %
                                      (path, name, np.dtype(dtype), shape, dst.dtype, dst.shape))
            f.seek(offset)
            if f.readinto(memoryview(dst).cast("B")) != nbytes:
                raise CheckpointError("%s: %s is truncated" % (path, name))


def read_arrays(path):
    """Yields (name, numpy array) one tensor at a time (for layouts that need a conversion)."""
    tensors, _ = read_header(path)
    with open(path, "rb") as f:
        for name, (dtype, shape, offset, nbytes) in tensors.items():
            f.seek(offset)
            a = np.empty(shape, dtype=dtype)
            if f.readinto(memoryview(a).cast("B")) != nbytes:
                raise CheckpointError("%s: %s is truncated" % (path, name))
            yield name, a


def write_checkpoint(directory, config, chars, named_arrays):
    """Writes DIR/model.safetensors in attn's "attn-gpt" format (what `attn generate` loads).
    named_arrays: (name, array) pairs in the model's state_dict order; written one at a time."""
    os.makedirs(directory, exist_ok=True)
    header, offset = {}, 0
    for name, a in named_arrays():
        nbytes = a.size * a.itemsize
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "attn-gpt", "config": json.dumps(config),
                              "tokenizer": json.dumps({"type": "char", "chars": chars}),
                              "step": "0"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = os.path.join(directory, MODEL_FILE)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, a in named_arrays():
            f.write(np.ascontiguousarray(a).tobytes())
    return path


def synthetic_chars(vocab_size):
    """vocab_size distinct characters for a model without a text vocabulary (the GPT-2-shaped
    one): newline, printable ASCII, then code points from U+00A1 on (below the surrogates for any
    vocab_size up to ~55,000), so an ASCII prompt encodes and `attn generate` accepts the model."""
    if vocab_size < ASCII_VOCAB:
        raise ValueError("vocab_size %d is below the %d characters of an ASCII vocabulary" %
                         (vocab_size, ASCII_VOCAB))
    chars = ["\n"] + [chr(c) for c in range(0x20, 0x7F)]
    c = 0xA1
    while len(chars) < vocab_size:
        if 0xD800 <= c <= 0xDFFF:
            c = 0xE000
        chars.append(chr(c))
        c += 1
    return chars


def encode(prompt, chars):
    index = {c: i for i, c in enumerate(chars)}
    bad = sorted({c for c in prompt if c not in index})
    if bad:
        raise CheckpointError("the prompt has characters outside the vocabulary: %r" % bad)
    return [index[c] for c in prompt]


def timing_figures(t0, stamps, batch):
    """Figures of one generation from its start time t0 and the time each new token (a column of
    `batch` tokens) was ready. Prefill is the prompt's forward pass and the first sampled token;
    decode is every later step (one token per sequence through the key/value cache). Rates count
    every sequence's tokens (batch x steps per second). first/second half: the decode steps split
    in two, each half's rate from its median step time (robust to a stray preemption), so a cache
    in use shows about the same rate in both, and a full recompute a falling one."""
    n = len(stamps)
    f = {"steps": n, "batch": batch, "prefill_ms": (stamps[0] - t0) * 1e3 if n else None,
         "total_ms": (stamps[-1] - t0) * 1e3 if n else None,
         "total_tokens_per_s": batch * n / (stamps[-1] - t0) if n else None,
         "decode_tokens_per_s": None, "first_half_tokens_per_s": None,
         "second_half_tokens_per_s": None}
    steps = [b - a for a, b in zip(stamps, stamps[1:])]  # decode step times
    if steps and stamps[-1] > stamps[0]:
        f["decode_tokens_per_s"] = batch * len(steps) / (stamps[-1] - stamps[0])
    half = len(steps) // 2
    if half >= 1:
        for key, part in (("first", steps[:half]), ("second", steps[half:])):
            med = statistics.median(part)
            f[key + "_half_tokens_per_s"] = batch / med if med > 0 else None
    return f


def child_parser(doc):
    """The command line both children (generate_attn.py, generate_torch.py) take."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=doc.split("\n", 1)[1])
    p.add_argument("--ckpt", required=True, help="attn checkpoint directory or model.safetensors")
    p.add_argument("--prompt", default="ROMEO:")
    p.add_argument("--batch", type=int, default=1, help="sequences, each the same prompt")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=200, help="0: no top-k filtering")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup-tokens", type=int, default=8,
                   help="untimed generation first, in the same process (0: none)")
    p.add_argument("--tokens", action="store_true", help="put the generated ids in the result")
    return p


def check_child_args(p, a):
    for name in ("batch", "max_new_tokens", "threads"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name.replace("_", "-"))
    if a.warmup_tokens < 0 or a.top_k < 0:
        p.error("--warmup-tokens and --top-k must be >= 0")
    if not (a.temperature > 0 and a.temperature < float("inf")):
        p.error("--temperature must be positive and finite")
    if not a.prompt:
        p.error("--prompt must not be empty")
    return a


def emit(result):
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def parse_result(lines):
    for line in reversed(lines):
        if line.startswith(RESULT_PREFIX):
            try:
                return json.loads(line[len(RESULT_PREFIX):])
            except ValueError:
                return None
    return None


def fail(prog, message):
    sys.exit("%s: error: %s" % (prog, message))
