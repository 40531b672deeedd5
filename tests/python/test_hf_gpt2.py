"""attn and Hugging Face transformers on the same GPT-2 files: attn.nn.GPT.from_pretrained gives
transformers' GPT2LMHeadModel logits on a small random GPT-2 that transformers saved, transformers'
from_pretrained gives attn's logits on what GPT.save_pretrained wrote, and attn.data.BpeTokenizer
gives GPT2Tokenizer's and GPT2TokenizerFast's ids on the whole of tinyshakespeare and on Unicode
samples, with a byte-level BPE that tokenizers trains in the test (no model or vocabulary can be
downloaded). The transformers side runs in .venv-test's interpreter (scripts/setup.sh --test),
through tests/python/hf_reference.py; without it these tests skip, naming what is missing.
The `attn generate` / `attn export` round trip through the CLI is checked here too.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
REFERENCE = os.path.join(HERE, "hf_reference.py")
VENV_PYTHON = os.environ.get("ATTN_HF_PYTHON",
                             os.path.join(REPO_ROOT, ".venv-test", "bin", "python"))
CORPUS = os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "data", "tinyshakespeare.txt"))
# The `attn` tool of the build the imported module comes from (build/python/attn -> build/attn).
ATTN_CLI = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__)))), "attn")


def _hf_missing():
    if not os.path.exists(VENV_PYTHON):
        return ("%s is missing (scripts/setup.sh --test creates .venv-test with transformers)"
                % VENV_PYTHON)
    r = subprocess.run([VENV_PYTHON, "-c", "import transformers, tokenizers, safetensors"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "%s cannot import transformers/tokenizers/safetensors: %s" % (
            VENV_PYTHON, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode)
    return None


HF_MISSING = _hf_missing()
needs_hf = pytest.mark.skipif(HF_MISSING is not None, reason=str(HF_MISSING))


def reference(*args):
    r = subprocess.run([VENV_PYTHON, REFERENCE, *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1",
                                TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, "hf_reference.py %s failed:\n%s" % (args[0], r.stderr)


def hf_logits(model_dir, ids, tmp_path):
    out = tmp_path / "ref_logits.npy"
    reference("logits", model_dir, json.dumps(ids), out)
    return np.load(out)


def attn_logits(model, ids):
    model.eval()
    logits, _ = model(attn.tensor(ids, dtype=attn.int64))
    return np.array(logits.tolist(), dtype=np.float32)


# initializer_range 0.2 (GPT-2's is 0.02): with weights that small the two GELUs differ by ~1e-6 in
# the logits, below any tolerance; at 0.2 by ~1e-3, far above the float32 tolerance used here.
CONFIGS = {
    # GPT-2's defaults but small: gelu_new (tanh GELU), epsilon 1e-5, n_inner 4 C
    "gelu_new": dict(vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4,
                     initializer_range=0.2),
    "exact_gelu_inner_eps": dict(vocab_size=61, n_positions=16, n_embd=24, n_layer=3, n_head=3,
                                 activation_function="gelu", n_inner=40,
                                 layer_norm_epsilon=1e-3, initializer_range=0.2),
    "pytorch_tanh": dict(vocab_size=50, n_positions=12, n_embd=16, n_layer=1, n_head=2,
                         activation_function="gelu_pytorch_tanh", resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2),
}


def assert_logits_close(got, want):
    """float32 agreement, relative to the logits' scale (which is several units here)."""
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert scale > 0.5  # not a degenerate model
    err = float(np.abs(got - want).max())
    assert err <= 2e-5 * scale, "max |attn - transformers| = %g at scale %g" % (err, scale)


def ids_for(cfg, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg["vocab_size"], size=(batch, cfg["n_positions"])).tolist()


@needs_hf
@pytest.mark.parametrize("name,flags", [(name, []) for name in sorted(CONFIGS)] + [
    ("gelu_new", ["--no-prefix"]), ("exact_gelu_inner_eps", ["--buffers"])])
def test_transformers_checkpoint_loads_with_the_same_logits(tmp_path, name, flags):
    cfg = CONFIGS[name]
    d = tmp_path / "hf"
    ids = ids_for(cfg)
    ref = tmp_path / "ref_logits.npy"
    reference("model", d, json.dumps(cfg), 7, *flags, "--logits", json.dumps(ids), ref)
    want = np.load(ref)
    model = attn.nn.GPT.from_pretrained(d)
    got = attn_logits(model, ids)
    assert got.shape == (2, cfg["n_positions"], cfg["vocab_size"])
    assert_logits_close(got, want)


