"""attn.data.Tokenizer (attn::data::Tokenizer, a Hugging Face tokenizer.json run in C++) against
Hugging Face tokenizers (PyPI, in .venv-test) on the same files: the ids with and without the
template's special tokens, the tokens, and decode with and without special tokens, on the whole
of tinyshakespeare, on Unicode samples and on random strings.

Every tokenizer.json is trained in the test by tests/python/tokenizer_reference.py (no hub), one
per kind of today's models: llama3 and qwen2 (byte-level BPE behind their Split regexes, NFC,
ignore_merges, a template), llama2 and gemma (BPE with byte fallback over "▁"-spaced text, unknown
characters fused), metaspace (Metaspace with prepend_scheme "first", Digits, NFKC) and splits
(Split's other behaviors, Whitespace, NFD, Strip, a Replace regex, no decoder). Added tokens:
special ones, one with lstrip/rstrip, one single_word, normalized ones."""
import json
import os
import subprocess

import pytest

import attn
from test_hf_gpt2 import CORPUS, HF_MISSING, UNICODE_SAMPLES, VENV_PYTHON, random_samples

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "tokenizer_reference.py")
KINDS = ["llama3", "qwen2", "llama2", "gemma", "metaspace", "splits"]
pytestmark = pytest.mark.skipif(HF_MISSING is not None, reason=str(HF_MISSING))

# Texts that meet the added tokens and the steps' edge cases.
EXTRA = [
    "<|begin_of_text|>ROMEO: <|eot_id|>\n<|start_header_id|>user<|end_header_id|>",
    "<|im_start|>system\nYou are<|im_end|> <|endoftext|>", "a <mask> b  <mask>  c<mask>d",
    "<start_of_turn>user\nhi<start_of_turn>", "thou art thou artless; thou art", "    x        y",
    "x1234567 89", "Ｆｕｌｌｗｉｄｔｈ ﬁ ½ ①", "e\u0301 é", "  leading and trailing  ",
    "a,b;c:d e-f--g ---h", "It's 'S 'LL 'll I'M", "\r\n\r\n x \n\n\ny", "語" * 5 + "😀" * 3,
    "<s></s><unk><0x41>", "▁ ▁▁ x▁y",
    # Oniguruma's \w (Alphabetic, marks, Nd, Pc, ²³¹¼½¾) against PCRE2's: ① ⁴ ₅ ፩ ൰ are not in it
    "x½y ①z ⁴₅ Ⓐb ፩൰ ²³¹¼¾ a_b e\u0301 \u200dq ⅷ〇",
]


