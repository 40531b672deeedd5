#!/usr/bin/env python3
"""attn's side of the generation benchmark: one timed attn.nn.GPT.generate (use_cache=True) per
process, on an attn checkpoint; and the random GPT-2-shaped checkpoint both sides load.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \\
        /usr/bin/python3 bench/generate_attn.py --ckpt out --batch 1 --max-new-tokens 200 \\
        --threads 1
    PYTHONPATH=build/python /usr/bin/python3 bench/generate_attn.py --make-random DIR \\
        --vocab-size 50257 --block-size 1024 --n-layer 12 --n-head 12 --n-embd 768 --bias

Generation: attn.set_num_threads(--threads), the weights read straight into the model's
parameters (eval mode), the prompt repeated --batch times, model.generate(idx, n, temperature,
top_k, use_cache=True, generator=attn.Generator seeded --seed, callback) where the callback
stamps the time each new column is ready. After --warmup-tokens untimed tokens one generation of
--max-new-tokens is timed; the last line is `result: {JSON}` (bench/gen_checkpoint.py's
timing_figures, and the ids with --tokens).

--make-random writes DIR/model.safetensors in attn's checkpoint format ("attn-gpt", what
`attn generate --ckpt DIR` loads) holding attn's own initialisation (N(0, 0.02) matrices, seeded
--seed) and a synthetic character vocabulary of --vocab-size characters (ASCII first).
"""
import argparse
import sys
import time

import gen_checkpoint as gc

try:
    import attn
except ImportError as e:  # the usual cause: PYTHONPATH does not name build/python
    sys.exit("generate_attn.py: error: cannot import attn (%s); set PYTHONPATH=build/python" % e)

PROG = "generate_attn.py"


def load_model(ckpt):
    path, config, chars = gc.load_meta(ckpt)
    config = dict(config, dropout=0.0)
    model = attn.nn.utils.skip_init(attn.nn.GPT, **config)  # every weight is read next
    model.eval()
    gc.read_into(path, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    return model, chars


def make_random(directory, a):
    config = {"vocab_size": a.vocab_size, "block_size": a.block_size, "n_layer": a.n_layer,
              "n_head": a.n_head, "n_embd": a.n_embd, "dropout": 0.0, "bias": a.bias}
    g = attn.Generator()
    g.manual_seed(a.seed)
    model = attn.nn.GPT(generator=g, **config)
    chars = gc.synthetic_chars(a.vocab_size)
    path = gc.write_checkpoint(
        directory, config, chars,
        lambda: ((k, v.detach().numpy()) for k, v in model.state_dict().items()))
    print("wrote %s (%d parameters)" % (path, model.get_num_params()), flush=True)


def make_random_main(argv):
    p = argparse.ArgumentParser(prog=PROG + " --make-random")
    p.add_argument("--make-random", metavar="DIR", required=True)
    for flag, default in (("vocab-size", 50257), ("block-size", 1024), ("n-layer", 12),
                          ("n-head", 12), ("n-embd", 768), ("seed", 1337)):
        p.add_argument("--" + flag, type=int, default=default)
    p.add_argument("--bias", action="store_true", help="biases in Linear layers and LayerNorms")
    a = p.parse_args(argv)
    for name in ("block_size", "n_layer", "n_head", "n_embd"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name.replace("_", "-"))
    if a.n_embd % a.n_head:
        p.error("--n-embd must be divisible by --n-head")
    if a.vocab_size < gc.ASCII_VOCAB:
        p.error("--vocab-size must be >= %d (an ASCII vocabulary)" % gc.ASCII_VOCAB)
    make_random(a.make_random, a)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(x == "--make-random" or x.startswith("--make-random=") for x in argv):
        return make_random_main(argv)
    p = gc.child_parser(__doc__)
    a = gc.check_child_args(p, p.parse_args(argv))
    attn.set_num_threads(a.threads)
    t_load = time.perf_counter()
    try:
        model, chars = load_model(a.ckpt)
        ids = gc.encode(a.prompt, chars)
    except gc.CheckpointError as e:
        gc.fail(PROG, e)
    load_s = time.perf_counter() - t_load
    idx = attn.tensor([ids] * a.batch, dtype=attn.int64)
    gen = attn.Generator()
    gen.manual_seed(a.seed)
    top_k = a.top_k or None
    if a.warmup_tokens:
        model.generate(idx, a.warmup_tokens, a.temperature, top_k, True, gen)
    stamps = []
    t0 = time.perf_counter()
    out = model.generate(idx, a.max_new_tokens, a.temperature, top_k, True, gen,
                         lambda _: stamps.append(time.perf_counter()))
    if len(stamps) != a.max_new_tokens:
        gc.fail(PROG, "%d tokens streamed, expected %d" % (len(stamps), a.max_new_tokens))
    result = {"impl": "attn", "threads": attn.get_num_threads(), "load_s": load_s}
    result.update(gc.timing_figures(t0, stamps, a.batch))
    if a.tokens:
        result["tokens"] = [row[len(ids):] for row in out.tolist()]
    gc.emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