@needs_hf
@pytest.mark.parametrize("bias", [True, False])
def test_attn_model_exports_to_transformers(tmp_path, bias):
    g = attn.Generator().manual_seed(3)
    model = attn.nn.GPT(vocab_size=43, block_size=20, n_layer=2, n_head=2, n_embd=16, bias=bias,
                        generator=g)
    # Non-trivial LayerNorm and bias values, so that a misplaced one shows, and matrices 10 times
    # nanoGPT's 0.02, so that the exact and the tanh GELU give logits apart (see CONFIGS).
    with attn.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(attn.randn(p.shape, generator=g) * 0.5 + (1.0 if "ln" in name and
                                                                   name.endswith("weight") else 0.0))
            else:
                p.mul_(10.0)
    d = tmp_path / "exported"
    model.save_pretrained(d)
    assert sorted(os.listdir(d)) == ["config.json", "model.safetensors"]
    ids = ids_for(dict(vocab_size=43, n_positions=20), batch=3, seed=1)
    assert_logits_close(attn_logits(model, ids), hf_logits(d, ids, tmp_path))
    again = attn.nn.GPT.from_pretrained(d)
    np.testing.assert_allclose(attn_logits(again, ids), attn_logits(model, ids), rtol=0, atol=0)


@needs_hf
def test_half_precision_checkpoint_loads_widened_to_float32(tmp_path):
    """A model saved after .half(): its F16 weights are widened to float32, as transformers'
    from_pretrained loads them into a float32 model by default; the logits are the same."""
    cfg = CONFIGS["gelu_new"]
    d = tmp_path / "half"
    reference("model", d, json.dumps(cfg), 1, "--half")
    model = attn.nn.GPT.from_pretrained(d)
    assert all(p.dtype is attn.float32 for p in model.parameters())
    ids = ids_for(cfg)
    assert_logits_close(attn_logits(model, ids), hf_logits(d, ids, tmp_path))


def test_unsupported_config_fields_are_named(tmp_path):
    model = attn.nn.GPT(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8)
    d = tmp_path / "m"
    model.save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    for field, value, pattern in [
            ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
            ("reorder_and_upcast_attn", True, "reorder_and_upcast_attn"),
            ("activation_function", "relu", "activation_function' is 'relu'"),
            ("tie_word_embeddings", False, "tie_word_embeddings"),
            ("n_head", 3, "divisible by n_head 3")]:
        (d / "config.json").write_text(json.dumps(dict(cfg, **{field: value})))
        with pytest.raises(ValueError, match=pattern):
            attn.nn.GPT.from_pretrained(d)
    with pytest.raises(ValueError, match="no config.json"):
        attn.nn.GPT.from_pretrained(tmp_path)


# ---- the tokenizer ------------------------------------------------------------------------------

UNICODE_SAMPLES = [
    "Hello world", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\n\n end",
    "I'm sure they'll say it's what we've done, isn't it? I'd", "don't DON'T 'tis",
    "café naïve résumé Ångström façade", "Ελληνικά και русский текст", "中文字符和日本語のテキスト",
    "emoji 😀🎉👍🏽 and flags 🇫🇷", "digits 1234567890 ٣٤٥ and 3.14159e-10", "mixed123abc 4you",
    "whitespace runs:     \t\t  \u00a0\u2003 end", "<|endoftext|>", "a<|endoftext|>b <|endoftext|> c",
    "combining e\u0301 and \u200b zero width", "math ∑∫√∞ ≠ ≤ ≥", "", " ", "\n",
    "symbols !@#$%^&*()_+-=[]{};:'\",.<>/?\\|`~", "'s's 's 'S", "Zürich 2024: 10°C — “quotes”",
]
# Where Unicode tables could disagree (\s, \p{L}, \p{N} of PCRE2 against Python's regex and
# tokenizers' Oniguruma): control and separator characters, marks, superscripts, letter numbers.
EDGE_CHARS = [0x0b, 0x0c, 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680, 0x180e, 0x2000, 0x2007,
              0x200b, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff, 0x0300, 0x00b2, 0x2160,
              0x00aa, 0x02b0, 0x3007]