def run(*args):
    r = subprocess.run([VENV_PYTHON, REFERENCE, *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    if not os.path.exists(CORPUS):
        pytest.skip("corpus %s is missing (../shared/data relative to the repository)" % CORPUS)
    d = tmp_path_factory.mktemp("tokenizers")
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    corpus = d / "train.txt"
    corpus.write_text(text[:200000] + "\n".join(UNICODE_SAMPLES * 10), encoding="utf-8")
    out = {}
    for kind in KINDS:
        out[kind] = d / (kind + ".json")
        run("build", kind, corpus, out[kind])
    return out


def reference(path, texts, tmp_path):
    tj, oj = tmp_path / "texts.json", tmp_path / "out.json"
    tj.write_text(json.dumps(texts), encoding="utf-8")
    run("encode", path, tj, oj)
    return json.loads(oj.read_text(encoding="utf-8"))


def check(tok, ref, texts):
    for i, text in enumerate(texts):
        enc = tok.encode(text)
        assert enc.ids == ref["ids"][i], repr(text)
        assert tok.encode(text, add_special_tokens=False).ids == ref["plain"][i], repr(text)
        assert enc.tokens == ref["tokens"][i], repr(text)
        assert tok.decode(enc.ids) == ref["decoded"][i], repr(text)
        assert tok.decode(enc.ids, skip_special_tokens=False) == ref["decoded_all"][i], repr(text)


@pytest.mark.parametrize("kind", KINDS)
def test_ids_and_decodes_match_tokenizers_on_unicode_and_random_text(files, kind, tmp_path):
    texts = UNICODE_SAMPLES + EXTRA + random_samples(300, seed=KINDS.index(kind))
    ref = reference(files[kind], texts, tmp_path)
    tok = attn.data.Tokenizer.from_file(files[kind])
    assert tok.get_vocab_size() == ref["vocab_size"]
    check(tok, ref, texts)


@pytest.mark.parametrize("kind", KINDS)
def test_ids_match_tokenizers_on_tinyshakespeare(files, kind, tmp_path):
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    ref = reference(files[kind], [text], tmp_path)
    tok = attn.data.Tokenizer.from_file(files[kind])
    ids = tok.encode(text).ids
    assert len(ids) == len(ref["ids"][0])
    assert ids == ref["ids"][0]
    assert tok.decode(ids) == ref["decoded"][0]


def test_byte_fallback_and_unknowns(files):
    tok = attn.data.Tokenizer.from_file(files["llama2"])
    rare = "\u9fcb"  # in no training text, so never in the trained vocabulary
    assert tok.token_to_id(rare) is None
    byte_ids = [tok.token_to_id("<0x%02X>" % b) for b in rare.encode("utf-8")]
    assert None not in byte_ids
    ids = tok.encode(rare, add_special_tokens=False).ids
    assert ids[-3:] == byte_ids  # a character the vocabulary lacks, as its UTF-8 bytes
    assert tok.decode(ids) == rare
    assert tok.id_to_token(10 ** 9) is None


def refusals(tmp_path, name, edit):
    """A valid tokenizer.json edited by `edit`, written to a file for from_file."""
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
         "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                   "byte_fallback": False, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}
    edit(j)
    p = tmp_path / (name + ".json")
    p.write_text(json.dumps(j), encoding="utf-8")
    return p


@pytest.mark.parametrize("name, edit, words", [
    ("model", lambda j: j["model"].update(type="WordPiece"), ["model.type", "WordPiece"]),
    ("merge", lambda j: j["model"].update(merges=["a c"]), ["model.merges[0]", "'c'"]),
    ("merge_form", lambda j: j["model"].update(merges=["ab"]), ["model.merges[0]", "one space"]),
    ("vocab", lambda j: j["model"].update(vocab={"a": 0, "b": 0}), ["model.vocab", "id 0"]),
    ("unk", lambda j: j["model"].update(unk_token="<unk>"), ["model.unk_token", "<unk>"]),
    ("dropout", lambda j: j["model"].update(dropout=0.1), ["model.dropout"]),
    ("normalizer", lambda j: j.update(normalizer={"type": "Lowercase"}),
     ["normalizer.type", "Lowercase"]),
    ("nested", lambda j: j.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel"}, {"type": "Punctuation"}]}),
     ["pre_tokenizer.pretokenizers[1].type", "Punctuation"]),
    ("regex", lambda j: j.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "(a"},
                                                "behavior": "Isolated", "invert": False}),
     ["pre_tokenizer.pattern.Regex", "(a"]),
    ("behavior", lambda j: j.update(pre_tokenizer={"type": "Split", "pattern": {"String": "a"},
                                                   "behavior": "Sideways", "invert": False}),
     ["pre_tokenizer.behavior", "Sideways"]),
    ("decoder", lambda j: j.update(decoder={"type": "WordPiece"}), ["decoder.type"]),
    ("post", lambda j: j.update(post_processor={"type": "BertProcessing"}),
     ["post_processor.type", "BertProcessing"]),
    ("padding", lambda j: j.update(padding={"strategy": "BatchLongest"}), ["padding"]),
    ("added", lambda j: j.update(added_tokens=[{"id": 1, "content": "zz", "special": True}]),
     ["added_tokens[0].id", "'b'", "'zz'"]),
])
def test_bad_files_are_refused_naming_the_field(tmp_path, name, edit, words):
    p = refusals(tmp_path, name, edit)
    with pytest.raises(ValueError) as e:
        attn.data.Tokenizer.from_file(p)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert str(p) in str(e.value)


def test_a_valid_minimal_file_and_bad_text(tmp_path):
    tok = attn.data.Tokenizer.from_file(refusals(tmp_path, "ok", lambda j: None))
    assert tok.encode("abba", add_special_tokens=False).ids == [2, 1, 0]
    assert tok.decode([2, 1, 0]) == "ab b a"  # no decoder: tokens joined by spaces
    with pytest.raises(ValueError, match="not valid JSON"):
        attn.data.Tokenizer.from_str("{")
    with pytest.raises(IndexError, match="no token has id 7"):
        tok.decode([7])
    with pytest.raises(TypeError):
        tok.encode(b"ab")
