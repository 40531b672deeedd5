"""The tokenizers (PyPI) side of test_tokenizer_json.py, run in .venv-test's interpreter.

  build KIND CORPUS OUT_JSON   trains a small tokenizer of one of today's kinds on CORPUS and
                               writes its tokenizer.json (no hub: every vocabulary is trained here)
  encode TOKENIZER_JSON TEXTS_JSON OUT_JSON
                               ids with and without special tokens, tokens, and decodes

Kinds: llama3 and qwen2 (byte-level BPE behind their Split regexes), llama2 and gemma (BPE with
byte fallback over "▁"-spaced text), metaspace (Metaspace, Digits, NFKC), splits (Split's other
behaviors, Whitespace, NFD, Strip, a Replace regex, no decoder)."""
import json
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
         r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTES = ["<0x%02X>" % b for b in range(256)]


def byte_level(kind, pattern, corpus, specials):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    if kind == "llama3":
        bos = specials[0]
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=bos + " $A", pair=bos + " $A " + bos + " $B",
                                          special_tokens=[(bos, tok.token_to_id(bos))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # A non-special added token, matched in the normalized text, single word only.
    tok.add_tokens([AddedToken("thou art", single_word=True, normalized=True)])
    return tok


def byte_fallback(kind, corpus):
    """A SentencePiece-converted kind: <unk>, <s>, </s>, the 256 byte tokens, then the merges."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if kind == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        bos = "<s>"
    elif kind == "gemma":
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse()])
        bos = "<bos>"
    else:  # metaspace
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
            pre_tokenizers.Digits(individual_digits=True)])
        tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                         decoders.Metaspace(replacement="▁",
                                                            prepend_scheme="first")])
        bos = "<s>"
    specials = ["<unk>", bos, "</s>"]
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials + BYTES,
                                  show_progress=False, limit_alphabet=120,
                                  max_token_length=12)
    tok.train([corpus], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=bos + " $A", pair=bos + " $A " + bos + " $B",
        special_tokens=[(bos, tok.token_to_id(bos))])
    tok.add_tokens([AddedToken("<start_of_turn>", special=True, normalized=False),
                    AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("    ", normalized=True)])
    # The byte tokens belong to the vocabulary, not to the added tokens (as in a converted
    # SentencePiece model).
    j = json.loads(tok.to_str())
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] not in BYTES]
    return Tokenizer.from_str(json.dumps(j))


def splits(corpus):
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFD(), normalizers.Strip(left=True, right=True),
        normalizers.Replace(Regex(r"[0-9]+"), "#")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[,;:]"), behavior="merged_with_next"),
        pre_tokenizers.Split("-", behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\w+|\s+"), behavior="removed", invert=True),
        pre_tokenizers.Whitespace()])
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["[UNK]"], show_progress=False,
                                  limit_alphabet=80)
    tok.train([corpus], trainer)
    return tok


def build(kind, corpus, out):
    if kind == "llama3":
        tok = byte_level(kind, LLAMA3, corpus, ["<|begin_of_text|>", "<|end_of_text|>",
                                                "<|start_header_id|>", "<|end_header_id|>",
                                                "<|eot_id|>"])
    elif kind == "qwen2":
        tok = byte_level(kind, QWEN2, corpus, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    elif kind in ("llama2", "gemma", "metaspace"):
        tok = byte_fallback(kind, corpus)
    elif kind == "splits":
        tok = splits(corpus)
    else:
        raise SystemExit("unknown kind " + kind)
    tok.save(out)


def encode(path, texts_json, out):
    tok = Tokenizer.from_file(path)
    with open(texts_json, encoding="utf-8") as f:
        texts = json.load(f)
    res = {"ids": [], "plain": [], "tokens": [], "decoded": [], "decoded_all": []}
    for e, p in zip(tok.encode_batch(texts), tok.encode_batch(texts, add_special_tokens=False)):
        res["ids"].append(e.ids)
        res["plain"].append(p.ids)
        res["tokens"].append(e.tokens)
        res["decoded"].append(tok.decode(e.ids))
        res["decoded_all"].append(tok.decode(e.ids, skip_special_tokens=False))
    res["vocab_size"] = tok.get_vocab_size()
    with open(out, "w", encoding="utf-8") as f:
        json.dump(res, f)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"build": build, "encode": encode}[cmd](*args)