UNICODE_SAMPLES += ["a%sb %s x%sy  %s" % (chr(c), chr(c), chr(c) * 2, chr(c)) for c in EDGE_CHARS]


def random_samples(n=300, seed=0):
    """Random strings over an alphabet mixing the pieces above."""
    import random
    rng = random.Random(seed)
    alphabet = (list("abcXYZ019 '\t\n.,!?") + ["'s", "'ll", "  ", "\r\n", "<|endoftext|>"] +
                [chr(c) for c in EDGE_CHARS] + list("éüñ中文😀٣ⅷ"))
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(30))) for _ in range(n)]


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    if HF_MISSING:
        pytest.skip(HF_MISSING)
    if not os.path.exists(CORPUS):
        pytest.skip("corpus %s is missing (../shared/data relative to the repository)" % CORPUS)
    d = tmp_path_factory.mktemp("bpe")
    # Part of the corpus plus the samples, so that non-ASCII merges exist too.
    train = d / "train.txt"
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    train.write_text(text[:300000] + "\n".join(UNICODE_SAMPLES * 20), encoding="utf-8")
    reference("train-bpe", train, d, 3000)
    return d


def hf_encode(tok_dir, texts, tmp_path):
    tj, oj = tmp_path / "texts.json", tmp_path / "ids.json"
    tj.write_text(json.dumps(texts), encoding="utf-8")
    reference("encode", tok_dir, tj, oj)
    return json.loads(oj.read_text(encoding="utf-8"))


@needs_hf
def test_bpe_matches_transformers_on_tinyshakespeare(bpe_dir, tmp_path):
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    tok = attn.data.BpeTokenizer.from_files(str(bpe_dir / "vocab.json"),
                                            str(bpe_dir / "merges.txt"))
    assert tok.num_merges > 2000 and tok.eot_id >= 0
    ref = hf_encode(bpe_dir, [text], tmp_path)
    ids = tok.encode(text)
    assert ref["slow"][0] == ref["fast"][0]
    assert len(ids) == len(ref["slow"][0])
    assert ids == ref["slow"][0]
    assert tok.decode(ids) == text == ref["decoded"][0]


@needs_hf
def test_bpe_matches_transformers_on_unicode_samples(bpe_dir, tmp_path):
    tok = attn.data.BpeTokenizer.from_files(str(bpe_dir / "vocab.json"),
                                            str(bpe_dir / "merges.txt"))
    samples = UNICODE_SAMPLES + random_samples()
    ref = hf_encode(bpe_dir, samples, tmp_path)
    for i, text in enumerate(samples):
        ids = tok.encode(text)
        assert ids == ref["slow"][i], text
        assert ids == ref["fast"][i], text
        assert tok.decode(ids) == ref["decoded"][i] == text


@needs_hf
def test_generate_runs_a_transformers_checkpoint_end_to_end(bpe_dir, tmp_path):
    if not os.path.exists(ATTN_CLI):
        pytest.skip("%s is not built" % ATTN_CLI)
    d = tmp_path / "gpt2"
    vocab = json.loads((bpe_dir / "vocab.json").read_text(encoding="utf-8"))
    reference("model", d, json.dumps(dict(vocab_size=len(vocab), n_positions=32, n_embd=32,
                                          n_layer=2, n_head=2)), 5)
    for f in ("vocab.json", "merges.txt"):
        (d / f).write_bytes((bpe_dir / f).read_bytes())
    r = subprocess.run([ATTN_CLI, "generate", "--ckpt", str(d), "--prompt", "ROMEO:",
                        "--max-new-tokens", "40", "--seed", "4", "--top-k", "0",
                        "--temperature", "1.0"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.startswith(b"ROMEO:")
    assert b"generate: tokens=40 " in r.stderr
    # The same tokens from the same model through Python: attn.nn.GPT.generate draws from
    # attn's generator as the CLI does.
    tok = attn.data.BpeTokenizer.from_files(str(d / "vocab.json"), str(d / "merges.txt"))
    model = attn.nn.GPT.from_pretrained(d).eval()
    prompt = tok.encode("ROMEO:")
    out = model.generate(attn.tensor([prompt], dtype=attn.int64), 40, temperature=1.0,
                         generator=attn.Generator().manual_seed(4))
    want = tok.decode_bytes(out.tolist()[0]) + b"\n"
    assert r.stdout == want or r.stdout == want[:-1] + b"\n"
